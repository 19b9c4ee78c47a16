//go:build unix

package main

// cvsm run --watch against the real reference server: each test has a team
// of its own, a command that appends its WATCHED variable to a file every
// time it starts, and, where the server must go away or lose its change
// stream, a proxy in front of the server that the test closes or that
// answers the stream's path 404.

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// watchTeam is a team of the seeded user with one secret, WATCHED.
type watchTeam struct {
	s        *testServer
	slug     string
	secretID string
	values   []string // every value WATCHED was given, which cvsm must never print
}

func newWatchTeam(t *testing.T, s *testServer, value string) *watchTeam {
	t.Helper()
	slug := "watch-" + randomHex(4)
	created, err := s.call("POST", "/teams", s.jwt, map[string]string{"name": "Watch", "slug": slug}, http.StatusCreated)
	if err != nil {
		t.Fatal(err)
	}
	teamID, _ := created["team"].(map[string]any)["id"].(string)
	secret, err := s.call("POST", "/teams/"+teamID+"/secrets", s.jwt,
		map[string]string{"name": "WATCHED", "value": value, "environment": "production"}, http.StatusCreated)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := secret["secret"].(map[string]any)["id"].(string)
	return &watchTeam{s: s, slug: slug, secretID: id, values: []string{value}}
}

// set gives WATCHED a new value, as another client would.
func (w *watchTeam) set(t *testing.T, value string) {
	t.Helper()
	w.values = append(w.values, value)
	if _, err := w.s.call("PUT", "/teams/"+w.slug+"/secrets/"+w.secretID, w.s.jwt,
		map[string]string{"value": value}, http.StatusOK); err != nil {
		t.Fatal(err)
	}
}

// watching is one cvsm run --watch in the background.
type watching struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	starts string // the file the command appends WATCHED to at each start
	done   chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startWatching runs cvsm run --watch FLAGS -- sh -c SCRIPT, where SCRIPT
// first appends $WATCHED to the starts file, then runs body.
func startWatching(t *testing.T, team *watchTeam, baseURL string, flags []string, body string) *watching {
	t.Helper()
	return startWatchingEnv(t, team, baseURL, flags, body)
}

// startWatchingEnv is startWatching with more variables in cvsm's environment.
func startWatchingEnv(t *testing.T, team *watchTeam, baseURL string, flags []string, body string, env ...string) *watching {
	t.Helper()
	starts := filepath.Join(t.TempDir(), "starts")
	script := `printf '%s\n' "$WATCHED" >> "$STARTS"; ` + body
	args := append(append([]string{"run", "--watch"}, flags...), "--", "sh", "-c", script)
	cmd := exec.Command(binary, args...)
	cmd.Env = cleanEnv(append([]string{"CVSM_TOKEN=" + team.s.token, "CVSM_BASE_URL=" + baseURL, "CVSM_TEAM=" + team.slug, "STARTS=" + starts}, env...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w := &watching{cmd: cmd, stderr: &lockedBuffer{}, starts: starts, done: make(chan struct{})}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-w.done
		}
		for _, v := range team.values {
			if strings.Contains(w.stderr.String(), v) {
				t.Errorf("cvsm printed a value on stderr: %q", w.stderr.String())
			}
		}
		for _, line := range strings.Split(strings.TrimSuffix(w.stderr.String(), "\n"), "\n") {
			if line != "" && !strings.HasPrefix(line, "cvsm: ") {
				t.Errorf("a stderr line is not cvsm's own: %q", line)
			}
		}
	})
	return w
}

// startsSoFar is the value of WATCHED at each start of the command so far.
func (w *watching) startsSoFar() []string {
	b, _ := os.ReadFile(w.starts)
	if len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// waitStarts waits until the command has started n times and returns the
// values it started with.
func (w *watching) waitStarts(t *testing.T, n int, within time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := w.startsSoFar()
		if len(got) >= n {
			return got
		}
		select {
		case <-w.done:
			t.Fatalf("cvsm exited %d after %d starts, waiting for %d; stderr %q", w.cmd.ProcessState.ExitCode(), len(got), n, w.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command started %d times in %s, want %d; stderr %q", len(got), within, n, w.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (w *watching) running() bool {
	select {
	case <-w.done:
		return false
	default:
		return true
	}
}

const loop = `trap 'exit 0' TERM; while :; do sleep 0.05; done`

func TestWatchRestartsTheCommandWithTheNewValue(t *testing.T) {
	s := needServer(t)
	t.Parallel()
	team := newWatchTeam(t, s, "first-"+randomHex(8))
	w := startWatching(t, team, s.api, []string{"--debounce", "200ms"}, loop)
	if got := w.waitStarts(t, 1, 30*time.Second); got[0] != team.values[0] {
		t.Fatalf("the command started with %q, want the first value", got[0])
	}
	time.Sleep(500 * time.Millisecond) // the stream is open and its first snapshot taken
	team.set(t, "second-"+randomHex(8))
	started := time.Now()
	got := w.waitStarts(t, 2, 10*time.Second)
	if got[1] != team.values[1] {
		t.Errorf("the command restarted with %q, want the new value", got[1])
	}
	// The stream says so within a second; the debounce adds 200 ms, the fetch and restart little
	// (the bound leaves room for a loaded machine).
	if took := time.Since(started); took > 5*time.Second {
		t.Errorf("the restart took %s", took)
	}
	if !strings.Contains(w.stderr.String(), "cvsm: the secrets changed: restarting the command") {
		t.Errorf("stderr %q", w.stderr.String())
	}
}

// With the default debounce a change reaches the command within about a
// second (issue 39); a change to a secret the command was not given (a
// variable already set, no --overwrite) restarts nothing.
func TestWatchRestartsWithinASecondOnlyForSecretsItGave(t *testing.T) {
	s := needServer(t)
	t.Parallel()
	team := newWatchTeam(t, s, "given-"+randomHex(8))
	kept, err := s.call("POST", "/teams/"+team.slug+"/secrets", s.jwt,
		map[string]string{"name": "KEPT", "value": "server-" + randomHex(8), "environment": "production"}, http.StatusCreated)
	if err != nil {
		t.Fatal(err)
	}
	keptID, _ := kept["secret"].(map[string]any)["id"].(string)
	w := startWatchingEnv(t, team, s.api, nil, loop, "KEPT=set-by-the-caller")
	w.waitStarts(t, 1, 30*time.Second)
	time.Sleep(500 * time.Millisecond) // the stream is open and its first snapshot taken
	if _, err := s.call("PUT", "/teams/"+team.slug+"/secrets/"+keptID, s.jwt,
		map[string]string{"value": "server-" + randomHex(8)}, http.StatusOK); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the debounce and the fetch are long done
	if got := w.startsSoFar(); len(got) != 1 {
		t.Fatalf("the command started %d times after a change of a secret it was not given; stderr %q", len(got), w.stderr.String())
	}
	team.set(t, "given-again-"+randomHex(8))
	started := time.Now()
	if got := w.waitStarts(t, 2, 10*time.Second); got[1] != team.values[1] {
		t.Errorf("the command restarted with %q, want the new value", got[1])
	}
	// About 0.5 s of debounce, then the fetch and the restart (room for a loaded machine, yet
	// below the 2 s the debounce alone took before).
	if took := time.Since(started); took > 1900*time.Millisecond {
		t.Errorf("the restart took %s with the default debounce", took)
	}
}

func TestWatchRestartsOnceForABurst(t *testing.T) {
	s := needServer(t)
	t.Parallel()
	team := newWatchTeam(t, s, "burst-0-"+randomHex(8))
	w := startWatching(t, team, s.api, []string{"--debounce", "3s"}, loop)
	w.waitStarts(t, 1, 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	for i := 1; i <= 5; i++ {
		team.set(t, fmt.Sprintf("burst-%d-%s", i, randomHex(8)))
	}
	w.waitStarts(t, 2, 20*time.Second)
	time.Sleep(4 * time.Second) // more than the debounce: no second restart comes
	got := w.startsSoFar()
	if len(got) != 2 || got[1] != team.values[len(team.values)-1] {
		t.Errorf("the command started with %d values (want 2, the last one the burst's last): stderr %q", len(got), w.stderr.String())
	}
}

func TestWatchStopsACommandThatIgnoresSIGTERMAfterTheGrace(t *testing.T) {
	s := needServer(t)
	t.Parallel()
	team := newWatchTeam(t, s, "stubborn-"+randomHex(8))
	w := startWatching(t, team, s.api, []string{"--debounce", "100ms", "--grace", "500ms"},
		`trap '' TERM; while :; do sleep 0.05; done`)
	w.waitStarts(t, 1, 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	team.set(t, "stubborn-2-"+randomHex(8))
	if got := w.waitStarts(t, 2, 10*time.Second); got[1] != team.values[1] {
		t.Errorf("restarted with %q", got[1])
	}
	if !strings.Contains(w.stderr.String(), "did not stop within 500ms: killing it") {
		t.Errorf("stderr %q", w.stderr.String())
	}
}

func TestWatchExitsWithTheCommandsOwnStatus(t *testing.T) {
	s := needServer(t)
	t.Parallel()
	team := newWatchTeam(t, s, "exit-"+randomHex(8))
	for _, tc := range []struct {
		body string
		code int
	}{
		{"exit 7", 7},
		{"exit 0", 0},
		{"kill -KILL $$", 128 + 9},
	} {
		w := startWatching(t, team, s.api, nil, tc.body)
		select {
		case <-w.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%q: cvsm did not exit", tc.body)
		}
		if got := w.cmd.ProcessState.ExitCode(); got != tc.code {
			t.Errorf("%q: cvsm exited %d, want %d; stderr %q", tc.body, got, tc.code, w.stderr.String())
		}
	}
	// A signal passed on ends the command and cvsm, with no restart.
	w := startWatching(t, team, s.api, nil, `trap 'exit 42' TERM; while :; do sleep 0.05; done`)
	w.waitStarts(t, 1, 30*time.Second)
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	<-w.done
	if got := w.cmd.ProcessState.ExitCode(); got != 42 || len(w.startsSoFar()) != 1 {
		t.Errorf("after SIGTERM cvsm exited %d after %d starts, want 42 after 1", got, len(w.startsSoFar()))
	}
}

// proxy forwards to the test server; it can be closed (the server has gone
// away) and opened again on the same address, and can answer the change
// stream's path 404, as a server without the stream does.
type proxy struct {
	addr     string
	noStream bool
	srv      *http.Server
}

func startProxy(t *testing.T, s *testServer, addr string, noStream bool) *proxy {
	t.Helper()
	target, _ := url.Parse(s.api)
	target.Path = ""
	forward := httputil.NewSingleHostReverseProxy(target)
	p := &proxy{noStream: noStream}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if p.noStream && strings.HasSuffix(r.URL.Path, "/secrets/changes") {
			http.Error(rw, `{"error": "Tidak ditemukan"}`, http.StatusNotFound)
			return
		}
		forward.ServeHTTP(rw, r)
	})}
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the address of a closed proxy may take a moment to be free
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() { _ = p.srv.Close() })
	return p
}

func (p *proxy) api() string { return "http://" + p.addr + "/api/v1" }

func TestWatchKeepsTheCommandWhileTheServerIsAway(t *testing.T) {
	s := needServer(t)
	t.Parallel()
	team := newWatchTeam(t, s, "away-"+randomHex(8))
	p := startProxy(t, s, "127.0.0.1:0", false)
	w := startWatching(t, team, p.api(), []string{"--debounce", "100ms", "--poll", "300ms"}, loop)
	w.waitStarts(t, 1, 30*time.Second)
	time.Sleep(500 * time.Millisecond)

	_ = p.srv.Close() // the server goes away
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(w.stderr.String(), "checking for changes every 300ms") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // several polls, each failing
	if !w.running() || len(w.startsSoFar()) != 1 {
		t.Fatalf("while the server was away the command was stopped or restarted: stderr %q", w.stderr.String())
	}
	if !strings.Contains(w.stderr.String(), "the command keeps running with the ones it has") {
		t.Errorf("stderr %q", w.stderr.String())
	}

	team.set(t, "away-2-"+randomHex(8)) // changed while cvsm could not see it
	startProxy(t, s, p.addr, false)     // the server is back
	if got := w.waitStarts(t, 2, 10*time.Second); got[1] != team.values[1] {
		t.Errorf("after the server came back the command restarted with %q", got[1])
	}
}

func TestWatchPollsAServerWithoutTheStream(t *testing.T) {
	s := needServer(t)
	t.Parallel()
	team := newWatchTeam(t, s, "poll-"+randomHex(8))
	p := startProxy(t, s, "127.0.0.1:0", true)
	w := startWatching(t, team, p.api(), []string{"--debounce", "100ms", "--poll", "500ms"}, loop)
	w.waitStarts(t, 1, 30*time.Second)
	team.set(t, "poll-2-"+randomHex(8))
	if got := w.waitStarts(t, 2, 10*time.Second); got[1] != team.values[1] {
		t.Errorf("restarted with %q", got[1])
	}
	if !strings.Contains(w.stderr.String(), "the server offers no change stream; checking for changes every 500ms") {
		t.Errorf("stderr %q", w.stderr.String())
	}
}

func TestWatchFlagsAreCheckedBeforeAnythingStarts(t *testing.T) {
	t.Parallel()
	env := cleanEnv("CVSM_TOKEN=cvsm_unused", "CVSM_BASE_URL=http://127.0.0.1:9/api/v1", "CVSM_TEAM=acme")
	for _, args := range [][]string{
		{"run", "--debounce", "1s", "--", "true"},
		{"run", "--watch", "--grace", "soon", "--", "true"},
		{"run", "--watch", "--poll", "0", "--", "true"},
		{"run", "--watch", "--debounce", "-1s", "--", "true"},
	} {
		r := runCLI(t, env, args...)
		expectCode(t, r, exitUsage, args...)
	}
}
