"""Encryption at rest (AES-256-GCM), keyed token hashes, and the master key's start-up check.

Each ciphertext is stored with its 96-bit random nonce and the id of the key that made it, so the
key can rotate later. Associated data binds a ciphertext to the row it belongs to: a ciphertext
copied to another team, secret or version does not decrypt.
"""

from __future__ import annotations

import hashlib
import hmac
import os
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


class Keyring:
    """The master key and what is derived from it. Never printed: its repr holds only the key id."""

    def __init__(self, master_key: bytes) -> None:
        if len(master_key) != 32:
            raise ValueError("master key must be 32 bytes")
        self._aead = AESGCM(master_key)
        self.key_id = hashlib.sha256(b"cvsm-key-id\x00" + master_key).hexdigest()[:16]
        # A separate key for HMAC token hashes, so the AES key is used for one purpose only.
        self._hmac_key = hmac.new(master_key, b"cvsm-token-hash-v1", hashlib.sha256).digest()

    def __repr__(self) -> str:
        return f"Keyring(key_id={self.key_id!r})"

    def seal(self, plaintext: bytes, aad: bytes) -> Sealed:
        nonce = os.urandom(NONCE_BYTES)
        return Sealed(self.key_id, nonce, self._aead.encrypt(nonce, plaintext, aad))

    def open(self, key_id: str, nonce: bytes, ciphertext: bytes, aad: bytes) -> bytes:
        if key_id != self.key_id:
            raise DecryptionError(f"ciphertext made with key {key_id}, server has {self.key_id}")
        try:
            return self._aead.decrypt(bytes(nonce), bytes(ciphertext), aad)
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
