// This file tests a Client reading an end-to-end team with a token that
// carries its key part, against a stub of the server's end-to-end answers
// built from the shared vectors.

package cvsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	e2eSecretDB  = "0b6d3e2a-8f41-4a5c-b3d2-7e9c1f0a4b58" // the vectors' DATABASE_URL
	e2eSecretAPI = "c2a7f9e1-5b3d-4e8a-9f60-1d2c3b4a5e6f"
)

// e2eStub answers as the server does for an end-to-end team: by-name reads
// with "e2e": true and the envelope as value, the JSON export of
// envelopes, and GET .../e2e/key with the wrap for the vectors' token.
type e2eStub struct {
	t   *testing.T
	v   e2eVectors
	srv *httptest.Server

	mu         sync.Mutex
	requests   []recorded
	sealed     map[string]map[string]string // environment -> name -> envelope
	keyVersion int
	links      []map[string]any
	wrapped    string
	markBeside bool // "e2e": true beside the value instead of in the secret
	noMark     bool // the export answers without its Cvsm-E2E: 1 header
	// keyGate, when not nil, holds the next answer of GET .../e2e/key,
	// made when the request arrives, until it is closed.
	keyGate chan struct{}
	refused map[string]int // name -> the status its by-name read answers
}

func newE2EStub(t *testing.T) *e2eStub {
	t.Helper()
	v := loadVectors(t)
	s := &e2eStub{t: t, v: v, keyVersion: v.KeyVersion, links: []map[string]any{{"key_version": 2, "link": v.Chain.Links[0].Link}}}
	for _, r := range v.Recipients {
		if r.What == "token" {
			s.wrapped = r.WrappedKey
		}
	}
	teamKey := mustB64u(t, v.TeamKey)
	s.sealed = map[string]map[string]string{
		"production": {
			"DATABASE_URL": v.Values[0].Envelope, // the vectors' own envelope
			"API_KEY":      sealForTest(t, apiKeyVal, teamKey, v.KeyVersion, v.TeamID, e2eSecretAPI, 2, "production", "API_KEY"),
		},
		"staging": {"API_KEY": v.Values[2].Envelope},
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *e2eStub) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	unlocked := false
	defer func() {
		if !unlocked {
			s.mu.Unlock()
		}
	}()
	s.requests = append(s.requests, recorded{r.Method, r.URL.Path, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone()})
	w.Header().Set("X-Request-Id", fmt.Sprintf("req-%d", len(s.requests)))
	if r.Header.Get("Authorization") != "Bearer "+s.v.Token.APIToken {
		writeJSON(w, 401, map[string]any{"error": "token tidak valid"})
		return
	}
	team := "/api/v1/teams/" + s.v.TeamID
	env := r.URL.Query().Get("environment")
	switch path := r.URL.Path; {
	case path == team+"/e2e/key":
		body := map[string]any{"team_id": s.v.TeamID, "key_version": s.keyVersion, "wrapped_key": s.wrapped, "links": s.links}
		if gate := s.keyGate; gate != nil {
			s.keyGate = nil
			unlocked = true
			s.mu.Unlock()
			<-gate
		}
		writeJSON(w, 200, body)
	case path == team+"/secrets/export":
		out := map[string]string{}
		for name, sealed := range s.sealed[env] {
			out[name] = sealed
		}
		if !s.noMark {
			w.Header().Set("Cvsm-E2E", "1")
		}
		writeJSON(w, 200, out)
	case strings.HasPrefix(path, team+"/secrets/by-name/"):
		name := strings.TrimPrefix(path, team+"/secrets/by-name/")
		if status := s.refused[name]; status != 0 {
			writeJSON(w, status, map[string]any{"error": "tidak boleh"})
			return
		}
		sealed, ok := s.sealed[env][name]
		if !ok {
			writeJSON(w, 404, map[string]any{"error": "rahasia tidak ditemukan"})
			return
		}
		// The server marks the secret; docs/e2e.md first put the mark beside the value.
		secret := map[string]any{"name": name, "environment": env, "e2e": !s.markBeside}
		writeJSON(w, 200, map[string]any{"secret": secret, "value": sealed, "e2e": s.markBeside})
	case path == team+"/secrets":
		writeJSON(w, 200, map[string]any{"secrets": []any{}, "total": 0})
	default:
		writeJSON(w, 404, map[string]any{"error": "tidak ditemukan"})
	}
}

func (s *e2eStub) set(f func(s *e2eStub)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// take returns the paths requested since the last take.
func (s *e2eStub) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.requests {
		out = append(out, strings.TrimPrefix(r.path, "/api/v1/teams/"+s.v.TeamID))
	}
	s.requests = nil
	return out
}

func (s *e2eStub) client(t *testing.T, opts Options) testClient {
	t.Helper()
	clearEnv(t)
	if opts.Token == "" {
		opts.Token = s.v.Token.Token
	}
	opts.BaseURL, opts.Team = s.srv.URL+"/api/v1", s.v.TeamID
	return newTestClient(t, nil, opts) // nil: the options name this stub
}

func wantPaths(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("requests %q, want %q", got, want)
	}
}

func TestE2EKeyPartNeverPrintsOrLogs(t *testing.T) {
	s := newE2EStub(t)
	c := s.client(t, Options{})
	if _, err := c.GetAll(ctx); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("client", "client", c.Client, "options", Options{Token: s.v.Token.Token})
	opts, _ := json.Marshal(Options{Token: s.v.Token.Token})
	printed := fmt.Sprintf("%v %+v %#v %s %v %+v %#v", c.Client, c.Client, c.Client, *c.Client,
		Options{Token: s.v.Token.Token}, Options{Token: s.v.Token.Token}, Options{Token: s.v.Token.Token}) + logged.String() + string(opts)
	for _, secret := range []string{s.v.Token.PrivateKey, s.v.Token.APIToken, s.v.TeamKey, s.v.Values[0].Value} {
		if strings.Contains(printed, secret) {
			t.Errorf("printed or logged: %s", printed)
		}
	}
}

func TestE2EConcurrentFirstReadsFetchTheKeyOnce(t *testing.T) {
	s := newE2EStub(t)
	c := s.client(t, Options{CacheTTL: NoCache})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := c.Get(ctx, "DATABASE_URL"); err != nil || v != s.v.Values[0].Value {
				errs <- fmt.Errorf("Get = %d bytes, %v", len(v), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	keys := 0
	for _, p := range s.take() {
		if p == "/e2e/key" {
			keys++
		}
	}
	if keys != 1 {
		t.Errorf("%d key requests for 16 concurrent first reads, want 1", keys)
	}
}

// waitFor polls cond (every millisecond, for at most 10 s) until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// requested reports whether the stub has received a request for path
// (below the team) since the last take.
func (s *e2eStub) requested(path string) func() bool {
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, r := range s.requests {
			if strings.TrimPrefix(r.path, "/api/v1/teams/"+s.v.TeamID) == path {
				return true
			}
		}
		return false
	}
}

// blockedInFetchTeamKey reports whether a goroutine waits for the key
// fetch of another (on the keyring's fetchMu, in fetchTeamKey).
func blockedInFetchTeamKey() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "[sync.Mutex.Lock") && strings.Contains(g, ").fetchTeamKey(") {
			return true
		}
	}
	return false
}

func TestE2EAKeyFetchThatAClearOvertookKeepsNothing(t *testing.T) {
	for _, clear := range []string{"ClearCache", "a 403 to another read"} {
		t.Run(clear, func(t *testing.T) {
			s := newE2EStub(t)
			c := s.client(t, Options{CacheTTL: NoCache})
			gate := make(chan struct{})
			s.set(func(s *e2eStub) {
				s.keyGate = gate
				s.refused = map[string]int{"FORBIDDEN": 403}
			})
			done := make(chan error, 1)
			go func() {
				v, err := c.Get(ctx, "DATABASE_URL")
				if err == nil && v != s.v.Values[0].Value {
					err = errors.New("another value")
				}
				done <- err
			}()
			waitFor(t, "the key is asked", s.requested("/e2e/key"))
			if clear == "ClearCache" {
				c.ClearCache()
			} else if _, err := c.Get(ctx, "FORBIDDEN"); !errors.Is(err, ErrPermissionDenied) {
				t.Fatalf("Get(FORBIDDEN) = %v", err)
			}
			close(gate)
			// The read in flight opens its value with the key it fetched...
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			s.take()
			// ...but the key is not kept: the next read fetches it again.
			if _, err := c.Get(ctx, "DATABASE_URL"); err != nil {
				t.Fatal(err)
			}
			wantPaths(t, s.take(), "/secrets/by-name/DATABASE_URL", "/e2e/key")
		})
	}
}

func TestE2EAReadOfANewKeyVersionRefetchesAfterAFetchBegunBeforeTheReKey(t *testing.T) {
	s := newE2EStub(t)
	c := s.client(t, Options{CacheTTL: NoCache})
	gate := make(chan struct{})
	s.set(func(s *e2eStub) { s.keyGate = gate })
	// A first read fetches the key; its answer, version 2, is made before...
	first := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, "DATABASE_URL")
		first <- err
	}()
	waitFor(t, "the key is asked", s.requested("/e2e/key"))
	// ...the team is re-keyed (version 3), and a second read gets a value
	// sealed under version 3 while the first fetch is still in flight.
	newKey := bytes.Repeat([]byte{9}, 32)
	s.set(func(s *e2eStub) {
		s.keyVersion = 3
		s.wrapped = wrapForTest(t, newKey, s.v.TeamID, 3, mustB64u(t, s.v.Token.PrivateKey))
		s.links = append(s.links, map[string]any{"key_version": 3, "link": linkForTest(t, newKey, mustB64u(t, s.v.TeamKey), s.v.TeamID, 3)})
		s.sealed["production"]["API_KEY"] = sealForTest(t, "rotated", newKey, 3, s.v.TeamID, e2eSecretAPI, 3, "production", "API_KEY")
	})
	second := make(chan error, 1)
	go func() {
		v, err := c.Get(ctx, "API_KEY")
		if err == nil && v != "rotated" {
			err = errors.New("another value")
		}
		second <- err
	}()
	waitFor(t, "the second read waits for the first one's key fetch", blockedInFetchTeamKey)
	close(gate)
	if err := <-first; err != nil {
		t.Fatalf("first read: %v", err)
	}
	// The version 2 key the first read fetched does not open the second
	// read's value: the second read fetches the key once more.
	if err := <-second; err != nil {
		t.Fatalf("second read: %v", err)
	}
	keys := 0
	for _, p := range s.take() {
		if p == "/e2e/key" {
			keys++
		}
	}
	if keys != 2 {
		t.Errorf("%d key requests, want 2", keys)
	}
	if held := c.keys.get(); held == nil || held.version != 3 {
		t.Errorf("the key held is not version 3")
	}
}
