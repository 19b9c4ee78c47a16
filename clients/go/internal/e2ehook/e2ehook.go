// Package e2ehook lets the cvsm command carry the team key of an end-to-end
// team from one of its runs to the next (for the shell client, which starts
// one run per call), without a public API for it in package cvsm: package
// cvsm sets these functions when it is initialised, and only programs of
// this module can import an internal package.
package e2ehook

// Held returns the team key a *cvsm.Client holds (its team id, key version
// and 32 bytes); ok is false when it holds none.
var Held func(client any) (teamID string, keyVersion int, key []byte, ok bool)

// Hold gives a *cvsm.Client a team key to hold, as if it had fetched it.
var Hold func(client any, teamID string, keyVersion int, key []byte)
