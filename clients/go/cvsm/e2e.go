// This file owns the cryptography of end-to-end teams, exactly as the
// repository's docs/e2e.md defines it (version 1): splitting a token from
// its private key, unwrapping the team key (X25519, HKDF-SHA256,
// AES-256-GCM) and opening sealed values. Every primitive is the standard
// library's (crypto/ecdh, crypto/hkdf, crypto/aes and crypto/cipher). Every
// failure is an errE2E whose text never holds a key or a value.

package cvsm

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	e2eKeySize   = 32
	e2eNonceSize = 12
	e2eTagSize   = 16
)

var (
	e2eTokenRE    = regexp.MustCompile(`^(cvsm_[0-9a-f]{64})\.([A-Za-z0-9_-]{43})\.([1-9][0-9]{0,9})\.([A-Za-z0-9_-]{43})$`)
	e2eTokenV1RE  = regexp.MustCompile(`^cvsm_[0-9a-f]{64}\.[A-Za-z0-9_-]{43}$`)
	e2eLinkRE     = regexp.MustCompile(`^cvsm-link1\.([A-Za-z0-9_-]{16})\.([A-Za-z0-9_-]{64})$`)
	e2eWrapRE     = regexp.MustCompile(`^cvsm-wrap1\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$`)
	e2eEnvelopeRE = regexp.MustCompile(`^cvsm-e2e1\.([1-9][0-9]{0,9})\.([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.([1-9][0-9]{0,9})\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$`)
)

// errE2E is a key, envelope or wrap that is malformed or does not open.
type errE2E struct{ reason string }

func (e *errE2E) Error() string { return e.reason }

func e2eErr(reason string) error { return &errE2E{reason} }

// tokenPin is the pin a format-2 token carries: the key version current
// when it was made and that key's commitment C_v (docs/e2e.md, "Format 2").
type tokenPin struct {
	version    int
	commitment []byte
}

// errFirstFormatToken is a token of the first format (cvsm_<hex>.<key>,
// no pin): it must be made again.
var errFirstFormatToken = e2eErr(ruleMessageFirstFormatToken)

// splitToken returns the part of token the server knows (sent as the
// bearer) and, when the token has one, its 32-byte X25519 private key and
// its pin. A token of an end-to-end team is
// cvsm_<64 hex>.<43 base64url>.<key version>.<43 base64url>; one that
// starts with cvsm_ and holds a dot but is not that shape (the first
// format's cvsm_<64 hex>.<43> included) is an error. Any other token (a
// JWT, whose dots are its own) is returned whole.
func splitToken(token string) (bearer string, key []byte, pin *tokenPin, err error) {
	if !strings.HasPrefix(token, "cvsm_") || !strings.Contains(token, ".") {
		return token, nil, nil, nil
	}
	if e2eTokenV1RE.MatchString(token) {
		return "", nil, nil, errFirstFormatToken
	}
	m := e2eTokenRE.FindStringSubmatch(token)
	if m == nil {
		return "", nil, nil, e2eErr("a token with a key part must look like cvsm_<64 hex>.<43 base64url>.<key version>.<43 base64url>")
	}
	key, err = unb64u(m[2], e2eKeySize)
	if err != nil {
		return "", nil, nil, e2eErr("the token's key part is not a base64url X25519 private key")
	}
	version, err := strconv.Atoi(m[3])
	if err != nil || version < 1 {
		return "", nil, nil, e2eErr("the token's pinned key version is not a number from 1")
	}
	commitment, err := unb64u(m[4], e2eKeySize)
	if err != nil {
		return "", nil, nil, e2eErr("the token's commitment is not 32 bytes of base64url")
	}
	return m[1], key, &tokenPin{version: version, commitment: commitment}, nil
}

// keyCommitment is C_v = HKDF-SHA256(K_v, "", "cvsm-e2e:v2:commit:" T ":" v).
func keyCommitment(teamKey []byte, teamID string, keyVersion int) ([]byte, error) {
	return hkdf.Key(sha256.New, teamKey, nil, "cvsm-e2e:v2:commit:"+teamID+":"+strconv.Itoa(keyVersion), e2eKeySize)
}

// openLink opens the back-link of key version keyVersion with K_v and
// returns K_{v-1}.
func openLink(link string, teamKey []byte, teamID string, keyVersion int) ([]byte, error) {
	m := e2eLinkRE.FindStringSubmatch(link)
	if m == nil {
		return nil, e2eErr("a link is not cvsm-link1.<nonce>.<ct>")
	}
	nonce, err1 := unb64u(m[1], e2eNonceSize)
	ct, err2 := unb64u(m[2], e2eKeySize+e2eTagSize)
	if err := errors.Join(err1, err2); err != nil {
		return nil, e2eErr("a link is malformed")
	}
	older, err := aesGCMOpen(teamKey, nonce, ct, []byte("cvsm-e2e:v2:link:"+teamID+":"+strconv.Itoa(keyVersion)))
	if err != nil || len(older) != e2eKeySize {
		return nil, e2eErr(fmt.Sprintf("the link of key version %d does not open", keyVersion))
	}
	return older, nil
}

// parseLinks reads the links of a key answer, [{"key_version", "link"},
// ...], by key version (absent or null: none). Every link is checked,
// needed or not: each item an object with an integer key_version of at
// least 2, given once, and a link cvsm-link1.<12-byte nonce>.<48-byte ct>
// in canonical base64url. A malformed one is an errE2E: the answer is not
// used.
func parseLinks(raw json.RawMessage) (map[int]string, error) {
	links := map[int]string{}
	if len(raw) == 0 || string(raw) == "null" {
		return links, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, e2eErr("the links of the key answer are not a list")
	}
	for _, item := range items {
		// By exact field names (a struct would take "Key_Version" too); a
		// missing field is no JSON and fails, null leaves 0 or "".
		var fields map[string]json.RawMessage
		var version int
		var link string
		if json.Unmarshal(item, &fields) != nil || fields == nil ||
			json.Unmarshal(fields["key_version"], &version) != nil || json.Unmarshal(fields["link"], &link) != nil {
			return nil, e2eErr("the links of the key answer are not [{key_version, link}, ...]")
		}
		if _, twice := links[version]; twice || version < 2 {
			return nil, e2eErr("the links of the key answer are not [{key_version, link}, ...]")
		}
		m := e2eLinkRE.FindStringSubmatch(link)
		if m == nil {
			return nil, e2eErr(fmt.Sprintf("the link of key version %d is not cvsm-link1.<nonce>.<ct>", version))
		}
		_, err1 := unb64u(m[1], e2eNonceSize)
		_, err2 := unb64u(m[2], e2eKeySize+e2eTagSize)
		if errors.Join(err1, err2) != nil {
			return nil, e2eErr(fmt.Sprintf("the link of key version %d is malformed", version))
		}
		links[version] = link
	}
	return links, nil
}

// verifyChain walks from K_cur (key version cur) down to the pin through
// links (key version -> link) and checks the pin's commitment in constant
// time; it then walks on down as far as links go. It returns every key
// reached, by key version. Any failure is an errE2E and no key is returned.
func verifyChain(current []byte, teamID string, cur int, links map[int]string, pin tokenPin) (map[int][]byte, error) {
	if cur < pin.version {
		return nil, e2eErr(fmt.Sprintf("the server's current key version %d is below the token's pinned version %d", cur, pin.version))
	}
	keys := map[int][]byte{cur: current}
	key := current
	for u := cur; u > pin.version; u-- {
		link, ok := links[u]
		if !ok {
			return nil, e2eErr(fmt.Sprintf("the link of key version %d is missing", u))
		}
		older, err := openLink(link, key, teamID, u)
		if err != nil {
			return nil, err
		}
		keys[u-1] = older
		key = older
	}
	commitment, err := keyCommitment(key, teamID, pin.version)
	if err != nil || subtle.ConstantTimeCompare(commitment, pin.commitment) != 1 {
		return nil, e2eErr("the team key does not chain back to the token's pinned key (its commitment differs)")
	}
	// Versions below the pin: reached only through links that open.
	for u := pin.version; u > 1; u-- {
		link, ok := links[u]
		if !ok {
			break
		}
		older, err := openLink(link, key, teamID, u)
		if err != nil {
			break
		}
		keys[u-1] = older
		key = older
	}
	return keys, nil
}

// unb64u decodes canonical unpadded base64url (RFC 4648 section 5) of size
// bytes (any size when size is negative). The regular expressions above
// let only the alphabet through, so the decoder's tolerance of line breaks
// never applies; Strict refuses non-zero trailing bits, so each value has
// one spelling.
func unb64u(text string, size int) ([]byte, error) {
	data, err := base64.RawURLEncoding.Strict().DecodeString(text)
	if err != nil {
		return nil, e2eErr("not canonical base64url")
	}
	if size >= 0 && len(data) != size {
		return nil, e2eErr("wrong length")
	}
	return data, nil
}

// wrapKeyInfo is the HKDF info of the key that wraps the team key to a
// recipient (docs/e2e.md).
const wrapKeyInfo = "cvsm-e2e:v1:wrap"

// aesGCMOpen opens ct (the ciphertext followed by its 16-byte tag) under a
// 32-byte key with aad.
func aesGCMOpen(key, nonce, ct, aad []byte) ([]byte, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, e2eErr("the key is not an AES-256 key")
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil || len(nonce) != gcm.NonceSize() {
		return nil, e2eErr("the nonce is not 12 bytes")
	}
	plain, err := gcm.Open(nil, nonce, ct, aad)
	if err != nil {
		return nil, e2eErr("does not open with this key")
	}
	return plain, nil
}

func teamKeyAAD(teamID string, keyVersion int) []byte {
	return []byte("cvsm-e2e:v1:team-key:" + teamID + ":" + strconv.Itoa(keyVersion))
}

func valueAAD(teamID, secretID string, version int, environment, name string) []byte {
	return []byte("cvsm-e2e:v1:secret:" + teamID + ":" + secretID + ":" + strconv.Itoa(version) + ":" + environment + ":" + name)
}

// unwrapTeamKey opens a cvsm-wrap1 wrap of the team key of teamID at
// keyVersion with the recipient's X25519 private key.
func unwrapTeamKey(wrapped, teamID string, keyVersion int, privateKey []byte) ([]byte, error) {
	m := e2eWrapRE.FindStringSubmatch(wrapped)
	if m == nil {
		return nil, e2eErr("the wrapped team key is not cvsm-wrap1.<eph>.<nonce>.<ct>")
	}
	ephPublic, err1 := unb64u(m[1], e2eKeySize)
	nonce, err2 := unb64u(m[2], e2eNonceSize)
	ct, err3 := unb64u(m[3], e2eKeySize+e2eTagSize)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, e2eErr("the wrapped team key is malformed")
	}
	private, err := ecdh.X25519().NewPrivateKey(privateKey)
	if err != nil {
		return nil, e2eErr("the private key is not an X25519 key")
	}
	peer, err := ecdh.X25519().NewPublicKey(ephPublic)
	if err != nil {
		return nil, e2eErr("the wrap's ephemeral key is not an X25519 key")
	}
	shared, err := private.ECDH(peer) // refuses the all-zero result of a low-order point
	if err != nil {
		return nil, e2eErr("the wrap's ephemeral key is not usable (low order)")
	}
	salt := append(append([]byte{}, ephPublic...), private.PublicKey().Bytes()...)
	wrapping, err := hkdf.Key(sha256.New, shared, salt, wrapKeyInfo, e2eKeySize)
	if err != nil {
		return nil, e2eErr("the wrapping key cannot be derived")
	}
	key, err := aesGCMOpen(wrapping, nonce, ct, teamKeyAAD(teamID, keyVersion))
	if err != nil {
		return nil, e2eErr("the wrapped team key does not open with this token's key")
	}
	return key, nil
}

// envelope is a parsed sealed value, cvsm-e2e1.<key version>.<secret
// id>.<version>.<nonce>.<ct>.
type envelope struct {
	keyVersion int
	secretID   string
	version    int
	nonce, ct  []byte
}

func parseEnvelope(sealed string) (envelope, error) {
	m := e2eEnvelopeRE.FindStringSubmatch(sealed)
	if m == nil {
		return envelope{}, e2eErr("the value is not a sealed value (cvsm-e2e1.<key version>.<secret id>.<version>.<nonce>.<ciphertext>)")
	}
	keyVersion, _ := strconv.Atoi(m[1]) // at most 10 digits: fits an int on 64 bits
	version, _ := strconv.Atoi(m[3])
	nonce, err := unb64u(m[4], e2eNonceSize)
	if err != nil {
		return envelope{}, e2eErr("the sealed value's nonce is malformed")
	}
	ct, err := unb64u(m[5], -1)
	if err != nil || len(ct) < e2eTagSize {
		return envelope{}, e2eErr("the sealed value's ciphertext is malformed")
	}
	return envelope{keyVersion: keyVersion, secretID: m[2], version: version, nonce: nonce, ct: ct}, nil
}

// openEnvelope opens a parsed sealed value with the team key of teamID; it
// opens only when it was sealed for environment and name, those the caller
// asked for.
func openEnvelope(e envelope, teamKey []byte, teamID, environment, name string) (string, error) {
	plain, err := aesGCMOpen(teamKey, e.nonce, e.ct, valueAAD(teamID, e.secretID, e.version, environment, name))
	if err != nil {
		return "", e2eErr("the sealed value does not open with the team key for this team, environment and name")
	}
	if !utf8.Valid(plain) {
		return "", e2eErr("the sealed value is not UTF-8")
	}
	return string(plain), nil
}

// openValue parses and opens a sealed value (see openEnvelope).
func openValue(sealed string, teamKey []byte, teamID, environment, name string) (string, error) {
	e, err := parseEnvelope(sealed)
	if err != nil {
		return "", err
	}
	return openEnvelope(e, teamKey, teamID, environment, name)
}
