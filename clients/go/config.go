// This file owns configuration: the Options a caller passes, the CVSM_*
// environment variables that fill the options left empty, the defaults, and
// the redacted printed form of Options.

package cvsm

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Defaults used when neither an option nor an environment variable is set.
const (
	DefaultEnvironment = "production"
	DefaultCacheTTL    = 30 * time.Second
	DefaultTimeout     = 10 * time.Second
	DefaultMaxRetries  = 2
)

// NoCache, as Options.CacheTTL, turns caching off. A zero CacheTTL means
// "use CVSM_CACHE_TTL or the default"; any other negative CacheTTL is a
// configuration error, as a negative CVSM_CACHE_TTL is.
const NoCache time.Duration = -1

// Environment variables read by NewClient for the options left empty.
const (
	EnvToken       = "CVSM_TOKEN"
	EnvBaseURL     = "CVSM_BASE_URL"
	EnvTeam        = "CVSM_TEAM"
	EnvEnvironment = "CVSM_ENVIRONMENT"
	EnvCacheTTL    = "CVSM_CACHE_TTL"
)

// Options configures a Client. Every field is optional: a zero field takes
// its value from the matching CVSM_* environment variable, then from the
// default. Printing Options (with fmt or log/slog) never shows the token.
type Options struct {
	// Token is the API token or JWT sent as a bearer token. Default:
	// CVSM_TOKEN; required.
	Token string
	// BaseURL is the API root including /api/v1, for example
	// "https://cvsm.example.com/api/v1"; a trailing slash is ignored.
	// Default: CVSM_BASE_URL; required.
	BaseURL string
	// Team is the team id (a UUID) or its slug; a slug is resolved once per
	// client through GET /teams. Default: CVSM_TEAM; required.
	Team string
	// Environment is the environment secrets are read from. Default:
	// CVSM_ENVIRONMENT, then "production".
	Environment string
	// CacheTTL is how long fetched values are kept. Zero means
	// CVSM_CACHE_TTL (whole seconds), then 30 seconds; NoCache turns
	// caching off; any other negative value is a configuration error.
	CacheTTL time.Duration
	// Timeout bounds each HTTP attempt, including reading the body.
	// Zero means 10 seconds.
	Timeout time.Duration
	// MaxRetries is how many more attempts a GET gets after a network error
	// or a 502, 503 or 504. Nil means 2; use cvsm.Int(0) for no retries.
	MaxRetries *int
	// HTTPClient sends the requests. Nil means a client of this package's
	// own; its Timeout is not used (Timeout above applies per attempt).
	HTTPClient *http.Client
}

// Int returns a pointer to n, for Options.MaxRetries.
func Int(n int) *int { return &n }

// String describes the options without the token.
func (o Options) String() string {
	retries := "<default>"
	if o.MaxRetries != nil {
		retries = strconv.Itoa(*o.MaxRetries)
	}
	return fmt.Sprintf("cvsm.Options{Token: %s, BaseURL: %q, Team: %q, Environment: %q, CacheTTL: %s, Timeout: %s, MaxRetries: %s}",
		redactedMark(o.Token), displayURL(o.BaseURL), o.Team, o.Environment, o.CacheTTL, o.Timeout, retries)
}

// GoString is the %#v form of the options; it also hides the token.
func (o Options) GoString() string { return o.String() }

// Format prints the options for every verb (%v, %+v, %#v, %s, %q, %d...)
// without the token.
func (o Options) Format(f fmt.State, verb rune) { formatSafe(f, verb, o.String()) }

// LogValue lets log/slog log the options without the token.
func (o Options) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("token", redactedMark(o.Token)),
		slog.String("base_url", displayURL(o.BaseURL)),
		slog.String("team", o.Team),
		slog.String("environment", o.Environment),
		slog.Duration("cache_ttl", o.CacheTTL),
		slog.Duration("timeout", o.Timeout),
	}
	if o.MaxRetries != nil {
		attrs = append(attrs, slog.Int("max_retries", *o.MaxRetries))
	}
	return slog.GroupValue(attrs...)
}

// MarshalJSON encodes the options with the token replaced by "<redacted>",
// so a JSON log (log/slog's JSON handler encodes nested values this way)
// never holds it.
func (o Options) MarshalJSON() ([]byte, error) {
	type plain Options // no methods: avoids recursion
	p := plain(o)
	p.Token = redactedMark(o.Token)
	p.HTTPClient = nil
	return json.Marshal(p)
}

// config is the effective configuration of a Client. The token is held in
// a closure so that no reflection-based printer (fmt following pointers,
// debuggers' pretty-printers, spew) can reach it.
type config struct {
	token       func() string
	baseURL     string
	team        string
	environment string
	cacheTTL    time.Duration // 0: no cache
	timeout     time.Duration
	maxRetries  int
}

// resolveConfig applies the precedence option, then environment variable,
// then default, and validates the result.
func resolveConfig(o Options) (config, error) {
	token := firstNonEmpty(o.Token, os.Getenv(EnvToken))
	c := config{
		token:       func() string { return token },
		baseURL:     firstNonEmpty(strings.TrimSpace(o.BaseURL), strings.TrimSpace(os.Getenv(EnvBaseURL))),
		team:        firstNonEmpty(strings.TrimSpace(o.Team), strings.TrimSpace(os.Getenv(EnvTeam))),
		environment: firstNonEmpty(strings.TrimSpace(o.Environment), strings.TrimSpace(os.Getenv(EnvEnvironment)), DefaultEnvironment),
		timeout:     DefaultTimeout,
		maxRetries:  DefaultMaxRetries,
	}
	if token == "" {
		return config{}, missing(EnvToken, "Token")
	}
	if c.baseURL == "" {
		return config{}, missing(EnvBaseURL, "BaseURL")
	}
	if c.team == "" {
		return config{}, missing(EnvTeam, "Team")
	}
	c.baseURL = strings.TrimRight(c.baseURL, "/")
	if u, err := url.Parse(c.baseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return config{}, newError(KindConfiguration, "the base URL must be an absolute http or https URL such as https://cvsm.example.com/api/v1 (option BaseURL or %s)", EnvBaseURL)
	}

	switch {
	case o.CacheTTL == NoCache:
		c.cacheTTL = 0
	case o.CacheTTL < 0:
		return config{}, newError(KindConfiguration, "CacheTTL must not be negative, got %s (use cvsm.NoCache to turn caching off)", o.CacheTTL)
	case o.CacheTTL > 0:
		c.cacheTTL = o.CacheTTL
	default:
		ttl, err := cacheTTLFromEnv()
		if err != nil {
			return config{}, err
		}
		c.cacheTTL = ttl
	}

	if o.Timeout < 0 {
		return config{}, newError(KindConfiguration, "Timeout must not be negative, got %s", o.Timeout)
	}
	if o.Timeout > 0 {
		c.timeout = o.Timeout
	}
	if o.MaxRetries != nil {
		if *o.MaxRetries < 0 {
			return config{}, newError(KindConfiguration, "MaxRetries must not be negative, got %d", *o.MaxRetries)
		}
		c.maxRetries = *o.MaxRetries
	}
	return c, nil
}

// cacheTTLFromEnv reads CVSM_CACHE_TTL: unset or empty means the default
// (an empty variable counts as unset, as for every CVSM_* variable); anything
// but a non-negative whole number of seconds is a configuration error.
func cacheTTLFromEnv() (time.Duration, error) {
	raw := os.Getenv(EnvCacheTTL)
	if strings.TrimSpace(raw) == "" {
		return DefaultCacheTTL, nil
	}
	s := strings.TrimSpace(raw)
	valid := s != ""
	for _, r := range s {
		if r < '0' || r > '9' {
			valid = false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if !valid || err != nil || n > math.MaxInt64/int64(time.Second) {
		return 0, newError(KindConfiguration, "%s must be a non-negative whole number of seconds, got %q", EnvCacheTTL, raw)
	}
	return time.Duration(n) * time.Second, nil
}

func missing(envVar, option string) *Error {
	return newError(KindConfiguration, "%s is not set: pass Options.%s or set the %s environment variable", envVar, option, envVar)
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// redactedMark stands in for the token in printed forms.
func redactedMark(token string) string {
	if token == "" {
		return "<unset>"
	}
	return "<redacted>"
}

// displayURL hides a password embedded in a URL.
func displayURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<invalid URL>"
	}
	return u.Redacted()
}

// formatSafe writes a redacted description for any fmt verb, so that no
// verb (not even %d or %x) falls through to printing struct fields.
func formatSafe(f fmt.State, verb rune, s string) {
	switch verb {
	case 'q':
		fmt.Fprintf(f, "%q", s)
	default:
		_, _ = f.Write([]byte(s))
	}
}
