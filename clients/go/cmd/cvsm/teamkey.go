package main

// --team-key-file keeps the team key of an end-to-end team between runs, for
// the shell client, which runs cvsm once per call: the key is read from the
// file before the first request and written there when this run fetched
// one, so a later run makes one request instead of two; it is removed when
// the run ends holding no key (a 401 or 403 drops it). The shell client
// names a file in its private cache directory (a per-user tmpfs, mode 0700),
// where it keeps the values themselves, and removes it with them. A key read
// from the file is trusted no more than one the server serves (issue 37):
// it must chain back to the token's pinned key version through the links
// the file keeps beside it, else it is not used and the run fetches the key.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"github.com/cvsm/cvsm/clients/go/cvsm"
	"github.com/cvsm/cvsm/clients/go/internal/e2ehook"
)

// keyFile is the file's content.
type keyFile struct {
	TeamID     string `json:"team_id"`
	KeyVersion int    `json:"key_version"`
	TeamKey    string `json:"team_key"` // base64url, unpadded
	// Links are the key answer's links (key version -> link) that verified
	// it, down to the token's pin; not secret (each is sealed under a key).
	Links map[int]string `json:"links,omitempty"`
}

// loadTeamKey gives the client the key the file holds, if it holds one. A
// file that is missing or unreadable is no key: the client fetches it.
func (c *cli) loadTeamKey() {
	path := c.settings.teamKeyFile.value
	if path == "" || c.sdk == nil {
		return
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var f keyFile
	if json.Unmarshal(raw, &f) != nil {
		return
	}
	key, err := base64.RawURLEncoding.DecodeString(f.TeamKey)
	if err != nil {
		return
	}
	_ = e2ehook.Hold(c.sdk, f.TeamID, f.KeyVersion, key, f.Links) // a key that does not verify is no key
}

// saveTeamKey writes the key the client holds to the file when it is not
// what the file holds already: created with mode 0600 next to it, then
// renamed over it, so a reader never sees half a file. A failure to write
// costs only a request next time, so it is not reported. When the run ended
// with an authentication or permission error (runErr), or holds no key (a
// 401 or 403 drops it, as does a file that held no usable key), the file is
// removed: a refused token's team key does not stay on disk.
func (c *cli) saveTeamKey(runErr error) {
	path := c.settings.teamKeyFile.value
	if path == "" || c.sdk == nil {
		return
	}
	teamID, version, key, links, ok := e2ehook.Held(c.sdk)
	if !ok || errors.Is(runErr, cvsm.ErrAuthentication) || errors.Is(runErr, cvsm.ErrPermissionDenied) {
		os.Remove(path)
		return
	}
	content, err := json.Marshal(keyFile{TeamID: teamID, KeyVersion: version, TeamKey: base64.RawURLEncoding.EncodeToString(key), Links: links})
	if err != nil {
		return
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, content) {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".cvsm-key-*") // mode 0600
	if err != nil {
		return
	}
	_, werr := tmp.Write(content)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), path) != nil {
		os.Remove(tmp.Name())
	}
}
