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

func TestConfigurationComesFromTheEnvironment(t *testing.T) {
	clearEnv(t)
	t.Setenv(EnvToken, testToken)
	t.Setenv(EnvBaseURL, "https://cvsm.example.com/api/v1/")
	t.Setenv(EnvTeam, teamSlug)
	t.Setenv(EnvEnvironment, "staging")
	t.Setenv(EnvCacheTTL, "45")
	c, err := NewClient(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.BaseURL() != "https://cvsm.example.com/api/v1" {
		t.Errorf("BaseURL %q: the trailing slash is ignored", c.BaseURL())
	}
	if c.Team() != teamSlug || c.Environment() != "staging" || c.CacheTTL() != 45*time.Second {
		t.Errorf("got team %q env %q ttl %s", c.Team(), c.Environment(), c.CacheTTL())
	}
	if c.cfg.token() != testToken {
		t.Error("token not taken from CVSM_TOKEN")
	}
}

func TestDefaults(t *testing.T) {
	clearEnv(t)
	c, err := NewClient(Options{Token: testToken, BaseURL: "http://localhost:8080/api/v1", Team: teamID})
	if err != nil {
		t.Fatal(err)
	}
	if c.Environment() != "production" || c.CacheTTL() != 30*time.Second || c.Timeout() != 10*time.Second || c.MaxRetries() != 2 {
		t.Errorf("defaults: env %q ttl %s timeout %s retries %d", c.Environment(), c.CacheTTL(), c.Timeout(), c.MaxRetries())
	}
}

func TestExplicitOptionsWinOverTheEnvironment(t *testing.T) {
	clearEnv(t)
	t.Setenv(EnvToken, "cvsm_from_env")
	t.Setenv(EnvBaseURL, "https://env.example.com/api/v1")
	t.Setenv(EnvTeam, "env-team")
	t.Setenv(EnvEnvironment, "staging")
	t.Setenv(EnvCacheTTL, "not a number") // never read: CacheTTL is explicit
	c, err := NewClient(Options{Token: testToken, BaseURL: "http://opt.example.com/api/v1", Team: "opt-team",
		Environment: "development", CacheTTL: 5 * time.Second, Timeout: 3 * time.Second, MaxRetries: Int(0)})
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.token() != testToken || c.BaseURL() != "http://opt.example.com/api/v1" || c.Team() != "opt-team" ||
		c.Environment() != "development" || c.CacheTTL() != 5*time.Second || c.Timeout() != 3*time.Second || c.MaxRetries() != 0 {
		t.Errorf("options not applied: %v", c)
	}
}

func TestMissingSettingsAreConfigurationErrorsNamingTheVariable(t *testing.T) {
	cases := []struct {
		opts Options
		want string
	}{
		{Options{BaseURL: "http://x/api/v1", Team: "acme"}, "CVSM_TOKEN is not set"},
		{Options{Token: testToken, Team: "acme"}, "CVSM_BASE_URL is not set"},
		{Options{Token: testToken, BaseURL: "http://x/api/v1"}, "CVSM_TEAM is not set"},
	}
	for _, tc := range cases {
		clearEnv(t)
		c, err := NewClient(tc.opts)
		if c != nil || !errors.Is(err, ErrConfiguration) {
			t.Fatalf("want configuration error, got %v, %v", c, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("message %q should contain %q", err.Error(), tc.want)
		}
		var ce *Error
		if !errors.As(err, &ce) || ce.Kind != KindConfiguration || ce.Status != 0 {
			t.Errorf("want *Error of kind configuration, got %#v", err)
		}
	}
}

func TestInvalidCacheTTLVariableIsAConfigurationError(t *testing.T) {
	for _, raw := range []string{"abc", "-1", "1.5", "30s", "99999999999999999999"} {
		clearEnv(t)
		t.Setenv(EnvCacheTTL, raw)
		_, err := NewClient(Options{Token: testToken, BaseURL: "http://x/api/v1", Team: "acme"})
		if !errors.Is(err, ErrConfiguration) || !strings.Contains(err.Error(), EnvCacheTTL) {
			t.Errorf("CVSM_CACHE_TTL=%q: want configuration error naming it, got %v", raw, err)
		}
	}
	clearEnv(t)
	t.Setenv(EnvCacheTTL, "0")
	c, err := NewClient(Options{Token: testToken, BaseURL: "http://x/api/v1", Team: "acme"})
	if err != nil || c.CacheTTL() != 0 {
		t.Errorf("CVSM_CACHE_TTL=0 disables the cache: %v, %v", c, err)
	}
}

func TestEmptyCacheTTLVariableCountsAsUnset(t *testing.T) {
	for _, raw := range []string{"", "  "} {
		clearEnv(t)
		t.Setenv(EnvCacheTTL, raw)
		c, err := NewClient(Options{Token: testToken, BaseURL: "http://x/api/v1", Team: "acme"})
		if err != nil || c.CacheTTL() != DefaultCacheTTL {
			t.Errorf("CVSM_CACHE_TTL=%q: want the default %s, got %v, %v", raw, DefaultCacheTTL, c, err)
		}
	}
}

func TestNegativeCacheTTLOptionIsAConfigurationError(t *testing.T) {
	clearEnv(t)
	_, err := NewClient(Options{Token: testToken, BaseURL: "http://x/api/v1", Team: "acme", CacheTTL: -5 * time.Second})
	if !errors.Is(err, ErrConfiguration) {
		t.Errorf("CacheTTL -5s: want a configuration error, got %v", err)
	}
	c, err := NewClient(Options{Token: testToken, BaseURL: "http://x/api/v1", Team: "acme", CacheTTL: NoCache})
	if err != nil || c.CacheTTL() != 0 {
		t.Errorf("CacheTTL NoCache turns caching off: %v, %v", c, err)
	}
}

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
	if out := printedForms(c); strings.Contains(out, "hunter2") {
		t.Errorf("password printed:\n%s", out)
	}
}
