// This file owns the error model: the Kind of an error, the *Error type every
// call returns, and the sentinel errors callers match with errors.Is.

package cvsm

import (
	"errors"
	"fmt"
	"time"
)

// Kind tells what went wrong. Its string form is the canonical kind name
// shared by every cvsm SDK ("not_found", "rate_limited", ...).
type Kind string

// The kinds of error a Client returns.
const (
	// KindConfiguration: a missing token, base URL or team, an invalid
	// option or CVSM_CACHE_TTL, or a team slug that matches none of the
	// caller's teams.
	KindConfiguration Kind = "configuration"
	// KindAuthentication: HTTP 401, a bad, expired or revoked token.
	KindAuthentication Kind = "authentication"
	// KindPermissionDenied: HTTP 403.
	KindPermissionDenied Kind = "permission_denied"
	// KindNotFound: the secret is absent in the environment, or HTTP 404.
	KindNotFound Kind = "not_found"
	// KindRateLimited: HTTP 429; Error.RetryAfter says how long to wait.
	KindRateLimited Kind = "rate_limited"
	// KindAPI: any other non-2xx status, including 502/503/504 after retries.
	KindAPI Kind = "api"
	// KindNetwork: the connection failed or dropped, the request timed out,
	// or the response could not be read, after retries.
	KindNetwork Kind = "network"
)

// String returns the canonical name of the kind.
func (k Kind) String() string { return string(k) }

// Sentinel errors, one per Kind. Every *Error matches the sentinel of its
// kind with errors.Is:
//
//	if errors.Is(err, cvsm.ErrNotFound) { ... }
var (
	ErrConfiguration    = errors.New("cvsm: configuration error")
	ErrAuthentication   = errors.New("cvsm: authentication error")
	ErrPermissionDenied = errors.New("cvsm: permission denied")
	ErrNotFound         = errors.New("cvsm: secret not found")
	ErrRateLimited      = errors.New("cvsm: rate limited")
	ErrAPI              = errors.New("cvsm: API error")
	ErrNetwork          = errors.New("cvsm: network error")
)

var sentinels = map[Kind]error{
	KindConfiguration:    ErrConfiguration,
	KindAuthentication:   ErrAuthentication,
	KindPermissionDenied: ErrPermissionDenied,
	KindNotFound:         ErrNotFound,
	KindRateLimited:      ErrRateLimited,
	KindAPI:              ErrAPI,
	KindNetwork:          ErrNetwork,
}

// Error is the one error type the client returns. Use errors.As to read its
// fields:
//
//	var cerr *cvsm.Error
//	if errors.As(err, &cerr) && cerr.Kind == cvsm.KindRateLimited {
//		time.Sleep(cerr.RetryAfter)
//	}
//
// Its message never contains the token or a secret value.
type Error struct {
	// Kind says what went wrong.
	Kind Kind
	// Status is the HTTP status of the response, or 0 when there was none
	// (configuration and network errors, a name absent from the listing).
	Status int
	// RetryAfter is the wait the server asked for with Retry-After on a
	// 429, in whole seconds; zero when it gave none.
	RetryAfter time.Duration
	// Message describes the error; for HTTP errors it is the status
	// followed by the server's own message.
	Message string
	// Err is the underlying cause, when there is one (for example a
	// *url.Error or context.DeadlineExceeded for a network error).
	Err error
}

// Error returns "cvsm: " followed by the message.
func (e *Error) Error() string {
	return "cvsm: " + e.Message
}

// Unwrap returns the underlying cause, so errors.Is(err,
// context.DeadlineExceeded) works on a timed-out request.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel error of e's kind.
func (e *Error) Is(target error) bool {
	s, ok := sentinels[e.Kind]
	return ok && s == target
}

func newError(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}
