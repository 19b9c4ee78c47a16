// Package cvsm is the Go client for cvsm, the team secrets manager.
//
// It reads the secrets of one team and one environment, caches them for a
// short time, and can copy them into the process environment:
//
//	client, err := cvsm.NewClient(cvsm.Options{Team: "acme"}) // token and URL from CVSM_* variables
//	if err != nil { log.Fatal(err) }
//	dsn, err := client.Get(ctx, "DATABASE_URL")
//	all, err := client.GetAll(ctx)
//	names, err := client.Inject(ctx) // keeps variables that are already set
//
// Every error the client returns is a *Error whose Kind says what went wrong;
// branch on it with errors.Is and the sentinel errors (ErrNotFound,
// ErrAuthentication, ...) or with errors.As, which also gives the answer's
// RequestID and, for a name in the wrong case, the Suggestion. A Client is
// safe for concurrent use, and neither it nor its Options ever print the
// token.
//
// Options follow Go's zero-value idiom: a zero field means "from the CVSM_*
// environment variable, else the default". In particular a zero CacheTTL is
// the default 30 seconds; NoCache turns caching off.
package cvsm

// Version is the version of this client library, and the only place it is
// written: the user agent (cvsm-go/<Version>) is built from it. (Go reads a
// module's version from its git tag, clients/go/v<Version>, not from a file.)
const Version = "0.1.0"

// userAgent is sent with every request.
const userAgent = "cvsm-go/" + Version
