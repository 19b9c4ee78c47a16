//go:build unix

package main

// The commands on an end-to-end team, against a stub of the server's
// end-to-end answers built from the shared vectors
// (conformance/vectors/e2e.json): the same stub also serves the opened
// values as a plain team ("plain"), so each command's output on the
// end-to-end team can be compared with its output on a plain team of the
// same values (whose export TestExportIsTheServersExportByteForByte
// compares with the server's).

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

type cliVectors struct {
	TeamID     string `json:"team_id"`
	KeyVersion int    `json:"key_version"`
	Recipients []struct {
		What       string `json:"what"`
		WrappedKey string `json:"wrapped_key"`
	} `json:"recipients"`
	Token struct {
		Token      string `json:"token"`
		APIToken   string `json:"api_token"`
		PrivateKey string `json:"private_key"`
	} `json:"token"`
	Chain struct {
		Links []map[string]any `json:"links"`
	} `json:"chain"`
	Values []struct {
		Name        string `json:"name"`
		Environment string `json:"environment"`
		Envelope    string `json:"envelope"`
		Opens       bool   `json:"opens"`
		Value       string `json:"value"`
	} `json:"values"`
}

// e2eCLIStub serves team "plain" (values) and the vectors' team (their
// envelopes, "e2e": true on a by-name read, and the token's wrap).
type e2eCLIStub struct {
	v   cliVectors
	srv *httptest.Server

	mu      sync.Mutex
	auth    []string // the Authorization header of every request
	paths   []string // and its path
	tamper  bool     // serve every envelope with its last character changed
	changes int      // requests to the change stream
	refuse  int      // when not 0, the status of every answer (a 403, say)
}

func newE2ECLIStub(t *testing.T) *e2eCLIStub {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "conformance", "vectors", "e2e.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := &e2eCLIStub{}
	if err := json.Unmarshal(raw, &s.v); err != nil {
		t.Fatal(err)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// opened is what the vectors open to per environment: one value each, the
// first of a name.
func (s *e2eCLIStub) opened(environment string, sealed bool) map[string]string {
	out := map[string]string{}
	for _, v := range s.v.Values {
		if v.Opens && v.Environment == environment {
			if _, seen := out[v.Name]; !seen {
				out[v.Name] = v.Value
				if sealed {
					out[v.Name] = v.Envelope
				}
			}
		}
	}
	return out
}

func (s *e2eCLIStub) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	s.paths = append(s.paths, r.URL.Path)
	tamper, refuse := s.tamper, s.refuse
	s.mu.Unlock()
	w.Header().Set("X-Request-Id", "req-e2e")
	w.Header().Set("Content-Type", "application/json")
	if refuse != 0 {
		w.WriteHeader(refuse)
		_, _ = w.Write([]byte(`{"error": "tidak boleh"}`))
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.v.Token.APIToken {
		w.WriteHeader(401)
		_, _ = w.Write([]byte(`{"error": "token tidak valid"}`))
		return
	}
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/api/v1/teams/"), "/", 2)
	if len(parts) != 2 || (parts[0] != "plain" && parts[0] != s.v.TeamID) {
		w.WriteHeader(404)
		_, _ = w.Write([]byte(`{"error": "tidak ditemukan"}`))
		return
	}
	sealed := parts[0] != "plain"
	values := s.opened(r.URL.Query().Get("environment"), sealed)
	if sealed && tamper {
		for name, v := range values {
			values[name] = v[:len(v)-1] + map[bool]string{true: "B", false: "A"}[strings.HasSuffix(v, "A")]
		}
	}
	var body any
	switch rest := parts[1]; {
	case rest == "e2e/key" && sealed:
		for _, rc := range s.v.Recipients {
			if rc.What == "token" {
				body = map[string]any{"team_id": s.v.TeamID, "key_version": s.v.KeyVersion, "wrapped_key": rc.WrappedKey, "links": s.v.Chain.Links[:1]}
			}
		}
	case rest == "secrets/export":
		body = values
	case strings.HasPrefix(rest, "secrets/by-name/"):
		name := strings.TrimPrefix(rest, "secrets/by-name/")
		value, ok := values[name]
		if !ok {
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"error": "rahasia tidak ditemukan"}`))
			return
		}
		body = map[string]any{"secret": map[string]any{"name": name, "e2e": sealed}, "value": value}
	case rest == "secrets/changes":
		s.mu.Lock()
		s.changes++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	case rest == "secrets":
		body = map[string]any{"secrets": []any{}, "total": 0}
	default:
		w.WriteHeader(404)
		_, _ = w.Write([]byte(`{"error": "tidak ditemukan"}`))
		return
	}
	_ = json.NewEncoder(w).Encode(body)
}

func (s *e2eCLIStub) env(team, token string) []string {
	return cleanEnv("CVSM_TOKEN="+token, "CVSM_BASE_URL="+s.srv.URL+"/api/v1", "CVSM_TEAM="+team)
}

func (s *e2eCLIStub) checkBearers(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, auth := range s.auth {
		if strings.Contains(auth, s.v.Token.PrivateKey) {
			t.Errorf("a request's Authorization carries the key part")
		}
	}
}

func TestCommandsOnAnEndToEndTeamPrintWhatAPlainTeamOfTheSameValuesPrints(t *testing.T) {
	t.Parallel()
	s := newE2ECLIStub(t)
	e2e := s.env(s.v.TeamID, s.v.Token.Token)
	plain := s.env("plain", s.v.Token.APIToken)
	for _, environment := range []string{"production", "staging", "development"} {
		for name, value := range s.opened(environment, false) {
			args := []string{"get", "-e", environment, name}
			r := runCLI(t, e2e, args...)
			expectCode(t, r, 0, args...)
			if r.stdout != value {
				t.Errorf("cvsm %q printed another value", args)
			}
		}
		for _, format := range []string{"dotenv", "shell", "json"} {
			args := []string{"export", "-e", environment, "--format", format}
			got, want := runCLI(t, e2e, args...), runCLI(t, plain, args...)
			expectCode(t, got, 0, args...)
			if got.stdout != want.stdout || want.stdout == "" {
				t.Errorf("cvsm %q on the end-to-end team:\n%s\non a plain team of the same values:\n%s", args, got.stdout, want.stdout)
			}
		}
		args := []string{"run", "-e", environment, "--overwrite", "--", "env", "-0"}
		r := runCLI(t, e2e, args...)
		expectCode(t, r, 0, args...)
		got := parseEnv0(r.stdout)
		for name, value := range s.opened(environment, false) {
			if got[name] != value {
				t.Errorf("cvsm %q: the command's %s is not the opened value", args, name)
			}
		}
	}
	s.checkBearers(t)
}

func TestAValueThatDoesNotOpenExitsNine(t *testing.T) {
	t.Parallel()
	s := newE2ECLIStub(t)
	s.mu.Lock()
	s.tamper = true
	s.mu.Unlock()
	env := s.env(s.v.TeamID, s.v.Token.Token)
	for _, args := range [][]string{{"get", "DATABASE_URL"}, {"export"}, {"run", "--", "true"}} {
		r := runCLI(t, env, args...)
		expectCode(t, r, exitDecryption, args...)
		if !strings.Contains(r.stderr, "DATABASE_URL") || strings.Contains(r.stderr, s.v.Token.PrivateKey) || strings.Contains(r.stderr, "cvsm-e2e1.2.") {
			t.Errorf("cvsm %q: stderr %q should name the secret, never a key or the envelope", args, r.stderr)
		}
	}
	// Read by a program: the same failure as one JSON object.
	cmd := exec.Command(binary, "--error-json", "get", "DATABASE_URL")
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var failure map[string]any
	if json.Unmarshal(stderr.Bytes(), &failure) != nil || cmd.ProcessState.ExitCode() != exitDecryption ||
		failure["kind"] != "decryption" || failure["status"] != nil || failure["request_id"] != "req-e2e" {
		t.Errorf("cvsm --error-json get: %v, stderr %q", err, stderr.String())
	}
}

func TestAKeylessTokenOnAnEndToEndTeamIsAConfigurationError(t *testing.T) {
	t.Parallel()
	s := newE2ECLIStub(t)
	r := runCLI(t, s.env(s.v.TeamID, s.v.Token.APIToken), "get", "DATABASE_URL")
	expectCode(t, r, exitUsage, "get")
	if !strings.Contains(r.stderr, "key part") {
		t.Errorf("stderr %q", r.stderr)
	}
	// And a token whose key part was cut short is refused before any request.
	r = runCLI(t, s.env(s.v.TeamID, s.v.Token.Token[:len(s.v.Token.Token)-3]), "get", "DATABASE_URL")
	expectCode(t, r, exitUsage, "get")
	if strings.Contains(r.stderr, s.v.Token.PrivateKey[:20]) {
		t.Errorf("stderr quotes the key part: %q", r.stderr)
	}
}

func TestWatchFollowsTheStreamWithTheBearerOnly(t *testing.T) {
	t.Parallel()
	s := newE2ECLIStub(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run", "--watch", "--", "sleep", "30")
	cmd.Env = s.env(s.v.TeamID, s.v.Token.Token)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		s.mu.Lock()
		changes := s.changes
		s.mu.Unlock()
		if changes > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cvsm run --watch did not open the change stream")
		}
	}
	s.checkBearers(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, auth := range s.auth {
		if auth != "Bearer "+s.v.Token.APIToken {
			t.Errorf("Authorization %q", auth)
		}
	}
}

func TestBearerCutsTheKeyPartOfCvsmTokensOnly(t *testing.T) {
	for token, want := range map[string]string{
		"cvsm_" + strings.Repeat("ab", 32) + "." + strings.Repeat("A", 43): "cvsm_" + strings.Repeat("ab", 32),
		"cvsm_plain": "cvsm_plain",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln",
	} {
		if got := bearer(token); got != want {
			t.Errorf("bearer(%q) = %q", token, got)
		}
	}
}

func TestTheTeamKeyFileSavesTheKeyRequestOfTheNextRun(t *testing.T) {
	t.Parallel()
	s := newE2ECLIStub(t)
	env := s.env(s.v.TeamID, s.v.Token.Token)
	file := filepath.Join(t.TempDir(), "key")
	keyRequests := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for _, p := range s.paths {
			if strings.HasSuffix(p, "/e2e/key") {
				n++
			}
		}
		return n
	}
	for run, args := range [][]string{{"get", "DATABASE_URL"}, {"export", "--format", "json"}, {"get", "DATABASE_URL"}} {
		args = append([]string{"--team-key-file", file}, args...)
		r := runCLI(t, env, args...)
		expectCode(t, r, 0, args...)
		if got := keyRequests(); got != 1 {
			t.Fatalf("after run %d: %d key requests, want the first run's only", run+1, got)
		}
	}
	info, err := os.Stat(file)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v, %v", info, err)
	}
	// A file that holds no usable key is no key: the run fetches one, and writes it.
	if err := os.WriteFile(file, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, env, "--team-key-file", file, "get", "DATABASE_URL")
	expectCode(t, r, 0, "get")
	if got := keyRequests(); got != 2 {
		t.Errorf("%d key requests, want one more", got)
	}
	if raw, _ := os.ReadFile(file); !strings.Contains(string(raw), `"key_version":2`) {
		t.Errorf("the file was not written again: %q", raw)
	}
}

// A key in the file is trusted no more than one the server serves (issue
// 37): one that does not chain back to the token's pin, a swapped key or
// altered links, is not used; the run fetches the key, verifies it and
// writes it back.
func TestTheTeamKeyFileRefusesASwappedKey(t *testing.T) {
	t.Parallel()
	s := newE2ECLIStub(t)
	env := s.env(s.v.TeamID, s.v.Token.Token)
	file := filepath.Join(t.TempDir(), "key")
	keyRequests := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for _, p := range s.paths {
			if strings.HasSuffix(p, "/e2e/key") {
				n++
			}
		}
		return n
	}
	expectCode(t, runCLI(t, env, "--team-key-file", file, "get", "DATABASE_URL"), 0, "get")
	genuine, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var f keyFile
	if err := json.Unmarshal(genuine, &f); err != nil || len(f.Links) == 0 {
		t.Fatalf("the key file %v holds no links (%v)", f.Links, err)
	}
	swapped := f
	swapped.TeamKey = base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	noLinks := f
	noLinks.Links = nil
	for i, bad := range []keyFile{swapped, noLinks} {
		raw, _ := json.Marshal(bad)
		if err := os.WriteFile(file, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		r := runCLI(t, env, "--team-key-file", file, "get", "DATABASE_URL")
		expectCode(t, r, 0, "get")
		if got := keyRequests(); got != 2+i {
			t.Fatalf("case %d: %d key requests, want %d: a key that does not chain to the pin was used", i, got, 2+i)
		}
		if raw, _ := os.ReadFile(file); !bytes.Equal(raw, genuine) {
			t.Errorf("case %d: the verified key was not written back", i)
		}
	}
}

func TestTheTeamKeyFileIsRemovedWhenTheTokenIsRefused(t *testing.T) {
	t.Parallel()
	s := newE2ECLIStub(t)
	refusedToken := "cvsm_" + strings.Repeat("0", 64) + s.v.Token.Token[strings.Index(s.v.Token.Token, "."):]
	for _, tc := range []struct {
		what  string
		token string
		code  int
	}{
		{"401", refusedToken, 3},
		{"403", s.v.Token.Token, 4},
	} {
		file := filepath.Join(t.TempDir(), "key")
		env := s.env(s.v.TeamID, s.v.Token.Token)
		expectCode(t, runCLI(t, env, "--team-key-file", file, "get", "DATABASE_URL"), 0, "get")
		if _, err := os.Stat(file); err != nil {
			t.Fatalf("%s: the first run wrote no key file: %v", tc.what, err)
		}
		if tc.what == "403" {
			s.mu.Lock()
			s.refuse = 403
			s.mu.Unlock()
		}
		// The run reads the key from the file, and the server refuses it.
		r := runCLI(t, s.env(s.v.TeamID, tc.token), "--team-key-file", file, "get", "DATABASE_URL")
		expectCode(t, r, tc.code, "get")
		if _, err := os.Stat(file); !os.IsNotExist(err) {
			t.Errorf("%s: the key file is still there after the refusal (%v)", tc.what, err)
		}
	}
}
