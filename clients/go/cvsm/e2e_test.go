// This file tests the cryptography of end-to-end teams against the
// repository's shared vectors (conformance/vectors/e2e.json, read where it
// lies).

package cvsm

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// e2eVectors is conformance/vectors/e2e.json, the fields these tests use.
type e2eVectors struct {
	TeamID     string `json:"team_id"`
	KeyVersion int    `json:"key_version"`
	TeamKey    string `json:"team_key"`
	Recipients []struct {
		What       string `json:"what"`
		PrivateKey string `json:"private_key"`
		PublicKey  string `json:"public_key"`
		WrappedKey string `json:"wrapped_key"`
	} `json:"recipients"`
	Token struct {
		Token      string `json:"token"`
		APIToken   string `json:"api_token"`
		PrivateKey string `json:"private_key"`
	} `json:"token"`
	BadTokens []string `json:"bad_tokens"`
	V1Token   string   `json:"v1_token"`
	Chain     struct {
		TeamID string `json:"team_id"`
		Keys   []struct {
			KeyVersion int    `json:"key_version"`
			TeamKey    string `json:"team_key"`
			Commitment string `json:"commitment"`
		} `json:"keys"`
		Links []struct {
			KeyVersion int    `json:"key_version"`
			Link       string `json:"link"`
			OpensTo    string `json:"opens_to"`
		} `json:"links"`
		BadLinks []struct {
			KeyVersion int    `json:"key_version"`
			Key        string `json:"key"`
			Link       string `json:"link"`
			Why        string `json:"why"`
		} `json:"bad_links"`
	} `json:"chain"`
	TokenPins []struct {
		Token     string `json:"token"`
		KeyAnswer struct {
			TeamID     string `json:"team_id"`
			KeyVersion int    `json:"key_version"`
			WrappedKey string `json:"wrapped_key"`
			Links      []struct {
				KeyVersion int    `json:"key_version"`
				Link       string `json:"link"`
			} `json:"links"`
		} `json:"key_answer"`
		Outcome string `json:"outcome"`
		Why     string `json:"why"`
	} `json:"token_pins"`
	Values []struct {
		Name        string `json:"name"`
		Environment string `json:"environment"`
		Envelope    string `json:"envelope"`
		Opens       bool   `json:"opens"`
		Value       string `json:"value"`
		Why         string `json:"why"`
	} `json:"values"`
}

// loadVectors reads the shared vectors from the repository, relative to
// this package's folder (clients/go/cvsm).
func loadVectors(t *testing.T) e2eVectors {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "conformance", "vectors", "e2e.json"))
	if err != nil {
		t.Fatalf("the shared vectors: %v", err)
	}
	var v e2eVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Recipients) == 0 || len(v.Values) == 0 || len(v.BadTokens) == 0 {
		t.Fatal("the vectors file has no recipients, values or bad tokens")
	}
	return v
}

func mustB64u(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEveryRecipientsWrapOpensToTheTeamKey(t *testing.T) {
	v := loadVectors(t)
	for _, r := range v.Recipients {
		key, err := unwrapTeamKey(r.WrappedKey, v.TeamID, v.KeyVersion, mustB64u(t, r.PrivateKey))
		if err != nil {
			t.Fatalf("%s: %v", r.What, err)
		}
		if !bytes.Equal(key, mustB64u(t, v.TeamKey)) {
			t.Errorf("%s: unwrapped a key that is not team_key", r.What)
		}
		priv, _ := ecdh.X25519().NewPrivateKey(mustB64u(t, r.PrivateKey))
		if !bytes.Equal(priv.PublicKey().Bytes(), mustB64u(t, r.PublicKey)) {
			t.Errorf("%s: the public key is not the private key's", r.What)
		}
		// The wrap is bound to the team and the key version.
		if _, err := unwrapTeamKey(r.WrappedKey, v.TeamID, v.KeyVersion+1, mustB64u(t, r.PrivateKey)); err == nil {
			t.Errorf("%s: the wrap opened for another key version", r.What)
		}
		if _, err := unwrapTeamKey(r.WrappedKey, otherTeam, v.KeyVersion, mustB64u(t, r.PrivateKey)); err == nil {
			t.Errorf("%s: the wrap opened for another team", r.What)
		}
	}
	// A wrap for one recipient does not open with another's key.
	if _, err := unwrapTeamKey(v.Recipients[0].WrappedKey, v.TeamID, v.KeyVersion, mustB64u(t, v.Recipients[1].PrivateKey)); err == nil {
		t.Error("the member's wrap opened with the token's key")
	}
}

func TestEveryVectorValueOpensOrFailsAsTheVectorsSay(t *testing.T) {
	v := loadVectors(t)
	teamKey := mustB64u(t, v.TeamKey)
	for i, tc := range v.Values {
		got, err := openValue(tc.Envelope, teamKey, v.TeamID, tc.Environment, tc.Name)
		switch {
		case tc.Opens && err != nil:
			t.Errorf("values[%d] (%s in %s): %v", i, tc.Name, tc.Environment, err)
		case tc.Opens && got != tc.Value:
			t.Errorf("values[%d] (%s in %s): opened to another value", i, tc.Name, tc.Environment)
		case !tc.Opens && err == nil:
			t.Errorf("values[%d] (%s): opened, but %s", i, tc.Name, tc.Why)
		case !tc.Opens:
			var e2e *errE2E
			if !errors.As(err, &e2e) {
				t.Errorf("values[%d]: error %T, want the package's e2e error", i, err)
			}
		}
	}
}

func TestVectorTokenSplitsIntoTheAPITokenAndItsKey(t *testing.T) {
	v := loadVectors(t)
	bearer, key, pin, err := splitToken(v.Token.Token)
	if err == nil && (pin == nil || pin.version != 1 || !bytes.Equal(pin.commitment, mustB64u(t, v.Chain.Keys[0].Commitment))) {
		t.Errorf("the pin is not version 1 and its commitment")
	}
	if err != nil {
		t.Fatal(err)
	}
	if bearer != v.Token.APIToken || !bytes.Equal(key, mustB64u(t, v.Token.PrivateKey)) {
		t.Errorf("split into %q and another key", bearer)
	}
	// Tokens without a dot, and JWTs, pass whole without a key.
	for _, plain := range []string{v.Token.APIToken, testToken, "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"} {
		if b, k, p, err := splitToken(plain); b != plain || k != nil || p != nil || err != nil {
			t.Errorf("splitToken(%q) = %q, %v, %v", plain, b, k, err)
		}
	}
}

func TestVectorBadTokensAreConfigurationErrorsThatQuoteNothing(t *testing.T) {
	v := loadVectors(t)
	// A key part whose last character has bits set past the 32 bytes is not
	// canonical base64url: refused too, so a key has one spelling.
	last := v.Token.Token[len(v.Token.Token)-1]
	odd := "B" // 1 and 2: low bits the 43rd character may not have
	if last == 'B' {
		odd = "C"
	}
	noncanonical := v.Token.Token[:len(v.Token.Token)-1] + odd
	for _, bad := range append(append([]string{}, v.BadTokens...), noncanonical, v.V1Token) {
		clearEnv(t)
		c, err := NewClient(Options{Token: bad, BaseURL: "http://127.0.0.1:1/api/v1", Team: v.TeamID})
		if c != nil || !errors.Is(err, ErrConfiguration) {
			t.Fatalf("token %q: want a configuration error, got %v", bad, err)
		}
		head, tail, _ := strings.Cut(bad, ".")
		for _, part := range []string{head, tail} {
			if len(part) >= 4 && strings.Contains(err.Error(), part) {
				t.Errorf("the message quotes the token: %v", err)
			}
		}
	}
}

// The sealing half, for the tests only (no program of this module writes
// to an end-to-end team): docs/e2e.md's formats with fresh randomness.

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func gcmSeal(t *testing.T, key, plain, aad []byte) (nonce, ct []byte) {
	t.Helper()
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	nonce = make([]byte, 12)
	_, _ = rand.Read(nonce)
	return nonce, gcm.Seal(nil, nonce, plain, aad)
}

// sealForTest is a cvsm-e2e1 envelope of value.
func sealForTest(t *testing.T, value string, teamKey []byte, keyVersion int, teamID, secretID string, version int, environment, name string) string {
	t.Helper()
	nonce, ct := gcmSeal(t, teamKey, []byte(value), valueAAD(teamID, secretID, version, environment, name))
	return "cvsm-e2e1." + strconv.Itoa(keyVersion) + "." + secretID + "." + strconv.Itoa(version) + "." + b64u(nonce) + "." + b64u(ct)
}

// wrapForTest is a cvsm-wrap1 wrap of teamKey to the recipient whose
// private key is recipientPrivate.
func wrapForTest(t *testing.T, teamKey []byte, teamID string, keyVersion int, recipientPrivate []byte) string {
	t.Helper()
	recipient, err := ecdh.X25519().NewPrivateKey(recipientPrivate)
	if err != nil {
		t.Fatal(err)
	}
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := eph.ECDH(recipient.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	salt := append(append([]byte{}, eph.PublicKey().Bytes()...), recipient.PublicKey().Bytes()...)
	wrapping, err := hkdf.Key(sha256.New, shared, salt, wrapKeyInfo, 32)
	if err != nil {
		t.Fatal(err)
	}
	nonce, ct := gcmSeal(t, wrapping, teamKey, teamKeyAAD(teamID, keyVersion))
	return "cvsm-wrap1." + b64u(eph.PublicKey().Bytes()) + "." + b64u(nonce) + "." + b64u(ct)
}

func TestTheTestSealersRoundTripThroughTheOpeners(t *testing.T) {
	v := loadVectors(t)
	teamKey := mustB64u(t, v.TeamKey)
	sealed := sealForTest(t, "nilai", teamKey, 3, v.TeamID, "0b6d3e2a-8f41-4a5c-b3d2-7e9c1f0a4b58", 4, "staging", "X")
	if got, err := openValue(sealed, teamKey, v.TeamID, "staging", "X"); err != nil || got != "nilai" {
		t.Fatalf("openValue = %q, %v", got, err)
	}
	wrapped := wrapForTest(t, teamKey, v.TeamID, 3, mustB64u(t, v.Token.PrivateKey))
	if got, err := unwrapTeamKey(wrapped, v.TeamID, 3, mustB64u(t, v.Token.PrivateKey)); err != nil || !bytes.Equal(got, teamKey) {
		t.Fatalf("unwrapTeamKey: %v", err)
	}
}

// linkForTest makes the back-link of key version keyVersion (docs/e2e.md,
// "Format 2"): older sealed under newer.
func linkForTest(t *testing.T, newer, older []byte, teamID string, keyVersion int) string {
	t.Helper()
	block, err := aes.NewCipher(newer)
	if err != nil {
		t.Fatal(err)
	}
	gcm, _ := cipher.NewGCM(block)
	nonce := make([]byte, 12)
	rand.Read(nonce)
	ct := gcm.Seal(nil, nonce, older, []byte("cvsm-e2e:v2:link:"+teamID+":"+strconv.Itoa(keyVersion)))
	b := base64.RawURLEncoding
	return "cvsm-link1." + b.EncodeToString(nonce) + "." + b.EncodeToString(ct)
}

func TestVectorChainCommitmentsAndLinks(t *testing.T) {
	v := loadVectors(t)
	c := v.Chain
	for _, k := range c.Keys {
		got, err := keyCommitment(mustB64u(t, k.TeamKey), c.TeamID, k.KeyVersion)
		if err != nil || base64.RawURLEncoding.EncodeToString(got) != k.Commitment {
			t.Errorf("commitment of version %d differs", k.KeyVersion)
		}
	}
	for _, l := range c.Links {
		newer := mustB64u(t, c.Keys[l.KeyVersion-1].TeamKey)
		got, err := openLink(l.Link, newer, c.TeamID, l.KeyVersion)
		if err != nil || base64.RawURLEncoding.EncodeToString(got) != l.OpensTo {
			t.Errorf("link of version %d: %v", l.KeyVersion, err)
		}
	}
	for _, l := range c.BadLinks {
		if _, err := openLink(l.Link, mustB64u(t, l.Key), c.TeamID, l.KeyVersion); err == nil {
			t.Errorf("bad link (%s) opened", l.Why)
		}
	}
}

func TestVectorTokenPinsVerifyOrRefuse(t *testing.T) {
	v := loadVectors(t)
	if len(v.TokenPins) == 0 {
		t.Fatal("no token_pins vectors")
	}
	for i, p := range v.TokenPins {
		_, private, pin, err := splitToken(p.Token)
		if p.Outcome == "configuration" {
			if err == nil {
				t.Errorf("token_pins[%d] (%s): the token was accepted", i, p.Why)
			}
			continue
		}
		if err != nil {
			t.Fatalf("token_pins[%d] (%s): %v", i, p.Why, err)
		}
		a := p.KeyAnswer
		links := map[int]string{}
		for _, l := range a.Links {
			links[l.KeyVersion] = l.Link
		}
		var keys map[int][]byte
		key, err := unwrapTeamKey(a.WrappedKey, a.TeamID, a.KeyVersion, private)
		if err == nil {
			keys, err = verifyChain(key, a.TeamID, a.KeyVersion, links, *pin)
		}
		switch p.Outcome {
		case "ok":
			if err != nil {
				t.Errorf("token_pins[%d] (%s): %v", i, p.Why, err)
				continue
			}
			for _, k := range v.Chain.Keys {
				if got, ok := keys[k.KeyVersion]; ok && base64.RawURLEncoding.EncodeToString(got) != k.TeamKey {
					t.Errorf("token_pins[%d]: key of version %d differs", i, k.KeyVersion)
				}
			}
		case "integrity":
			var e2e *errE2E
			if err == nil || keys != nil || !errors.As(err, &e2e) {
				t.Errorf("token_pins[%d] (%s): want the e2e error and no key, got %v", i, p.Why, err)
			}
		default:
			t.Errorf("token_pins[%d]: unknown outcome %q", i, p.Outcome)
		}
	}
}
