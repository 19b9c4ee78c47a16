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
	"encoding/base64"
	"errors"
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
	e2eTokenRE    = regexp.MustCompile(`^(cvsm_[0-9a-f]{64})\.([A-Za-z0-9_-]{43})$`)
	e2eWrapRE     = regexp.MustCompile(`^cvsm-wrap1\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$`)
	e2eEnvelopeRE = regexp.MustCompile(`^cvsm-e2e1\.([1-9][0-9]{0,9})\.([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.([1-9][0-9]{0,9})\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$`)
)

// errE2E is a key, envelope or wrap that is malformed or does not open.
type errE2E struct{ reason string }

func (e *errE2E) Error() string { return e.reason }

func e2eErr(reason string) error { return &errE2E{reason} }

// splitToken returns the part of token the server knows (sent as the
// bearer) and, when the token has one, its 32-byte X25519 private key. A
// token of an end-to-end team is cvsm_<64 hex>.<43 base64url characters>;
// one that starts with cvsm_ and holds a dot but is not that shape is an
// error. Any other token (a JWT, whose dots are its own) is returned whole.
func splitToken(token string) (bearer string, key []byte, err error) {
	if !strings.HasPrefix(token, "cvsm_") || !strings.Contains(token, ".") {
		return token, nil, nil
	}
	m := e2eTokenRE.FindStringSubmatch(token)
	if m == nil {
		return "", nil, e2eErr("a token with a key part must look like cvsm_<64 hex>.<43 base64url characters>")
	}
	key, err = unb64u(m[2], e2eKeySize)
	if err != nil {
		return "", nil, e2eErr("the token's key part is not a base64url X25519 private key")
	}
	return m[1], key, nil
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
