//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// --- without a server --------------------------------------------------

// runCLIIn runs the binary in dir with env and args (as runCLI does).
func runCLIIn(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env, cmd.Dir = env, dir
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

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTheFoldersCvsmYamlIsReadFromTheFolderUpward(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	// A server that is not there: a network error (8) proves the address came from the file.
	writeFile(t, filepath.Join(root, ".cvsm.yaml"), "server: http://127.0.0.1:9\nteam: acme\nenvironment: staging\n")
	deep := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	env := cleanEnv("CVSM_TOKEN=cvsm_" + strings.Repeat("0", 64))
	r := runCLIIn(t, deep, env, "--max-retries", "0", "get", "X")
	expectCode(t, r, exitNetwork, "get", "X")

	// The flags and CVSM_* variables win over the file: here an address that is not http.
	r = runCLIIn(t, deep, append(env, "CVSM_BASE_URL=ftp://example.com"), "get", "X")
	expectCode(t, r, exitUsage, "get", "X")
	if !strings.Contains(r.stderr, "base URL") {
		t.Errorf("want the CVSM_BASE_URL error, got %q", r.stderr)
	}
	// A file without a team, and no login: the error says how to set one.
	other := t.TempDir()
	writeFile(t, filepath.Join(other, ".cvsm.yaml"), "server: http://127.0.0.1:9\n")
	r = runCLIIn(t, other, env, "get", "X")
	expectCode(t, r, exitUsage, "get", "X")
	if !strings.Contains(r.stderr, "cvsm setup") {
		t.Errorf("want a hint to cvsm setup, got %q", r.stderr)
	}
}

func TestABadCvsmYamlIsAConfigurationErrorNamingIt(t *testing.T) {
	t.Parallel()
	for _, content := range []string{
		"server: http://127.0.0.1:9\nteem: acme\n", // a typo is not passed over
		"server: ftp://example.com\n",
		"[not, a, mapping]\n",
	} {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, ".cvsm.yaml"), content)
		r := runCLIIn(t, dir, cleanEnv("CVSM_TOKEN=cvsm_x"), "get", "X")
		expectCode(t, r, exitUsage, "get", "X")
		if !strings.Contains(r.stderr, ".cvsm.yaml") {
			t.Errorf("%q: the error does not name the file: %q", content, r.stderr)
		}
	}
}

func TestSetupWritesTheFoldersFileAndRefusesAnUnknownEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := cleanEnv("XDG_CONFIG_HOME=" + t.TempDir())
	r := runCLIIn(t, dir, env, "setup", "--server", "https://cvsm.example.com/api/v1/", "--team", "acme", "-e", "staging")
	expectCode(t, r, 0, "setup")
	raw, err := os.ReadFile(filepath.Join(dir, ".cvsm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parseProject(raw)
	if err != nil || cfg != (projectConfig{Server: "https://cvsm.example.com", Team: "acme", Environment: "staging"}) {
		t.Errorf("wrote %q (%v)", raw, err)
	}
	if !strings.Contains(r.stdout, "Not signed in") {
		t.Errorf("setup without a login should say so: %q", r.stdout)
	}
	r = runCLIIn(t, dir, env, "setup", "--server", "https://cvsm.example.com", "--team", "acme", "-e", "prod")
	expectCode(t, r, exitUsage, "setup")
	r = runCLIIn(t, t.TempDir(), env, "setup", "--team", "acme")
	expectCode(t, r, exitUsage, "setup")
	if !strings.Contains(r.stderr, "cvsm login") {
		t.Errorf("setup without a server should point at cvsm login: %q", r.stderr)
	}
}

func TestWhoamiAndLogoutWithoutALoginSaySo(t *testing.T) {
	t.Parallel()
	env := cleanEnv("XDG_CONFIG_HOME=" + t.TempDir())
	r := runCLIIn(t, t.TempDir(), env, "whoami")
	expectCode(t, r, exitAuth, "whoami")
	if !strings.Contains(r.stderr, "cvsm login") {
		t.Errorf("whoami: %q", r.stderr)
	}
	r = runCLIIn(t, t.TempDir(), env, "logout", "--server", "https://cvsm.example.com")
	expectCode(t, r, 0, "logout")
	if !strings.Contains(r.stdout, "Not signed in") {
		t.Errorf("logout: %q", r.stdout)
	}
}

// --- against the reference server ----------------------------------------

var userCodeLine = regexp.MustCompile(`open (\S+) and enter the code ([A-Z]{4}-[A-Z]{4})`)

// loginRun is a cvsm login in progress.
type loginRun struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	lines  chan string
	done   chan error
	stderr bytes.Buffer
}

func startLogin(t *testing.T, s *testServer, env []string) (*loginRun, string) {
	t.Helper()
	run := &loginRun{lines: make(chan string, 16), done: make(chan error, 1)}
	run.cmd = exec.Command(binary, "login", "--server", strings.TrimSuffix(s.api, "/api/v1"))
	run.cmd.Env = env
	run.cmd.Stderr = &run.stderr
	pipe, err := run.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := run.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.cmd.Process.Kill() })
	go func() {
		scanner := bufio.NewScanner(pipe)
		for scanner.Scan() {
			run.stdout.WriteString(scanner.Text() + "\n")
			run.lines <- scanner.Text()
		}
		close(run.lines)
		run.done <- run.cmd.Wait()
	}()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-run.lines:
			if !ok {
				t.Fatalf("cvsm login ended before printing a code: %q %q", run.stdout.String(), run.stderr.String())
			}
			if m := userCodeLine.FindStringSubmatch(line); m != nil {
				if m[1] != strings.TrimSuffix(s.api, "/api/v1")+"/device" {
					t.Errorf("the address printed is %q", m[1])
				}
				return run, m[2]
			}
		case <-timeout:
			t.Fatalf("cvsm login printed no code within 30 s: %q", run.stdout.String())
		}
	}
}

// wait is the login's exit status, its stdout and its stderr.
func (run *loginRun) wait(t *testing.T) (int, string, string) {
	t.Helper()
	for range run.lines {
	}
	select {
	case <-run.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("cvsm login did not end within 60 s of the decision: %q", run.stdout.String())
	}
	return run.cmd.ProcessState.ExitCode(), run.stdout.String(), run.stderr.String()
}

// decideOnPage approves or denies userCode on the /device page, signed in as
// the seeded user (its session JWT as the page's cookie), as a browser would.
func decideOnPage(t *testing.T, s *testServer, userCode string, fields url.Values) {
	t.Helper()
	origin := strings.TrimSuffix(s.api, "/api/v1")
	client := &http.Client{Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) string {
		req, _ := http.NewRequest(http.MethodGet, origin+path, nil)
		req.AddCookie(&http.Cookie{Name: "cvsm_session", Value: s.jwt})
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %.300s", path, resp.StatusCode, raw)
		}
		return string(raw)
	}
	page := get("/device?user_code=" + url.QueryEscape(userCode))
	if !strings.Contains(page, userCode) || !strings.Contains(page, "cvsm-cli/") {
		t.Errorf("the /device page does not show the code and the asking program: %.500s", page)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if csrf == nil {
		t.Fatal("no CSRF token on the /device page")
	}
	fields.Set("csrf", csrf[1])
	fields.Set("user_code", userCode)
	req, _ := http.NewRequest(http.MethodPost, origin+"/device", strings.NewReader(fields.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "cvsm_session", Value: s.jwt})
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /device answered %d", resp.StatusCode)
	}
}

func TestLoginSetupGetWhoamiLogoutAgainstTheServer(t *testing.T) {
	t.Parallel()
	s := needServer(t)
	config := t.TempDir()
	// The file, not a keyring this machine may have (keyring_test.go tests the keyring).
	env := cleanEnv("XDG_CONFIG_HOME="+config, "CVSM_KEYRING=off")
	run, userCode := startLogin(t, s, env)
	decideOnPage(t, s, userCode, url.Values{"decision": {"approve"}, "team": {s.teamSlug},
		"read_only": {"on"}, "environments": {"staging"}})
	code, stdout, stderr := run.wait(t)
	if code != 0 || !strings.Contains(stderr, filepath.Join(config, "cvsm", "credentials.json")) {
		t.Fatalf("cvsm login exited %d, or did not say where the token is: %q %q", code, stdout, stderr)
	}
	checkStderr(t, []string{"login"}, stderr)
	if !strings.Contains(stdout, "Signed in to") || !strings.Contains(stdout, s.teamSlug) || strings.Contains(stdout, "cvsm_") {
		t.Errorf("login's output: %q", stdout)
	}
	// The token is in a file only its owner can read, in a folder only its owner can enter.
	path := filepath.Join(config, "cvsm", "credentials.json")
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	folder, _ := os.Stat(filepath.Dir(path))
	if info.Mode().Perm() != 0o600 || folder.Mode().Perm() != 0o700 {
		t.Errorf("modes %v and %v, want 0600 and 0700", info.Mode().Perm(), folder.Mode().Perm())
	}
	var stored credentials
	raw, _ := os.ReadFile(path)
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}
	origin := strings.TrimSuffix(s.api, "/api/v1")
	login := stored.Servers[origin]
	if login == nil || !strings.HasPrefix(login.Token, "cvsm_") || stored.Default != origin {
		t.Fatalf("stored: %s", login)
	}

	// A folder set up for staging: get and export read it from a folder below, with the login.
	project := t.TempDir()
	r := runCLIIn(t, project, env, "setup", "-e", "staging")
	expectCode(t, r, 0, "setup")
	below := filepath.Join(project, "src", "app")
	if err := os.MkdirAll(below, 0o755); err != nil {
		t.Fatal(err)
	}
	r = runCLIIn(t, below, env, "get", "DATABASE_URL")
	expectCode(t, r, 0, "get")
	if r.stdout != s.staging["DATABASE_URL"] {
		t.Errorf("get printed %q", r.stdout)
	}
	r = runCLIIn(t, below, env, "export", "--format", "json")
	expectCode(t, r, 0, "export")
	if !strings.Contains(r.stdout, s.staging["DATABASE_URL"]) {
		t.Errorf("export printed %q", r.stdout)
	}
	// The flag wins over the file: production is outside this token's reach.
	r = runCLIIn(t, below, env, "get", "-e", "production", "DATABASE_URL")
	if r.code == 0 || strings.Contains(r.stdout, s.production["DATABASE_URL"]) {
		t.Errorf("-e production with a staging-only token: exit %d, %q", r.code, r.stdout)
	}
	// CVSM_* wins over the login: the seeded full token reads production.
	r = runCLIIn(t, below, append(env, "CVSM_TOKEN="+s.token, "CVSM_ENVIRONMENT=production"), "get", "DATABASE_URL")
	expectCode(t, r, 0, "get")
	if r.stdout != s.production["DATABASE_URL"] {
		t.Errorf("CVSM_TOKEN and CVSM_ENVIRONMENT did not win: %q", r.stdout)
	}

	r = runCLIIn(t, below, env, "whoami")
	expectCode(t, r, 0, "whoami")
	// A `cvsm login` token expires (CVSM_DEVICE_TOKEN_DAYS, 90 days): whoami says when (the
	// day the token was minted, a minute ago at most, plus 90 days).
	in90 := func(ago time.Duration) string {
		return "Expires: " + time.Now().UTC().Add(90*24*time.Hour-ago).Format("2006-01-02")
	}
	if !strings.Contains(r.stdout, in90(0)) && !strings.Contains(r.stdout, in90(time.Minute)) {
		t.Errorf("whoami does not show the expiry 90 days on: %q", r.stdout)
	}
	for _, want := range []string{"cli-", "cvsm login on", s.teamSlug, "read-only", "staging", ".cvsm.yaml", login.TokenPrefix} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("whoami does not show %q: %q", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, login.Token) {
		t.Error("whoami printed the token")
	}

	r = runCLIIn(t, below, env, "logout")
	expectCode(t, r, 0, "logout")
	if _, err := s.call("GET", "/me", login.Token, nil, http.StatusUnauthorized); err != nil {
		t.Errorf("the token still works after logout: %v", err)
	}
	raw, _ = os.ReadFile(path)
	if strings.Contains(string(raw), login.Token) {
		t.Error("the token is still stored after logout")
	}
	r = runCLIIn(t, below, env, "get", "DATABASE_URL")
	expectCode(t, r, exitUsage, "get")
	if !strings.Contains(r.stderr, "cvsm login") {
		t.Errorf("get after logout: %q", r.stderr)
	}
}

func TestADeniedLoginStoresNothing(t *testing.T) {
	t.Parallel()
	s := needServer(t)
	config := t.TempDir()
	run, userCode := startLogin(t, s, cleanEnv("XDG_CONFIG_HOME="+config, "CVSM_KEYRING=off"))
	decideOnPage(t, s, userCode, url.Values{"decision": {"deny"}})
	code, stdout, stderr := run.wait(t)
	if code != exitAuth || !strings.Contains(stderr, "denied") {
		t.Errorf("a denied login exited %d: %q %q", code, stdout, stderr)
	}
	checkStderr(t, []string{"login"}, stderr)
	if _, err := os.Stat(filepath.Join(config, "cvsm", "credentials.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a denied login stored something: %v", err)
	}
}

func TestWhoamiShowsTheTokenFromTheEnvironmentFirst(t *testing.T) {
	t.Parallel()
	s := needServer(t)
	r := runCLIIn(t, t.TempDir(), s.env(), "whoami")
	expectCode(t, r, 0, "whoami")
	for _, want := range []string{"cli-", "cvsm CLI tests", "from CVSM_TOKEN", "every team of the account", s.token[:13], "Expires: never"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("whoami does not show %q: %q", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, s.token) {
		t.Error("whoami printed the token")
	}
}
