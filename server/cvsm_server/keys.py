"""Where the master key and the JWT signing secret come from.

`CVSM_MASTER_KEY` / `CVSM_JWT_SECRET` win. Unset, each is generated once into the data dir
(mode 0600) with a logged warning, so the embedded default needs no set-up. A master key that
does not decrypt the data already stored stops start-up.
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from . import db
from .config import ConfigError, Settings, parse_master_key
from .crypto import CANARY_AAD, CANARY_PLAINTEXT, DecryptionError, Keyring

log = logging.getLogger("cvsm.keys")


CANARY_LOCK_ID = 0x63766B63  # "cvkc"


class KeyMismatch(Exception):
    """The configured master key cannot decrypt the data in this database."""


def _read_or_create(path: Path, make: Callable[[], str], what: str, variable: str, loss: str) -> str:
    if path.exists():
        return path.read_text(encoding="ascii").strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = make()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (value + "\n").encode("ascii"))
    finally:
        os.close(fd)
    log.warning(
        "%s not set: generated a %s in %s (mode 0600); %s. Set %s to manage it yourself.",
        variable, what, path, loss, variable,
    )
    return value


def load_master_key(settings: Settings) -> bytes:
    if settings.master_key is not None:
        return settings.master_key
    raw = _read_or_create(
        settings.data_dir / "master.key",
        lambda: base64.b64encode(secrets.token_bytes(32)).decode("ascii"),
        "master key",
        "CVSM_MASTER_KEY",
        "back it up: without it the stored secrets cannot be decrypted",
    )
    try:
        return parse_master_key(raw)
    except ConfigError as exc:
        raise ConfigError(f"{settings.data_dir / 'master.key'}: {exc}") from None


def load_jwt_secret(settings: Settings) -> str:
    if settings.jwt_secret is not None:
        if len(settings.jwt_secret) < 32:
            raise ConfigError("CVSM_JWT_SECRET must be at least 32 characters")
        return settings.jwt_secret
    return _read_or_create(
        settings.data_dir / "jwt.secret",
        lambda: secrets.token_urlsafe(48),
        "JWT signing secret",
        "CVSM_JWT_SECRET",
        "every server process sharing the database needs the same one",
    )


async def check_master_key(pool, keyring: Keyring) -> None:
    """Refuse to run with a key that does not match the stored data; record a new key's canary."""
    async with db.pool_transaction(pool) as cur:
        # Serialises concurrent start-ups (an advisory lock: the server's role may not lock tables).
        await cur.execute("SELECT pg_advisory_xact_lock(%s)", (CANARY_LOCK_ID,))
        rows = await db.fetchall(cur, "SELECT key_id, nonce, ciphertext FROM key_canaries")
        mine = [r for r in rows if r["key_id"] == keyring.key_id]
        if mine:
            try:
                keyring.open(keyring.key_id, mine[0]["nonce"], mine[0]["ciphertext"], CANARY_AAD)
            except DecryptionError:
                raise KeyMismatch("the master key does not decrypt its own check value") from None
            return
        stored = await db.fetchone(
            cur, "SELECT count(*) AS n FROM secrets WHERE key_id <> %s", (keyring.key_id,)
        )
        if rows or stored["n"]:
            raise KeyMismatch(
                "the master key (CVSM_MASTER_KEY or <data dir>/master.key) does not match the key "
                "this database was encrypted with; start with the original key"
            )
        sealed = keyring.seal(CANARY_PLAINTEXT, CANARY_AAD)
        await cur.execute(
            "INSERT INTO key_canaries (key_id, nonce, ciphertext) VALUES (%s, %s, %s)",
            (sealed.key_id, sealed.nonce, sealed.ciphertext),
        )
