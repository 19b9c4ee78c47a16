"""Password hashing with Argon2id (from `cryptography`), always off the event loop.

An unknown user still costs one full verification against a dummy hash, so response time does
not tell whether an account exists.
"""

from __future__ import annotations

import asyncio
import os
import secrets

from cryptography.exceptions import InvalidKey
from cryptography.hazmat.primitives.kdf.argon2 import Argon2id

# OWASP's Argon2id baseline: 19 MiB, 2 iterations, 1 lane.
MEMORY_KIB = 19 * 1024
ITERATIONS = 2
LANES = 1

MIN_LENGTH = 8
MAX_LENGTH = 1024


def _hash(password: str) -> str:
    kdf = Argon2id(salt=os.urandom(16), length=32, iterations=ITERATIONS, lanes=LANES,
                   memory_cost=MEMORY_KIB)
    return kdf.derive_phc_encoded(password.encode())


def _verify(password: str, encoded: str) -> bool:
    try:
        Argon2id.verify_phc_encoded(password.encode(), encoded)
        return True
    except (InvalidKey, ValueError):
        return False


# The dummy hash an unknown user is verified against: of a random password nobody knows, made
# once per process (an app made again in one process, as the tests do per test, reuses it).
_DUMMY: str | None = None


def _dummy_hash() -> str:
    global _DUMMY
    if _DUMMY is None:
        _DUMMY = _hash(secrets.token_urlsafe(24))
    return _DUMMY


class PasswordHasher:
    """Hashes and verifies passwords in a worker thread."""

    def __init__(self) -> None:
        self._dummy = _dummy_hash()

    async def hash(self, password: str) -> str:
        return await asyncio.get_running_loop().run_in_executor(None, _hash, password)

    async def verify(self, password: str, encoded: str | None) -> bool:
        """True when `password` matches; with no hash (unknown user) burns the same time."""
        target = encoded or self._dummy
        ok = await asyncio.get_running_loop().run_in_executor(None, _verify, password, target)
        return ok and encoded is not None
