//go:build unix

package main

// The Go README's install lines and first example, and the cvsm command's install lines and
// first example, run exactly as printed against the reference server: in a new empty folder
// next to a "clone" (a link to this repository, as ../cvsm), in a module that is not this one.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeBlocks returns the fenced blocks of lang in the section of README.md under heading
// (the whole file when heading is "").
func readmeBlocks(t *testing.T, path, heading, lang string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	if heading != "" {
		start := strings.Index(text, "\n"+heading+"\n")
		if start < 0 {
			t.Fatalf("%s has no section %q", path, heading)
		}
		text = text[start+len(heading)+2:]
		if end := regexp.MustCompile(`(?m)^## `).FindStringIndex(text); end != nil {
			text = text[:end[0]]
		}
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(text, -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) == 0 {
		t.Fatalf("%s: no %s block under %q", path, lang, heading)
	}
	return blocks
}

// shellLines are the commands of a sh block, without comments, blank lines and the clone
// (the test's ../cvsm is a link to this repository).
func shellLines(block string) []string {
	var lines []string
	for _, line := range strings.Split(block, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "git clone ") {
			continue
		}
		lines = append(lines, line)
	}
	return lines
}

// newProject makes <tmp>/cvsm (a link to the repository) and the empty folder <tmp>/app.
func newProject(t *testing.T) (app string, env []string) {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(root, filepath.Join(dir, "cvsm")); err != nil {
		t.Fatal(err)
	}
	app = filepath.Join(dir, "app")
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	// Offline: golang.org/x/net comes from the module cache, and no checksum database can be asked.
	env = append(withoutCVSM(os.Environ()), "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOFLAGS=-buildvcs=false")
	return app, env
}

func runIn(t *testing.T, dir string, env []string, line string) string {
	t.Helper()
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s (in %s): %v\n%s", line, dir, err, out)
	}
	return string(out)
}

func TestTheGoReadmesInstallLinesAndFirstExampleWorkInANewModule(t *testing.T) {
	s := needServer(t)
	root, _ := repoRoot()
	readme := filepath.Join(root, "clients", "go", "README.md")
	app, env := newProject(t)
	runIn(t, app, env, "go mod init example.com/app")
	install := readmeBlocks(t, readme, "## Installation", "sh")
	for _, line := range shellLines(install[0]) {
		runIn(t, app, env, line)
	}
	// The root README's install line for Go is the same.
	rootRow := regexp.MustCompile("(?m)^\\| Go \\|.*\\| `(go mod edit [^`]*)`, then `(go mod tidy)` once your code imports `github.com/cvsm/cvsm/clients/go/cvsm` \\|$").
		FindStringSubmatch(mustRead(t, filepath.Join(root, "README.md")))
	if rootRow == nil || !strings.Contains(mustRead(t, readme), rootRow[1]) {
		t.Errorf("the root README's Go install line is not the Go README's: %q", rootRow)
	}
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(readmeBlocks(t, readme, "", "go")[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	env = append(env, "CVSM_TOKEN="+s.token, "CVSM_BASE_URL="+s.api, "CVSM_TEAM="+s.teamSlug)
	then := shellLines(install[1])
	if len(then) != 2 || then[1] != "go run ." {
		t.Fatalf("the lines after the import are %q; this test expects them to end with `go run .`", then)
	}
	runIn(t, app, env, then[0])
	out := runIn(t, app, env, then[1])
	want := fmt.Sprintf("DATABASE_URL has %d bytes; %d secrets; injected [", len(s.production["DATABASE_URL"]), len(s.production))
	if !strings.HasPrefix(out, want) || !strings.Contains(out, "CLI_TEST_EXISTING") {
		t.Errorf("the first example printed %q, want %q...", out, want)
	}
	if mod := mustRead(t, filepath.Join(app, "go.mod")); !strings.Contains(mod, "golang.org/x/net") {
		t.Errorf("go mod tidy did not add the dependency:\n%s", mod)
	}
}

func TestTheCvsmCommandsInstallLinesAndFirstExampleWork(t *testing.T) {
	s := needServer(t)
	root, _ := repoRoot()
	readme := filepath.Join(root, "clients", "go", "README.md")
	app, env := newProject(t)
	gobin := t.TempDir()
	env = append(env, "GOBIN="+gobin, "PATH="+gobin+string(os.PathListSeparator)+os.Getenv("PATH"))
	// The Go README's: from clients/go in the clone, go install and the static build into bin/.
	blocks := readmeBlocks(t, readme, "## The cvsm command", "sh")
	dir := app
	for _, line := range shellLines(blocks[0]) {
		line = strings.TrimSpace(strings.SplitN(line, " #", 2)[0])
		if strings.HasPrefix(line, "cd ") {
			dir = filepath.Join(filepath.Dir(app), "cvsm", strings.TrimPrefix(line, "cd "))
			continue
		}
		runIn(t, dir, env, line)
	}
	if _, err := os.Stat(filepath.Join(gobin, "cvsm")); err != nil {
		t.Fatalf("go install put no cvsm in GOBIN: %v", err)
	}
	// The root README's: from a project next to the clone.
	rootRow := regexp.MustCompile("(?m)^\\| `cvsm` command \\|.*\\| `([^`]*)` \\|$").
		FindStringSubmatch(mustRead(t, filepath.Join(root, "README.md")))
	if rootRow == nil {
		t.Fatal("the root README has no install line for the cvsm command")
	}
	runIn(t, app, env, rootRow[1])
	// The first example of the commands' list, with the variables its section exports.
	env = append(env, "CVSM_TOKEN="+s.token, "CVSM_BASE_URL="+s.api, "CVSM_TEAM="+s.teamSlug)
	first := shellLines(blocks[2])[0]
	if first != "cvsm get DATABASE_URL" {
		t.Fatalf("the first example is %q; this test runs `cvsm get DATABASE_URL`", first)
	}
	if out := runIn(t, app, env, first); out != s.production["DATABASE_URL"] {
		t.Errorf("%s printed %q", first, out)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}
