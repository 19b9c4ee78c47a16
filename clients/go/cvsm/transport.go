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
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxErrorBody bounds how much of an error response is read for its message.
const maxErrorBody = 64 << 10

// backoffBase is the cap of the first retry's random sleep; it doubles for
// each later retry (0.1 s, 0.2 s, 0.4 s, ...).
const backoffBase = ruleRetryBackoffBaseMS * time.Millisecond

// endpoint names the request a GET is, because the same status means
// different things on different requests (rule R9: a 404 to the listing or
// export request says the base URL or the team is wrong, a 404 to the
// by-name read says the secret may be absent, which the listing decides).
type endpoint int

const (
	endpointByName endpoint = iota
	endpointList
	endpointExport
	endpointE2EKey // GET .../teams/{team}/e2e/key, the team key wrapped for the token
)

// answer is a JSON body the client decodes; valid reports whether the
// decoded body has the shape its request promises (rule R3).
type answer interface {
	valid() bool
}

// headedAnswer is an answer that also reads the headers of the 2xx
// response it was decoded from.
type headedAnswer interface {
	answer
	readHeader(http.Header)
}

// getJSON GETs path (below the base URL) with query, retrying network
// errors, unreadable answers and 502/503/504 up to maxRetries more times,
// and decodes the JSON body of the 2xx answer into out. It returns the
// X-Request-Id of the answer it used. An authentication or permission error
// empties the cache, kept values included, so a revoked token stops working
// at once.
func (c *Client) getJSON(ctx context.Context, ep endpoint, path string, query url.Values, out answer) (string, error) {
	target := c.cfg.apiRoot + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := c.sleep(ctx, backoff(attempt-1)); err != nil {
				return "", c.networkError(ctx, path, err)
			}
		}
		requestID, err, retryable := c.attempt(ctx, ep, path, target, out)
		if err == nil {
			return requestID, nil
		}
		if err.Kind == KindAuthentication || err.Kind == KindPermissionDenied {
			c.cache.clear()
			c.keys.clear()
		}
		if !retryable || attempt >= c.cfg.maxRetries || ctx.Err() != nil {
			return "", err
		}
	}
}

// attempt makes one request, bounded as a whole (connecting, headers and
// the whole body) by the timeout. It reports the answer's request id, the
// error, if any, and whether another attempt may succeed.
func (c *Client) attempt(ctx context.Context, ep endpoint, path, target string, out answer) (string, *Error, bool) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(actx, http.MethodGet, target, nil)
	if err != nil {
		return "", newError(KindConfiguration, "cannot build a request for GET %s: check the base URL", path), false
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.token())
	req.Header.Set("Accept", ruleAcceptJSON)
	req.Header.Set("User-Agent", userAgent)

	resp, err := c.httpClient.Do(req)
	if err != nil {
		return "", c.networkError(ctx, path, err), true
	}
	defer resp.Body.Close()
	requestID := resp.Header.Get(ruleHeaderRequestID)

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		reflect.ValueOf(out).Elem().SetZero() // drop what a failed attempt decoded
		readErr, problem := decodeAnswer(resp.Body, out)
		switch {
		case readErr != nil:
			return requestID, c.bodyReadError(ctx, actx, path, requestID, readErr), true
		case problem != "":
			return requestID, &Error{Kind: KindNetwork, RequestID: requestID,
				Message: fmt.Sprintf("GET %s: unreadable answer (status %d): %s", path, resp.StatusCode, problem)}, true
		}
		if h, ok := out.(headedAnswer); ok {
			h.readHeader(resp.Header)
		}
		return requestID, nil, false
	}

	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if readErr != nil {
		// The status came but not the whole answer: it was never given, so the
		// attempt failed like any other cut off (rule R1) and is retried, never
		// taken for an error with that status (a 404 would go on to the listing).
		return requestID, c.bodyReadError(ctx, actx, path, requestID, readErr), true
	}
	e := &Error{Status: resp.StatusCode, RequestID: requestID, Message: c.scrub(statusMessage(resp.StatusCode, body))}
	retryable := false
	switch code := resp.StatusCode; {
	case code == http.StatusNotFound && ep != endpointByName:
		e.Kind = KindConfiguration
		e.Message += fmt.Sprintf("; check the base URL (option BaseURL or %s; it includes /api/v1) and the team %q (option Team or %s)",
			EnvBaseURL, c.cfg.team, EnvTeam)
	case code == http.StatusBadRequest && ep == endpointE2EKey:
		e.Kind = KindConfiguration
		e.Message += "; the team is not end-to-end, yet the token has a key part: use the token without it"
	case code == http.StatusBadRequest:
		e.Kind = KindConfiguration
		e.Message += "; check the environment (option Environment or " + EnvEnvironment + ")"
	case code == http.StatusUnauthorized:
		e.Kind = KindAuthentication
	case code == http.StatusForbidden:
		e.Kind = KindPermissionDenied
	case code == http.StatusNotFound:
		e.Kind = KindNotFound
	case code == http.StatusTooManyRequests:
		e.Kind = KindRateLimited
		e.RetryAfter, e.HasRetryAfter = parseRetryAfter(resp.Header.Get(ruleHeaderRetryAfter), c.now())
	case code >= 300 && code < 400:
		e.Kind = KindAPI
		e.Message += "; cvsm does not follow redirects: check the base URL"
		if loc, err := resp.Location(); err == nil {
			e.Message += " (the server points to " + c.scrub(displayOrigin(loc)) + ")"
		}
	case slices.Contains(ruleRetryableStatuses, code):
		e.Kind = KindAPI
		retryable = true
	default:
		e.Kind = KindAPI
	}
	return requestID, e, retryable
}

// bodyReadError is the network error of an answer whose body could not be
// read to its end: a dropped connection, or the attempt's timeout (actx)
// passing while the body was still coming.
func (c *Client) bodyReadError(ctx, actx context.Context, path, requestID string, err error) *Error {
	if ctx.Err() == nil && actx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	e := c.networkError(ctx, path, err)
	e.RequestID = requestID
	return e
}

// displayOrigin is a redirect target reduced to its scheme, host and path:
// no credentials, no query.
func displayOrigin(u *url.URL) string {
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// decodeAnswer decodes a 2xx body into out and checks its shape. readErr is
// set when the body could not be read; problem, when it was read but is not
// the expected JSON. problem never quotes the body, which may hold secret
// values (the JSON decoder's own messages can).
func decodeAnswer(body io.Reader, out answer) (readErr error, problem string) {
	counted := &countingReader{r: body}
	dec := json.NewDecoder(counted)
	err := dec.Decode(out)
	if err == nil {
		// One JSON value and nothing after it but whitespace.
		if _, terr := dec.Token(); terr != io.EOF {
			err = errTrailingData
		}
	}
	if counted.err != nil {
		return counted.err, ""
	}
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil && out.valid():
		return nil, ""
	case err == nil, errors.As(err, &typ), errors.Is(err, errNullValue):
		return nil, "the JSON does not have the expected shape"
	default:
		return nil, fmt.Sprintf("%d bytes that are not JSON", counted.n)
	}
}

var errTrailingData = errors.New("data after the JSON value")

// countingReader counts the bytes read and remembers a read error, so a
// failed read (network) can be told from a body that is not JSON.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
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
	for _, secret := range []string{c.cfg.keyText(), c.cfg.token()} {
		if len(secret) >= 4 {
			msg = strings.ReplaceAll(msg, secret, "<redacted>")
		}
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
		if r := []rune(server); len(r) > ruleMaxServerMessage {
			server = string(r[:ruleMaxServerMessage]) + "..."
		}
		msg += ": " + server
	}
	return msg
}

// parseRetryAfter reads a 429's Retry-After header (rule R4): whole seconds
// ("0" is 0), or an HTTP date, which gives the seconds from now until then
// rounded up, 0 when it is past. ok is false when the header is absent or
// in neither form.
func parseRetryAfter(header string, now time.Time) (d time.Duration, ok bool) {
	header = strings.TrimSpace(header)
	if header == "" {
		return 0, false
	}
	if allDigits(header) {
		n, err := strconv.ParseInt(header, 10, 64)
		if err != nil || n > int64(math.MaxInt64/time.Second) {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	at, err := http.ParseTime(header)
	if err != nil {
		return 0, false
	}
	if d := at.Sub(now); d > 0 {
		return ((d + time.Second - 1) / time.Second) * time.Second, true
	}
	return 0, true
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
