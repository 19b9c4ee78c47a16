//! End-to-end teams, the reading half of `docs/e2e.md` (format 2: the token's pin and the back-links):
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
    /// The team key does not chain back to the token's pin.
    Chain(&'static str),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Malformed(what) => f.write_str(what),
            Failure::DoesNotOpen => f.write_str("it does not open with the key"),
            Failure::LowOrder => f.write_str("its public key is not usable (low order)"),
            Failure::NotUtf8 => f.write_str("the opened value is not UTF-8"),
            Failure::Chain(why) => f.write_str(why),
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
    /// pin is the key version pinned in the token and its commitment.
    pin: (u64, [u8; KEY]),
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
    const SHAPE: &str = "the token (CVSM_TOKEN) has a key part but is not cvsm_<64 hex digits>.<43 base64url characters>.<key version>.<43 base64url characters> (the token is of the first end-to-end format (no pinned key version): make a new token)";
    let hex = &api_token["cvsm_".len()..];
    let parts: Vec<&str> = key.split('.').collect();
    if hex.len() != API_TOKEN_HEX
        || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        || parts.len() != 3
        || parts[0].len() != KEY_PART
        || parts[2].len() != KEY_PART
    {
        return Err(SHAPE);
    }
    let bytes = decode(parts[0], KEY).map_err(|_| SHAPE)?;
    let pinned = number(parts[1]).ok_or(SHAPE)?;
    let commitment = decode(parts[2], KEY).map_err(|_| SHAPE)?;
    let mut private = [0u8; KEY];
    private.copy_from_slice(&bytes);
    let mut pin = [0u8; KEY];
    pin.copy_from_slice(&commitment);
    let secret = StaticSecret::from(private);
    let public = PublicKey::from(&secret);
    Ok((
        api_token,
        Some(TokenKey {
            secret,
            public,
            pin: (pinned, pin),
        }),
    ))
}

/// commitment is `C_v`, HKDF-SHA256 of the team key with
/// `cvsm-e2e:v2:commit:<team>:<v>` (docs/e2e.md, "Format 2").
fn commitment(key: &[u8], team_id: &str, version: u64) -> [u8; KEY] {
    let info = format!("cvsm-e2e:v2:commit:{team_id}:{version}");
    hkdf32(key, info.as_bytes())
}

/// hkdf32 is HKDF-SHA256 with an empty salt and 32 bytes of output.
fn hkdf32(ikm: &[u8], info: &[u8]) -> [u8; KEY] {
    struct Len;
    impl ring::hkdf::KeyType for Len {
        fn len(&self) -> usize {
            KEY
        }
    }
    let mut out = [0u8; KEY];
    Salt::new(HKDF_SHA256, &[])
        .extract(ikm)
        .expand(&[info], Len)
        .and_then(|okm| okm.fill(&mut out))
        .expect("32 bytes is a valid HKDF-SHA256 length");
    out
}

/// same compares two byte strings in constant time (for their length).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Link is one back-link of the key answer: the link of `key_version`,
/// `cvsm-link1.<nonce>.<ct>`, the key of the version before sealed under it.
pub(crate) struct Link<'a> {
    pub(crate) key_version: u64,
    pub(crate) link: &'a str,
}

/// TeamKey is a team's key at one key version, unwrapped, with the team id
/// that the values' associated data names.
pub(crate) struct TeamKey {
    team_id: String,
    version: u64,
    /// keys are the keys of every version reached, by version (the
    /// current one and those below it through verified links).
    keys: std::collections::BTreeMap<u64, LessSafeKey>,
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
        links: &[Link<'_>],
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
        Self::verify_chain(team_key, team_id, version, links, token.pin)
    }

    /// verify_chain walks the back-links from `current` (the key of
    /// `version`) down to the pin and checks the pin's commitment, then on
    /// down as far as links go; every failure is [`Failure::Chain`].
    pub(crate) fn verify_chain(
        current: &[u8],
        team_id: &str,
        version: u64,
        links: &[Link<'_>],
        pin: (u64, [u8; KEY]),
    ) -> Result<TeamKey, Failure> {
        let (pinned, pin_commitment) = pin;
        if version < pinned {
            return Err(Failure::Chain(
                "the server gives a key version below the token's pin",
            ));
        }
        let mut raw: Vec<u8> = current.to_vec();
        let mut keys = std::collections::BTreeMap::new();
        let mut u = version;
        loop {
            if u == pinned && !same(&commitment(&raw, team_id, pinned), &pin_commitment) {
                return Err(Failure::Chain(
                    "the team key does not chain back to the key pinned in the token",
                ));
            }
            let key = UnboundKey::new(&AES_256_GCM, &raw).map_err(|_| Failure::DoesNotOpen)?;
            let key = LessSafeKey::new(key);
            if u <= 1 {
                keys.insert(u, key);
                break;
            }
            let Some(link) = links.iter().find(|l| l.key_version == u) else {
                if u > pinned {
                    return Err(Failure::Chain(
                        "a back-link between the key and the token's pin is missing",
                    ));
                }
                keys.insert(u, key);
                break;
            };
            let opened = open_link(&key, link.link, team_id, u);
            keys.insert(u, key);
            match opened {
                Ok(older) => raw = older,
                Err(_) if u > pinned => {
                    return Err(Failure::Chain(
                        "a back-link between the key and the token's pin does not open",
                    ))
                }
                Err(_) => break,
            }
            u -= 1;
        }
        Ok(TeamKey {
            team_id: team_id.to_string(),
            version,
            keys,
        })
    }

    /// has reports whether this key reaches `version`.
    pub(crate) fn has(&self, version: u64) -> bool {
        self.keys.contains_key(&version)
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
        let key = self
            .keys
            .get(&envelope.key_version)
            .ok_or(Failure::DoesNotOpen)?;
        let mut ct = envelope.ciphertext.clone();
        let plain = open_with(key, &envelope.nonce, &mut ct, aad.as_bytes())?;
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

/// open_link opens `cvsm-link1.<nonce>.<ct>`, the link of `version`
/// under the key of `version`: the key of `version - 1`.
fn open_link(
    key: &LessSafeKey,
    link: &str,
    team_id: &str,
    version: u64,
) -> Result<Vec<u8>, Failure> {
    let (nonce, mut ct) = link_parts(link)?;
    let aad = format!("cvsm-e2e:v2:link:{team_id}:{version}");
    Ok(open_with(key, &nonce, &mut ct, aad.as_bytes())?.to_vec())
}

/// link_parts are the nonce (12 bytes) and ciphertext (48 bytes) of
/// `cvsm-link1.<nonce>.<ct>`, or [`Failure::Malformed`].
fn link_parts(link: &str) -> Result<(Vec<u8>, Vec<u8>), Failure> {
    let malformed = Failure::Malformed("a link is not cvsm-link1.<nonce>.<ct>");
    let [nonce, ct] = fields(link, "cvsm-link1.").ok_or(malformed.clone())?;
    let nonce = decode(nonce, NONCE_LEN).map_err(|_| malformed.clone())?;
    let ct = decode(ct, KEY + TAG).map_err(|_| malformed)?;
    Ok((nonce, ct))
}

/// parse_links reads the key answer's `links` (`None`: absent or null,
/// none): a list of `{"key_version", "link"}`, each version an integer of
/// at least 2 given once and each link `cvsm-link1.<nonce>.<ct>`. Every link
/// is checked, needed or not; a malformed one is [`Failure::Malformed`] and
/// the answer is not used.
pub(crate) fn parse_links(raw: Option<&serde_json::Value>) -> Result<Vec<Link<'_>>, Failure> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    let items = raw.as_array().ok_or(Failure::Malformed(
        "the links of the key answer are not a list",
    ))?;
    let malformed =
        Failure::Malformed("the links of the key answer are not [{key_version, link}, ...]");
    let mut links: Vec<Link<'_>> = Vec::with_capacity(items.len());
    for item in items {
        let version = item.get("key_version").and_then(serde_json::Value::as_u64);
        let link = item.get("link").and_then(serde_json::Value::as_str);
        let (Some(key_version), Some(link)) = (version, link) else {
            return Err(malformed);
        };
        if key_version < 2 || links.iter().any(|l| l.key_version == key_version) {
            return Err(malformed);
        }
        link_parts(link)?;
        links.push(Link { key_version, link });
    }
    Ok(links)
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
