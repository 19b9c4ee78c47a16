package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/zalando/go-keyring"
)

// These tests swap go-keyring's provider (a process-wide value): none of
// them is parallel.

const keyringTestToken = "cvsm_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// keyringWorld is a signed-out machine with a server that revokes the
// test token: an empty configuration folder, no CVSM_* variables, a
// folder without .cvsm.yaml as the working folder.
type keyringWorld struct {
	server   string // the server's address, as logins are stored under
	path     string // credentials.json
	revoked  atomic.Int32
	stdout   bytes.Buffer
	stderr   bytes.Buffer
	bearerOK atomic.Bool
}

func newKeyringWorld(t *testing.T) *keyringWorld {
	config := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", config)
	t.Setenv("HOME", config) // os.UserConfigDir on macOS
	t.Setenv("AppData", config)
	for _, name := range []string{"CVSM_TOKEN", "CVSM_BASE_URL", "CVSM_TEAM", "CVSM_ENVIRONMENT", envKeyring} {
		t.Setenv(name, "")
	}
	t.Chdir(t.TempDir())
	w := &keyringWorld{}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete && r.URL.Path == "/api/v1/tokens/current" {
			w.revoked.Add(1)
			w.bearerOK.Store(r.Header.Get("Authorization") == "Bearer "+keyringTestToken)
			rw.WriteHeader(http.StatusNoContent)
			return
		}
		http.NotFound(rw, r)
	}))
	t.Cleanup(srv.Close)
	w.server = srv.URL
	dir, err := configDir()
	if err != nil {
		t.Fatal(err)
	}
	w.path = filepath.Join(dir, credentialsName)
	return w
}

func (w *keyringWorld) cli() *cli {
	w.stdout.Reset()
	w.stderr.Reset()
	return newCLI(&w.stdout, &w.stderr)
}

// login stores a login as cvsm login does once the code is approved.
func (w *keyringWorld) login(t *testing.T) {
	t.Helper()
	creds, path, err := loadCredentials()
	if err != nil {
		t.Fatal(err)
	}
	cred := &credential{Token: keyringTestToken, TokenID: "t1", TokenName: "cli-laptop", TokenPrefix: keyringTestToken[:13],
		Team: "acme", ReadOnly: true, Envs: []string{"staging"}}
	if err := w.cli().storeLogin(creds, path, w.server, cred); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(w.stderr.String(), keyringTestToken) {
		t.Errorf("stderr holds the token: %q", w.stderr.String())
	}
}

// file is credentials.json as stored.
func (w *keyringWorld) file(t *testing.T) (string, credentials) {
	t.Helper()
	raw, err := os.ReadFile(w.path)
	if err != nil {
		t.Fatal(err)
	}
	var creds credentials
	if err := json.Unmarshal(raw, &creds); err != nil {
		t.Fatal(err)
	}
	return string(raw), creds
}

// getsToken checks that get/export/run find the stored token and team.
func (w *keyringWorld) getsToken(t *testing.T) {
	t.Helper()
	opts, err := w.cli().options()
	if err != nil {
		t.Fatalf("options: %v", err)
	}
	if opts.Token != keyringTestToken || opts.Team != "acme" || opts.BaseURL != w.server+apiSuffix {
		t.Errorf("get would use team %q at %q, token found: %v", opts.Team, opts.BaseURL, opts.Token == keyringTestToken)
	}
}

func (w *keyringWorld) logout(t *testing.T) {
	t.Helper()
	c := w.cli()
	if code := c.main([]string{"logout"}); code != 0 {
		t.Fatalf("logout exited %d: %q %q", code, w.stdout.String(), w.stderr.String())
	}
	if w.revoked.Load() != 1 || !w.bearerOK.Load() {
		t.Errorf("logout revoked %d times, with the stored token: %v", w.revoked.Load(), w.bearerOK.Load())
	}
	raw, creds := w.file(t)
	if strings.Contains(raw, keyringTestToken) || creds.Servers[w.server] != nil || creds.Default != "" {
		t.Errorf("the login is still in the file after logout: %s", raw)
	}
}

func TestLoginStoresTheTokenInTheKeyringWhereThereIsOne(t *testing.T) {
	keyring.MockInit()
	t.Cleanup(func() { keyring.MockInitWithError(errors.New("no keyring in tests")) })
	w := newKeyringWorld(t)
	w.login(t)
	if !strings.Contains(w.stderr.String(), "OS keyring") || strings.Contains(w.stderr.String(), w.path) {
		t.Errorf("login does not say the keyring was used: %q", w.stderr.String())
	}
	if got, err := keyring.Get(keyringService, w.server); err != nil || got != keyringTestToken {
		t.Fatalf("the keyring holds %v (%v)", got == keyringTestToken, err)
	}
	raw, creds := w.file(t)
	entry := creds.Servers[w.server]
	if strings.Contains(raw, keyringTestToken) || entry == nil || !entry.Keyring || entry.TokenPrefix != keyringTestToken[:13] || creds.Default != w.server {
		t.Errorf("the file should keep the entry without the token: %s", raw)
	}
	w.getsToken(t)

	w.logout(t)
	if _, err := keyring.Get(keyringService, w.server); !errors.Is(err, keyring.ErrNotFound) {
		t.Errorf("the token is still in the keyring after logout: %v", err)
	}
}

func TestLoginFallsBackToTheFileWithoutAKeyring(t *testing.T) {
	keyring.MockInitWithError(errors.New("The name org.freedesktop.secrets was not provided by any .service files"))
	w := newKeyringWorld(t)
	w.login(t)
	if !strings.Contains(w.stderr.String(), w.path) || !strings.Contains(w.stderr.String(), "no OS keyring") {
		t.Errorf("login does not say the file was used: %q", w.stderr.String())
	}
	raw, creds := w.file(t)
	if entry := creds.Servers[w.server]; entry == nil || entry.Token != keyringTestToken || entry.Keyring {
		t.Fatalf("the token is not in the file: %v", entry)
	}
	_ = raw
	if info, err := os.Stat(w.path); err != nil || runtime.GOOS != "windows" && info.Mode().Perm() != 0o600 {
		t.Errorf("the file: %v, %v", info.Mode(), err)
	}
	w.getsToken(t)
	w.logout(t)
}

func TestCvsmKeyringOffKeepsTheTokenInTheFile(t *testing.T) {
	keyring.MockInit()
	t.Cleanup(func() { keyring.MockInitWithError(errors.New("no keyring in tests")) })
	w := newKeyringWorld(t)
	t.Setenv(envKeyring, "off")
	w.login(t)
	if _, err := keyring.Get(keyringService, w.server); !errors.Is(err, keyring.ErrNotFound) {
		t.Errorf("CVSM_KEYRING=off stored the token in the keyring: %v", err)
	}
	if _, creds := w.file(t); creds.Servers[w.server] == nil || creds.Servers[w.server].Token != keyringTestToken {
		t.Error("the token is not in the file")
	}
	w.getsToken(t)
}

func TestATokenGoneFromTheKeyringIsAnAuthError(t *testing.T) {
	keyring.MockInit()
	t.Cleanup(func() { keyring.MockInitWithError(errors.New("no keyring in tests")) })
	w := newKeyringWorld(t)
	w.login(t)
	if err := keyring.Delete(keyringService, w.server); err != nil {
		t.Fatal(err)
	}
	c := w.cli()
	if code := c.main([]string{"get", "DATABASE_URL"}); code != exitAuth || !strings.Contains(w.stderr.String(), "cvsm login") {
		t.Errorf("get exited %d: %q", code, w.stderr.String())
	}
	// logout still clears the entry (nothing is left to revoke from here).
	c = w.cli()
	if code := c.main([]string{"logout"}); code != 0 || w.revoked.Load() != 0 {
		t.Errorf("logout exited %d, revoked %d: %q", code, w.revoked.Load(), w.stderr.String())
	}
	if _, creds := w.file(t); creds.Servers[w.server] != nil {
		t.Error("the entry is still in the file")
	}
}
