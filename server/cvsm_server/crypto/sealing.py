"""Encryption at rest (AES-256-GCM), keyed token hashes, and the master key's start-up check.

Each ciphertext is stored with its 96-bit random nonce and the id of the key that made it, so the
key can rotate: the keyring holds the current master key, which seals, and the old ones
(`CVSM_OLD_MASTER_KEYS`), which still open what they sealed until `cvsm-server rotate-key` has
re-sealed it under the current one. Associated data binds a ciphertext to the row it belongs to:
a ciphertext copied to another team, secret or version does not decrypt.

Token hashes (API tokens, share tokens, mail tokens) are keyed with a hash key that cannot change
with the master key (the tokens themselves are not stored, so nothing could be re-hashed). It is
derived from the first master key the database was used with, kept in the database sealed under
each master key since (`token_hash_keys`, see keys.py), and installed with `use_hash_key` at
start-up; until then it is derived from the current key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

NONCE_BYTES = 12


class DecryptionError(Exception):
    """A ciphertext did not authenticate under the key and associated data given."""


@dataclass(frozen=True)
class Sealed:
    key_id: str
    nonce: bytes
    ciphertext: bytes


def key_id_of(master_key: bytes) -> str:
    """The public id of a master key, stored beside every ciphertext it makes."""
    return hashlib.sha256(b"cvsm-key-id\x00" + master_key).hexdigest()[:16]


def derive_hash_key(master_key: bytes) -> bytes:
    """The token-hash key a master key gives (a separate key, so the AES key has one purpose)."""
    return hmac.new(master_key, b"cvsm-token-hash-v1", hashlib.sha256).digest()


class Keyring:
    """The current master key, the old ones still accepted, and the token-hash key. Never
    printed: its repr holds only key ids."""

    def __init__(self, master_key: bytes, old_keys: Iterable[bytes] = ()) -> None:
        old_keys = tuple(old_keys)
        if len(master_key) != 32 or any(len(k) != 32 for k in old_keys):
            raise ValueError("master key must be 32 bytes")
        self.key_id = key_id_of(master_key)
        self._aeads = {self.key_id: AESGCM(master_key)}
        for key in old_keys:
            self._aeads.setdefault(key_id_of(key), AESGCM(key))
        self._derived = {key_id_of(k): derive_hash_key(k) for k in (master_key, *old_keys)}
        self._hmac_key = self._derived[self.key_id]

    def __repr__(self) -> str:
        return f"Keyring(key_id={self.key_id!r}, old_key_ids={self.old_key_ids!r})"

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key id this keyring opens, the current one first."""
        return tuple(self._aeads)

    @property
    def old_key_ids(self) -> tuple[str, ...]:
        return tuple(k for k in self._aeads if k != self.key_id)

    def derived_hash_key(self, key_id: str) -> bytes:
        """The token-hash key the master key `key_id` (one of this keyring's) gives."""
        return self._derived[key_id]

    def use_hash_key(self, hash_key: bytes) -> None:
        """Hash tokens with `hash_key` from now on (the database's, read at start-up)."""
        self._hmac_key = bytes(hash_key)

    @property
    def hash_key(self) -> bytes:
        return self._hmac_key

    def seal(self, plaintext: bytes, aad: bytes) -> Sealed:
        """Encrypt under the current key."""
        nonce = os.urandom(NONCE_BYTES)
        return Sealed(self.key_id, nonce, self._aeads[self.key_id].encrypt(nonce, plaintext, aad))

    def open(self, key_id: str, nonce: bytes, ciphertext: bytes, aad: bytes) -> bytes:
        """Decrypt a ciphertext made by any key of this keyring, current or old."""
        aead = self._aeads.get(key_id)
        if aead is None:
            raise DecryptionError(f"ciphertext made with key {key_id}, which this server does "
                                  f"not have (it has {', '.join(self._aeads)})")
        try:
            return aead.decrypt(bytes(nonce), bytes(ciphertext), aad)
        except InvalidTag:
            raise DecryptionError("ciphertext does not authenticate") from None

    def token_hash(self, token: str) -> bytes:
        """Keyed hash of an API token or share token, as stored."""
        return hmac.new(self._hmac_key, token.encode(), hashlib.sha256).digest()


def secret_aad(team_id: object, secret_id: object, version: int) -> bytes:
    return f"cvsm:secret:{team_id}:{secret_id}:{version}".encode()


def share_aad(share_id: object) -> bytes:
    return f"cvsm:share:{share_id}".encode()


def totp_aad(user_id: object) -> bytes:
    return f"cvsm:totp:{user_id}".encode()


CANARY_AAD = b"cvsm:key-canary"
CANARY_PLAINTEXT = b"cvsm master key check"
HASH_KEY_AAD = b"cvsm:token-hash-key"


def mail_aad(mail_id: object) -> bytes:
    return f"cvsm:mail:{mail_id}".encode()


def webhook_aad(webhook_id: object) -> bytes:
    return f"cvsm:webhook:{webhook_id}".encode()


def rotation_aad(team_id: object, secret_id: object, run_id: object) -> bytes:
    """A rotation's pending value: bound to its run, so it opens as nothing else."""
    return f"cvsm:rotation:{team_id}:{secret_id}:{run_id}".encode()


def rotation_target_aad(policy_id: object) -> bytes:
    """A rotation target's sealed setting (a webhook target's signing secret)."""
    return f"cvsm:rotation-target:{policy_id}".encode()
