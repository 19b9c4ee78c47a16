// Tests for stale-if-error (rule R14 of conformance/PROTOCOL.md): the
// option and its variable, which failures serve a kept value, the bound,
// the stale mark, the warning logged once, and what empties the cache.

package cvsm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// logRecorder is a slog.Handler that keeps every record, attributes
// flattened to strings.
type logRecorder struct {
	mu      sync.Mutex
	records []loggedRecord
}

type loggedRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := loggedRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, rec)
	return nil
}

func (h *logRecorder) all() []loggedRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]loggedRecord(nil), h.records...)
}

// staleClient is a test client with CacheTTL 10 s and StaleIfError 60 s
// unless opts says otherwise, logging to a recorder.
func staleClient(t *testing.T, s *stubServer, opts Options) (testClient, *logRecorder) {
	t.Helper()
	if opts.CacheTTL == 0 {
		opts.CacheTTL = 10 * time.Second
	}
	if opts.StaleIfError == 0 {
		opts.StaleIfError = time.Minute
	}
	logs := &logRecorder{}
	opts.Logger = slog.New(logs)
	return newTestClient(t, s, opts), logs
}

// outage makes every request fail as f says from now on.
func outage(s *stubServer, f fault) {
	f.pathPrefix, f.remaining = "/", 1000
	s.inject(f)
}

func TestStaleIfErrorConfiguration(t *testing.T) {
	base := Options{Token: testToken, BaseURL: "http://x/api/v1", Team: "acme"}
	clearEnv(t)
	c, err := NewClient(base)
	if err != nil || c.StaleIfError() != 0 {
		t.Fatalf("off by default: %v, %v", c, err)
	}
	t.Setenv(EnvStaleIfError, "300")
	if c, err = NewClient(base); err != nil || c.StaleIfError() != 300*time.Second {
		t.Fatalf("CVSM_STALE_IF_ERROR=300: %v, %v", c, err)
	}
	explicit := base
	explicit.StaleIfError = 5 * time.Second
	if c, err = NewClient(explicit); err != nil || c.StaleIfError() != 5*time.Second {
		t.Fatalf("the option wins: %v, %v", c, err)
	}
	explicit.StaleIfError = NoStaleIfError
	if c, err = NewClient(explicit); err != nil || c.StaleIfError() != 0 {
		t.Fatalf("NoStaleIfError wins over the variable: %v, %v", c, err)
	}
	explicit.StaleIfError = -time.Second
	if _, err = NewClient(explicit); !errors.Is(err, ErrConfiguration) || !strings.Contains(err.Error(), "NoStaleIfError") {
		t.Errorf("a negative option: %v", err)
	}
	for _, bad := range []string{"soon", "-1", "1.5", "+3", "30s", "99999999999999999999"} {
		t.Setenv(EnvStaleIfError, bad)
		if _, err := NewClient(base); !errors.Is(err, ErrConfiguration) || !strings.Contains(err.Error(), EnvStaleIfError) {
			t.Errorf("CVSM_STALE_IF_ERROR=%q: %v", bad, err)
		}
	}
	t.Setenv(EnvStaleIfError, " ")
	if c, err = NewClient(base); err != nil || c.StaleIfError() != 0 {
		t.Errorf("an empty variable counts as unset: %v, %v", c, err)
	}
	explicit.StaleIfError = 90 * time.Second
	c, _ = NewClient(explicit)
	if text := fmt.Sprint(c); !strings.Contains(text, "StaleIfError: 1m30s") {
		t.Errorf("the printed client shows it: %s", text)
	}
	if text := fmt.Sprint(explicit); !strings.Contains(text, "StaleIfError: 1m30s") {
		t.Errorf("the printed options show it: %s", text)
	}
}

// Every failure R14 names serves the kept value, to Get and to GetAll,
// marked stale and carrying the error.
func TestStaleIfErrorServesKeptValuesOnTheFailuresItNames(t *testing.T) {
	cases := []struct {
		name     string
		fault    fault
		kind     Kind
		status   int
		attempts int // of each refresh
	}{
		{"dropped connection", fault{drop: true}, KindNetwork, 0, 3},
		{"unreadable answer", fault{status: 200, body: "<html>maintenance</html>"}, KindNetwork, 0, 3},
		{"503", fault{status: 503}, KindAPI, 503, 3},
		{"502", fault{status: 502}, KindAPI, 502, 3},
		{"504", fault{status: 504}, KindAPI, 504, 3},
		{"500", fault{status: 500}, KindAPI, 500, 1},
		{"501", fault{status: 501}, KindAPI, 501, 1},
		{"429", fault{status: 429, header: map[string]string{"Retry-After": "1"}}, KindRateLimited, 429, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStub(t)
			c, logs := staleClient(t, s, Options{})
			if _, err := c.Get(ctx, "API_KEY"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.GetAll(ctx); err != nil {
				t.Fatal(err)
			}
			c.clock.Advance(30 * time.Second) // past the TTL of 10 s, within 10 s + 60 s
			outage(s, tc.fault)

			before := s.count()
			v, info, err := c.GetWithInfo(ctx, "API_KEY")
			if err != nil || v != apiKeyVal {
				t.Fatalf("GetWithInfo = %q, %v; want the kept value", v, err)
			}
			// (net/http may resend a GET once more itself when a reused
			// keep-alive connection drops before answering.)
			if got := s.count() - before; got < tc.attempts || got > tc.attempts+1 {
				t.Errorf("the refresh was tried %d times, want %d", got, tc.attempts)
			}
			ce := asError(t, info.Err)
			if !info.Stale || !info.Cached || info.Age != 30*time.Second || ce.Kind != tc.kind || ce.Status != tc.status {
				t.Errorf("info %+v (error %#v), want stale, cached, 30s old, kind %s status %d", info, ce, tc.kind, tc.status)
			}

			all, info, err := c.GetAllWithInfo(ctx)
			want := map[string]string{"DATABASE_URL": dbURLValue, "API_KEY": apiKeyVal}
			if err != nil || !reflect.DeepEqual(all, want) {
				t.Fatalf("GetAllWithInfo = %v, %v; want the kept result", all, err)
			}
			if !info.Stale || asError(t, info.Err).Kind != tc.kind {
				t.Errorf("GetAll info %+v", info)
			}
			all["API_KEY"] = "changed by the caller"
			if again, _ := c.GetAll(ctx); again["API_KEY"] != apiKeyVal {
				t.Error("a stale map is the caller's own too")
			}
			// Plain Get and Inject serve it as well, without a mark.
			if v, err := c.Get(ctx, "DATABASE_URL"); err != nil || v != dbURLValue {
				t.Errorf("Get = %q, %v", v, err)
			}
			if len(logs.all()) == 0 {
				t.Error("serving stale logs a warning")
			}
		})
	}
}

// No other failure serves a kept value.
func TestStaleIfErrorIsNotForOtherErrors(t *testing.T) {
	const byName = "/teams/acme/secrets/by-name/API_KEY"
	const listing = "/teams/acme/secrets"
	cases := []struct {
		name   string
		faults []fault
		kind   Kind
		status int
	}{
		{"404 then a listing", []fault{{pathPrefix: byName, status: 404}}, KindNotFound, 404},
		{"400", []fault{{pathPrefix: byName, status: 400}}, KindConfiguration, 400},
		{"409", []fault{{pathPrefix: byName, status: 409}}, KindAPI, 409},
		{"redirect", []fault{{pathPrefix: byName, status: 302, header: map[string]string{"Location": "http://elsewhere/"}}}, KindAPI, 302},
		// The server said 404 to the read: a failed listing after it does not bring the value back.
		{"404 then a failed listing", []fault{{pathPrefix: byName, status: 404}, {pathPrefix: listing, exact: true, status: 503}}, KindAPI, 503},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStub(t)
			c, logs := staleClient(t, s, Options{})
			if _, err := c.Get(ctx, "API_KEY"); err != nil {
				t.Fatal(err)
			}
			c.clock.Advance(30 * time.Second)
			for _, f := range tc.faults {
				f.remaining = 1000
				s.inject(f)
			}
			v, info, err := c.GetWithInfo(ctx, "API_KEY")
			ce := asError(t, err)
			if v != "" || info.Stale || ce.Kind != tc.kind || ce.Status != tc.status {
				t.Errorf("got %q, %+v, %#v; want the error, kind %s status %d", v, info, ce, tc.kind, tc.status)
			}
			if n := len(logs.all()); n != 0 {
				t.Errorf("%d warnings logged", n)
			}
		})
	}
}

// A 404 means the secret is gone: its kept value is forgotten, so a later
// outage cannot bring it back.
func TestStaleIfErrorForgetsASecretTheServerSaysIsGone(t *testing.T) {
	s := newStub(t)
	c, _ := staleClient(t, s, Options{})
	c.Get(ctx, "API_KEY")
	c.clock.Advance(30 * time.Second)
	s.inject(fault{pathPrefix: "/teams/acme/secrets/by-name/API_KEY", remaining: 1, status: 404})
	if _, err := c.Get(ctx, "API_KEY"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	outage(s, fault{status: 503})
	if _, err := c.Get(ctx, "API_KEY"); !errors.Is(err, ErrAPI) {
		t.Errorf("want the outage's error, got %v", err)
	}
}

// A 401 or 403 never serves a kept value, and empties the whole cache, so
// that a later outage finds nothing kept either.
func TestStaleIfErrorNeverAfterRefusedCredentials(t *testing.T) {
	for _, tc := range []struct {
		status   int
		sentinel error
	}{{401, ErrAuthentication}, {403, ErrPermissionDenied}} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			s := newStub(t)
			c, logs := staleClient(t, s, Options{})
			c.GetAll(ctx)
			c.clock.Advance(30 * time.Second)
			s.inject(fault{pathPrefix: "/teams/acme/secrets/by-name/API_KEY", remaining: 1, status: tc.status})
			v, info, err := c.GetWithInfo(ctx, "API_KEY")
			if !errors.Is(err, tc.sentinel) || v != "" || info.Stale {
				t.Fatalf("want %v, got %q, %+v, %v", tc.sentinel, v, info, err)
			}
			outage(s, fault{status: 503})
			for _, name := range []string{"API_KEY", "DATABASE_URL"} {
				if _, err := c.Get(ctx, name); !errors.Is(err, ErrAPI) {
					t.Errorf("%s after the refusal: want the outage's error, got %v", name, err)
				}
			}
			if _, err := c.GetAll(ctx); !errors.Is(err, ErrAPI) {
				t.Errorf("GetAll after the refusal: want the outage's error, got %v", err)
			}
			if n := len(logs.all()); n != 0 {
				t.Errorf("%d warnings logged", n)
			}
		})
	}
}

// The bound is CacheTTL + StaleIfError since the value was fetched.
func TestStaleIfErrorBound(t *testing.T) {
	s := newStub(t)
	c, _ := staleClient(t, s, Options{CacheTTL: time.Second, StaleIfError: time.Second})
	c.Get(ctx, "API_KEY")
	c.GetAll(ctx)
	outage(s, fault{status: 503})
	c.clock.Advance(1999 * time.Millisecond)
	if _, info, err := c.GetWithInfo(ctx, "API_KEY"); err != nil || !info.Stale {
		t.Fatalf("1.999 s old: want stale, got %+v, %v", info, err)
	}
	if _, info, err := c.GetAllWithInfo(ctx); err != nil || !info.Stale {
		t.Fatalf("GetAll 1.999 s old: want stale, got %+v, %v", info, err)
	}
	c.clock.Advance(time.Millisecond)
	if _, err := c.Get(ctx, "API_KEY"); !errors.Is(err, ErrAPI) {
		t.Errorf("2 s old: past the bound, want the error, got %v", err)
	}
	if _, err := c.GetAll(ctx); !errors.Is(err, ErrAPI) {
		t.Errorf("GetAll 2 s old: want the error, got %v", err)
	}
	// Huge settings do not overflow into "expired".
	s2 := newStub(t)
	c2, _ := staleClient(t, s2, Options{CacheTTL: time.Duration(1<<62) + 1, StaleIfError: time.Duration(1 << 62)})
	c2.Get(ctx, "API_KEY")
	c2.clock.Advance(time.Duration(1<<62) + 2) // past the TTL
	outage(s2, fault{status: 503})
	if _, info, err := c2.GetWithInfo(ctx, "API_KEY"); err != nil || !info.Stale {
		t.Errorf("huge bound: %+v, %v", info, err)
	}
}

// Without StaleIfError a failed refresh is the error, as before.
func TestStaleIfErrorIsOffByDefault(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{CacheTTL: time.Second})
	c.Get(ctx, "API_KEY")
	c.GetAll(ctx)
	c.clock.Advance(time.Second)
	outage(s, fault{status: 503})
	if _, err := c.Get(ctx, "API_KEY"); !errors.Is(err, ErrAPI) {
		t.Errorf("Get: %v", err)
	}
	if _, err := c.GetAll(ctx); !errors.Is(err, ErrAPI) {
		t.Errorf("GetAll: %v", err)
	}
}

// With NoCache every call asks the server; a failed one returns the last
// value fetched less than StaleIfError ago.
func TestStaleIfErrorWithTheCacheOff(t *testing.T) {
	s := newStub(t)
	c, _ := staleClient(t, s, Options{CacheTTL: NoCache, StaleIfError: 30 * time.Second})
	for i := 0; i < 2; i++ {
		if _, info, err := c.GetWithInfo(ctx, "API_KEY"); err != nil || info.Cached || info.Stale {
			t.Fatalf("get %d: %+v, %v", i, info, err)
		}
	}
	c.GetAll(ctx)
	c.GetAll(ctx)
	if n := s.count(); n != 4 {
		t.Fatalf("the cache is off: want 4 requests, got %v", s.paths())
	}
	outage(s, fault{status: 503})
	c.clock.Advance(29 * time.Second)
	if v, info, err := c.GetWithInfo(ctx, "API_KEY"); err != nil || v != apiKeyVal || !info.Stale || info.Age != 29*time.Second {
		t.Errorf("want the value kept for 30 s, got %q, %+v, %v", v, info, err)
	}
	if _, info, err := c.GetAllWithInfo(ctx); err != nil || !info.Stale {
		t.Errorf("GetAll: want the result kept for 30 s, got %+v, %v", info, err)
	}
	c.clock.Advance(time.Second)
	if _, err := c.Get(ctx, "API_KEY"); !errors.Is(err, ErrAPI) {
		t.Errorf("30 s old: want the error, got %v", err)
	}
}

// ClearCache forgets kept values too; a fresh read after an outage is not
// marked.
func TestStaleIfErrorAndClearCache(t *testing.T) {
	s := newStub(t)
	c, _ := staleClient(t, s, Options{})
	c.Get(ctx, "API_KEY")
	c.GetAll(ctx)
	c.clock.Advance(30 * time.Second)
	outage(s, fault{drop: true})
	c.ClearCache()
	if _, err := c.Get(ctx, "API_KEY"); !errors.Is(err, ErrNetwork) {
		t.Errorf("Get after ClearCache: want the network error, got %v", err)
	}
	if _, err := c.GetAll(ctx); !errors.Is(err, ErrNetwork) {
		t.Errorf("GetAll after ClearCache: want the network error, got %v", err)
	}
	s.mu.Lock()
	s.faults = nil
	s.mu.Unlock()
	if v, info, err := c.GetWithInfo(ctx, "API_KEY"); err != nil || v != apiKeyVal || info != (Info{}) {
		t.Errorf("a fresh read: %q, %+v, %v", v, info, err)
	}
	if _, info, err := c.GetWithInfo(ctx, "API_KEY"); err != nil || !info.Cached || info.Stale {
		t.Errorf("a cache hit is marked cached, not stale: %+v, %v", info, err)
	}
}

// GetAll serves only a whole kept result, never one pieced together from
// the values Get cached.
func TestStaleIfErrorGetAllNeedsAKeptGetAll(t *testing.T) {
	s := newStub(t)
	c, _ := staleClient(t, s, Options{})
	c.Get(ctx, "API_KEY")
	c.Get(ctx, "DATABASE_URL")
	c.clock.Advance(30 * time.Second)
	outage(s, fault{status: 503})
	if all, err := c.GetAll(ctx); !errors.Is(err, ErrAPI) || all != nil {
		t.Errorf("want the error, got %v, %v", all, err)
	}
}

// A caller that cancels its context gets that, not a kept value.
func TestStaleIfErrorNotWhenTheCallerCancels(t *testing.T) {
	s := newStub(t)
	c, _ := staleClient(t, s, Options{})
	c.Get(ctx, "API_KEY")
	c.clock.Advance(30 * time.Second)
	outage(s, fault{status: 503})
	cctx, cancel := context.WithCancel(ctx)
	c.sleep = func(ctx context.Context, d time.Duration) error { cancel(); return ctx.Err() }
	if _, err := c.Get(cctx, "API_KEY"); !errors.Is(err, context.Canceled) {
		t.Errorf("want context.Canceled, got %v", err)
	}
}

// The warning: once per kept value and name, naming the secret and the
// error's kind, never the value; again after a successful refresh and a
// new outage.
func TestStaleIfErrorWarnsOncePerName(t *testing.T) {
	s := newStub(t)
	c, logs := staleClient(t, s, Options{})
	c.Get(ctx, "API_KEY")
	c.Get(ctx, "DATABASE_URL")
	c.clock.Advance(30 * time.Second)
	outage(s, fault{status: 503, header: map[string]string{"X-Request-Id": "req-outage"}})
	for i := 0; i < 3; i++ {
		if _, err := c.Get(ctx, "API_KEY"); err != nil {
			t.Fatal(err)
		}
	}
	recs := logs.all()
	if len(recs) != 1 {
		t.Fatalf("three stale reads of one name: want 1 warning, got %d: %v", len(recs), recs)
	}
	r := recs[0]
	if r.level != slog.LevelWarn || !strings.Contains(r.msg, "stale") || r.attrs["secret"] != "API_KEY" ||
		r.attrs["error_kind"] != "api" || r.attrs["status"] != "503" || r.attrs["environment"] != "production" ||
		r.attrs["age"] != "30s" || r.attrs["request_id"] != "req-outage" {
		t.Errorf("warning %+v", r)
	}
	c.Get(ctx, "DATABASE_URL")
	c.Get(ctx, "DATABASE_URL")
	if recs = logs.all(); len(recs) != 2 || recs[1].attrs["secret"] != "DATABASE_URL" {
		t.Fatalf("a second name warns once: %v", recs)
	}
	// The outage ends, the value is refreshed, a new outage warns again.
	s.mu.Lock()
	s.faults = nil
	s.mu.Unlock()
	c.clock.Advance(time.Minute)
	if _, info, err := c.GetWithInfo(ctx, "API_KEY"); err != nil || info.Stale {
		t.Fatal(info, err)
	}
	c.clock.Advance(30 * time.Second)
	outage(s, fault{drop: true})
	c.Get(ctx, "API_KEY")
	c.Get(ctx, "API_KEY")
	if recs = logs.all(); len(recs) != 3 || recs[2].attrs["secret"] != "API_KEY" || recs[2].attrs["error_kind"] != "network" {
		t.Fatalf("a new outage warns again, once: %v", recs)
	}
	// GetAll warns once for the whole result.
	c.ClearCache()
	s.mu.Lock()
	s.faults = nil
	s.mu.Unlock()
	c.GetAll(ctx)
	c.clock.Advance(30 * time.Second)
	outage(s, fault{status: 429})
	c.GetAll(ctx)
	c.GetAll(ctx)
	if recs = logs.all(); len(recs) != 4 || recs[3].attrs["secrets"] != "2" || recs[3].attrs["error_kind"] != "rate_limited" {
		t.Fatalf("GetAll warns once: %v", recs)
	}
	for _, r := range logs.all() {
		text := fmt.Sprint(r)
		for _, secret := range []string{apiKeyVal, dbURLValue, "s3cr3t", testToken} {
			if strings.Contains(text, secret) {
				t.Errorf("a warning holds a value or the token: %s", text)
			}
		}
	}
}

// Without a Logger the warning goes to slog.Default().
func TestStaleIfErrorWarnsThroughTheDefaultLogger(t *testing.T) {
	logs := &logRecorder{}
	previous := slog.Default()
	slog.SetDefault(slog.New(logs))
	defer slog.SetDefault(previous)
	s := newStub(t)
	c := newTestClient(t, s, Options{CacheTTL: time.Second, StaleIfError: time.Minute})
	c.Get(ctx, "API_KEY")
	c.clock.Advance(2 * time.Second)
	outage(s, fault{status: 503})
	if _, err := c.Get(ctx, "API_KEY"); err != nil {
		t.Fatal(err)
	}
	if recs := logs.all(); len(recs) != 1 || recs[0].attrs["secret"] != "API_KEY" {
		t.Errorf("default logger got %v", recs)
	}
}

// Inject works from a kept result during an outage.
func TestStaleIfErrorInject(t *testing.T) {
	s := newStub(t)
	c, _ := staleClient(t, s, Options{})
	c.GetAll(ctx)
	c.clock.Advance(30 * time.Second)
	outage(s, fault{drop: true})
	for _, name := range []string{"API_KEY", "DATABASE_URL"} {
		t.Setenv(name, "")
	}
	names, err := c.Inject(ctx, Overwrite(true))
	if err != nil || len(names) != 2 {
		t.Fatalf("Inject = %v, %v", names, err)
	}
}
