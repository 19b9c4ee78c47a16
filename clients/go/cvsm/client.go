// This file owns the Client: construction, Get, GetAll (and their WithInfo
// forms), Inject, ClearCache, the effective-configuration accessors and the
// redacted printed form of the client.

package cvsm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
)

// Client reads the secrets of one team and environment. Create it with
// NewClient. A Client is safe for concurrent use by several goroutines.
// Printing it (with any fmt verb or log/slog) shows its configuration but
// never the token or a cached value.
type Client struct {
	// The token and the cached values sit behind closures (see config and
	// cache), out of reach of reflection-based printers.
	cfg        *config
	httpClient *http.Client
	cache      *cache
	keys       *keyring     // the team key of an end-to-end team, once fetched
	logger     *slog.Logger // nil: slog.Default()
	now        func() time.Time
	sleep      func(context.Context, time.Duration) error
	live       *live // the change stream of a live client (Options.Live); nil otherwise
}

// NewClient returns a client configured by opts, with the options left
// empty taken from the CVSM_* environment variables and then the defaults.
// A missing token, base URL or team, a token with characters other than
// visible ASCII, a token with a key part that is not an end-to-end team's
// (cvsm_<64 hex>.<43 base64url characters>), a negative Timeout or
// MaxRetries, a CVSM_* variable that
// does not parse, or a CA file that cannot be read returns an *Error of kind
// KindConfiguration naming what to set. The proxy variables (HTTP_PROXY,
// HTTPS_PROXY, NO_PROXY and their lower-case forms) are read now, once per
// client. NewClient makes no request.
func NewClient(opts Options) (*Client, error) {
	cfg, err := resolveConfig(opts)
	if err != nil {
		return nil, err
	}
	hc, err := newHTTPClient(opts, cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg:        &cfg,
		httpClient: hc,
		keys:       &keyring{},
		logger:     opts.Logger,
		now:        time.Now,
		sleep:      sleepContext,
	}
	c.cache = newCache(cfg.cacheTTL, cfg.stale, func() time.Time { return c.now() })
	if cfg.live {
		c.live = newLive()
	}
	return c, nil
}

// Get returns the value of the secret name in the client's environment,
// read with one request (GET .../secrets/by-name/{name}). Names are
// case-sensitive: when the environment holds the name only in another case,
// the KindNotFound error suggests it (Error.Suggestion). A name that is not
// a valid secret name ([A-Za-z_][A-Za-z0-9_]{0,254}, so also "") is
// KindNotFound without a request. A cached value younger than the cache TTL
// is returned without a request. With StaleIfError set, a kept value may be
// returned when the refresh fails; GetWithInfo tells when. With the token of
// an end-to-end team the value is opened here (the first read also fetches
// the team key); one that does not open is a KindDecryption error.
func (c *Client) Get(ctx context.Context, name string) (string, error) {
	v, _, err := c.GetWithInfo(ctx, name)
	return v, err
}

// Info describes where a value returned by GetWithInfo, or a map returned by
// GetAllWithInfo, came from.
type Info struct {
	// Cached reports that the value came from the client's cache rather
	// than from an answer to this call.
	Cached bool
	// Stale reports that the value is past its cache TTL and was returned
	// because refreshing it failed (Options.StaleIfError, rule R14). Err is
	// then the error the refresh failed with.
	Stale bool
	// Age is how long ago the value was fetched from the server; 0 when
	// this call fetched it.
	Age time.Duration
	// Err is, when Stale, the *Error the refresh failed with (a network
	// error, a 5xx or a 429); nil otherwise.
	Err error
}

// GetWithInfo is Get, and also says whether the value came from the cache
// and whether it was served stale: when StaleIfError is set and refreshing
// a value fails with a network error (after retries), a 5xx (after
// retries) or a 429, a value fetched less than CacheTTL+StaleIfError ago is
// returned with a nil error and info.Stale set, and a warning is logged the
// first time that value is served stale. A 401 or 403 empties the cache
// and is returned; so is any other error (404, 400, configuration).
func (c *Client) GetWithInfo(ctx context.Context, name string) (string, Info, error) {
	if !validSecretName(name) {
		return "", Info{}, newError(KindNotFound, ruleMessageInvalidSecretName, quoteName(name))
	}
	env := c.cfg.environment
	if v, age, ok := c.cache.get(env, name); ok {
		return v, Info{Cached: true, Age: age}, nil
	}
	c.liveStart()
	m := c.cache.mark()
	value, version, absent, err := c.readByName(ctx, env, name)
	if err == nil {
		c.cache.put(env, name, value, m, version)
		return value, Info{}, nil
	}
	if absent {
		// The by-name read answered 404: the server answered, so no kept
		// value is served (whatever the listing answered), and this one is
		// forgotten.
		c.cache.forget(env, name)
		return "", Info{}, err
	}
	ce := asClientError(err)
	if servesStale(ce) {
		if v, age, first, ok := c.cache.getKept(env, name); ok {
			if first {
				c.warnStale(ctx, "cvsm: serving a stale secret value: refreshing it failed", slog.String("secret", name), ce, age)
			}
			return v, Info{Cached: true, Stale: true, Age: age, Err: ce}, nil
		}
	}
	return "", Info{}, err
}

// RefreshOption changes what Refresh does.
type RefreshOption func(*refreshOptions)

type refreshOptions struct {
	environment string
}

// InEnvironment returns a RefreshOption that reads from environment instead
// of the client's; that value is returned and not cached.
func InEnvironment(environment string) RefreshOption {
	return func(o *refreshOptions) { o.environment = environment }
}

// Refresh returns the value of the secret name read now, past the cache,
// with one request, as Get makes it (the same errors, retries and not-found
// listing): for the pattern "my database login failed: fetch the
// credential again once" (rule R17). It is never answered from the cache
// and never with a kept value (StaleIfError does not apply: the caller
// asked for the current value). In the client's environment the cache then
// holds the value read; with InEnvironment(other) the value is returned and
// not cached.
func (c *Client) Refresh(ctx context.Context, name string, opts ...RefreshOption) (string, error) {
	o := refreshOptions{environment: c.cfg.environment}
	for _, opt := range opts {
		opt(&o)
	}
	env := o.environment
	if strings.TrimSpace(env) == "" {
		return "", newError(KindConfiguration, "Refresh: the environment must not be empty (leave InEnvironment out for the client's own)")
	}
	if !validSecretName(name) {
		return "", newError(KindNotFound, ruleMessageInvalidSecretName, quoteName(name))
	}
	own := env == c.cfg.environment
	c.liveStart()
	m := c.cache.mark()
	value, version, absent, err := c.readByName(ctx, env, name)
	if err != nil {
		if own && absent {
			c.cache.forget(env, name)
		}
		return "", err
	}
	if own {
		c.cache.put(env, name, value, m, version)
	}
	return value, nil
}

// readByName reads name in env with one request (GET .../by-name/{name}),
// opening an end-to-end team's envelope: the value and the version the
// answer says it is (0: unknown). A 404 goes on to the listing, which
// decides between KindNotFound and a KindConfiguration error (notFound);
// absent then says that the by-name read answered 404.
func (c *Client) readByName(ctx context.Context, env, name string) (value string, version int, absent bool, err error) {
	var one valueAnswer
	query := url.Values{"environment": {env}}
	requestID, err := c.getJSON(ctx, endpointByName, c.secretsPath()+"/by-name/"+url.PathEscape(name), query, &one)
	if err == nil {
		if value, err = c.readValue(ctx, env, name, &one, requestID); err == nil {
			var v int
			if json.Unmarshal(one.Secret.Version, &v) == nil && v > 0 {
				version = v
			}
			return value, version, false, nil
		}
	}
	if ce := asClientError(err); ce.Kind == KindNotFound {
		// The by-name read answered 404: the listing tells a missing
		// secret from a wrong team or base URL.
		return "", 0, true, c.notFound(ctx, env, name, ce)
	}
	return "", 0, false, err
}

// notFound turns the by-name read's 404 into the error Get returns, after
// asking the listing: a 404 or 400 to the listing is a KindConfiguration
// error (a wrong team or base URL, rule R9); a listing makes the 404 a
// KindNotFound error that suggests a name differing only in case.
func (c *Client) notFound(ctx context.Context, env, name string, byName *Error) error {
	var list listAnswer
	query := url.Values{"environment": {env}, "search": {name}}
	if _, err := c.getJSON(ctx, endpointList, c.secretsPath(), query, &list); err != nil {
		return err
	}
	suggestion := ""
	for _, s := range *list.Secrets {
		if s.Environment != "" && s.Environment != env {
			continue
		}
		if s.Name != name && strings.EqualFold(s.Name, name) {
			suggestion = s.Name
			break
		}
	}
	e := newError(KindNotFound, "secret %q not found in %s", name, env)
	if suggestion != "" {
		e.Message += fmt.Sprintf(ruleMessageDidYouMean, suggestion)
	}
	e.Status, e.RequestID, e.Suggestion = byName.Status, byName.RequestID, suggestion
	return e
}

// GetAll returns every secret of the client's environment as a map of name
// to value, read with one request to the export endpoint. The result is
// cached as a whole and also fills the cache for Get. The returned map is
// the caller's own. With StaleIfError set, a kept result may be returned
// when the refresh fails; GetAllWithInfo tells when. With the token of an
// end-to-end team every value is opened here, and one that does not open
// fails the whole call with a KindDecryption error; a token without its
// key part gets a KindConfiguration error for an export the server marks
// end-to-end (Cvsm-E2E: 1), as Get does.
func (c *Client) GetAll(ctx context.Context) (map[string]string, error) {
	values, _, err := c.GetAllWithInfo(ctx)
	return values, err
}

// GetAllWithInfo is GetAll, and also says whether the map came from the
// cache and whether it was served stale, under the same rules as
// GetWithInfo: only a whole GetAll result is served stale, never one pieced
// together from values cached by Get.
func (c *Client) GetAllWithInfo(ctx context.Context) (map[string]string, Info, error) {
	env := c.cfg.environment
	if all, age, ok := c.cache.getAll(env); ok {
		return all, Info{Cached: true, Age: age}, nil
	}
	c.liveStart()
	m := c.cache.mark()
	var export exportAnswer
	query := url.Values{"format": {"json"}, "environment": {env}}
	requestID, err := c.getJSON(ctx, endpointExport, c.secretsPath()+"/export", query, &export)
	values := export.values
	switch {
	case err == nil && c.endToEnd():
		values, err = c.openAll(ctx, env, values, requestID)
	case err == nil && export.e2e:
		return nil, Info{}, c.keylessError(requestID)
	}
	if err != nil {
		if ce := asClientError(err); servesStale(ce) {
			if all, age, first, ok := c.cache.getAllKept(env); ok {
				if first {
					c.warnStale(ctx, "cvsm: serving stale values of every secret (GetAll): refreshing them failed", slog.Int("secrets", len(all)), ce, age)
				}
				return all, Info{Cached: true, Stale: true, Age: age, Err: ce}, nil
			}
		}
		return nil, Info{}, err
	}
	c.cache.putAll(env, values, m)
	return copyMap(values), Info{}, nil
}

// secretsPath is the path of the team's secrets, below the base URL. The
// team, id or slug, goes in as it is, percent-encoded.
func (c *Client) secretsPath() string {
	return "/teams/" + url.PathEscape(c.cfg.team) + "/secrets"
}

// The answers the client decodes, each with the shape its request promises
// (rule R3); a 2xx answer of another shape is unreadable, like a dropped
// connection.
type (
	listAnswer struct {
		Secrets *[]struct {
			Name        string `json:"name"`
			Environment string `json:"environment"`
		} `json:"secrets"`
	}
	valueAnswer struct {
		Secret *struct {
			E2E     bool            `json:"e2e"`     // an end-to-end team's secret: the value is its envelope
			Version json.RawMessage `json:"version"` // read when it is a whole number
		} `json:"secret"`
		Value *string `json:"value"`
		E2E   bool    `json:"e2e"` // the same mark beside the value, as docs/e2e.md first put it
	}
	exportAnswer struct {
		values map[string]string
		e2e    bool // the answer carries Cvsm-E2E: 1: an end-to-end team's envelopes
	}
)

func (a *listAnswer) valid() bool   { return a.Secrets != nil }
func (a *valueAnswer) valid() bool  { return a.Secret != nil && a.Value != nil }
func (a *exportAnswer) valid() bool { return a.values != nil } // JSON null decodes to a nil map

// readHeader notes the export's mark of an end-to-end team, which its
// {NAME: value} body has no room for.
func (a *exportAnswer) readHeader(h http.Header) { a.e2e = h.Get(ruleHeaderE2E) == "1" }

// UnmarshalJSON decodes an export, refusing null values, which would
// otherwise decode as "".
func (a *exportAnswer) UnmarshalJSON(data []byte) error {
	var raw map[string]*string
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if raw == nil {
		a.values = nil
		return nil
	}
	m := make(map[string]string, len(raw))
	for name, value := range raw {
		if value == nil {
			return errNullValue
		}
		m[name] = *value
	}
	a.values = m
	return nil
}

var errNullValue = errors.New("an export value is null")

// validSecretName reports whether name matches [A-Za-z_][A-Za-z0-9_]{0,254}.
func validSecretName(name string) bool {
	return len(name) <= ruleSecretNameMaxLength && validEnvName(name)
}

// validEnvName reports whether name matches [A-Za-z_][A-Za-z0-9_]*, the
// names Inject puts in the process environment.
func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if !(b == '_' || 'A' <= b && b <= 'Z' || 'a' <= b && b <= 'z' || i > 0 && '0' <= b && b <= '9') {
			return false
		}
	}
	return true
}

// quoteName quotes a name for a message, shortened when it is long.
func quoteName(name string) string {
	if len(name) > 80 {
		return fmt.Sprintf("%q...", name[:80])
	}
	return fmt.Sprintf("%q", name)
}

// InjectOption changes what Inject does.
type InjectOption func(*injectOptions)

type injectOptions struct {
	overwrite bool
}

// Overwrite returns an InjectOption: with true, Inject replaces environment
// variables that are already set; by default it keeps them.
func Overwrite(overwrite bool) InjectOption {
	return func(o *injectOptions) { o.overwrite = overwrite }
}

// Inject copies every secret of the client's environment (from GetAll) into
// the process environment and returns the names it set, sorted. A variable
// that is already set, even to "", is kept unless Overwrite(true) is given.
//
// Inject is all or nothing: before setting anything it checks every name
// of the export ([A-Za-z_][A-Za-z0-9_]*) and every value (no NUL character,
// which no process environment can hold), those of variables it would keep
// included. A secret that fails is a KindConfiguration error naming it
// (never its value), and nothing is set.
func (c *Client) Inject(ctx context.Context, opts ...InjectOption) ([]string, error) {
	var o injectOptions
	for _, opt := range opts {
		opt(&o)
	}
	values, err := c.GetAll(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	sort.Strings(names)
	set := make([]string, 0, len(names))
	for _, name := range names {
		if !validEnvName(name) {
			return nil, newError(KindConfiguration, "secret %s cannot be put in the environment: its name is not a valid variable name (letters, digits and _, not starting with a digit); nothing was set", quoteName(name))
		}
		if strings.IndexByte(values[name], 0) >= 0 {
			return nil, newError(KindConfiguration, "secret %q cannot be put in the environment: its value holds a NUL character; nothing was set", name)
		}
		if _, exists := os.LookupEnv(name); exists && !o.overwrite {
			continue
		}
		set = append(set, name)
	}
	for i, name := range set {
		if err := os.Setenv(name, values[name]); err != nil {
			return set[:i], newError(KindConfiguration, "secret %q cannot be put in the environment", name)
		}
	}
	return set, nil
}

// ClearCache forgets every cached value, those kept for StaleIfError
// included, and the team key of an end-to-end team, so the next Get or
// GetAll asks the server again (and fetches the team key again).
func (c *Client) ClearCache() {
	c.cache.clear()
	c.keys.clear()
}

// CloseIdleConnections closes the connections the client keeps open for
// reuse. The client stays usable. Call it when you drop a client in a
// long-lived process that creates many.
func (c *Client) CloseIdleConnections() { c.httpClient.CloseIdleConnections() }

// BaseURL returns the effective API root, without a trailing slash.
func (c *Client) BaseURL() string { return c.cfg.baseURL }

// Team returns the configured team, id or slug, as given.
func (c *Client) Team() string { return c.cfg.team }

// Environment returns the environment secrets are read from.
func (c *Client) Environment() string { return c.cfg.environment }

// CacheTTL returns how long values are cached; zero means no caching.
func (c *Client) CacheTTL() time.Duration { return c.cfg.cacheTTL }

// Timeout returns the time limit of each HTTP attempt.
func (c *Client) Timeout() time.Duration { return c.cfg.timeout }

// StaleIfError returns how long values are kept after their cache TTL to be
// served when a refresh fails; zero means off.
func (c *Client) StaleIfError() time.Duration { return c.cfg.stale }

// MaxRetries returns how many more attempts a failed GET may get.
func (c *Client) MaxRetries() int { return c.cfg.maxRetries }

// String describes the client's configuration, without the token. It, and
// GoString, Format and LogValue, have value receivers so that a dereferenced
// Client prints just as safely as a *Client.
func (c Client) String() string {
	if c.cfg == nil {
		return "cvsm.Client{}"
	}
	return fmt.Sprintf("cvsm.Client{BaseURL: %q, Team: %q, Environment: %q, CacheTTL: %s, StaleIfError: %s, Timeout: %s, MaxRetries: %d, Live: %t, Token: <redacted>}",
		displayURL(c.cfg.baseURL), c.cfg.team, c.cfg.environment, c.cfg.cacheTTL, c.cfg.stale, c.cfg.timeout, c.cfg.maxRetries, c.cfg.live)
}

// GoString is the %#v form of the client; it also hides the token.
func (c Client) GoString() string { return c.String() }

// Format prints the client for every fmt verb without the token.
func (c Client) Format(f fmt.State, verb rune) { formatSafe(f, verb, c.String()) }

// LogValue lets log/slog log the client's configuration without the token.
func (c Client) LogValue() slog.Value {
	if c.cfg == nil {
		return slog.StringValue("cvsm.Client{}")
	}
	return slog.GroupValue(
		slog.String("base_url", displayURL(c.cfg.baseURL)),
		slog.String("team", c.cfg.team),
		slog.String("environment", c.cfg.environment),
		slog.Duration("cache_ttl", c.cfg.cacheTTL),
		slog.Duration("stale_if_error", c.cfg.stale),
		slog.Duration("timeout", c.cfg.timeout),
		slog.Int("max_retries", c.cfg.maxRetries),
		slog.Bool("live", c.cfg.live),
	)
}
