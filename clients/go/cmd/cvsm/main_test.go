//go:build unix

package main

// The tests run the built cvsm binary, as a person or a script would, against
// the real reference server: TestMain builds the binary, starts
// the reference server once on a fresh embedded PostgreSQL (found as
// findServer says: <repo>/.venv/bin/cvsm-server, $CVSM_SERVER_PYTHON, PATH),
// and seeds a user, a team, secrets in three environments and an API token
// through the public API. Without a server the tests that need it skip,
// saying why; with CI=true that is a failure instead, before any test runs. The tests of
// usage, help and the error kinds a stub server answers run either way.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

var (
	binary   string      // the cvsm binary built for this run
	server   *testServer // nil when the reference server is not available
	noServer string      // why server is nil
	scratch  string      // a directory removed after the run
)

// testServer is the reference server of this run and what was seeded in it.
type testServer struct {
	api      string // base URL, with /api/v1
	token    string // an API token of the seeded user
	jwt      string // the seeded user's session
	teamID   string
	teamSlug string
	// secrets per environment, as seeded
	production, staging, development map[string]string
	marker                           string // a file that a value would create if the shell ran it

	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	var err error
	scratch, err = os.MkdirTemp("", "cvsm-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Under root the embedded PostgreSQL runs as a system user, which must pass through this
	// folder to the server's data dir; the server changes no folder's mode it did not make.
	if err := os.Chmod(scratch, 0o711); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(scratch)

	binary = filepath.Join(scratch, "cvsm")
	build := exec.Command("go", "build", "-buildvcs=false", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // the static binary the Makefile builds
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building cvsm: %v\n%s", err, out)
		return 1
	}

	server, noServer, err = startServer()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cvsm CLI tests: %v\n", err)
		return 1
	}
	if server == nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "cvsm CLI tests: %s; CI=true makes this a failure\n", noServer)
			return 1
		}
		fmt.Fprintf(os.Stderr, "cvsm CLI tests: %s; the tests that need it are skipped\n", noServer)
	} else {
		defer server.stop()
	}
	return m.Run()
}

// needServer skips t when the reference server is not available.
func needServer(t *testing.T) *testServer {
	t.Helper()
	if server == nil {
		t.Skip(noServer)
	}
	return server
}

// repoRoot is the repository root: the first parent holding conformance/PROTOCOL.md.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "conformance", "PROTOCOL.md")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the repository root (no conformance/PROTOCOL.md above the working directory)")
		}
		dir = parent
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// withoutCVSM is environ without any CVSM_* variable.
func withoutCVSM(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "CVSM_") {
			out = append(out, kv)
		}
	}
	return out
}

// startServer starts and seeds the reference server. It answers (nil, why,
// nil) when there is none to start, and an error when it did not start.
func startServer() (*testServer, string, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, "", err
	}
	command, why := findServer(root)
	if command == nil {
		return nil, why, nil
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	dataDir, err := os.MkdirTemp(scratch, "server-")
	if err != nil {
		return nil, "", err
	}
	s := &testServer{
		api:     fmt.Sprintf("http://127.0.0.1:%d/api/v1", port),
		exited:  make(chan struct{}),
		logPath: filepath.Join(scratch, "server.log"),
		marker:  filepath.Join(scratch, "a-value-was-run-by-the-shell"),
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		return nil, "", err
	}
	defer logFile.Close()
	args := append(command[1:len(command):len(command)], "serve", "--host", "127.0.0.1", "--port", fmt.Sprint(port))
	s.cmd = exec.Command(command[0], args...)
	s.cmd.Env = append(withoutCVSM(os.Environ()),
		"CVSM_DATA_DIR="+dataDir,
		"CVSM_MASTER_KEY="+base64.StdEncoding.EncodeToString([]byte(randomHex(16))), // 32 bytes
		"CVSM_JWT_SECRET="+randomHex(32),
		"CVSM_BACKGROUND_JOBS=off",
		// the tests send wrong tokens on purpose, and many requests with one token
		"CVSM_RATELIMIT_AUTH=off", "CVSM_RATELIMIT_API=off", "CVSM_RATELIMIT_PUBLIC=off",
		"CVSM_RATELIMIT_NEWSLETTER=off", "CVSM_RATELIMIT_FAILED_AUTH=off",
		// the team holds secrets in all three environments, which a starter team may not
		"CVSM_DEFAULT_PLAN=professional",
	)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.SysProcAttr = serverProcAttr()
	if err := s.cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting %s: %w", strings.Join(command, " "), err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()

	// The embedded PostgreSQL takes a few seconds to start, more on a loaded machine.
	deadline := time.Now().Add(180 * time.Second)
	probe := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := probe.Get(s.api + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-s.exited:
			return nil, "", fmt.Errorf("the reference server exited at start-up:\n%s", s.logTail())
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, "", fmt.Errorf("the reference server did not answer %s/health within 180 s:\n%s", s.api, s.logTail())
		}
	}
	if err := s.seed(); err != nil {
		s.stop()
		return nil, "", fmt.Errorf("seeding the reference server: %w\n%s", err, s.logTail())
	}
	return s, "", nil
}

// findServer finds the reference server's command, as the conformance
// harness does (it imports cvsm_server from the Python it runs in): the
// repository's .venv (make venv), then $CVSM_SERVER_PYTHON, a cvsm-server
// command on PATH, then python3 on PATH, each if it can import cvsm_server.
// It answers the command and "", or nil and what it looked for.
func findServer(root string) ([]string, string) {
	venv := filepath.Join(root, ".venv", "bin", "cvsm-server")
	if _, err := os.Stat(venv); err == nil {
		return []string{venv}, ""
	}
	tried := []string{venv}
	if python := os.Getenv("CVSM_SERVER_PYTHON"); python != "" {
		if exec.Command(python, "-c", "import cvsm_server.runtime.cli").Run() == nil {
			return []string{python, "-m", "cvsm_server.runtime.cli"}, ""
		}
		tried = append(tried, "$CVSM_SERVER_PYTHON ("+python+") with cvsm_server")
	}
	if path, err := exec.LookPath("cvsm-server"); err == nil {
		return []string{path}, ""
	}
	tried = append(tried, "cvsm-server on PATH")
	if python, err := exec.LookPath("python3"); err == nil && exec.Command(python, "-c", "import cvsm_server.runtime.cli").Run() == nil {
		return []string{python, "-m", "cvsm_server.runtime.cli"}, ""
	}
	tried = append(tried, "python3 on PATH with cvsm_server")
	return nil, fmt.Sprintf("no reference server: tried %s (run `make venv` in the repository root, or set CVSM_SERVER_PYTHON to a Python that imports cvsm_server)", strings.Join(tried, ", "))
}

func (s *testServer) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stop ends the server the way an operator does (SIGTERM), which also stops
// its embedded PostgreSQL; it is killed if it takes more than a minute.
func (s *testServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// call makes one request of the seeding; body nil sends none.
func (s *testServer) call(method, path, bearer string, body any, expect int) (map[string]any, error) {
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		reader = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.api+path, reader)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != expect {
		return nil, fmt.Errorf("%s %s answered %d (expected %d): %.300s", method, path, resp.StatusCode, expect, raw)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%s %s answered non-JSON: %.300s", method, path, raw)
	}
	return out, nil
}

// seed registers a user, creates a team with secrets in three environments
// and mints an API token, as docs/API.md shows.
func (s *testServer) seed() error {
	run := randomHex(4)
	registered, err := s.call("POST", "/auth/register", "", map[string]string{
		"email": "cli-" + run + "@example.test", "username": "cli_" + run,
		"password": randomHex(12), "name": "CLI tests",
	}, http.StatusCreated)
	if err != nil {
		return err
	}
	jwt, _ := registered["token"].(string)
	s.jwt = jwt
	s.teamSlug = "cli-" + run
	created, err := s.call("POST", "/teams", jwt, map[string]string{"name": "CLI tests", "slug": s.teamSlug}, http.StatusCreated)
	if err != nil {
		return err
	}
	s.teamID, _ = created["team"].(map[string]any)["id"].(string)

	s.production = map[string]string{
		"DATABASE_URL":      "postgres://db.prod/acme",
		"QUOTES":            `it's "double" and 'single' \ back\slash`,
		"SUBSTITUTION":      "$(touch " + s.marker + ") `touch " + s.marker + "` ${HOME} $HOME",
		"MULTILINE":         "-----BEGIN KEY-----\nsecond line\n-----END KEY-----\n",
		"SPACES":            "  two leading, two trailing  ",
		"EMPTY":             "",
		"UNICODE":           "héllo wörld ✓ ☃",
		"DASHES":            "-n -e \\c --help",
		"GLOB":              "* ?[ab] ~ ; | & < >",
		"CLI_TEST_EXISTING": "from-the-cvsm-secret",
	}
	s.staging = map[string]string{"DATABASE_URL": "postgres://db.staging/acme"}
	s.development = map[string]string{"GOOD_VALUE": "development-value", "WITH_NUL": "before\x00after"}
	for env, secrets := range map[string]map[string]string{"production": s.production, "staging": s.staging, "development": s.development} {
		for name, value := range secrets {
			if _, err := s.call("POST", "/teams/"+s.teamID+"/secrets", jwt,
				map[string]string{"name": name, "value": value, "environment": env}, http.StatusCreated); err != nil {
				return err
			}
		}
	}
	minted, err := s.call("POST", "/tokens", jwt, map[string]string{"name": "cvsm CLI tests"}, http.StatusCreated)
	if err != nil {
		return err
	}
	s.token, _ = minted["token"].(string)
	if s.token == "" || s.teamID == "" {
		return errors.New("the server's answers lacked the token or the team id")
	}
	return nil
}

// env is an environment configured for the seeded team: the test process's
// own without CVSM_* variables, then CVSM_TOKEN, CVSM_BASE_URL and
// CVSM_TEAM, then extra (a later NAME=value wins; "NAME=" sets it empty).
func (s *testServer) env(extra ...string) []string {
	return append(cleanEnv("CVSM_TOKEN="+s.token, "CVSM_BASE_URL="+s.api, "CVSM_TEAM="+s.teamSlug), extra...)
}

// cleanEnv is the test process's environment without CVSM_* variables, plus extra.
// Its configuration folder is an empty one of this run's, so that a login
// stored on the machine (cvsm login) never reaches a test.
func cleanEnv(extra ...string) []string {
	env := append(withoutCVSM(os.Environ()), "XDG_CONFIG_HOME="+filepath.Join(scratch, "no-login"))
	return append(env, extra...)
}

// result is what one run of cvsm did.
type result struct {
	stdout, stderr string
	code           int
}

// runCLI runs the binary with env and args and checks its stderr: empty or
// one line "cvsm: ...", never the token or a seeded value.
func runCLI(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var xerr *exec.ExitError
	if err != nil && !errors.As(err, &xerr) {
		t.Fatalf("cvsm %q: %v", args, err)
	}
	r := result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
	checkStderr(t, args, r.stderr)
	return r
}

// checkStderr fails t when stderr is not empty or one "cvsm: " line, or
// when it holds the token or a seeded value.
func checkStderr(t *testing.T, args []string, stderr string) {
	t.Helper()
	if stderr != "" && (!strings.HasPrefix(stderr, "cvsm: ") || strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n")) {
		t.Errorf("cvsm %q: stderr is not one line \"cvsm: ...\": %q", args, stderr)
	}
	for _, secret := range sensitive() {
		if strings.Contains(stderr, secret) {
			t.Errorf("cvsm %q: stderr holds the token or a value: %q", args, stderr)
		}
	}
}

// sensitive is every string that must never reach stderr: the token and
// the seeded values long enough to be told from ordinary words.
func sensitive() []string {
	if server == nil {
		return nil
	}
	out := []string{server.token}
	for _, env := range []map[string]string{server.production, server.staging, server.development} {
		for _, v := range env {
			if len(v) >= 8 {
				out = append(out, v)
			}
		}
	}
	return out
}

func expectCode(t *testing.T, r result, code int, args ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("cvsm %q exited %d, want %d; stderr %q", args, r.code, code, r.stderr)
	}
}
