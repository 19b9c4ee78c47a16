// The README's first code example is this program: the test below checks
// that README.md prints main.go exactly, then runs it against a stub server.

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestTheReadmesFirstExampleIsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	first := regexp.MustCompile("(?s)```([a-z]*)\n(.*?)```").FindSubmatch(readme)
	if first == nil || string(first[1]) != "go" {
		t.Fatalf("the README's first code block must be Go, got %q", first)
	}
	program, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first[2], program) {
		t.Errorf("README.md's first example and examples/quickstart/main.go differ: copy one onto the other.\nREADME:\n%s\nmain.go:\n%s", first[2], program)
	}
}

func TestTheExampleRuns(t *testing.T) {
	const token = "cvsm_example_token"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(401)
			return
		}
		var body any
		switch r.URL.Path { // the team slug goes in the path as it is
		case "/api/v1/teams/acme/secrets/by-name/DATABASE_URL":
			body = map[string]any{"secret": map[string]string{"id": "s1", "name": "DATABASE_URL", "environment": "production"}, "value": "postgres://db/app"}
		case "/api/v1/teams/acme/secrets/export":
			body = map[string]string{"DATABASE_URL": "postgres://db/app", "QUICKSTART_API_KEY": "k"}
		default:
			w.WriteHeader(404)
			return
		}
		_ = json.NewEncoder(w).Encode(body)
	}))
	defer srv.Close()
	for _, name := range []string{"CVSM_ENVIRONMENT", "CVSM_CACHE_TTL", "CVSM_TIMEOUT", "CVSM_MAX_RETRIES", "CVSM_CA_FILE", "CVSM_STALE_IF_ERROR", "QUICKSTART_API_KEY"} {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
	t.Setenv("CVSM_TOKEN", token)
	t.Setenv("CVSM_BASE_URL", srv.URL+"/api/v1")
	t.Setenv("CVSM_TEAM", "acme")
	t.Setenv("DATABASE_URL", "kept")

	out := captureStdout(t, main)
	if want := "DATABASE_URL has 17 bytes; 2 secrets; injected [QUICKSTART_API_KEY]\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	if os.Getenv("QUICKSTART_API_KEY") != "k" || os.Getenv("DATABASE_URL") != "kept" {
		t.Error("Inject did not set the missing variable or replaced a set one")
	}
}

func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = saved }()
	done := make(chan string)
	go func() {
		var b strings.Builder
		_, _ = io.Copy(&b, r)
		done <- b.String()
	}()
	f()
	w.Close()
	return <-done
}
