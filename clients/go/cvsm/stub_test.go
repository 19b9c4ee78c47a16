// This file holds the test fixtures: a stub cvsm server on httptest that
// records every request and can inject faults, a fake clock, and a helper
// that builds a client against the stub with a clean CVSM_* environment.

package cvsm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	testToken  = "cvsm_0123abcd_test_token_value"
	teamID     = "6f1c2a9e-4b7d-4c1e-9a55-3d2f8e7b1a00"
	teamSlug   = "acme"
	otherTeam  = "0b3e1d55-1111-4a2a-8c3c-222222222222"
	dbURLValue = "postgres://app:s3cr3t-db-pass@db/app"
	apiKeyVal  = "sk_live_value_9f8e7d"
)

type stubSecret struct {
	id, name, env, value string
}

// recorded is what the stub saw of one request.
type recorded struct {
	method  string
	path    string
	rawPath string // as sent, percent-encoding included
	query   string
	header  http.Header
}

// fault is a canned answer for the next requests whose path has a prefix
// (or, with exact, is that path).
type fault struct {
	pathPrefix string
	exact      bool
	remaining  int
	status     int
	header     map[string]string
	body       string
	drop       bool          // close the connection without answering
	delay      time.Duration // wait before answering (for timeouts)
	drip       time.Duration // with status: send the body one byte every drip
}

type stubServer struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	requests []recorded
	secrets  []stubSecret
	faults   []*fault
}

func newStub(t *testing.T) *stubServer {
	t.Helper()
	s := &stubServer{t: t, secrets: []stubSecret{
		{"11111111-0000-4000-8000-000000000001", "DATABASE_URL", "production", dbURLValue},
		{"11111111-0000-4000-8000-000000000002", "API_KEY", "production", apiKeyVal},
		{"11111111-0000-4000-8000-000000000003", "API_KEY", "staging", "staging-key"},
	}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *stubServer) baseURL() string { return s.srv.URL + "/api/v1" }

// inject makes the next n requests under pathPrefix (below /api/v1) fail as f says.
func (s *stubServer) inject(f fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ff := f
	s.faults = append(s.faults, &ff)
}

func (s *stubServer) reqs() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.requests...)
}

func (s *stubServer) count() int { return len(s.reqs()) }

// lastRequestID is the X-Request-Id the stub gave its latest answer.
func (s *stubServer) lastRequestID() string { return s.requestID(s.count()) }

// requestID is the X-Request-Id the stub gave its n-th answer (from 1).
func (s *stubServer) requestID(n int) string { return fmt.Sprintf("req-%d", n) }

func (s *stubServer) paths() []string {
	var out []string
	for _, r := range s.reqs() {
		p := r.path
		if r.query != "" {
			p += "?" + r.query
		}
		out = append(out, p)
	}
	return out
}

func (s *stubServer) serve(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/api/v1")
	s.mu.Lock()
	s.requests = append(s.requests, recorded{r.Method, r.URL.Path, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone()})
	w.Header().Set("X-Request-Id", fmt.Sprintf("req-%d", len(s.requests)))
	var f *fault
	for _, cand := range s.faults {
		if cand.remaining > 0 && (path == cand.pathPrefix || !cand.exact && strings.HasPrefix(path, cand.pathPrefix)) {
			cand.remaining--
			f = cand
			break
		}
	}
	s.mu.Unlock()

	if f != nil {
		if f.delay > 0 {
			select {
			case <-time.After(f.delay):
			case <-r.Context().Done():
				return
			}
		}
		if f.drop {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		if f.status != 0 {
			for k, v := range f.header {
				w.Header().Set(k, v)
			}
			if f.drip > 0 {
				w.Header().Set("Content-Length", fmt.Sprint(len(f.body)))
			}
			w.WriteHeader(f.status)
			if f.drip > 0 {
				w.(http.Flusher).Flush()
				for i := range len(f.body) {
					select {
					case <-r.Context().Done():
						return
					case <-time.After(f.drip):
					}
					_, _ = w.Write([]byte{f.body[i]})
					w.(http.Flusher).Flush()
				}
				return
			}
			_, _ = w.Write([]byte(f.body))
			return
		}
	}

	if !strings.HasPrefix(r.URL.Path, "/api/v1/") {
		writeJSON(w, 404, map[string]any{"error": "tidak ditemukan"})
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "token tidak valid"})
		return
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "teams" && (parts[1] == teamID || parts[1] == teamSlug) && parts[2] == "secrets":
		s.serveSecrets(w, r, parts[3:])
	default:
		writeJSON(w, 404, map[string]any{"error": "tidak ditemukan"})
	}
}

func (s *stubServer) serveSecrets(w http.ResponseWriter, r *http.Request, rest []string) {
	env := r.URL.Query().Get("environment")
	if env == "" {
		env = "production"
	}
	if env != "production" && env != "staging" && env != "development" {
		writeJSON(w, 400, map[string]any{"error": "environment tidak valid"})
		return
	}
	switch {
	case len(rest) == 0:
		search := strings.ToLower(r.URL.Query().Get("search"))
		items := []map[string]any{}
		for _, sec := range s.secrets {
			if sec.env == env && strings.Contains(strings.ToLower(sec.name), search) {
				items = append(items, map[string]any{"id": sec.id, "name": sec.name, "environment": sec.env, "type": "credential"})
			}
		}
		writeJSON(w, 200, map[string]any{"secrets": items, "total": len(items)})
	case len(rest) == 1 && rest[0] == "export":
		if r.URL.Query().Get("format") != "json" {
			writeJSON(w, 400, map[string]any{"error": "format salah"})
			return
		}
		out := map[string]string{}
		for _, sec := range s.secrets {
			if sec.env == env {
				out[sec.name] = sec.value
			}
		}
		writeJSON(w, 200, out)
	case len(rest) == 2 && rest[0] == "by-name":
		for _, sec := range s.secrets {
			if sec.name == rest[1] && sec.env == env {
				writeJSON(w, 200, map[string]any{"secret": map[string]any{"id": sec.id, "name": sec.name, "environment": sec.env}, "value": sec.value})
				return
			}
		}
		writeJSON(w, 404, map[string]any{"error": "rahasia tidak ditemukan"})
	default:
		writeJSON(w, 404, map[string]any{"error": "tidak ditemukan"})
	}
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// fakeClock is a settable clock for cache expiry.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// sleepRecorder replaces the backoff sleep so retries run instantly.
type sleepRecorder struct {
	mu     sync.Mutex
	sleeps []time.Duration
}

func (r *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.sleeps = append(r.sleeps, d)
	r.mu.Unlock()
	return ctx.Err()
}

func (r *sleepRecorder) recorded() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.sleeps...)
}

var cvsmEnvVars = []string{EnvToken, EnvBaseURL, EnvTeam, EnvEnvironment, EnvCacheTTL, EnvTimeout, EnvMaxRetries, EnvCAFile, EnvStaleIfError, EnvLive,
	"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "REQUEST_METHOD"}

// clearEnv unsets every CVSM_* and proxy variable for the test (restored
// afterwards).
func clearEnv(t *testing.T) {
	t.Helper()
	for _, name := range cvsmEnvVars {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
}

// testClient is a client on the stub with a fake clock and instant retries.
type testClient struct {
	*Client
	clock  *fakeClock
	sleeps *sleepRecorder
}

func newTestClient(t *testing.T, s *stubServer, opts Options) testClient {
	t.Helper()
	clearEnv(t)
	if opts.Token == "" {
		opts.Token = testToken
	}
	if opts.BaseURL == "" {
		opts.BaseURL = s.baseURL()
	}
	if opts.Team == "" {
		opts.Team = teamSlug
	}
	c, err := NewClient(opts)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	clock := &fakeClock{now: time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)}
	rec := &sleepRecorder{}
	c.now = clock.Now
	c.sleep = rec.sleep
	return testClient{c, clock, rec}
}
