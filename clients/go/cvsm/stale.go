// This file owns stale-if-error (rule R14): which failed refreshes may be
// answered with a kept value, and the warning logged when one is.

package cvsm

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// servesStale reports whether a refresh that failed with err may be
// answered with a kept value: a network error (after retries, an unreadable
// answer included, but not the caller cancelling ctx), a 5xx (after
// retries) or a 429. A 401 or 403 never does (it empties the cache), nor
// does any other error: the server answered, and its answer stands.
func servesStale(err *Error) bool {
	switch err.Kind {
	case KindNetwork:
		return !errors.Is(err, context.Canceled)
	case KindRateLimited:
		return true
	case KindAPI:
		return err.Status >= 500 && err.Status <= 599
	}
	return false
}

// warnStale logs, once per kept value, that it was served stale. subject
// names what was served (the secret, or the size of a GetAll result); the
// value itself is never logged.
func (c *Client) warnStale(ctx context.Context, msg string, subject slog.Attr, cause *Error, age time.Duration) {
	logger := c.logger
	if logger == nil {
		logger = slog.Default()
	}
	attrs := []slog.Attr{
		subject,
		slog.String("environment", c.cfg.environment),
		slog.String("error_kind", cause.Kind.String()),
		slog.Duration("age", age.Truncate(time.Millisecond)),
		slog.String("error", cause.Error()),
	}
	if cause.Status != 0 {
		attrs = append(attrs, slog.Int("status", cause.Status))
	}
	if cause.RequestID != "" {
		attrs = append(attrs, slog.String("request_id", cause.RequestID))
	}
	logger.LogAttrs(ctx, slog.LevelWarn, msg, attrs...)
}

// asClientError returns err as the *Error every failed request is.
func asClientError(err error) *Error {
	var ce *Error
	if errors.As(err, &ce) {
		return ce
	}
	return &Error{Kind: KindNetwork, Message: err.Error(), Err: err}
}
