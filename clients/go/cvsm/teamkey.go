// This file owns what a Client does for an end-to-end team when its token
// carries a key part: it fetches the team key wrapped for the token once
// (GET .../teams/{team}/e2e/key), unwraps it, keeps it for the client's life
// (until ClearCache, or a 401 or 403) and opens each sealed value with the
// environment and name the caller asked for. See e2e.go for the formats.

package cvsm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"sync"

	"github.com/cvsm/cvsm/clients/go/internal/e2ehook"
)

// The cvsm command keeps the team key between its runs through these (see
// internal/e2ehook); nothing else of this module can reach them.
func init() {
	e2ehook.Held = func(client any) (string, int, []byte, map[int]string, bool) {
		c, ok := client.(*Client)
		if !ok || c.keys == nil {
			return "", 0, nil, nil, false
		}
		held := c.keys.get()
		if held == nil {
			return "", 0, nil, nil, false
		}
		links := map[int]string{}
		if held.links != nil {
			for v, l := range held.links() {
				links[v] = l
			}
		}
		return held.teamID, held.version, append([]byte(nil), held.keys()[held.version]...), links, true
	}
	e2ehook.Hold = func(client any, teamID string, keyVersion int, key []byte, links map[int]string) bool {
		c, ok := client.(*Client)
		if !ok || c.keys == nil || c.cfg.pin == nil || len(key) != e2eKeySize || teamID == "" || keyVersion < 1 {
			return false
		}
		// A key kept on disk is trusted no more than one the server
		// serves: it must chain back to the token's pin (issue 37).
		key = append([]byte(nil), key...)
		kept := make(map[int]string, len(links))
		for v, l := range links {
			kept[v] = l
		}
		keys, err := verifyChain(key, teamID, keyVersion, kept, c.cfg.pin())
		if err != nil {
			return false
		}
		c.keys.set(&heldKey{teamID: teamID, version: keyVersion,
			keys: func() map[int][]byte { return keys }, links: func() map[int]string { return kept }})
		return true
	}
}

// heldKey is the unwrapped team key of the current key version (version)
// and every older key reached through verified links, by key version, with
// the team id they were wrapped for. The keys sit in a closure, out of
// reach of printers.
type heldKey struct {
	teamID  string
	version int
	keys    func() map[int][]byte
	links   func() map[int]string // the links of the key answer, which verified it; nil: none
}

// keyring holds the team key of an end-to-end team. fetchMu makes
// concurrent reads that need the key wait for one fetch instead of making
// one each. gen counts clears: a fetch that a clear overtook (ClearCache, or
// a 401 or 403 meanwhile) keeps nothing.
type keyring struct {
	fetchMu sync.Mutex
	mu      sync.Mutex
	held    *heldKey
	gen     uint64
}

func (k *keyring) get() *heldKey {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held
}

func (k *keyring) set(h *heldKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held = h
}

// generation is the number of clears so far, for setIfSince.
func (k *keyring) generation() uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.gen
}

// setIfSince holds h unless the keyring was cleared since generation gen.
func (k *keyring) setIfSince(gen uint64, h *heldKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.gen == gen {
		k.held = h
	}
}

// clear forgets the team key, so the next read fetches it again, and
// makes a fetch in flight keep nothing.
func (k *keyring) clear() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held = nil
	k.gen++
}

// keyAnswer is the answer of GET .../e2e/key: the team key wrapped for the
// caller.
type keyAnswer struct {
	TeamID     *string `json:"team_id"`
	KeyVersion *int    `json:"key_version"`
	WrappedKey *string `json:"wrapped_key"`
	// Links are read with the key (parseLinks): a malformed one is a
	// KindDecryption error, not an unreadable answer.
	Links json.RawMessage `json:"links"`
}

func (a *keyAnswer) valid() bool {
	return a.TeamID != nil && *a.TeamID != "" && a.KeyVersion != nil && *a.KeyVersion > 0 && a.WrappedKey != nil
}

// endToEnd reports whether the client's token carries a key part.
func (c *Client) endToEnd() bool { return c.cfg.key != nil }

// readValue is the value of a by-name answer for name in env: the answer's
// value for a plain token; for a token with a key part, the value opened
// from its envelope. A by-name answer marked "e2e" (in its secret, where
// the server puts it, or beside the value) read with a token without a key
// part is a KindConfiguration error.
func (c *Client) readValue(ctx context.Context, env, name string, one *valueAnswer, requestID string) (string, error) {
	if !c.endToEnd() {
		if one.Secret.E2E || one.E2E {
			return "", c.keylessError(requestID)
		}
		return *one.Value, nil
	}
	opened, err := c.openAll(ctx, env, map[string]string{name: *one.Value}, requestID)
	if err != nil {
		return "", err
	}
	return opened[name], nil
}

// keylessError is the KindConfiguration error of a token without a key
// part that reads an end-to-end team: a by-name answer marked "e2e", or an
// export answer carrying Cvsm-E2E: 1.
func (c *Client) keylessError(requestID string) *Error {
	e := newError(KindConfiguration, ruleMessageKeylessE2E+" (cvsm_….<key>, as it was shown when it was created) to open the values of team %q", c.cfg.team)
	e.RequestID = requestID
	return e
}

// openAll opens every sealed value of sealed (name -> envelope) read from
// env, with the team key of the envelopes' key version: the key held, or
// else the one fetched now (once per call). A value that does not open is a
// KindDecryption error naming its secret, with the request id of the
// answer that served it.
func (c *Client) openAll(ctx context.Context, env string, sealed map[string]string, requestID string) (map[string]string, error) {
	names := make([]string, 0, len(sealed))
	for name := range sealed {
		names = append(names, name)
	}
	sort.Strings(names) // the first failing name is the same every time
	envelopes := make(map[string]envelope, len(sealed))
	for _, name := range names {
		e, err := parseEnvelope(sealed[name])
		if err != nil {
			return nil, decryptionError(name, env, requestID, err)
		}
		envelopes[name] = e
	}
	// fits reports whether a key opens every envelope's key version.
	fits := func(key *heldKey) bool {
		for _, e := range envelopes {
			if key == nil {
				return false
			}
			if _, ok := key.keys()[e.keyVersion]; !ok {
				return false
			}
		}
		return true
	}
	key := c.keys.get()
	if !fits(key) {
		var err error
		if key, err = c.fetchTeamKey(ctx, fits); err != nil {
			return nil, err
		}
	}
	opened := make(map[string]string, len(sealed))
	for _, name := range names {
		e := envelopes[name]
		teamKey, ok := key.keys()[e.keyVersion]
		if !ok {
			return nil, decryptionError(name, env, requestID,
				fmt.Errorf("it is sealed under key version %d, which the team key this token holds (version %d) does not reach through verified links", e.keyVersion, key.version))
		}
		value, err := openEnvelope(e, teamKey, key.teamID, env, name)
		if err != nil {
			return nil, decryptionError(name, env, requestID, err)
		}
		opened[name] = value
	}
	return opened, nil
}

// fetchTeamKey asks the server for the team key wrapped for this token,
// unwraps it with the token's key part and holds it. fits says whether a
// key opens the envelopes the caller read: a key that another goroutine
// fetched while this one waited is used without a request only when it
// fits, since that fetch may have begun before a re-key that the caller's
// envelopes already show. The key fetched is held unless the keyring was
// cleared meanwhile (ClearCache, a 401 or a 403); the caller opens its
// envelopes with it either way.
func (c *Client) fetchTeamKey(ctx context.Context, fits func(*heldKey) bool) (*heldKey, error) {
	c.keys.fetchMu.Lock()
	defer c.keys.fetchMu.Unlock()
	if held := c.keys.get(); held != nil && fits(held) {
		return held, nil
	}
	gen := c.keys.generation()
	var answer keyAnswer
	path := "/teams/" + url.PathEscape(c.cfg.team) + "/e2e/key"
	requestID, err := c.getJSON(ctx, endpointE2EKey, path, nil, &answer)
	if err != nil {
		return nil, err
	}
	links, err := parseLinks(answer.Links)
	if err != nil {
		e := newError(KindDecryption, "the team key the server sent for this token cannot be used: %v (nothing was opened)", err)
		e.RequestID = requestID
		return nil, e
	}
	key, err := unwrapTeamKey(*answer.WrappedKey, *answer.TeamID, *answer.KeyVersion, c.cfg.key())
	if err != nil {
		e := newError(KindDecryption, "the team key the server holds for this token does not open with the token's key part: %v (was the token copied from another team, or re-created?)", err)
		e.RequestID = requestID
		return nil, e
	}
	keys, err := verifyChain(key, *answer.TeamID, *answer.KeyVersion, links, c.cfg.pin())
	if err != nil {
		e := newError(KindDecryption, "the team key the server holds for this token does not chain back to the key pinned in the token: %v (nothing was opened)", err)
		e.RequestID = requestID
		return nil, e
	}
	held := &heldKey{teamID: *answer.TeamID, version: *answer.KeyVersion,
		keys: func() map[int][]byte { return keys }, links: func() map[int]string { return links }}
	c.keys.setIfSince(gen, held)
	return held, nil
}

// decryptionError is the KindDecryption error of secret name in env. why
// comes from this package's own checks and never holds a value or a key.
func decryptionError(name, env, requestID string, why error) *Error {
	e := newError(KindDecryption, "the value of secret %s in %s cannot be opened: %v", quoteName(name), env, why)
	e.RequestID = requestID
	return e
}
