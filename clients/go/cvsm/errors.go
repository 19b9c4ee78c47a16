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
	// KindConfiguration is a missing token, base URL or team, an invalid
	// option or CVSM_* variable, a server answer saying that the base URL,
	// team (id or slug) or environment is wrong (a 404 to the listing or
	// export request, a 400 to any request; Status is then that 404 or
	// 400), or a secret Inject cannot put in the process environment.
	KindConfiguration Kind = "configuration"
	// KindAuthentication is HTTP 401: a bad, expired or revoked token.
	KindAuthentication Kind = "authentication"
	// KindPermissionDenied is HTTP 403.
	KindPermissionDenied Kind = "permission_denied"
	// KindNotFound is a secret absent in the environment (the by-name
	// read answered 404 and the listing confirmed it; Status 404), or the
	// name is not a valid secret name (no request; Status 0).
	KindNotFound Kind = "not_found"
	// KindRateLimited is HTTP 429; Error.RetryAfter says how long to wait.
	KindRateLimited Kind = "rate_limited"
	// KindAPI is any other non-2xx status, including a redirect (never
	// followed) and 502/503/504 after retries.
	KindAPI Kind = "api"
	// KindNetwork is a connection that failed or dropped, a request that
	// timed out, or an answer that could not be read or did not have the
	// promised shape, after retries.
	KindNetwork Kind = "network"
	// KindDecryption is a value of an end-to-end team that does not open
	// with the team key: its envelope was changed, is malformed, was
	// sealed for another environment or name, or names a key version the
	// server's wrap for this token does not have; or that wrap does not
	// open with the token's key part. It is never retried and has no
	// Status; the message names the secret, never a value or a key.
	KindDecryption Kind = "decryption"
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
	ErrDecryption       = errors.New("cvsm: decryption error")
)

var sentinels = map[Kind]error{
	KindConfiguration:    ErrConfiguration,
	KindAuthentication:   ErrAuthentication,
	KindPermissionDenied: ErrPermissionDenied,
	KindNotFound:         ErrNotFound,
	KindRateLimited:      ErrRateLimited,
	KindAPI:              ErrAPI,
	KindNetwork:          ErrNetwork,
	KindDecryption:       ErrDecryption,
}

// Error is the one error type the client returns. Use errors.As to read its
// fields:
//
//	var cerr *cvsm.Error
//	if errors.As(err, &cerr) && cerr.Kind == cvsm.KindRateLimited && cerr.HasRetryAfter {
//		time.Sleep(cerr.RetryAfter)
//	}
//
// Its message never contains the token or a secret value.
type Error struct {
	// Kind says what went wrong.
	Kind Kind
	// Status is the HTTP status of the answer the error came from, or 0
	// when there was none (network errors, most configuration errors, an
	// invalid name).
	Status int
	// RetryAfter is the wait a 429 asked for with its Retry-After header,
	// in whole seconds: the header's number, or the time until its HTTP
	// date rounded up (0 when the date is past). It is 0 both when the
	// server said 0 and when it gave no usable header; HasRetryAfter tells
	// the two apart.
	RetryAfter time.Duration
	// HasRetryAfter reports whether the 429 carried a Retry-After header
	// in one of the two forms HTTP allows (whole seconds or an HTTP date).
	HasRetryAfter bool
	// RequestID is the X-Request-Id header of the answer the error came
	// from (for an absent secret, the by-name read's 404); "" when
	// there was no answer or the answer had none. Quote it when you
	// report a problem to the server's operators.
	RequestID string
	// Suggestion is, on a KindNotFound error, the name that differs from
	// the requested one only in case ("API_KEY" for "api_key"); "" when
	// there is none.
	Suggestion string
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
