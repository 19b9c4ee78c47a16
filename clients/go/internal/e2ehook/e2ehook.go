// Package e2ehook lets the cvsm command carry the team key of an end-to-end
// team from one of its runs to the next (for the shell client, which starts
// one run per call), without a public API for it in package cvsm: package
// cvsm sets these functions when it is initialised, and only programs of
// this module can import an internal package.
package e2ehook

// Held returns the team key a *cvsm.Client holds (its team id, key version
// and 32 bytes) and the links (key version -> link) it was verified
// through, down to the token's pinned version; ok is false when it holds
// none.
var Held func(client any) (teamID string, keyVersion int, key []byte, links map[int]string, ok bool)

// Hold gives a *cvsm.Client a team key to hold, as if it had fetched it,
// only after verifying it as a fetched one is: through links down to the
// token's pinned key version, whose commitment it must match (issue 37). It
// reports whether the key was taken; a key that does not verify is not.
var Hold func(client any, teamID string, keyVersion int, key []byte, links map[int]string) bool
