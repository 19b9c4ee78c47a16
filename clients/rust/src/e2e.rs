//! End-to-end teams, the reading half of `docs/e2e.md` (formats version 1):
//! the private key a token carries after its dot, the team key the server
//! wraps to it, and the sealed values that key opens.
//!
//! Primitives: X25519 from x25519-dalek (ring's agrees only with keys it
//! generated itself), HKDF-SHA256 and AES-256-GCM from ring. Nothing here
//! seals: the client only reads. No failure's text holds a key or a value.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::hkdf::{Salt, HKDF_SHA256};
use x25519_dalek::{PublicKey, StaticSecret};

/// KEY is the size of an X25519 key and of a team key.
const KEY: usize = 32;
/// TAG is the size of an AES-GCM tag.
const TAG: usize = 16;
/// API_TOKEN_HEX is how many hex digits follow `cvsm_` in an API token.
const API_TOKEN_HEX: usize = 64;
/// KEY_PART is the length of a token's key part: 32 bytes in base64url.
const KEY_PART: usize = 43;

/// Failure says why something did not open; the client words it into an
/// [`Error::Decryption`](crate::Error::Decryption) or, for a token, an
/// [`Error::Configuration`](crate::Error::Configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The text is not the format it should be.
    Malformed(&'static str),
    /// AES-GCM refused it: another key, other associated data, or altered.
    DoesNotOpen,
    /// A low-order public key made an all-zero shared secret.
    LowOrder,
    /// It opened, but the value is not UTF-8.
    NotUtf8,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Malformed(what) => f.write_str(what),
            Failure::DoesNotOpen => f.write_str("it does not open with the key"),
            Failure::LowOrder => f.write_str("its public key is not usable (low order)"),
            Failure::NotUtf8 => f.write_str("the opened value is not UTF-8"),
        }
    }
}

/// TokenKey is the X25519 private key a token of an end-to-end team carries
/// after its dot, with its public key. It is wiped from memory when dropped
/// and never printed.
#[derive(Clone)]
pub(crate) struct TokenKey {
    secret: StaticSecret,
    public: PublicKey,
}

impl fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenKey([redacted])")
    }
}

/// split_token returns the part of `token` the server knows (the bearer)
/// and the private key after its dot, if any.
///
/// A `cvsm_` token with a dot must be exactly `cvsm_<64 hex>.<43 base64url
/// characters>` (32 bytes, canonical); anything else is `Err`, a message
/// that never quotes the token. A token with no dot, or one that is not a
/// `cvsm_` API token (a JWT, whose dots are its own), is the bearer as it is.
pub(crate) fn split_token(token: &str) -> Result<(&str, Option<TokenKey>), &'static str> {
    let Some((api_token, key)) = token.split_once('.') else {
        return Ok((token, None));
    };
    if !token.starts_with("cvsm_") {
        return Ok((token, None));
    }
    const SHAPE: &str = "the token (CVSM_TOKEN) has a key part but is not cvsm_<64 hex digits>.<43 base64url characters>";
    let hex = &api_token["cvsm_".len()..];
    if hex.len() != API_TOKEN_HEX
        || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        || key.len() != KEY_PART
    {
        return Err(SHAPE);
    }
    let bytes = decode(key, KEY).map_err(|_| SHAPE)?;
    let mut private = [0u8; KEY];
    private.copy_from_slice(&bytes);
    let secret = StaticSecret::from(private);
    let public = PublicKey::from(&secret);
    Ok((api_token, Some(TokenKey { secret, public })))
}

/// TeamKey is a team's key at one key version, unwrapped, with the team id
/// that the values' associated data names.
pub(crate) struct TeamKey {
    team_id: String,
    version: u64,
    key: LessSafeKey,
}

impl fmt::Debug for TeamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TeamKey")
            .field("team_id", &self.team_id)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl TeamKey {
    /// unwrap opens `wrapped` (`cvsm-wrap1.<eph>.<nonce>.<ct>`), the team
    /// key of `team_id` at `version` wrapped to `token`'s public key.
    pub(crate) fn unwrap(
        wrapped: &str,
        team_id: &str,
        version: u64,
        token: &TokenKey,
    ) -> Result<TeamKey, Failure> {
        let [eph, nonce, ct] = fields(wrapped, "cvsm-wrap1.").ok_or(Failure::Malformed(
            "it is not cvsm-wrap1.<eph>.<nonce>.<ct>",
        ))?;
        let eph = decode(eph, KEY)
            .map_err(|_| Failure::Malformed("its ephemeral key is not 32 bytes of base64url"))?;
        let nonce = decode(nonce, NONCE_LEN)
            .map_err(|_| Failure::Malformed("its nonce is not 12 bytes of base64url"))?;
        let mut ct = decode(ct, KEY + TAG)
            .map_err(|_| Failure::Malformed("its ciphertext is not 48 bytes of base64url"))?;
        let mut eph_public = [0u8; KEY];
        eph_public.copy_from_slice(&eph);
        let shared = token.secret.diffie_hellman(&PublicKey::from(eph_public));
        if !shared.was_contributory() {
            return Err(Failure::LowOrder);
        }
        let mut salt = eph;
        salt.extend_from_slice(token.public.as_bytes());
        let wrapping: UnboundKey = Salt::new(HKDF_SHA256, &salt)
            .extract(shared.as_bytes())
            .expand(&[b"cvsm-e2e:v1:wrap"], &AES_256_GCM)
            .map_err(|_| Failure::DoesNotOpen)?
            .into();
        let aad = format!("cvsm-e2e:v1:team-key:{team_id}:{version}");
        let team_key = open_with(&LessSafeKey::new(wrapping), &nonce, &mut ct, aad.as_bytes())?;
        let key = UnboundKey::new(&AES_256_GCM, team_key).map_err(|_| Failure::DoesNotOpen)?;
        Ok(TeamKey {
            team_id: team_id.to_string(),
            version,
            key: LessSafeKey::new(key),
        })
    }

    /// version is the key version this key opens.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// open returns the value sealed in `envelope`, which must have been
    /// sealed for this team, `environment` and `name`: the ones asked for,
    /// so that a server cannot hand one secret's value out as another's.
    pub(crate) fn open(
        &self,
        envelope: &Envelope,
        environment: &str,
        name: &str,
    ) -> Result<String, Failure> {
        let aad = format!(
            "cvsm-e2e:v1:secret:{}:{}:{}:{environment}:{name}",
            self.team_id, envelope.secret_id, envelope.version
        );
        let mut ct = envelope.ciphertext.clone();
        let plain = open_with(&self.key, &envelope.nonce, &mut ct, aad.as_bytes())?;
        String::from_utf8(plain.to_vec()).map_err(|_| Failure::NotUtf8)
    }
}

/// Envelope is a sealed value,
/// `cvsm-e2e1.<key_version>.<secret_id>.<version>.<nonce>.<ciphertext>`.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Envelope {
    pub(crate) key_version: u64,
    secret_id: String,
    version: u64,
    nonce: Vec<u8>,
    /// ciphertext ends with the GCM tag.
    ciphertext: Vec<u8>,
}

impl fmt::Debug for Envelope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Envelope")
            .field("key_version", &self.key_version)
            .field("secret_id", &self.secret_id)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// ENVELOPE_SHAPE describes an envelope in an error message.
const ENVELOPE_SHAPE: &str =
    "it is not a sealed value (cvsm-e2e1.<key version>.<secret id>.<version>.<nonce>.<ciphertext>)";

impl Envelope {
    /// parse reads a sealed value; `Err` when `text` is not one.
    pub(crate) fn parse(text: &str) -> Result<Envelope, Failure> {
        let malformed = Failure::Malformed(ENVELOPE_SHAPE);
        let [key_version, secret_id, version, nonce, ciphertext] =
            fields(text, "cvsm-e2e1.").ok_or(malformed.clone())?;
        let (Some(key_version), Some(version)) = (number(key_version), number(version)) else {
            return Err(malformed);
        };
        if !is_uuid(secret_id) {
            return Err(malformed);
        }
        let nonce = decode(nonce, NONCE_LEN).map_err(|_| malformed.clone())?;
        let ciphertext = decode_any(ciphertext).ok_or(malformed.clone())?;
        if ciphertext.len() < TAG {
            return Err(malformed);
        }
        Ok(Envelope {
            key_version,
            secret_id: secret_id.to_string(),
            version,
            nonce,
            ciphertext,
        })
    }
}

/// fields splits `text` after `prefix` into exactly N non-empty fields of
/// the base64url alphabet (which the numbers and UUIDs also fit), separated
/// by dots.
fn fields<'a, const N: usize>(text: &'a str, prefix: &str) -> Option<[&'a str; N]> {
    let rest = text.strip_prefix(prefix)?;
    let parts: Vec<&str> = rest.split('.').collect();
    if parts.iter().any(|p| {
        p.is_empty()
            || !p
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }) {
        return None;
    }
    parts.try_into().ok()
}

/// number reads a decimal without leading zeros, 1 to 10 digits, as the
/// formats write key versions and versions.
fn number(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    if bytes.is_empty() || bytes.len() > 10 || bytes[0] == b'0' {
        return None;
    }
    if !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    text.parse().ok()
}

/// is_uuid reports whether `text` is a lowercase hyphenated UUID.
fn is_uuid(text: &str) -> bool {
    text.len() == 36
        && text.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => matches!(b, b'0'..=b'9' | b'a'..=b'f'),
        })
}

/// decode reads canonical unpadded base64url that must hold `size` bytes.
fn decode(text: &str, size: usize) -> Result<Vec<u8>, ()> {
    decode_any(text)
        .filter(|bytes| bytes.len() == size)
        .ok_or(())
}

/// decode_any reads canonical unpadded base64url (no padding, no stray
/// bits in the last character).
fn decode_any(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text).ok()
}

/// open_with opens `ct` (tag included) in place: the plaintext, or
/// [`Failure::DoesNotOpen`].
fn open_with<'a>(
    key: &LessSafeKey,
    nonce: &[u8],
    ct: &'a mut [u8],
    aad: &[u8],
) -> Result<&'a [u8], Failure> {
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| Failure::DoesNotOpen)?;
    key.open_in_place(nonce, Aad::from(aad), ct)
        .map(|plain| &*plain)
        .map_err(|_| Failure::DoesNotOpen)
}

#[cfg(test)]
mod tests;
