// This file tests a Client reading an end-to-end team with a token that
// carries its key part, on the shared stub (conformance/stub.py) holding an
// end-to-end team built from the shared vectors.

package cvsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// e2eSecretAPI is the id of the API_KEY the tests seal in production.
const e2eSecretAPI = "c2a7f9e1-5b3d-4e8a-9f60-1d2c3b4a5e6f"

// e2eStub is the shared stub reset to the vectors' end-to-end team: by-name
// reads with "e2e": true and the envelope as value, the JSON export of
// envelopes, and GET .../e2e/key with the wrap for the vectors' token (key
// version 2, its link back to the token's pinned version 1).
type e2eStub struct {
	*stubServer
	v    e2eVectors
	seen int // the requests already returned by take
}

func newE2EStub(t *testing.T) *e2eStub {
	t.Helper()
	v := loadVectors(t)
	s := &e2eStub{stubServer: sharedStub(t), v: v}
	var wrapped string
	for _, r := range v.Recipients {
		if r.What == "token" {
			wrapped = r.WrappedKey
		}
	}
	apiKey := sealForTest(t, apiKeyVal, mustB64u(t, v.TeamKey), v.KeyVersion, v.TeamID, e2eSecretAPI, 2, "production", "API_KEY")
	s.post("/_stub/reset", map[string]any{
		"token":   v.Token.APIToken,
		"teams":   []map[string]any{{"id": v.TeamID}},
		"secrets": s.secrets(apiKey),
		"e2e":     s.keyAnswer(v.KeyVersion, wrapped, map[string]any{"key_version": 2, "link": v.Chain.Links[0].Link}),
	})
	return s
}

// secrets are the team's envelopes: the vectors' own DATABASE_URL
// (production) and API_KEY (staging), and apiKey as API_KEY in production.
func (s *e2eStub) secrets(apiKey string) []map[string]any {
	secret := func(name, environment, envelope string) map[string]any {
		id := strings.Split(envelope, ".")[2] // cvsm-e2e1.<key version>.<secret id>...
		return map[string]any{"id": id + "-" + environment, "name": name, "environment": environment, "value": envelope}
	}
	return []map[string]any{
		secret("DATABASE_URL", "production", s.v.Values[0].Envelope),
		secret("API_KEY", "production", apiKey),
		secret("API_KEY", "staging", s.v.Values[2].Envelope),
	}
}

func (s *e2eStub) keyAnswer(version int, wrapped string, links ...map[string]any) map[string]any {
	return map[string]any{"team_id": s.v.TeamID, "key_version": version, "wrapped_key": wrapped, "links": links}
}

// take returns the paths (below the team) requested since the last take.
func (s *e2eStub) take() []string {
	reqs := s.reqs()
	var out []string
	for _, r := range reqs[s.seen:] {
		out = append(out, strings.TrimPrefix(r.Path, "/api/v1/teams/"+s.v.TeamID))
	}
	s.seen = len(reqs)
	return out
}

func (s *e2eStub) client(t *testing.T, opts Options) testClient {
	t.Helper()
	opts.Token, opts.BaseURL, opts.Team = s.v.Token.Token, s.baseURL(), s.v.TeamID
	return newTestClient(t, nil, opts) // nil: the options name this stub
}

// holdKeyAnswer holds the next answer of GET .../e2e/key, made when the
// request arrives, until s.release("key").
func (s *e2eStub) holdKeyAnswer() {
	s.inject(stubFault{URL: "/api/v1/teams/" + s.v.TeamID + "/e2e/key", Hold: "key"})
}

func wantPaths(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("requests %q, want %q", got, want)
	}
}

func TestE2EKeyPartNeverPrintsOrLogs(t *testing.T) {
	s := newE2EStub(t)
	c := s.client(t, Options{})
	if _, err := c.GetAll(ctx); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("client", "client", c.Client, "options", Options{Token: s.v.Token.Token})
	opts, _ := json.Marshal(Options{Token: s.v.Token.Token})
	printed := fmt.Sprintf("%v %+v %#v %s %v %+v %#v", c.Client, c.Client, c.Client, *c.Client,
		Options{Token: s.v.Token.Token}, Options{Token: s.v.Token.Token}, Options{Token: s.v.Token.Token}) + logged.String() + string(opts)
	for _, secret := range []string{s.v.Token.PrivateKey, s.v.Token.APIToken, s.v.TeamKey, s.v.Values[0].Value} {
		if strings.Contains(printed, secret) {
			t.Errorf("printed or logged: %s", printed)
		}
	}
}

func TestE2EConcurrentFirstReadsFetchTheKeyOnce(t *testing.T) {
	s := newE2EStub(t)
	c := s.client(t, Options{CacheTTL: NoCache})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := c.Get(ctx, "DATABASE_URL"); err != nil || v != s.v.Values[0].Value {
				errs <- fmt.Errorf("Get = %d bytes, %v", len(v), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	keys := 0
	for _, p := range s.take() {
		if p == "/e2e/key" {
			keys++
		}
	}
	if keys != 1 {
		t.Errorf("%d key requests for 16 concurrent first reads, want 1", keys)
	}
}

// waitFor polls cond (every millisecond, for at most 10 s) until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// requested reports whether the stub has received a request for path
// (below the team) since the last take.
func (s *e2eStub) requested(path string) func() bool {
	return func() bool {
		for _, r := range s.reqs()[s.seen:] {
			if strings.TrimPrefix(r.Path, "/api/v1/teams/"+s.v.TeamID) == path {
				return true
			}
		}
		return false
	}
}

// blockedInFetchTeamKey reports whether a goroutine waits for the key
// fetch of another (on the keyring's fetchMu, in fetchTeamKey).
func blockedInFetchTeamKey() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "[sync.Mutex.Lock") && strings.Contains(g, ").fetchTeamKey(") {
			return true
		}
	}
	return false
}

func TestE2EAKeyFetchThatAClearOvertookKeepsNothing(t *testing.T) {
	for _, clear := range []string{"ClearCache", "a 403 to another read"} {
		t.Run(clear, func(t *testing.T) {
			s := newE2EStub(t)
			c := s.client(t, Options{CacheTTL: NoCache})
			s.holdKeyAnswer()
			s.inject(stubFault{URL: "/api/v1/teams/" + s.v.TeamID + "/secrets/by-name/FORBIDDEN", Count: 100, Status: 403})
			done := make(chan error, 1)
			go func() {
				v, err := c.Get(ctx, "DATABASE_URL")
				if err == nil && v != s.v.Values[0].Value {
					err = errors.New("another value")
				}
				done <- err
			}()
			waitFor(t, "the key is asked", s.requested("/e2e/key"))
			if clear == "ClearCache" {
				c.ClearCache()
			} else if _, err := c.Get(ctx, "FORBIDDEN"); !errors.Is(err, ErrPermissionDenied) {
				t.Fatalf("Get(FORBIDDEN) = %v", err)
			}
			s.release("key")
			// The read in flight opens its value with the key it fetched...
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			s.take()
			// ...but the key is not kept: the next read fetches it again.
			if _, err := c.Get(ctx, "DATABASE_URL"); err != nil {
				t.Fatal(err)
			}
			wantPaths(t, s.take(), "/secrets/by-name/DATABASE_URL", "/e2e/key")
		})
	}
}

func TestE2EAReadOfANewKeyVersionRefetchesAfterAFetchBegunBeforeTheReKey(t *testing.T) {
	s := newE2EStub(t)
	c := s.client(t, Options{CacheTTL: NoCache})
	s.holdKeyAnswer()
	// A first read fetches the key; its answer, version 2, is made before...
	first := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, "DATABASE_URL")
		first <- err
	}()
	waitFor(t, "the key is asked", s.requested("/e2e/key"))
	// ...the team is re-keyed (version 3), and a second read gets a value
	// sealed under version 3 while the first fetch is still in flight.
	newKey := bytes.Repeat([]byte{9}, 32)
	s.post("/_stub/state", map[string]any{
		"e2e": s.keyAnswer(3, wrapForTest(t, newKey, s.v.TeamID, 3, mustB64u(t, s.v.Token.PrivateKey)),
			map[string]any{"key_version": 2, "link": s.v.Chain.Links[0].Link},
			map[string]any{"key_version": 3, "link": linkForTest(t, newKey, mustB64u(t, s.v.TeamKey), s.v.TeamID, 3)}),
		"secrets": s.secrets(sealForTest(t, "rotated", newKey, 3, s.v.TeamID, e2eSecretAPI, 3, "production", "API_KEY")),
	})
	second := make(chan error, 1)
	go func() {
		v, err := c.Get(ctx, "API_KEY")
		if err == nil && v != "rotated" {
			err = errors.New("another value")
		}
		second <- err
	}()
	waitFor(t, "the second read waits for the first one's key fetch", blockedInFetchTeamKey)
	s.release("key")
	if err := <-first; err != nil {
		t.Fatalf("first read: %v", err)
	}
	// The version 2 key the first read fetched does not open the second
	// read's value: the second read fetches the key once more.
	if err := <-second; err != nil {
		t.Fatalf("second read: %v", err)
	}
	keys := 0
	for _, p := range s.take() {
		if p == "/e2e/key" {
			keys++
		}
	}
	if keys != 2 {
		t.Errorf("%d key requests, want 2", keys)
	}
	if held := c.keys.get(); held == nil || held.version != 3 {
		t.Errorf("the key held is not version 3")
	}
}
