// This file owns the Client: construction, Get, GetAll, Inject, ClearCache,
// team slug resolution, the effective-configuration accessors and the
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
	"sync"
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
	team       *teamResolver
	now        func() time.Time
	sleep      func(context.Context, time.Duration) error
}

// NewClient returns a client configured by opts, with the options left
// empty taken from the CVSM_* environment variables and then the defaults.
// A missing token, base URL or team, a token with characters other than
// visible ASCII, a negative Timeout or MaxRetries, a CVSM_* variable that
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
		team:       &teamResolver{},
		now:        time.Now,
		sleep:      sleepContext,
	}
	c.cache = newCache(cfg.cacheTTL, func() time.Time { return c.now() })
	return c, nil
}

// Get returns the value of the secret name in the client's environment.
// Names are case-sensitive: when the environment holds the name only in
// another case, the KindNotFound error suggests it (Error.Suggestion). A
// name that is not a valid secret name ([A-Za-z_][A-Za-z0-9_]{0,254}, so
// also "") is KindNotFound without a request. A cached value younger than
// the cache TTL is returned without a request.
func (c *Client) Get(ctx context.Context, name string) (string, error) {
	if !validSecretName(name) {
		return "", newError(KindNotFound, "%s is not a valid secret name (letters, digits and _, not starting with a digit, at most 255 characters)", quoteName(name))
	}
	env := c.cfg.environment
	if v, ok := c.cache.get(env, name); ok {
		return v, nil
	}
	team, err := c.teamID(ctx)
	if err != nil {
		return "", err
	}

	var list listAnswer
	secretsPath := "/teams/" + url.PathEscape(team) + "/secrets"
	query := url.Values{"environment": {env}, "search": {name}}
	requestID, err := c.getJSON(ctx, endpointList, secretsPath, query, &list)
	if err != nil {
		return "", err
	}
	id, suggestion := "", ""
	for _, s := range *list.Secrets {
		if s.Environment != "" && s.Environment != env {
			continue
		}
		if s.Name == name {
			id = s.ID
			break
		}
		if suggestion == "" && strings.EqualFold(s.Name, name) {
			suggestion = s.Name
		}
	}
	if id == "" {
		e := newError(KindNotFound, "secret %q not found in %s", name, env)
		if suggestion != "" {
			e.Message += fmt.Sprintf("; did you mean %q?", suggestion)
		}
		e.RequestID, e.Suggestion = requestID, suggestion
		return "", e
	}

	var one valueAnswer
	if _, err := c.getJSON(ctx, endpointValue, secretsPath+"/"+url.PathEscape(id), nil, &one); err != nil {
		return "", err
	}
	c.cache.put(env, name, *one.Value)
	return *one.Value, nil
}

// GetAll returns every secret of the client's environment as a map of name
// to value, read with one request to the export endpoint. The result is
// cached as a whole and also fills the cache for Get. The returned map is
// the caller's own.
func (c *Client) GetAll(ctx context.Context) (map[string]string, error) {
	env := c.cfg.environment
	if all, ok := c.cache.getAll(env); ok {
		return all, nil
	}
	team, err := c.teamID(ctx)
	if err != nil {
		return nil, err
	}
	var values exportAnswer
	query := url.Values{"format": {"json"}, "environment": {env}}
	if _, err := c.getJSON(ctx, endpointExport, "/teams/"+url.PathEscape(team)+"/secrets/export", query, &values); err != nil {
		return nil, err
	}
	c.cache.putAll(env, values)
	return copyMap(values), nil
}

// The answers the client decodes, each with the shape its request promises
// (rule R3); a 2xx answer of another shape is unreadable, like a dropped
// connection.
type (
	teamsAnswer struct {
		Teams *[]struct {
			ID   string `json:"id"`
			Slug string `json:"slug"`
		} `json:"teams"`
	}
	listAnswer struct {
		Secrets *[]struct {
			ID          string `json:"id"`
			Name        string `json:"name"`
			Environment string `json:"environment"`
		} `json:"secrets"`
	}
	valueAnswer struct {
		Value *string `json:"value"`
	}
	exportAnswer map[string]string
)

func (a *teamsAnswer) valid() bool  { return a.Teams != nil }
func (a *listAnswer) valid() bool   { return a.Secrets != nil }
func (a *valueAnswer) valid() bool  { return a.Value != nil }
func (a *exportAnswer) valid() bool { return *a != nil } // JSON null decodes to a nil map

// UnmarshalJSON decodes an export, refusing null values, which would
// otherwise decode as "".
func (a *exportAnswer) UnmarshalJSON(data []byte) error {
	var raw map[string]*string
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if raw == nil {
		*a = nil
		return nil
	}
	m := make(exportAnswer, len(raw))
	for name, value := range raw {
		if value == nil {
			return errNullValue
		}
		m[name] = *value
	}
	*a = m
	return nil
}

var errNullValue = errors.New("an export value is null")

// validSecretName reports whether name matches [A-Za-z_][A-Za-z0-9_]{0,254}.
func validSecretName(name string) bool {
	return len(name) <= 255 && validEnvName(name)
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

// ClearCache forgets every cached value, so the next Get or GetAll asks the
// server again.
func (c *Client) ClearCache() { c.cache.clear() }

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

// MaxRetries returns how many more attempts a failed GET may get.
func (c *Client) MaxRetries() int { return c.cfg.maxRetries }

// String describes the client's configuration, without the token. It, and
// GoString, Format and LogValue, have value receivers so that a dereferenced
// Client prints just as safely as a *Client.
func (c Client) String() string {
	if c.cfg == nil {
		return "cvsm.Client{}"
	}
	return fmt.Sprintf("cvsm.Client{BaseURL: %q, Team: %q, Environment: %q, CacheTTL: %s, Timeout: %s, MaxRetries: %d, Token: <redacted>}",
		displayURL(c.cfg.baseURL), c.cfg.team, c.cfg.environment, c.cfg.cacheTTL, c.cfg.timeout, c.cfg.maxRetries)
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
		slog.Duration("timeout", c.cfg.timeout),
		slog.Int("max_retries", c.cfg.maxRetries),
	)
}

// teamResolver remembers the id a team slug resolved to.
type teamResolver struct {
	mu sync.Mutex
	id string
}

// teamID returns the team id to put in paths: the configured team when it
// is a UUID, otherwise the id of the caller's team with that slug, looked up
// once per client through GET /teams (a failed lookup is retried next time).
func (c *Client) teamID(ctx context.Context) (string, error) {
	if isUUID(c.cfg.team) {
		return c.cfg.team, nil
	}
	c.team.mu.Lock()
	defer c.team.mu.Unlock()
	if c.team.id != "" {
		return c.team.id, nil
	}
	var body teamsAnswer
	requestID, err := c.getJSON(ctx, endpointTeams, "/teams", nil, &body)
	if err != nil {
		return "", err
	}
	for _, t := range *body.Teams {
		if t.Slug == c.cfg.team && t.ID != "" {
			c.team.id = t.ID
			return t.ID, nil
		}
	}
	e := newError(KindConfiguration, "team %q matches none of your teams (set Options.Team or %s to a team id or slug)", c.cfg.team, EnvTeam)
	e.RequestID = requestID
	return "", e
}

// isUUID reports whether s has the 8-4-4-4-12 hexadecimal form of a UUID.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F') {
				return false
			}
		}
	}
	return true
}
