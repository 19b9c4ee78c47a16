// This file holds the test fixtures: a launcher for conformance/stub.py (the
// stub cvsm API every SDK's own tests share: canned data, scripted faults and
// the requests it saw, driven over HTTP), a fake clock, and a helper that
// builds a client with a clean CVSM_* environment. The end-to-end tests
// (teamkey_test.go) still run their own httptest server on recorded and
// writeJSON below.

package cvsm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// TestMain stops the shared stub, if a test started it, once the tests are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.cmd != nil {
		_ = shared.cmd.Process.Kill()
		_ = shared.cmd.Wait()
	}
	os.Exit(code)
}

// shared is conformance/stub.py, started by the first test that needs it.
var shared struct {
	once sync.Once
	cmd  *exec.Cmd
	url  string // http://127.0.0.1:PORT
	err  error
}

func startSharedStub() {
	dir, err := os.MkdirTemp("", "cvsm-go-stub")
	if err != nil {
		shared.err = err
		return
	}
	portFile := filepath.Join(dir, "port")
	cmd := exec.Command("python3", filepath.Join("..", "..", "..", "conformance", "stub.py"), portFile)
	cmd.Stderr = os.Stderr
	if shared.err = cmd.Start(); shared.err != nil {
		return
	}
	shared.cmd = cmd
	for range 200 {
		if port, err := os.ReadFile(portFile); err == nil && len(port) > 0 {
			shared.url = "http://127.0.0.1:" + strings.TrimSpace(string(port))
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	shared.err = fmt.Errorf("conformance/stub.py wrote no port to %s", portFile)
}

// stubServer is a test's handle on the shared stub.
type stubServer struct {
	t   *testing.T
	url string
}

// stubHTTP talks to the stub itself, never through a proxy.
var stubHTTP = &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}

// newStub starts the shared stub if need be and resets it to the fixture:
// token testToken, team teamID (slug teamSlug), DATABASE_URL and API_KEY in
// production, API_KEY in staging; no faults, no recorded requests.
func newStub(t *testing.T) *stubServer {
	t.Helper()
	shared.once.Do(startSharedStub)
	if shared.err != nil {
		t.Fatalf("the shared stub (conformance/stub.py): %v", shared.err)
	}
	s := &stubServer{t: t, url: shared.url}
	s.post("/_stub/reset", map[string]any{
		"token": testToken,
		"teams": []map[string]any{{"id": teamID, "slug": teamSlug}},
		"secrets": []map[string]any{
			{"id": "11111111-0000-4000-8000-000000000001", "name": "DATABASE_URL", "environment": "production", "value": dbURLValue},
			{"id": "11111111-0000-4000-8000-000000000002", "name": "API_KEY", "environment": "production", "value": apiKeyVal},
			{"id": "11111111-0000-4000-8000-000000000003", "name": "API_KEY", "environment": "staging", "value": "staging-key"},
		},
	})
	return s
}

func (s *stubServer) baseURL() string { return s.url + "/api/v1" }

func (s *stubServer) post(path string, body any) {
	s.t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := stubHTTP.Post(s.url+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		s.t.Fatalf("stub %s: %v", path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		s.t.Fatalf("stub %s: %s", path, resp.Status)
	}
}

// stubFault is one scripted fault (see conformance/stub.py): the first After
// requests whose path starts with Path pass, the next Count (1 when 0) get it.
type stubFault struct {
	Path   string  `json:"path"`
	After  int     `json:"after,omitempty"`
	Count  int     `json:"count,omitempty"`
	Status int     `json:"status,omitempty"`
	Delay  float64 `json:"delay,omitempty"` // seconds
}

// inject queues faults on the stub.
func (s *stubServer) inject(faults ...stubFault) { s.post("/_stub/faults", faults) }

// changes sends changes to the stub's open change streams (see conformance/stub.py).
func (s *stubServer) changes(items ...map[string]any) { s.post("/_stub/changes", items) }

// streams says how many change streams are open, and how many ended since the reset.
func (s *stubServer) streams() (open, closed int) {
	s.t.Helper()
	resp, err := stubHTTP.Get(s.url + "/_stub/streams")
	if err != nil {
		s.t.Fatalf("stub streams: %v", err)
	}
	defer resp.Body.Close()
	var out struct{ Open, Closed int }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		s.t.Fatalf("stub streams: %v", err)
	}
	return out.Open, out.Closed
}

// stubRequest is what the stub saw of one API request.
type stubRequest struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"` // as sent, percent-encoding included
	Query   string            `json:"query"`
	Headers map[string]string `json:"headers"` // names in lower case
}

func (s *stubServer) reqs() []stubRequest {
	s.t.Helper()
	resp, err := stubHTTP.Get(s.url + "/_stub/requests")
	if err != nil {
		s.t.Fatalf("stub requests: %v", err)
	}
	defer resp.Body.Close()
	var out []stubRequest
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		s.t.Fatalf("stub requests: %v", err)
	}
	return out
}

func (s *stubServer) count() int { return len(s.reqs()) }

func (s *stubServer) paths() []string {
	var out []string
	for _, r := range s.reqs() {
		p := r.Path
		if r.Query != "" {
			p += "?" + r.Query
		}
		out = append(out, p)
	}
	return out
}

// recorded is what the end-to-end tests' own server saw of one request.
type recorded struct {
	method  string
	path    string
	rawPath string // as sent, percent-encoding included
	query   string
	header  http.Header
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

// testClient is a client with a fake clock and instant retries.
type testClient struct {
	*Client
	clock  *fakeClock
	sleeps *sleepRecorder
}

// newTestClient builds a client on s (token, base URL and team slug unless
// opts has them; s may be nil when opts names them all).
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
