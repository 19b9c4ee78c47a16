// This file owns live caches (Options.Live, CVSM_LIVE, rule R16): the one
// change-stream connection a live client keeps, the server-sent events it
// reads, and the pause before each reconnection.
//
// A live client keeps one connection to the team's change stream,
// GET {base_url}/teams/{team}/secrets/changes?environment={env}: server-sent
// events of names and versions, never values. It is opened by a goroutine
// at the client's first read and shared by every name the client reads. Its
// snapshot (on each connect) and each change tell the cache which values
// stopped being current (cache.snapshot, cache.change); the next read of
// such a name fetches it. While the stream is down the cache works as
// without Live (CacheTTL, StaleIfError) and the goroutine reconnects after
// a jittered, growing pause (reconnectDelay), sending Last-Event-ID when an
// event carried an id. Close ends the goroutine.

package cvsm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// EnvLive is CVSM_LIVE: 1, true, yes or on turn live caches on; 0, false,
// no or off leave them off (any case); see Options.Live.
const EnvLive = ruleEnvLive

const (
	// liveReadTimeout is how long the stream may send nothing before it
	// counts as lost (the server sends a comment every 15 s while idle).
	liveReadTimeout = ruleLiveReadTimeoutSeconds * time.Second
	liveMaxBackoff  = ruleLiveMaxBackoffSeconds * time.Second
	// liveRefusedBackoff is the least pause after the stream was refused
	// (401, 403, 404): a revoked token is not tried every few seconds,
	// which would also lock its prefix.
	liveRefusedBackoff = ruleLiveRefusedBackoffSeconds * time.Second
	// liveMaxLine bounds one line of the stream (a snapshot of many names).
	liveMaxLine = 16 << 20
)

// parseLive reads CVSM_LIVE's value: the accepted spellings of rule R16.
func parseLive(raw string) (on, ok bool) {
	word := strings.ToLower(strings.TrimSpace(raw))
	switch {
	case slices.Contains(ruleLiveTrueWords, word):
		return true, true
	case slices.Contains(ruleLiveFalseWords, word):
		return false, true
	}
	return false, false
}

// reconnectDelay is the pause before reconnection attempt (0 for the
// first): 0.5 s doubling up to 30 s, taken at random between half and all
// of it.
func reconnectDelay(attempt int) time.Duration {
	limit := liveMaxBackoff
	if attempt < 16 {
		limit = min(liveMaxBackoff, (ruleLiveBackoffBaseMS*time.Millisecond)<<attempt)
	}
	return limit/2 + time.Duration(rand.Int64N(int64(limit/2)+1))
}

// sseDecoder decodes the lines of a text/event-stream into events.
// Comments are skipped; id is remembered in lastID, for Last-Event-ID.
type sseDecoder struct {
	lastID string
	event  string
	data   []string
}

// line takes one line without its line ending; ok is true when a blank
// line ends an event that carried data.
func (d *sseDecoder) line(line string) (event, data string, ok bool) {
	if line == "" {
		event, lines := d.event, d.data
		d.event, d.data = "", nil
		if event == "" {
			event = "message"
		}
		if lines == nil {
			return "", "", false
		}
		return event, strings.Join(lines, "\n"), true
	}
	if strings.HasPrefix(line, ":") {
		return "", "", false
	}
	field, value, _ := strings.Cut(line, ":")
	value = strings.TrimPrefix(value, " ")
	switch field {
	case "event":
		d.event = value
	case "data":
		d.data = append(d.data, value)
	case "id":
		if !strings.ContainsRune(value, 0) {
			d.lastID = value
		}
	}
	return "", "", false
}

// streamRefused is a change stream answered with a status other than 200.
type streamRefused struct {
	status     int
	retryAfter time.Duration
}

func (e *streamRefused) Error() string {
	return fmt.Sprintf("the change stream answered HTTP %d", e.status)
}

// errStreamEnded is an end event: the server closes the stream.
var errStreamEnded = errors.New("the server ended the change stream")

// live is a client's change stream: started once, at the first read, and
// ended by Close.
type live struct {
	start  sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has returned

	mu          sync.Mutex
	connected   bool
	connections int // snapshots received
	attempt     int
	outage      bool // the outage was logged
	lastEventID string
}

func newLive() *live {
	ctx, cancel := context.WithCancel(context.Background())
	return &live{ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// liveStart opens the client's change stream, once, when it is live.
func (c *Client) liveStart() {
	if c.live == nil {
		return
	}
	c.live.start.Do(func() {
		if c.live.ctx.Err() != nil { // closed before the first read
			close(c.live.done)
			return
		}
		go c.liveRun()
	})
}

// Close ends the client's change stream (Options.Live) and waits for its
// goroutine to return, then closes the idle connections. The client must
// not be used afterwards for reads that should stay live; a read after
// Close still works as without Live. Close is safe to call more than once,
// and on a client that is not live.
func (c *Client) Close() error {
	if c.live != nil {
		c.live.cancel()
		c.live.start.Do(func() { close(c.live.done) })
		<-c.live.done
	}
	c.httpClient.CloseIdleConnections()
	return nil
}

// Live reports whether the client keeps a change stream (Options.Live).
func (c *Client) Live() bool { return c.live != nil }

// liveConnected reports whether the stream is up (a snapshot came and it
// has not been lost since), and how many snapshots came: for tests.
func (c *Client) liveConnected() (bool, int) {
	if c.live == nil {
		return false, 0
	}
	c.live.mu.Lock()
	defer c.live.mu.Unlock()
	return c.live.connected, c.live.connections
}

// liveRun follows the stream until Close.
func (c *Client) liveRun() {
	l := c.live
	defer close(l.done)
	for l.ctx.Err() == nil {
		err := c.liveFollow(l.ctx)
		if l.ctx.Err() != nil {
			return
		}
		delay := c.liveLost(err)
		if sleepContext(l.ctx, delay) != nil {
			return
		}
	}
}

// liveLost notes that the stream is down and returns the pause before the
// next attempt. Nothing logged holds the token.
func (c *Client) liveLost(err error) time.Duration {
	l := c.live
	c.cache.streamLost()
	l.mu.Lock()
	l.connected = false
	first := !l.outage
	l.outage = true
	delay := reconnectDelay(l.attempt)
	l.attempt++
	l.mu.Unlock()
	reason := "it closed"
	if err != nil {
		reason = c.scrub(err.Error())
	}
	if first {
		c.log(slog.LevelWarn, "cvsm: the change stream is down; values are cached for the cache TTL until it is back; reconnecting",
			slog.String("reason", reason))
	}
	var refused *streamRefused
	if errors.As(err, &refused) {
		switch refused.status {
		case http.StatusUnauthorized, http.StatusForbidden:
			c.cache.clear() // as a refused read does
			c.keys.clear()
			delay = max(delay, liveRefusedBackoff)
		case http.StatusNotFound:
			delay = max(delay, liveRefusedBackoff)
		}
		delay = max(delay, refused.retryAfter)
	}
	return delay
}

func (c *Client) log(level slog.Level, msg string, attrs ...slog.Attr) {
	logger := c.logger
	if logger == nil {
		logger = slog.Default()
	}
	attrs = append([]slog.Attr{slog.String("team", c.cfg.team), slog.String("environment", c.cfg.environment)}, attrs...)
	logger.LogAttrs(context.Background(), level, msg, attrs...)
}

// liveFollow opens the stream once and reads it until it ends, is lost (no
// byte for liveReadTimeout) or ctx is done.
func (c *Client) liveFollow(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Until the headers come the client's timeout bounds the attempt; then
	// each byte must come within liveReadTimeout.
	var timedOut bool
	var timedMu sync.Mutex
	watchdog := time.AfterFunc(c.cfg.timeout, func() {
		timedMu.Lock()
		timedOut = true
		timedMu.Unlock()
		cancel()
	})
	defer watchdog.Stop()

	target := c.cfg.apiRoot + c.secretsPath() + "/changes?" + url.Values{"environment": {c.cfg.environment}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return errors.New("cannot build the change stream's request: check the base URL")
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.token())
	req.Header.Set("Accept", ruleAcceptEventStream)
	req.Header.Set("User-Agent", userAgent)
	c.live.mu.Lock()
	if id := c.live.lastEventID; id != "" {
		req.Header.Set(ruleHeaderLastEventID, id)
	}
	c.live.mu.Unlock()
	resp, err := c.httpClient.Do(req)
	if err != nil {
		return c.networkError(ctx, "/changes", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		refused := &streamRefused{status: resp.StatusCode}
		if d, ok := parseRetryAfter(resp.Header.Get(ruleHeaderRetryAfter), c.now()); ok {
			refused.retryAfter = d
		}
		return refused
	}
	watchdog.Reset(liveReadTimeout)

	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 0, 64<<10), liveMaxLine)
	var dec sseDecoder
	for scanner.Scan() {
		watchdog.Reset(liveReadTimeout)
		event, data, ok := dec.line(scanner.Text())
		if dec.lastID != "" {
			c.live.mu.Lock()
			c.live.lastEventID = dec.lastID
			c.live.mu.Unlock()
		}
		if ok {
			if err := c.liveEvent(event, data); err != nil {
				return err
			}
		}
	}
	timedMu.Lock()
	idle := timedOut
	timedMu.Unlock()
	switch err := scanner.Err(); {
	case idle:
		return fmt.Errorf("no byte for %s", liveReadTimeout)
	case err != nil:
		return c.networkError(ctx, "/changes", err)
	}
	return nil
}

// liveEvent applies one event; an end returns errStreamEnded (after
// emptying the cache when it carries a refusal).
func (c *Client) liveEvent(event, data string) error {
	env := c.cfg.environment
	switch event {
	case "snapshot":
		var snap struct {
			Secrets map[string]json.RawMessage `json:"secrets"`
		}
		if json.Unmarshal([]byte(data), &snap) != nil || snap.Secrets == nil {
			return nil
		}
		versions := make(map[string]int, len(snap.Secrets))
		for name, raw := range snap.Secrets {
			var item struct {
				Version *int `json:"version"`
			}
			if json.Unmarshal(raw, &item) == nil && item.Version != nil {
				versions[name] = *item.Version
			}
		}
		dropped := c.cache.snapshot(env, versions)
		l := c.live
		l.mu.Lock()
		l.connections++
		l.attempt = 0
		back := l.outage
		l.outage, l.connected = false, true
		l.mu.Unlock()
		if back {
			c.log(slog.LevelInfo, "cvsm: the change stream is back", slog.Int("changed_meanwhile", dropped))
		}
	case "change":
		var ch struct {
			Name    *string `json:"name"`
			Version *int    `json:"version"`
			Deleted bool    `json:"deleted"`
		}
		if json.Unmarshal([]byte(data), &ch) != nil || ch.Name == nil {
			return nil
		}
		switch {
		case ch.Deleted:
			c.cache.change(env, *ch.Name, 0, true)
		case ch.Version != nil:
			c.cache.change(env, *ch.Name, *ch.Version, false)
		}
	case "end":
		var end struct {
			Reason string `json:"reason"`
			Status int    `json:"status"`
		}
		_ = json.Unmarshal([]byte(data), &end)
		switch end.Status {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
			c.cache.clear()
			c.keys.clear()
			return &streamRefused{status: end.Status}
		}
		return errStreamEnded
	}
	return nil
}
