// This file owns configuration: the Options a caller passes, the CVSM_*
// environment variables that fill the options left empty, the defaults, and
// the redacted printed form of Options.

package cvsm

import (
	"encoding/json"
	"errors"
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
	DefaultEnvironment = ruleDefaultEnvironment
	DefaultCacheTTL    = ruleDefaultCacheTTLSeconds * time.Second
	DefaultTimeout     = ruleDefaultTimeoutSeconds * time.Second
	DefaultMaxRetries  = ruleDefaultMaxRetries
)

// NoCache turns caching off when given as Options.CacheTTL. Options follow Go's
// zero-value idiom, so a zero CacheTTL does NOT turn caching off: it means
// "not set here", that is CVSM_CACHE_TTL, then 30 seconds. NoCache is the
// explicit "cache for 0 seconds" (what cache_ttl 0 means in the other cvsm
// SDKs, and what CVSM_CACHE_TTL=0 means here too). Any other negative
// CacheTTL is a configuration error, as a negative CVSM_CACHE_TTL is.
const NoCache time.Duration = -1

// NoStaleIfError turns stale-if-error off when given as
// Options.StaleIfError, even when CVSM_STALE_IF_ERROR is set. As for CacheTTL, a zero StaleIfError
// means "not set here": CVSM_STALE_IF_ERROR, then 0 (off). Any other
// negative StaleIfError is a configuration error.
const NoStaleIfError time.Duration = -1

// Environment variables read by NewClient for the options left empty.
const (
	EnvToken       = ruleEnvToken
	EnvBaseURL     = ruleEnvBaseURL
	EnvTeam        = ruleEnvTeam
	EnvEnvironment = ruleEnvEnvironment
	EnvCacheTTL    = ruleEnvCacheTTL
	EnvTimeout     = ruleEnvTimeout
	EnvMaxRetries  = ruleEnvMaxRetries
	EnvCAFile      = ruleEnvCAFile
	// EnvStaleIfError is CVSM_STALE_IF_ERROR, whole seconds (default 0,
	// off); see Options.StaleIfError.
	EnvStaleIfError = ruleEnvStaleIfError
)

// Options configures a Client. Every field is optional: a zero field takes
// its value from the matching CVSM_* environment variable, then from the
// default. Printing Options (with fmt or log/slog) never shows the token.
type Options struct {
	// Token is the API token or JWT sent as a bearer token. Leading and
	// trailing whitespace is trimmed, so a token read from a file works;
	// what remains must be visible ASCII. The token of an end-to-end team
	// carries its private key after a dot (cvsm_<64 hex>.<43 characters>):
	// only the part before the dot is sent, and the key opens the team's
	// values in this process. Default: CVSM_TOKEN; required.
	Token string
	// BaseURL is the API root including /api/v1, for example
	// "https://cvsm.example.com/api/v1"; a trailing slash is ignored.
	// Default: CVSM_BASE_URL; required.
	BaseURL string
	// Team is the team id (a UUID) or its slug, put in every request's
	// path as it is (percent-encoded): the server takes either, so no
	// lookup is made. A team that is none of the caller's is answered 404,
	// a KindConfiguration error. Default: CVSM_TEAM; required.
	Team string
	// Environment is the environment secrets are read from. Default:
	// CVSM_ENVIRONMENT, then "production".
	Environment string
	// CacheTTL is how long fetched values are kept. Zero (the zero value)
	// means "not set": CVSM_CACHE_TTL (whole seconds), then 30 seconds. To
	// turn caching off use NoCache, not 0. Any other negative value is a
	// configuration error.
	CacheTTL time.Duration
	// StaleIfError keeps every cached value (and a cached GetAll result)
	// that much longer after it stops being fresh, as HTTP's
	// stale-if-error (RFC 5861) does: when a refresh then fails with a
	// network error, a 5xx (after retries) or a 429, the kept value is
	// returned instead of the error if it was fetched less than
	// CacheTTL+StaleIfError ago. GetWithInfo and GetAllWithInfo report
	// such a value as Info.Stale, and the client logs a warning (to
	// Logger) the first time it serves a given value stale. A 401 or 403
	// never serves a kept value: it empties the cache. With NoCache, a
	// value is kept for StaleIfError after it was fetched, for this use
	// only. Zero means CVSM_STALE_IF_ERROR (whole seconds), then 0 (off);
	// NoStaleIfError turns it off explicitly. Any other negative value is a
	// configuration error. Kept values stay in memory only.
	StaleIfError time.Duration
	// Logger receives the client's warnings: today only the one logged
	// when a value is first served stale (see StaleIfError), which names
	// the secret and the error's kind, never the value. Nil means
	// slog.Default() at the time of the warning; to silence the client,
	// pass a logger whose handler discards.
	Logger *slog.Logger
	// Timeout bounds each HTTP attempt as a whole: connecting, sending,
	// the headers and reading the whole body. Zero means CVSM_TIMEOUT
	// (seconds, a decimal number), then 10 seconds.
	Timeout time.Duration
	// MaxRetries is how many more attempts a GET gets after a network error
	// or a 502, 503 or 504. Nil means CVSM_MAX_RETRIES, then 2; use
	// cvsm.Int(0) for no retries.
	MaxRetries *int
	// CAFile is the path of a PEM bundle of CA certificates trusted
	// instead of the system's for https base URLs. Empty means
	// CVSM_CA_FILE, then the system store. A file that cannot be read or
	// holds no certificate is a configuration error. It configures the
	// package's own transport, so it cannot be combined with HTTPClient.
	CAFile string
	// HTTPClient is the transport seam: when set, requests go through it
	// instead of the package's own client, for anything the options above
	// do not cover (a client certificate, a custom dialer, tracing). It is
	// then used as given, except that it never follows redirects (the
	// client works on a copy whose CheckRedirect stops at the first
	// answer) and that its Timeout is ignored (Timeout above bounds each
	// attempt). Proxy variables and CVSM_CA_FILE are not applied to it:
	// configure its Transport instead.
	HTTPClient *http.Client
	// Live keeps a live cache (rule R16): the client opens one connection
	// to the team's change stream at its first read and keeps it until
	// Close, and a value whose secret changes on the server stops being
	// served from the cache at once (the next Get reads it again), so an
	// update is seen within about a second instead of after CacheTTL. A
	// name that does not change still costs one request per CacheTTL, and
	// nothing polls. While the stream is down the cache works as without
	// Live, and the client reconnects with a growing pause. False means
	// CVSM_LIVE (1, true, yes or on; 0, false, no or off; any case;
	// anything else is a configuration error), then off. Call Close when
	// the client is no longer needed, to end the stream.
	Live bool
}

// Int returns a pointer to n, for Options.MaxRetries.
func Int(n int) *int { return &n }

// String describes the options without the token.
func (o Options) String() string {
	retries := "<default>"
	if o.MaxRetries != nil {
		retries = strconv.Itoa(*o.MaxRetries)
	}
	return fmt.Sprintf("cvsm.Options{Token: %s, BaseURL: %q, Team: %q, Environment: %q, CacheTTL: %s, StaleIfError: %s, Timeout: %s, MaxRetries: %s, CAFile: %q, Live: %t}",
		redactedMark(o.Token), displayURL(o.BaseURL), o.Team, o.Environment, o.CacheTTL, o.StaleIfError, o.Timeout, retries, o.CAFile, o.Live)
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
		slog.Duration("stale_if_error", o.StaleIfError),
		slog.Duration("timeout", o.Timeout),
	}
	if o.MaxRetries != nil {
		attrs = append(attrs, slog.Int("max_retries", *o.MaxRetries))
	}
	if o.CAFile != "" {
		attrs = append(attrs, slog.String("ca_file", o.CAFile))
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
	p.Logger = nil
	return json.Marshal(p)
}

// config is the effective configuration of a Client. The token and its key
// part are held in closures so that no reflection-based printer (fmt
// following pointers, debuggers' pretty-printers, spew) can reach them.
type config struct {
	token       func() string   // the bearer: the token without its key part
	key         func() []byte   // the token's X25519 private key; nil without a key part
	pin         func() tokenPin // the token's pinned key version and commitment; nil without a key part
	keyText     func() string   // the key part as written, only to scrub it from messages
	baseURL     string          // as configured; printed through displayURL
	apiRoot     string          // baseURL without a user and password: where requests go
	team        string
	environment string
	cacheTTL    time.Duration // 0: no cache
	stale       time.Duration // stale-if-error; 0: off
	timeout     time.Duration
	maxRetries  int
	caFile      string // "" : the system store
	live        bool   // keep a change stream (Options.Live, CVSM_LIVE)
}

// resolveConfig applies the precedence option, then environment variable,
// then default, and validates the result.
func resolveConfig(o Options) (config, error) {
	token := firstNonEmpty(trimToken(o.Token), trimToken(os.Getenv(EnvToken)))
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
	if i := strings.IndexFunc(token, func(r rune) bool { return r < '!' || r > '~' }); i >= 0 {
		// Never quote the token, nor the offending character's neighbours.
		return config{}, newError(KindConfiguration, "the token (option Token or %s) holds a character that is not visible ASCII at position %d: check how it was copied", EnvToken, i+1)
	}
	if c.baseURL == "" {
		return config{}, missing(EnvBaseURL, "BaseURL")
	}
	if c.team == "" {
		return config{}, missing(EnvTeam, "Team")
	}
	bearer, key, pin, err := splitToken(token)
	if errors.Is(err, errFirstFormatToken) {
		// Never quote the token: its key part is the team's secret.
		return config{}, newError(KindConfiguration, ruleMessageFirstFormatToken+" (the token of option Token or %s is cvsm_<64 hex>.<key>: tokens made before format 2 must be made again)", EnvToken)
	}
	if err != nil {
		// Never quote the token: its key part is the team's secret.
		return config{}, newError(KindConfiguration, "the token (option Token or %s) has a key part but is not an end-to-end team's token, cvsm_<64 hex>.<43 base64url>.<key version>.<43 base64url>: check how it was copied", EnvToken)
	}
	c.token = func() string { return bearer }
	c.keyText = func() string { return "" }
	if key != nil {
		keyText := token[len(bearer)+1:]
		c.key = func() []byte { return key }
		c.pin = func() tokenPin { return *pin }
		c.keyText = func() string { return keyText }
	}
	c.baseURL = strings.TrimRight(c.baseURL, "/")
	if u, err := url.Parse(c.baseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return config{}, newError(KindConfiguration, "the base URL must be an absolute http or https URL such as https://cvsm.example.com/api/v1 (option BaseURL or %s)", EnvBaseURL)
	}
	c.apiRoot = withoutUserinfo(c.baseURL)

	switch {
	case o.CacheTTL == NoCache:
		c.cacheTTL = 0
	case o.CacheTTL < 0:
		return config{}, newError(KindConfiguration, "CacheTTL must not be negative, got %s (use cvsm.NoCache to turn caching off)", o.CacheTTL)
	case o.CacheTTL > 0:
		c.cacheTTL = o.CacheTTL
	default:
		ttl, err := secondsFromEnv(EnvCacheTTL, DefaultCacheTTL)
		if err != nil {
			return config{}, err
		}
		c.cacheTTL = ttl
	}

	switch {
	case o.StaleIfError == NoStaleIfError:
		c.stale = 0
	case o.StaleIfError < 0:
		return config{}, newError(KindConfiguration, "StaleIfError must not be negative, got %s (use cvsm.NoStaleIfError to turn it off)", o.StaleIfError)
	case o.StaleIfError > 0:
		c.stale = o.StaleIfError
	default:
		stale, err := secondsFromEnv(EnvStaleIfError, 0)
		if err != nil {
			return config{}, err
		}
		c.stale = stale
	}

	switch {
	case o.Timeout < 0:
		return config{}, newError(KindConfiguration, "Timeout must not be negative, got %s", o.Timeout)
	case o.Timeout > 0:
		c.timeout = o.Timeout
	default:
		timeout, err := timeoutFromEnv()
		if err != nil {
			return config{}, err
		}
		c.timeout = timeout
	}

	switch {
	case o.MaxRetries != nil && *o.MaxRetries < 0:
		return config{}, newError(KindConfiguration, "MaxRetries must not be negative, got %d", *o.MaxRetries)
	case o.MaxRetries != nil:
		c.maxRetries = *o.MaxRetries
	default:
		retries, err := maxRetriesFromEnv()
		if err != nil {
			return config{}, err
		}
		c.maxRetries = retries
	}

	c.live = o.Live
	if raw := os.Getenv(EnvLive); !c.live && strings.TrimSpace(raw) != "" {
		on, ok := parseLive(raw)
		if !ok {
			return config{}, newError(KindConfiguration, "%s must be 1, true, yes or on (or 0, false, no or off), got %q", EnvLive, raw)
		}
		c.live = on
	}

	c.caFile = firstNonEmpty(strings.TrimSpace(o.CAFile), strings.TrimSpace(os.Getenv(EnvCAFile)))
	if c.caFile != "" && o.HTTPClient != nil {
		if o.CAFile != "" {
			return config{}, newError(KindConfiguration, "CAFile configures the package's own transport and cannot be combined with HTTPClient: set RootCAs in your HTTPClient's Transport instead")
		}
		c.caFile = "" // CVSM_CA_FILE, like the proxy variables, is for the package's own transport only
	}
	return c, nil
}

// trimToken removes the whitespace a token read from a file carries
// (spaces, tabs, carriage returns and newlines) from both ends.
func trimToken(s string) string { return strings.Trim(s, " \t\r\n") }

// timeoutFromEnv reads CVSM_TIMEOUT, a positive number of seconds such as
// "10" or "2.5"; unset or empty means the default.
func timeoutFromEnv() (time.Duration, error) {
	raw := os.Getenv(EnvTimeout)
	s := strings.TrimSpace(raw)
	if s == "" {
		return DefaultTimeout, nil
	}
	seconds, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(seconds) || seconds <= 0 || seconds > float64(math.MaxInt64/int64(time.Second)) ||
		strings.ContainsAny(s, "xXpPeEiInN_") { // plain decimals only: no hex, exponents, Inf or NaN
		return 0, newError(KindConfiguration, "%s must be a positive number of seconds, got %q", EnvTimeout, raw)
	}
	return time.Duration(seconds * float64(time.Second)), nil
}

// maxRetriesFromEnv reads CVSM_MAX_RETRIES, a non-negative whole number;
// unset or empty means the default.
func maxRetriesFromEnv() (int, error) {
	raw := os.Getenv(EnvMaxRetries)
	s := strings.TrimSpace(raw)
	if s == "" {
		return DefaultMaxRetries, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || !allDigits(s) {
		return 0, newError(KindConfiguration, "%s must be a non-negative whole number, got %q", EnvMaxRetries, raw)
	}
	return n, nil
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// secondsFromEnv reads CVSM_CACHE_TTL or CVSM_STALE_IF_ERROR: unset or
// empty means def (an empty variable counts as unset, as for every CVSM_*
// variable); anything but a non-negative whole number of seconds is a
// configuration error naming the variable.
func secondsFromEnv(name string, def time.Duration) (time.Duration, error) {
	raw := os.Getenv(name)
	if strings.TrimSpace(raw) == "" {
		return def, nil
	}
	s := strings.TrimSpace(raw)
	n, err := strconv.ParseInt(s, 10, 64)
	if !allDigits(s) || err != nil || n > math.MaxInt64/int64(time.Second) {
		return 0, newError(KindConfiguration, "%s must be a non-negative whole number of seconds, got %q", name, raw)
	}
	return time.Duration(n) * time.Second, nil
}

func missing(envVar, option string) *Error {
	return newError(KindConfiguration, ruleMessageNotSet+": pass Options.%s or set the %s environment variable", envVar, option, envVar)
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

// displayURL hides a user and password embedded in a URL: they print as
// "***" (https://***@host/api/v1), as in every SDK.
func displayURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<invalid URL>"
	}
	if u.User == nil {
		return u.String()
	}
	u.User = nil
	return strings.Replace(u.String(), "://", "://***@", 1)
}

// withoutUserinfo is the URL requests go to: raw without a user and
// password, which are never sent (the client authenticates with its Bearer
// token only).
func withoutUserinfo(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
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
