"""The cryptography of end-to-end teams, exactly as ``docs/e2e.md`` defines it.

The client opens what an end-to-end team's server serves: it parses a token into its API token,
private key and pin (:func:`parse_token`), unwraps the current team key (:func:`unwrap_team_key`),
walks the key versions' back-links down to the pinned version and checks its commitment
(:func:`verify_chain`), and opens sealed values (:func:`open_value`). The making half is here
too (wraps, links, recipient authentication, anchors), for programs (and tests) that write to
such a team. Every failure raises :class:`E2EError`, whose message never holds a key or a value;
a token of the first format (no pin) raises :class:`TokenFormatError`, one of them.

Primitives: X25519, HKDF-SHA256, PBKDF2-HMAC-SHA256 and AES-256-GCM from ``cryptography``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import re
import unicodedata
import uuid
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import hmac as crypto_hmac
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

from ._rules import MESSAGE_FIRST_FORMAT_TOKEN

__all__ = [
    "E2EError",
    "Envelope",
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "PrivateKey",
    "TokenFormatError",
    "TokenParts",
    "check_public_key",
    "check_recipient_auth",
    "commitment",
    "generate_key_pair",
    "join_token",
    "make_link",
    "new_team_key",
    "open_anchor",
    "open_link",
    "parse_token",
    "recipient_auth",
    "seal_anchor",
    "verify_chain",
    "open_recovery_wrap",
    "open_passphrase_wrap",
    "open_share",
    "open_value",
    "parse_envelope",
    "public_key",
    "seal_share",
    "seal_value",
    "split_token",
    "unwrap_team_key",
    "wrap_private_key_with_passphrase",
    "wrap_private_key_with_recovery",
    "wrap_team_key",
]

MIN_ITERATIONS = 600_000
"""The fewest PBKDF2 iterations a passphrase wrap may use (OWASP's figure for SHA-256)."""
MAX_ITERATIONS = 10_000_000
"""The most PBKDF2 iterations a passphrase wrap may say (a stored wrap cannot make a client hang)."""

_KEY = 32
_NONCE = 12
_B64U = r"[A-Za-z0-9_-]+"
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_NUMBER = r"[1-9][0-9]{0,9}"
_ENVELOPE_RE = re.compile(rf"cvsm-e2e1\.({_NUMBER})\.({_UUID})\.({_NUMBER})\.({_B64U})\.({_B64U})")
_WRAP_RE = re.compile(rf"cvsm-wrap1\.({_B64U})\.({_B64U})\.({_B64U})")
_PASS_RE = re.compile(rf"cvsm-pass1\.({_NUMBER})\.({_B64U})\.({_B64U})\.({_B64U})")
_REC_RE = re.compile(rf"cvsm-rec1\.({_B64U})\.({_B64U})")
_SHARE_RE = re.compile(rf"cvsm-share1\.({_B64U})\.({_B64U})")
_LINK_RE = re.compile(rf"cvsm-link1\.({_B64U})\.({_B64U})")
_ANCHOR_RE = re.compile(rf"cvsm-anchor1\.({_B64U})\.({_B64U})")
_ANCHOR_PLAIN_RE = re.compile(rf"({_NUMBER}):({_B64U})")
_TOKEN_RE = re.compile(rf"(cvsm_[0-9a-f]{{64}})\.({_B64U})\.({_NUMBER})\.({_B64U})")
_TOKEN_V1_RE = re.compile(rf"cvsm_[0-9a-f]{{64}}\.{_B64U}")

PrivateKey = bytes | X25519PrivateKey
"""An X25519 private key: its 32 raw bytes, or cryptography's ``X25519PrivateKey``, whose repr
shows no bytes (what a long-lived holder such as the client keeps, so that no traceback local
shows the key)."""


class E2EError(ValueError):
    """A key, envelope or token is malformed, or a ciphertext does not open with the key given."""


class TokenFormatError(E2EError):
    """A token string with a key part of the first format (``cvsm_<hex>.<key>``, no pin), or a
    malformed key part: a configuration error for an SDK, never an integrity one."""


@dataclass(frozen=True, slots=True)
class TokenParts:
    """A token string of an end-to-end team: the API token the server knows, the token's X25519
    private key, and its pin (the key version current when it was made and that key's
    commitment). The repr shows no key."""

    api_token: str
    private_key: bytes
    key_version: int
    commitment: bytes

    def __repr__(self) -> str:
        return f"TokenParts(api_token='cvsm_[redacted]', key_version={self.key_version})"


@dataclass(frozen=True, slots=True)
class Envelope:
    """The parts of a sealed value (``cvsm-e2e1.…``); ``ciphertext`` ends with the GCM tag."""

    key_version: int
    secret_id: str
    version: int
    nonce: bytes
    ciphertext: bytes

    def __repr__(self) -> str:
        return (f"Envelope(key_version={self.key_version}, secret_id={self.secret_id!r}, "
                f"version={self.version}, {len(self.ciphertext)} bytes)")


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64u(text: str, size: int | None = None, what: str = "field") -> bytes:
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise E2EError(f"{what} is not base64url") from None
    if _b64u(data) != text:
        raise E2EError(f"{what} is not canonical base64url")
    if size is not None and len(data) != size:
        raise E2EError(f"{what} must be {size} bytes")
    return data


def _open(key: bytes, nonce: bytes, ciphertext: bytes, aad: bytes, what: str) -> bytes:
    try:
        return AESGCM(key).decrypt(nonce, ciphertext, aad)
    except InvalidTag:
        raise E2EError(f"{what} does not open with this key") from None


def _hkdf(ikm: bytes, salt: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=_KEY, salt=salt, info=info).derive(ikm)


def _private(private_key: PrivateKey) -> X25519PrivateKey:
    if isinstance(private_key, X25519PrivateKey):
        return private_key
    if len(private_key) != _KEY:
        raise E2EError("an X25519 private key is 32 bytes")
    return X25519PrivateKey.from_private_bytes(private_key)


def generate_key_pair() -> tuple[bytes, bytes]:
    """A new X25519 key pair: ``(private key, public key)``, 32 raw bytes each."""
    private = X25519PrivateKey.generate()
    return private.private_bytes_raw(), private.public_key().public_bytes_raw()


def public_key(private_key: PrivateKey) -> bytes:
    """The X25519 public key of ``private_key``."""
    return _private(private_key).public_key().public_bytes_raw()


def new_team_key() -> bytes:
    """32 random bytes: a team key."""
    return os.urandom(_KEY)


def check_public_key(public: bytes) -> bytes:
    """``public`` when it is a usable X25519 public key: 32 bytes, not of low order (the all-zero
    key and the other small-order points give an all-zero shared secret with every private key).
    """
    if len(public) != _KEY:
        raise E2EError("an X25519 public key is 32 bytes")
    _shared(_PROBE, public)
    return public


def _shared(private: X25519PrivateKey, peer: bytes) -> bytes:
    try:
        shared = private.exchange(X25519PublicKey.from_public_bytes(peer))
    except ValueError:  # cryptography refuses an all-zero shared secret
        raise E2EError("the public key is not usable (low order)") from None
    if shared == bytes(_KEY):
        raise E2EError("the public key is not usable (low order)")
    return shared


_PROBE = X25519PrivateKey.from_private_bytes(bytes(range(1, 33)))  # any key finds a low-order one


def _team_key_aad(team_id: str, key_version: int) -> bytes:
    return f"cvsm-e2e:v1:team-key:{team_id}:{key_version}".encode()


def wrap_team_key(team_key: bytes, team_id: str, key_version: int, recipient_public: bytes, *,
                  _ephemeral: bytes | None = None, _nonce: bytes | None = None) -> str:
    """``cvsm-wrap1.…``: ``team_key`` wrapped to the X25519 public key ``recipient_public``."""
    if len(team_key) != _KEY or len(recipient_public) != _KEY:
        raise E2EError("a team key and a public key are 32 bytes")
    eph = _private(_ephemeral) if _ephemeral is not None else X25519PrivateKey.generate()
    eph_public = eph.public_key().public_bytes_raw()
    wrapping = _hkdf(_shared(eph, recipient_public), eph_public + recipient_public,
                     b"cvsm-e2e:v1:wrap")
    nonce = _nonce if _nonce is not None else os.urandom(_NONCE)
    ct = AESGCM(wrapping).encrypt(nonce, team_key, _team_key_aad(team_id, key_version))
    return f"cvsm-wrap1.{_b64u(eph_public)}.{_b64u(nonce)}.{_b64u(ct)}"


def unwrap_team_key(wrapped: str, team_id: str, key_version: int, private_key: PrivateKey) -> bytes:
    """The team key in ``wrapped``, opened with the recipient's X25519 private key (raw bytes or an
    ``X25519PrivateKey``)."""
    match = _WRAP_RE.fullmatch(wrapped)
    if match is None:
        raise E2EError("a wrapped team key must look like cvsm-wrap1.<eph>.<nonce>.<ct>")
    eph_public = _unb64u(match[1], _KEY, "ephemeral key")
    nonce = _unb64u(match[2], _NONCE, "nonce")
    ct = _unb64u(match[3], _KEY + 16, "wrapped key")
    private = _private(private_key)
    own_public = private.public_key().public_bytes_raw()
    wrapping = _hkdf(_shared(private, eph_public), eph_public + own_public, b"cvsm-e2e:v1:wrap")
    return _open(wrapping, nonce, ct, _team_key_aad(team_id, key_version), "the wrapped team key")


def _value_aad(team_id: str, secret_id: str, version: int, environment: str, name: str) -> bytes:
    return f"cvsm-e2e:v1:secret:{team_id}:{secret_id}:{version}:{environment}:{name}".encode()


def seal_value(value: str, team_key: bytes, key_version: int, *, team_id: str, secret_id: str,
               version: int, environment: str, name: str, _nonce: bytes | None = None) -> str:
    """``cvsm-e2e1.…``: ``value`` sealed for version ``version`` of secret ``secret_id``."""
    secret_id = str(uuid.UUID(secret_id))
    nonce = _nonce if _nonce is not None else os.urandom(_NONCE)
    ct = AESGCM(team_key).encrypt(nonce, value.encode("utf-8"),
                                  _value_aad(team_id, secret_id, version, environment, name))
    return f"cvsm-e2e1.{key_version}.{secret_id}.{version}.{_b64u(nonce)}.{_b64u(ct)}"


def parse_envelope(envelope: str) -> Envelope:
    """The parts of a sealed value; :class:`E2EError` when it is not one."""
    match = _ENVELOPE_RE.fullmatch(envelope)
    if match is None:
        raise E2EError("a sealed value must look like "
                       "cvsm-e2e1.<key version>.<secret id>.<version>.<nonce>.<ciphertext>")
    ciphertext = _unb64u(match[5], None, "ciphertext")
    if len(ciphertext) < 16:
        raise E2EError("ciphertext is shorter than its tag")
    return Envelope(int(match[1]), match[2], int(match[3]), _unb64u(match[4], _NONCE, "nonce"),
                    ciphertext)


def open_value(envelope: str, team_key: bytes, *, team_id: str, environment: str,
               name: str) -> str:
    """The value sealed in ``envelope``, which must have been sealed for ``environment`` and
    ``name`` in ``team_id`` (so a server cannot serve one secret's value as another's)."""
    parts = parse_envelope(envelope)
    plain = _open(team_key, parts.nonce, parts.ciphertext,
                  _value_aad(team_id, parts.secret_id, parts.version, environment, name),
                  "the sealed value")
    try:
        return plain.decode("utf-8")
    except UnicodeDecodeError:
        raise E2EError("the sealed value is not UTF-8") from None


def _user_key_aad(user_id: str) -> bytes:
    return f"cvsm-e2e:v1:user-key:{user_id}".encode()


def _passphrase_key(passphrase: str, salt: bytes, iterations: int) -> bytes:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise E2EError(f"a passphrase wrap needs {MIN_ITERATIONS} to {MAX_ITERATIONS} iterations")
    # NFC first: the same passphrase typed on two machines (composed or not) opens the same wrap.
    return PBKDF2HMAC(algorithm=hashes.SHA256(), length=_KEY, salt=salt, iterations=iterations
                      ).derive(unicodedata.normalize("NFC", passphrase).encode("utf-8"))


def wrap_private_key_with_passphrase(private_key: bytes, passphrase: str, user_id: str, *,
                                     iterations: int = MIN_ITERATIONS,
                                     _salt: bytes | None = None,
                                     _nonce: bytes | None = None) -> str:
    """``cvsm-pass1.…``: a member's private key wrapped by their encryption passphrase."""
    salt = _salt if _salt is not None else os.urandom(16)
    nonce = _nonce if _nonce is not None else os.urandom(_NONCE)
    ct = AESGCM(_passphrase_key(passphrase, salt, iterations)).encrypt(
        nonce, _private(private_key).private_bytes_raw(), _user_key_aad(user_id))
    return f"cvsm-pass1.{iterations}.{_b64u(salt)}.{_b64u(nonce)}.{_b64u(ct)}"


def open_passphrase_wrap(wrapped: str, passphrase: str, user_id: str) -> bytes:
    """The private key in a ``cvsm-pass1`` wrap; :class:`E2EError` for a wrong passphrase."""
    match = _PASS_RE.fullmatch(wrapped)
    if match is None:
        raise E2EError("a passphrase wrap must look like cvsm-pass1.<iterations>.<salt>.<nonce>.<ct>")
    key = _passphrase_key(passphrase, _unb64u(match[2], 16, "salt"), int(match[1]))
    return _open(key, _unb64u(match[3], _NONCE, "nonce"), _unb64u(match[4], _KEY + 16, "ct"),
                 _user_key_aad(user_id), "the private key (wrong passphrase?)")


def _recovery_key(recovery_key: bytes) -> bytes:
    return _hkdf(recovery_key, b"", b"cvsm-e2e:v1:recovery")


def wrap_private_key_with_recovery(private_key: bytes, recovery_key: bytes, user_id: str, *,
                                   _nonce: bytes | None = None) -> str:
    """``cvsm-rec1.…``: a member's private key wrapped by their 32-byte recovery key."""
    if len(recovery_key) != _KEY:
        raise E2EError("a recovery key is 32 bytes")
    nonce = _nonce if _nonce is not None else os.urandom(_NONCE)
    ct = AESGCM(_recovery_key(recovery_key)).encrypt(
        nonce, _private(private_key).private_bytes_raw(), _user_key_aad(user_id))
    return f"cvsm-rec1.{_b64u(nonce)}.{_b64u(ct)}"


def open_recovery_wrap(wrapped: str, recovery_key: bytes, user_id: str) -> bytes:
    """The private key in a ``cvsm-rec1`` wrap."""
    match = _REC_RE.fullmatch(wrapped)
    if match is None or len(recovery_key) != _KEY:
        raise E2EError("a recovery wrap must look like cvsm-rec1.<nonce>.<ct>")
    return _open(_recovery_key(recovery_key), _unb64u(match[1], _NONCE, "nonce"),
                 _unb64u(match[2], _KEY + 16, "ct"), _user_key_aad(user_id),
                 "the private key (wrong recovery key?)")


def seal_share(value: str, share_key: bytes, *, _nonce: bytes | None = None) -> str:
    """``cvsm-share1.…``: a shared value sealed under the key its link carries."""
    nonce = _nonce if _nonce is not None else os.urandom(_NONCE)
    ct = AESGCM(share_key).encrypt(nonce, value.encode("utf-8"), b"cvsm-e2e:v1:share")
    return f"cvsm-share1.{_b64u(nonce)}.{_b64u(ct)}"


def open_share(envelope: str, share_key: bytes) -> str:
    """The value of a ``cvsm-share1`` envelope."""
    match = _SHARE_RE.fullmatch(envelope)
    if match is None or len(share_key) != _KEY:
        raise E2EError("a shared value must look like cvsm-share1.<nonce>.<ct>")
    plain = _open(share_key, _unb64u(match[1], _NONCE, "nonce"), _unb64u(match[2], None, "ct"),
                  b"cvsm-e2e:v1:share", "the shared value")
    try:
        return plain.decode("utf-8")
    except UnicodeDecodeError:
        raise E2EError("the shared value is not UTF-8") from None


def parse_token(token: str) -> TokenParts | None:
    """The parts of a token string of an end-to-end team, ``None`` for a token without a key part.

    Only an API token (``cvsm_…``) carries a key part; anything else (a JWT has dots of its own)
    has none. A key part of the first format (no pin) or a malformed one raises
    :class:`TokenFormatError`."""
    if not token.startswith("cvsm_") or "." not in token:
        return None
    match = _TOKEN_RE.fullmatch(token)
    if match is None:
        if _TOKEN_V1_RE.fullmatch(token):
            raise TokenFormatError(
                f"{MESSAGE_FIRST_FORMAT_TOKEN} for the team (docs/e2e.md; cvsm_<64 hex>.<key> has no pin)")
        raise TokenFormatError("a token with a key must look like "
                               "cvsm_<64 hex>.<private key>.<key version>.<commitment>")
    try:
        private_key = _unb64u(match[2], _KEY, "the token's private key")
        pinned = _unb64u(match[4], _KEY, "the token's key commitment")
    except E2EError as exc:
        raise TokenFormatError(str(exc)) from None
    return TokenParts(match[1], private_key, int(match[3]), pinned)


def split_token(token: str) -> tuple[str, bytes | None]:
    """``(API token, private key or None)``: the part the server knows, and the key after it
    (:func:`parse_token` without the pin)."""
    parts = parse_token(token)
    return (token, None) if parts is None else (parts.api_token, parts.private_key)


def join_token(api_token: str, private_key: PrivateKey, key_version: int, commitment_: bytes) -> str:
    """The token string an application of an end-to-end team is given: the API token, the
    token's private key, and its pin (the current key version and that key's commitment)."""
    if len(commitment_) != _KEY or key_version < 1:
        raise E2EError("a pin is a key version and a 32-byte commitment")
    return (f"{api_token}.{_b64u(_private(private_key).private_bytes_raw())}."
            f"{key_version}.{_b64u(commitment_)}")


# --- format 2: commitments, back-links, recipient authentication, anchors -----------------------

def commitment(team_key: bytes, team_id: str, key_version: int) -> bytes:
    """``C_v``: the 32-byte commitment to team ``team_id``'s key of version ``key_version``."""
    if len(team_key) != _KEY:
        raise E2EError("a team key is 32 bytes")
    return _hkdf(team_key, b"", f"cvsm-e2e:v2:commit:{team_id}:{key_version}".encode())


def _link_aad(team_id: str, key_version: int) -> bytes:
    return f"cvsm-e2e:v2:link:{team_id}:{key_version}".encode()


def make_link(new_key: bytes, old_key: bytes, team_id: str, new_version: int, *,
              _nonce: bytes | None = None) -> str:
    """``cvsm-link1.…``: the key of version ``new_version - 1`` sealed under that of ``new_version``
    (made by the re-keyer, who holds both)."""
    if len(new_key) != _KEY or len(old_key) != _KEY or new_version < 2:
        raise E2EError("a link seals a 32-byte key under the 32-byte key of a version >= 2")
    nonce = _nonce if _nonce is not None else os.urandom(_NONCE)
    ct = AESGCM(new_key).encrypt(nonce, old_key, _link_aad(team_id, new_version))
    return f"cvsm-link1.{_b64u(nonce)}.{_b64u(ct)}"


def open_link(link: str, new_key: bytes, team_id: str, new_version: int) -> bytes:
    """The key of version ``new_version - 1``, opened from the link stored with ``new_version``."""
    match = _LINK_RE.fullmatch(link) if isinstance(link, str) else None
    if match is None:
        raise E2EError("a link must look like cvsm-link1.<nonce>.<ct>")
    return _open(new_key, _unb64u(match[1], _NONCE, "nonce"), _unb64u(match[2], _KEY + 16, "link"),
                 _link_aad(team_id, new_version), f"the link of key version {new_version}")


def parse_links(raw: Any) -> dict[int, str]:
    """The ``links`` of a key answer by key version: ``[{"key_version": <int>, "link":
    "cvsm-link1.<12-byte nonce>.<48-byte ct>"}, ...]``, each version (2 or more) once (absent or
    ``None``: none). Every link is checked, needed or not; :class:`E2EError` when one is
    malformed: such an answer is not used."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise E2EError("the links of the key answer are not a list")
    links: dict[int, str] = {}
    for item in raw:
        version = item.get("key_version") if isinstance(item, dict) else None
        link = item.get("link") if isinstance(item, dict) else None
        if (isinstance(version, bool) or not isinstance(version, int) or version < 2 or version in links
                or not isinstance(link, str)):
            raise E2EError("the links of the key answer are not [{key_version, link}, ...]")
        match = _LINK_RE.fullmatch(link)
        if match is None:
            raise E2EError(f"the link of key version {version} does not look like cvsm-link1.<nonce>.<ct>")
        _unb64u(match[1], _NONCE, f"the nonce of the link of key version {version}")
        _unb64u(match[2], _KEY + 16, f"the link of key version {version}")
        links[version] = link
    return links


def verify_chain(current_key: bytes, current_version: int, team_id: str, links: dict[int, str],
                 pin_version: int, pin_commitment: bytes, *, down_to: int | None = None
                 ) -> dict[int, bytes]:
    """The team keys from ``current_version`` down to ``min(pin_version, down_to)``, by version,
    after checking that the chain of links from ``current_key`` reaches the pinned key version and
    that key's commitment is ``pin_commitment`` (in constant time). :class:`E2EError` when the
    current version is below the pin, a link is missing or does not open, or the commitment
    differs: the current key was not made by a holder of the pinned one."""
    if current_version < pin_version:
        raise E2EError(f"the team key is version {current_version}, below the pinned version "
                       f"{pin_version}")
    lowest = pin_version if down_to is None else max(1, min(pin_version, down_to))
    keys = {current_version: current_key}
    key = current_key
    for version in range(current_version, lowest, -1):
        link = links.get(version)
        if link is None:
            raise E2EError(f"the link of key version {version} is missing")
        key = open_link(link, key, team_id, version)
        keys[version - 1] = key
    if not hmac.compare_digest(commitment(keys[pin_version], team_id, pin_version), pin_commitment):
        raise E2EError(f"the team key does not match the pinned commitment of key version {pin_version}")
    return keys


def _auth_key(team_key: bytes, team_id: str, key_version: int) -> bytes:
    return _hkdf(team_key, b"", f"cvsm-e2e:v2:recipient:{team_id}:{key_version}".encode())


def _recipient_message(kind: str, recipient_id: str | None, public: bytes) -> bytes:
    if kind == "user" and recipient_id:
        return f"user:{recipient_id}:{_b64u(public)}".encode()
    if kind == "token" and recipient_id is None:
        return f"token:{_b64u(public)}".encode()
    raise E2EError("a recipient is ('user', its user id) or ('token', None)")


def recipient_auth(team_key: bytes, team_id: str, key_version: int, kind: str,
                   recipient_id: str | None, public: bytes) -> str:
    """``auth``: HMAC-SHA256 under the key version's recipient key over ``user:<id>:<public key>``
    (a member) or ``token:<public key>`` (a token), in base64url: made by the client that adds the
    recipient, checked by the one that re-keys."""
    mac = crypto_hmac.HMAC(_auth_key(team_key, team_id, key_version), hashes.SHA256())
    mac.update(_recipient_message(kind, recipient_id, check_public_key(public)))
    return _b64u(mac.finalize())


def check_recipient_auth(auth: str | None, team_key: bytes, team_id: str, key_version: int,
                         kind: str, recipient_id: str | None, public: bytes) -> None:
    """:class:`E2EError` unless ``auth`` authenticates the recipient's public key for the key
    version (a missing ``auth`` included)."""
    if not isinstance(auth, str):
        raise E2EError("the recipient has no authentication (added before format 2, or by the server)")
    expected = recipient_auth(team_key, team_id, key_version, kind, recipient_id, public)
    if not hmac.compare_digest(expected.encode(), auth.encode()):
        raise E2EError("the recipient's public key was not added by a holder of the team key")


def _anchor_key(private_key: PrivateKey) -> bytes:
    return _hkdf(_private(private_key).private_bytes_raw(), b"", b"cvsm-e2e:v2:anchor")


def _anchor_aad(user_id: str, team_id: str) -> bytes:
    return f"cvsm-e2e:v2:anchor:{user_id}:{team_id}".encode()


def seal_anchor(private_key: PrivateKey, user_id: str, team_id: str, key_version: int,
                commitment_: bytes, *, _nonce: bytes | None = None) -> str:
    """``cvsm-anchor1.…``: a member's record of the newest key version (and its commitment) of a
    team their client verified, sealed under a key only their private key gives."""
    if len(commitment_) != _KEY or key_version < 1:
        raise E2EError("an anchor holds a key version and a 32-byte commitment")
    nonce = _nonce if _nonce is not None else os.urandom(_NONCE)
    ct = AESGCM(_anchor_key(private_key)).encrypt(
        nonce, f"{key_version}:{_b64u(commitment_)}".encode(), _anchor_aad(user_id, team_id))
    return f"cvsm-anchor1.{_b64u(nonce)}.{_b64u(ct)}"


def open_anchor(anchor: str, private_key: PrivateKey, user_id: str, team_id: str) -> tuple[int, bytes]:
    """``(key version, commitment)`` of a member's anchor for a team."""
    match = _ANCHOR_RE.fullmatch(anchor) if isinstance(anchor, str) else None
    if match is None:
        raise E2EError("an anchor must look like cvsm-anchor1.<nonce>.<ct>")
    plain = _open(_anchor_key(private_key), _unb64u(match[1], _NONCE, "nonce"),
                  _unb64u(match[2], None, "anchor"), _anchor_aad(user_id, team_id), "the anchor")
    inner = _ANCHOR_PLAIN_RE.fullmatch(plain.decode("ascii", "replace"))
    if inner is None:
        raise E2EError("the anchor does not hold <key version>:<commitment>")
    return int(inner[1]), _unb64u(inner[2], _KEY, "the anchor's commitment")
