//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cvsmsdk "github.com/cvsm/cvsm/clients/go/cvsm"
)

// --- without a server --------------------------------------------------

func TestHelpOnEveryCommandExitsZero(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-h"}, {"--help"}, {"-help"}, {"help"},
		{"get", "-h"}, {"get", "--help"}, {"help", "get"},
		{"export", "-h"}, {"export", "--help"}, {"help", "export"},
		{"run", "-h"}, {"run", "--help"}, {"help", "run"},
		{"version", "-h"}, {"version", "--help"}, {"help", "version"},
		{"help", "-h"}, {"help", "help"},
	} {
		r := runCLI(t, cleanEnv(), args...)
		expectCode(t, r, 0, args...)
		if !strings.Contains(r.stdout, "Usage:") || !strings.Contains(r.stdout, "--token-file") || r.stderr != "" {
			t.Errorf("cvsm %q: want the help on stdout and nothing on stderr; stdout %q, stderr %q", args, r.stdout, r.stderr)
		}
		if len(args) > 1 && args[0] != "help" && !strings.Contains(r.stdout, "cvsm "+args[0]) {
			t.Errorf("cvsm %q: the help is not the command's: %q", args, r.stdout)
		}
	}
	top := runCLI(t, cleanEnv(), "--help").stdout
	for _, want := range []string{"get", "export", "run", "version", "CVSM_TOKEN", "never from a flag", "ps"} {
		if !strings.Contains(top, want) {
			t.Errorf("cvsm --help does not mention %q", want)
		}
	}
}

func TestUsageErrorsExitTwoWithOneLine(t *testing.T) {
	t.Parallel()
	// A configured environment: the usage error must win over any request.
	env := cleanEnv("CVSM_TOKEN=cvsm_not_used", "CVSM_BASE_URL=http://127.0.0.1:9/api/v1", "CVSM_TEAM=acme")
	for _, args := range [][]string{
		{},
		{"nosuch"},
		{"--nosuch", "get", "X"},
		{"get"},
		{"get", "A", "B"},
		{"get", "--nosuch", "X"},
		{"--timeout", "abc", "get", "X"},
		{"--timeout=0", "get", "X"},
		{"--max-retries", "-1", "get", "X"},
		{"-e", "", "get", "X"},
		{"get", "--team"},
		{"export", "--format", "yaml"},
		{"export", "extra"},
		{"run"},
		{"run", "--overwrite"},
		{"version", "extra"},
		{"help", "nosuch"},
		{"help", "get", "export"},
	} {
		r := runCLI(t, env, args...)
		expectCode(t, r, exitUsage, args...)
		if r.stdout != "" || !strings.HasPrefix(r.stderr, "cvsm: ") {
			t.Errorf("cvsm %q: stdout %q, stderr %q", args, r.stdout, r.stderr)
		}
	}
	if r := runCLI(t, env, "--timeout", "abc", "get", "X"); !strings.Contains(r.stderr, "--timeout") {
		t.Errorf("a flag error names the flag as the help shows it: %q", r.stderr)
	}
}

func TestConfigurationErrorsExitTwo(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	full := []string{"CVSM_TOKEN=cvsm_not_used", "CVSM_BASE_URL=http://127.0.0.1:9/api/v1", "CVSM_TEAM=acme"}
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{full[1:], []string{"get", "X"}, "CVSM_TOKEN is not set"},
		{append([]string{"CVSM_TOKEN= "}, full[1:]...), []string{"get", "X"}, "CVSM_TOKEN is not set"},
		{full[1:], []string{"export"}, "CVSM_TOKEN is not set"},
		{full[1:], []string{"run", "--", "true"}, "CVSM_TOKEN is not set"},
		{[]string{full[0], full[2]}, []string{"get", "X"}, "CVSM_BASE_URL is not set"},
		{full[:2], []string{"get", "X"}, "CVSM_TEAM is not set"},
		{full, []string{"--base-url", "ftp://example.com", "get", "X"}, "--base-url"},
		{full, []string{"--token-file", filepath.Join(t.TempDir(), "missing"), "get", "X"}, "cannot read the token file"},
		{full, []string{"--token-file", tokenFile, "get", "X"}, "is empty"},
		{append(full, "CVSM_TIMEOUT=soon"), []string{"get", "X"}, "CVSM_TIMEOUT"},
		{full, []string{"--ca-file", filepath.Join(t.TempDir(), "missing.pem"), "get", "X"}, "CA file"},
	} {
		r := runCLI(t, cleanEnv(tc.env...), tc.args...)
		expectCode(t, r, exitUsage, tc.args...)
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("cvsm %q with %q: stderr %q, want it to say %q", tc.args, tc.env, r.stderr, tc.want)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	want := fmt.Sprintf("cvsm %s (cvsm-go/%s, ", cvsmsdk.Version, cvsmsdk.Version)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := runCLI(t, cleanEnv(), args...)
		expectCode(t, r, 0, args...)
		if !strings.HasPrefix(r.stdout, want) || !strings.HasSuffix(r.stdout, ")\n") {
			t.Errorf("cvsm %q printed %q, want %q...", args, r.stdout, want)
		}
	}
}

// TestExitCodesOfAnswersTheServerRarelyGives covers the kinds the reference
// server cannot be made to answer on a read (403, 429, 5xx, an unreadable
// answer) with a stub; the team id in the path ends with the status to
// answer (a UUID, which no client resolves through GET /teams).
func TestExitCodesOfAnswersTheServerRarelyGives(t *testing.T) {
	t.Parallel()
	const stubTeam = "00000000-0000-4000-8000-000000000"
	userAgents := make(chan string, 64)
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		userAgents <- r.UserAgent()
		w.Header().Set("X-Request-Id", "req-stub-1")
		w.Header().Set("Content-Type", "application/json")
		parts := strings.Split(r.URL.Path, "/") // /api/v1/teams/{team}/...
		team := ""
		if len(parts) > 4 {
			team = parts[4]
		}
		switch status := strings.TrimPrefix(team, stubTeam); status {
		case "200":
			_, _ = io.WriteString(w, "this is not JSON")
		case "429":
			w.Header().Set("Retry-After", "7")
			fallthrough
		default:
			code, _ := strconv.Atoi(status)
			w.WriteHeader(code)
			_, _ = io.WriteString(w, `{"error": "stub says no"}`)
		}
	}))
	defer stub.Close()
	for _, tc := range []struct {
		team string
		code int
		want string
	}{
		{stubTeam + "401", exitAuth, "401"},
		{stubTeam + "403", exitPermission, "403"},
		{stubTeam + "429", exitRateLimited, "retry after 7s"},
		{stubTeam + "500", exitAPI, "500"},
		{stubTeam + "503", exitAPI, "503"},
		{stubTeam + "200", exitNetwork, "unreadable"},
	} {
		for _, args := range [][]string{{"get", "X"}, {"export"}, {"run", "--", "true"}} {
			env := cleanEnv("CVSM_TOKEN=cvsm_stub_token_0123456789", "CVSM_BASE_URL="+stub.URL+"/api/v1", "CVSM_TEAM="+tc.team)
			args = append([]string{"--max-retries", "0"}, args...)
			r := runCLI(t, env, args...)
			expectCode(t, r, tc.code, args...)
			if !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "cvsm_stub_token") {
				t.Errorf("team %s, cvsm %q: stderr %q, want it to say %q (and never the token)", tc.team, args, r.stderr, tc.want)
			}
			if tc.code != exitNetwork && !strings.Contains(r.stderr, "request id req-stub-1") {
				t.Errorf("team %s, cvsm %q: stderr %q does not quote the request id", tc.team, args, r.stderr)
			}
		}
	}
	close(userAgents)
	for ua := range userAgents {
		if ua != "cvsm-go/"+cvsmsdk.Version {
			t.Errorf("user agent %q, want the SDK's cvsm-go/%s", ua, cvsmsdk.Version)
		}
	}
}

func TestUnreachableServerIsANetworkError(t *testing.T) {
	t.Parallel()
	port, err := freePort() // nothing listens there any more
	if err != nil {
		t.Fatal(err)
	}
	env := cleanEnv("CVSM_TOKEN=cvsm_not_used", fmt.Sprintf("CVSM_BASE_URL=http://127.0.0.1:%d/api/v1", port), "CVSM_TEAM=acme")
	for _, args := range [][]string{{"get", "X"}, {"export"}, {"run", "--", "true"}} {
		r := runCLI(t, env, args...)
		expectCode(t, r, exitNetwork, args...)
	}
}

func TestShellExportQuoteRoundTripsEveryByte(t *testing.T) {
	t.Parallel()
	var all strings.Builder
	for b := 1; b < 256; b++ {
		all.WriteByte(byte(b))
	}
	values := []string{"", "'", "''", `'\''`, "a'b", "\n", "\r\n", "$(id)", "`id`", "${HOME}", "\\", `\\`, "ends\\", "héllo ✓\u2028", all.String()}
	var script strings.Builder
	for i, v := range values {
		fmt.Fprintf(&script, "v%d=%s\nprintf '%%s\\0' \"$v%d\"\n", i, ansiCQuote(v), i)
	}
	for _, shell := range []string{"bash", "zsh"} {
		if _, err := exec.LookPath(shell); err != nil {
			continue
		}
		out, err := exec.Command(shell, "-c", script.String()).Output()
		if err != nil {
			t.Fatalf("%s: %v", shell, err)
		}
		got := strings.Split(string(out), "\x00")
		for i, v := range values {
			if got[i] != v {
				t.Errorf("%s: value %d came back as %q, want %q", shell, i, got[i], v)
			}
		}
	}
}

// --- against the reference server ------------------------------------

func TestGetPrintsTheValueExactly(t *testing.T) {
	s := needServer(t)
	t.Parallel()
	for name, value := range s.production {
		r := runCLI(t, s.env(), "get", name)
		expectCode(t, r, 0, "get", name)
		if r.stdout != value || r.stderr != "" {
			t.Errorf("cvsm get %s: stdout %q, want exactly %q (no newline added on a pipe); stderr %q", name, r.stdout, value, r.stderr)
		}
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(s.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	staging := s.staging["DATABASE_URL"]
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"get", "-e", "staging", "DATABASE_URL"}, staging},
		{nil, []string{"-e", "staging", "get", "DATABASE_URL"}, staging},
		{nil, []string{"get", "--environment=staging", "DATABASE_URL"}, staging},
		{nil, []string{"get", "DATABASE_URL", "-e", "staging"}, staging},
		{nil, []string{"get", "--", "DATABASE_URL"}, s.production["DATABASE_URL"]},
		{[]string{"CVSM_ENVIRONMENT=staging"}, []string{"get", "DATABASE_URL"}, staging},
		{[]string{"CVSM_ENVIRONMENT=development"}, []string{"get", "-e", "staging", "DATABASE_URL"}, staging},
		{[]string{"CVSM_TEAM=no-such-team"}, []string{"get", "--team", s.teamID, "DATABASE_URL"}, s.production["DATABASE_URL"]},
		{[]string{"CVSM_BASE_URL=http://127.0.0.1:9/api/v1"}, []string{"--base-url", s.api + "/", "get", "DATABASE_URL"}, s.production["DATABASE_URL"]},
		{[]string{"CVSM_TOKEN="}, []string{"--token-file", tokenFile, "get", "DATABASE_URL"}, s.production["DATABASE_URL"]},
		{[]string{"CVSM_TOKEN=cvsm_wrong_token_0123456789"}, []string{"--token-file", tokenFile, "get", "DATABASE_URL"}, s.production["DATABASE_URL"]},
		{[]string{"CVSM_TIMEOUT=5", "CVSM_MAX_RETRIES=0", "CVSM_CACHE_TTL=not a number: a one-shot command ignores it"}, []string{"--timeout", "2.5", "--max-retries", "1", "get", "DATABASE_URL"}, s.production["DATABASE_URL"]},
	} {
		r := runCLI(t, s.env(tc.env...), tc.args...)
		expectCode(t, r, 0, tc.args...)
		if r.stdout != tc.want {
			t.Errorf("cvsm %q with %q: %q, want %q", tc.args, tc.env, r.stdout, tc.want)
		}
	}
}

func TestExitCodesPerErrorKind(t *testing.T) {
	s := needServer(t)
	t.Parallel()
	for _, tc := range []struct {
		env  []string
		args []string
		code int
		want string
	}{
		{[]string{"CVSM_TOKEN=cvsm_wrong_token_0123456789"}, []string{"get", "DATABASE_URL"}, exitAuth, "401"},
		{[]string{"CVSM_TOKEN=cvsm_wrong_token_0123456789"}, []string{"export"}, exitAuth, "401"},
		{[]string{"CVSM_TOKEN=cvsm_wrong_token_0123456789"}, []string{"run", "--", "true"}, exitAuth, "401"},
		{nil, []string{"get", "NO_SUCH_SECRET"}, exitNotFound, `"NO_SUCH_SECRET" not found in production`},
		{nil, []string{"get", "database_url"}, exitNotFound, `did you mean "DATABASE_URL"?`},
		{nil, []string{"get", "-e", "staging", "QUOTES"}, exitNotFound, `"QUOTES" not found in staging`},
		{nil, []string{"get", "1NOT-A-NAME"}, exitNotFound, "not a valid secret name"},
		{[]string{"CVSM_TEAM=no-such-team"}, []string{"get", "DATABASE_URL"}, exitUsage, "cvsm: "},
		{[]string{"CVSM_TEAM=no-such-team"}, []string{"export"}, exitUsage, "cvsm: "},
		{nil, []string{"-e", "nosuch", "export"}, exitUsage, "400"},
	} {
		r := runCLI(t, s.env(tc.env...), tc.args...)
		expectCode(t, r, tc.code, tc.args...)
		if !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("cvsm %q with %q: stdout %q, stderr %q, want it to say %q", tc.args, tc.env, r.stdout, r.stderr, tc.want)
		}
		if strings.Contains(r.stderr, "cvsm_wrong_token") {
			t.Errorf("stderr holds the token: %q", r.stderr)
		}
	}
}

func TestExportFormats(t *testing.T) {
	s := needServer(t)
	t.Parallel()

	r := runCLI(t, s.env(), "export", "--format", "json")
	expectCode(t, r, 0, "export", "--format", "json")
	var got map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("export --format json is not a JSON object of strings: %v: %q", err, r.stdout)
	}
	if !equalMaps(got, s.production) {
		t.Errorf("export --format json = %q, want %q", got, s.production)
	}

	dotenv := runCLI(t, s.env(), "export")
	if dotenv.code != 0 || dotenv != runCLI(t, s.env(), "export", "--format=dotenv") {
		t.Fatalf("export: %+v", dotenv)
	}
	shell := runCLI(t, s.env(), "export", "--format", "shell")
	expectCode(t, shell, 0, "export", "--format", "shell")
	lines := strings.Split(dotenv.stdout, "\n")
	if lines[0] != "CLI_TEST_EXISTING='from-the-cvsm-secret'" ||
		!strings.Contains(dotenv.stdout, "\nQUOTES=\"it's \\\"double\\\" and 'single' \\\\ back\\\\slash\"\n") ||
		!strings.Contains(dotenv.stdout, "\nMULTILINE=\"-----BEGIN KEY-----\\nsecond line\\n-----END KEY-----\\n\"\n") ||
		!strings.Contains(shell.stdout, "\nexport DATABASE_URL=$'postgres://db.prod/acme'\n") {
		t.Errorf("dotenv:\n%s\nshell:\n%s", dotenv.stdout, shell.stdout)
	}
	if len(lines) != len(s.production)+1 { // one line per secret, and the last newline
		t.Errorf("the .env export has %d lines for %d secrets", len(lines)-1, len(s.production))
	}

	// What a shell makes of the output is exactly the values, and nothing ran. A shell reads a
	// line break in a double-quoted .env value as the two characters \n (format shell is the one
	// for shells); the shell format's $'...' is read by bash and zsh, not by a POSIX sh.
	names := sortedNames(s.production)
	dotenvFile := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(dotenvFile, []byte(dotenv.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	asWritten := strings.NewReplacer("\n", `\n`, "\r", `\r`)
	for _, tc := range []struct {
		shell, script string
		dotenv        bool
	}{
		{"bash", `eval "$("$CVSM_BINARY" export --format shell)" || exit 99; exec env -0`, false},
		{"zsh", `eval "$("$CVSM_BINARY" export --format shell)" || exit 99; exec env -0`, false},
		{"bash", `set -a; . "$DOTENV_FILE" || exit 99; set +a; exec env -0`, true},
		{"sh", `set -a; . "$DOTENV_FILE" || exit 99; set +a; exec env -0`, true},
	} {
		if _, err := exec.LookPath(tc.shell); err != nil {
			continue
		}
		cmd := exec.Command(tc.shell, "-c", tc.script)
		cmd.Env = s.env("CVSM_BINARY="+binary, "DOTENV_FILE="+dotenvFile)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s -c %q: %v", tc.shell, tc.script, err)
		}
		env := parseEnv0(string(out))
		for _, name := range names {
			want := s.production[name]
			if tc.dotenv {
				want = asWritten.Replace(want)
			}
			if value, ok := env[name]; !ok || value != want {
				t.Errorf("%s -c %q: %s = %q (set: %v), want %q", tc.shell, tc.script, name, value, ok, want)
			}
		}
	}
	if _, err := os.Stat(s.marker); err == nil {
		t.Error("a shell ran a command substitution held in a value")
	}

	// dotenv and shell refuse, whole, what no shell variable can hold; json shows it.
	for _, format := range []string{"dotenv", "shell"} {
		r := runCLI(t, s.env(), "export", "-e", "development", "--format", format)
		expectCode(t, r, exitUsage, "export", format)
		if r.stdout != "" || !strings.Contains(r.stderr, `"WITH_NUL"`) {
			t.Errorf("export --format %s of a NUL value: stdout %q, stderr %q", format, r.stdout, r.stderr)
		}
	}
	r = runCLI(t, s.env(), "export", "-e", "development", "--format", "json")
	got = nil
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || !equalMaps(got, s.development) {
		t.Errorf("export -e development --format json: %q (%v)", r.stdout, err)
	}
}

func TestRunPutsTheSecretsInTheCommandsEnvironment(t *testing.T) {
	s := needServer(t)
	t.Parallel()
	for _, tc := range []struct {
		env  []string
		args []string
		want map[string]string // beyond the secrets
	}{
		{nil, []string{"run", "--", "env", "-0"}, nil},
		{nil, []string{"run", "env", "-0"}, nil},
		{[]string{"CLI_TEST_EXISTING=from-the-environment", "SPACES="}, []string{"run", "--", "env", "-0"},
			map[string]string{"CLI_TEST_EXISTING": "from-the-environment", "SPACES": ""}},
		{[]string{"CLI_TEST_EXISTING=from-the-environment", "SPACES="}, []string{"run", "--overwrite", "--", "env", "-0"}, nil},
		{[]string{"CLI_TEST_EXISTING=from-the-environment"}, []string{"run", "--overwrite", "env", "-0"}, nil},
		{nil, []string{"run", "-e", "staging", "--", "env", "-0"}, nil},
	} {
		r := runCLI(t, s.env(tc.env...), tc.args...)
		expectCode(t, r, 0, tc.args...)
		env := parseEnv0(r.stdout)
		want := s.production
		if strings.Contains(strings.Join(tc.args, " "), "staging") {
			want = s.staging
		}
		for name, value := range want {
			if override, ok := tc.want[name]; ok {
				value = override
			}
			if env[name] != value {
				t.Errorf("cvsm %q with %q: the command saw %s=%q, want %q", tc.args, tc.env, name, env[name], value)
			}
		}
		if env["CVSM_BASE_URL"] != s.api || env["HOME"] != os.Getenv("HOME") {
			t.Errorf("cvsm %q: the command did not get cvsm's own environment", tc.args)
		}
	}

	// The command's arguments, stdin and stdout are its own.
	cmd := exec.Command(binary, "run", "--", "sh", "-c", `printf '%s|' "$@"; cat`, "sh", "-e", "--overwrite", "a b")
	cmd.Env = s.env()
	cmd.Stdin = strings.NewReader("from stdin")
	out, err := cmd.Output()
	if err != nil || string(out) != "-e|--overwrite|a b|from stdin" {
		t.Errorf("run -- sh -c ...: %q, %v", out, err)
	}

	// Nothing starts when a secret cannot be put in an environment.
	marker := filepath.Join(t.TempDir(), "started")
	r := runCLI(t, s.env(), "run", "-e", "development", "--", "touch", marker)
	expectCode(t, r, exitUsage, "run", "-e", "development")
	if _, err := os.Stat(marker); err == nil || !strings.Contains(r.stderr, `"WITH_NUL"`) {
		t.Errorf("run with a NUL value: started anyway or stderr %q", r.stderr)
	}
}

func TestRunExitsWithTheCommandsStatus(t *testing.T) {
	s := needServer(t)
	t.Parallel()
	notExecutable := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 7"}, 7},
		{[]string{"sh", "-c", "exit 255"}, 255},
		{[]string{"sh", "-c", "kill -TERM $$"}, 128 + 15},
		{[]string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{[]string{"cvsm-test-no-such-command"}, 127},
		{[]string{filepath.Join(t.TempDir(), "missing")}, 127},
		{[]string{notExecutable}, 126},
	} {
		args := append([]string{"run", "--"}, tc.args...)
		r := runCLI(t, s.env(), args...)
		expectCode(t, r, tc.code, args...)
		if tc.code >= 126 && tc.code <= 127 && !strings.Contains(r.stderr, "cannot run") {
			t.Errorf("cvsm %q: stderr %q", args, r.stderr)
		}
		if tc.code < 126 && r.stderr != "" {
			t.Errorf("cvsm %q: cvsm wrote %q", args, r.stderr)
		}
	}
}

func TestRunPassesSignalsToTheCommand(t *testing.T) {
	s := needServer(t)
	t.Parallel()
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2} {
		code := 42 + i
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			name := strings.TrimPrefix(unixSignalName(sig), "SIG")
			script := fmt.Sprintf(`trap 'exit %d' %s; echo ready; while :; do sleep 0.05; done`, code, name)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, "run", "--", "bash", "-c", script)
			cmd.Env = s.env()
			// A process group of its own: were cvsm in a terminal's foreground
			// group (go test run at a terminal), it would take SIGINT for one
			// typed there, which its command has already received.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || line != "ready\n" {
				t.Fatalf("the command did not start: %q, %v; stderr %q", line, err, stderr.String())
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if got := cmd.ProcessState.ExitCode(); got != code {
				t.Errorf("after %s cvsm exited %d, want the command's %d; stderr %q", sig, got, code, stderr.String())
			}
			checkStderr(t, []string{"run", sig.String()}, stderr.String())
		})
	}
}

// TestTerminal runs cvsm on a pseudo-terminal (made by python3's pty
// module): a Ctrl-C typed there reaches the command once, not twice, and
// get adds a newline for the person reading.
func TestTerminal(t *testing.T) {
	s := needServer(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 (for a pseudo-terminal) is not installed")
	}
	t.Parallel()
	driver := filepath.Join(t.TempDir(), "pty_driver.py")
	if err := os.WriteFile(driver, []byte(ptyDriver), 0o600); err != nil {
		t.Fatal(err)
	}
	onTerminal := func(input string, args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, python, append([]string{driver, input, binary}, args...)...)
		cmd.Env = s.env()
		out, err := cmd.Output()
		if xerr, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatalf("%v: %v", args, err)
		} else if ok {
			return string(out), xerr.ExitCode()
		}
		return string(out), 0
	}

	out, code := onTerminal("", "get", "DATABASE_URL")
	if code != 0 || out != s.production["DATABASE_URL"]+"\r\n" {
		t.Errorf("cvsm get on a terminal: %q, exit %d; want the value and a newline", out, code)
	}

	counter := `import signal, sys, time
n = 0
def count(*_):
    global n
    n += 1
signal.signal(signal.SIGINT, count)
print("ready", flush=True)
while n == 0:
    time.sleep(0.01)
time.sleep(1)
print("SIGINTs:", n, flush=True)
sys.exit(3)
`
	out, code = onTerminal("\x03", "run", "--", python, "-c", counter)
	if code != 3 || !strings.Contains(out, "SIGINTs: 1\r\n") {
		t.Errorf("Ctrl-C at a terminal: exit %d, output %q; want the command to count one SIGINT and exit 3", code, out)
	}
}

// ptyDriver runs argv[2:] on a new pseudo-terminal, types argv[1] once the
// program printed "ready" (at once when argv[1] is empty), copies what
// appears on the terminal to stdout and exits with the program's status.
const ptyDriver = `import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
typed, seen = sys.argv[1], b""
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    seen += chunk
    if typed and b"ready" in seen:
        os.write(fd, typed.encode())
        typed = ""
sys.stdout.write(seen.decode(errors="replace"))
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
`

func unixSignalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	case syscall.SIGUSR2:
		return "SIGUSR2"
	}
	return sig.String()
}

// parseEnv0 reads `env -0` output.
func parseEnv0(out string) map[string]string {
	env := map[string]string{}
	for _, kv := range strings.Split(out, "\x00") {
		if name, value, ok := strings.Cut(kv, "="); ok {
			env[name] = value
		}
	}
	return env
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, k := range sortedNames(a) {
		if bv, ok := b[k]; !ok || bv != a[k] {
			return false
		}
	}
	return true
}
