package cvsm

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestInvalidOptionsAreConfigurationErrors(t *testing.T) {
	clearEnv(t)
	base := Options{Token: testToken, BaseURL: "http://x/api/v1", Team: "acme"}
	bad := []Options{base, base, base, base}
	bad[0].BaseURL = "not a url"
	bad[1].BaseURL = "ftp://x/api/v1"
	bad[2].Timeout = -time.Second
	bad[3].MaxRetries = Int(-1)
	for _, o := range bad {
		if _, err := NewClient(o); !errors.Is(err, ErrConfiguration) {
			t.Errorf("%v: want configuration error, got %v", o, err)
		}
	}
}

// printedForms renders v with every fmt verb and form a caller might use.
func printedForms(v any) string {
	var b strings.Builder
	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q", "%d", "%x", "%X", "%T"} {
		fmt.Fprintf(&b, format+"\n", v)
	}
	fmt.Fprintln(&b, v)
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("client", "value", v)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("client", "value", v)
	b.WriteString(logs.String())
	return b.String()
}

func TestPrintedClientAndOptionsNeverShowTheTokenOrValues(t *testing.T) {
	s := newStub(t)
	opts := Options{Token: testToken, BaseURL: s.baseURL(), Team: teamID}
	c := newTestClient(t, s, opts)
	if _, err := c.GetAll(ctx); err != nil { // fill the cache with values
		t.Fatal(err)
	}
	subjects := map[string]any{
		"*Client": c.Client, "Client value": *c.Client, "Options": opts, "*Options": &opts,
		"struct holding Options": struct{ Opts Options }{opts},
	}
	for label, v := range subjects {
		out := printedForms(v)
		for _, secret := range []string{testToken, dbURLValue, apiKeyVal, "s3cr3t"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s: printed form contains %q:\n%s", label, secret, out)
			}
		}
	}
	text := fmt.Sprintf("%v", c.Client)
	for _, want := range []string{s.baseURL(), teamID, "production", "30s", "10s", "MaxRetries: 2", "<redacted>"} {
		if !strings.Contains(text, want) {
			t.Errorf("%%v of the client should show %q: %s", want, text)
		}
	}
}

func TestPrintedBaseURLHidesAnEmbeddedPassword(t *testing.T) {
	clearEnv(t)
	c, err := NewClient(Options{Token: testToken, BaseURL: "https://user:hunter2@cvsm.example.com/api/v1", Team: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if out := printedForms(c); strings.Contains(out, "hunter2") || strings.Contains(out, "user:") {
		t.Errorf("user or password printed:\n%s", out)
	}
	// The form every SDK prints: the whole user:password part as ***.
	if text := c.String(); !strings.Contains(text, `"https://***@cvsm.example.com/api/v1"`) {
		t.Errorf("printed base URL: %s", text)
	}
}

// Go's zero-value idiom (R13): a zero Options.CacheTTL means the environment, else the
// default; CVSM_CACHE_TTL=0 (or cvsm.NoCache) turns the cache off.
func TestR13ZeroCacheTTLMeansDefaultAndNoCacheMeansNone(t *testing.T) {
	clearEnv(t)
	base := Options{Token: testToken, BaseURL: "http://x/api/v1", Team: "acme"}
	c, _ := NewClient(base)
	if c.CacheTTL() != DefaultCacheTTL {
		t.Errorf("zero CacheTTL: %s", c.CacheTTL())
	}
	t.Setenv(EnvCacheTTL, "0")
	c, _ = NewClient(base)
	if c.CacheTTL() != 0 {
		t.Errorf("CVSM_CACHE_TTL=0: %s", c.CacheTTL())
	}
	t.Setenv(EnvCacheTTL, "60")
	base.CacheTTL = NoCache
	if c, _ = NewClient(base); c.CacheTTL() != 0 {
		t.Errorf("NoCache with CVSM_CACHE_TTL=60: %s", c.CacheTTL())
	}
}
