// Package cvsm is the Go client for cvsm, the team secrets manager.
//
// Import it as github.com/cvsm/cvsm/clients/go/cvsm (the package of the module
// github.com/cvsm/cvsm/clients/go, whose folder also holds the cvsm command).
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
// Get is one request (GET .../secrets/by-name/{name}); only after its 404
// does the client ask the listing, to tell a missing secret from a wrong
// team or base URL.
//
// With Options.StaleIfError, a cached value is kept that much longer and
// returned when a refresh fails with a network error, a 5xx or a 429 (never
// after a 401 or 403, which empty the cache). GetWithInfo and
// GetAllWithInfo mark such a value with Info.Stale, and the first time a
// value is served stale a warning naming the secret (never the value) goes
// to Options.Logger, or slog.Default().
//
// For an end-to-end team, whose values the server holds only sealed, the
// token carries its private key after a dot (cvsm_<64 hex>.<key>): the
// client sends only the part before the dot, fetches the team key wrapped
// for the token once, and opens each value with the environment and name
// asked for. A value that does not open is an *Error of KindDecryption
// (ErrDecryption).
//
// Options follow Go's zero-value idiom: a zero field means "from the CVSM_*
// environment variable, else the default". In particular a zero CacheTTL is
// the default 30 seconds; NoCache turns caching off (and NoStaleIfError
// turns stale-if-error off, whatever CVSM_STALE_IF_ERROR says).
package cvsm

// Version is the version of this client library, and the only place it is
// written: the user agent (cvsm-go/<Version>) is built from it. (Go reads a
// module's version from its git tag, clients/go/v<Version>, not from a file.)
const Version = "0.1.0"

// userAgent is sent with every request.
const userAgent = ruleUserAgentPrefix + "go/" + Version
