// This file owns the wire: building GET requests with the cvsm headers,
// per-attempt timeouts, retries with full-jitter backoff, and turning HTTP
// statuses and transport failures into *Error values.

package cvsm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// maxErrorBody bounds how much of an error response is read for its message.
const maxErrorBody = 64 << 10

// backoffBase is the cap of the first retry's random sleep; it doubles for
// each later retry (0.1 s, 0.2 s, 0.4 s, ...).
const backoffBase = 100 * time.Millisecond

// getJSON GETs path (below the base URL) with query, retrying network
// errors and 502/503/504 up to maxRetries more times, and decodes the JSON
// body of the 2xx answer into out. An authentication error empties the cache.
func (c *Client) getJSON(ctx context.Context, path string, query url.Values, out any) error {
	target := c.cfg.baseURL + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := c.sleep(ctx, backoff(attempt-1)); err != nil {
				return c.networkError(ctx, path, err)
			}
		}
		err, retryable := c.attempt(ctx, path, target, out)
		if err == nil {
			return nil
		}
		if err.Kind == KindAuthentication {
			c.cache.clear()
		}
		if !retryable || attempt >= c.cfg.maxRetries || ctx.Err() != nil {
			return err
		}
	}
}

// attempt makes one request. It reports the error, if any, and whether
// another attempt may succeed.
func (c *Client) attempt(ctx context.Context, path, target string, out any) (*Error, bool) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(actx, http.MethodGet, target, nil)
	if err != nil {
		return newError(KindConfiguration, "cannot build a request for GET %s: check the base URL", path), false
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.token())
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)

	resp, err := c.httpClient.Do(req)
	if err != nil {
		return c.networkError(ctx, path, err), true
	}
	defer resp.Body.Close()

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return c.networkError(ctx, path, err), true
		}
		reflect.ValueOf(out).Elem().SetZero() // drop what a failed attempt decoded
		if err := json.Unmarshal(body, out); err != nil {
			// The decoder's message may quote the body, which can hold a
			// secret value: keep only the type of the failure.
			return &Error{
				Kind:    KindNetwork,
				Message: fmt.Sprintf("GET %s: unreadable response (status %d, %d bytes that are not the expected JSON)", path, resp.StatusCode, len(body)),
			}, true
		}
		return nil, false
	}

	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &Error{Status: resp.StatusCode, Message: c.scrub(statusMessage(resp.StatusCode, body))}
	retryable := false
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		e.Kind = KindAuthentication
	case http.StatusForbidden:
		e.Kind = KindPermissionDenied
	case http.StatusNotFound:
		e.Kind = KindNotFound
	case http.StatusTooManyRequests:
		e.Kind = KindRateLimited
		e.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), c.now())
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		e.Kind = KindAPI
		retryable = true
	default:
		e.Kind = KindAPI
	}
	return e, retryable
}

// networkError describes a transport failure without the URL (which may
// carry credentials) and keeps the cause for errors.Is/As.
func (c *Client) networkError(ctx context.Context, path string, err error) *Error {
	var reason string
	switch {
	case ctx.Err() != nil:
		reason = "request abandoned: " + ctx.Err().Error()
		err = ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		reason = "timed out after " + c.cfg.timeout.String()
	default:
		cause := err
		var uerr *url.Error
		if errors.As(err, &uerr) {
			cause = uerr.Err
		}
		reason = cause.Error()
	}
	return &Error{Kind: KindNetwork, Message: c.scrub(fmt.Sprintf("GET %s: %s", path, reason)), Err: err}
}

// scrub removes the token from a message built from text the client does
// not control (server bodies, transport errors).
func (c *Client) scrub(msg string) string {
	if token := c.cfg.token(); len(token) >= 4 {
		msg = strings.ReplaceAll(msg, token, "<redacted>")
	}
	return msg
}

// statusMessage is "<status> <reason>", then the server's {"error": "..."}
// message when the body has one.
func statusMessage(status int, body []byte) string {
	msg := strconv.Itoa(status)
	if text := http.StatusText(status); text != "" {
		msg += " " + text
	}
	var payload struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &payload) == nil && payload.Error != "" {
		server := payload.Error
		if len(server) > 500 {
			server = server[:500] + "..."
		}
		msg += ": " + server
	}
	return msg
}

// parseRetryAfter reads a Retry-After header given in seconds or as an
// HTTP date; the result is whole seconds, zero when absent or invalid.
func parseRetryAfter(header string, now time.Time) time.Duration {
	header = strings.TrimSpace(header)
	if header == "" {
		return 0
	}
	if n, err := strconv.ParseInt(header, 10, 64); err == nil {
		if n < 0 || n > int64(1<<31) {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if at, err := http.ParseTime(header); err == nil {
		if d := at.Sub(now); d > 0 {
			return ((d + time.Second - 1) / time.Second) * time.Second
		}
	}
	return 0
}

// backoff is the random sleep before retry number retry (0 for the first):
// uniform between 0 and 0.1 s * 2^retry.
func backoff(retry int) time.Duration {
	if retry > 10 {
		retry = 10
	}
	return time.Duration(rand.Int64N(int64(backoffBase<<retry) + 1))
}

// sleepContext waits for d or until ctx is done.
func sleepContext(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
