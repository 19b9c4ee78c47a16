"""Where the master key and the JWT signing secret come from.

`CVSM_MASTER_KEY` / `CVSM_JWT_SECRET` win. Unset, each is generated once into the data dir
(mode 0600) with a logged warning, so the embedded default needs no set-up. Old master keys
(`CVSM_OLD_MASTER_KEYS`) still decrypt during a rotation (`rotation.py`). A master key that
does not decrypt the data already stored, or data still sealed under a key not given, stops
start-up.
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from .. import db
from . import rekey as rotation
from ..core.config import ConfigError, Settings, make_data_dir, parse_master_key
from .sealing import CANARY_AAD, CANARY_PLAINTEXT, HASH_KEY_AAD, DecryptionError, Keyring

log = logging.getLogger("cvsm.keys")


CANARY_LOCK_ID = 0x63766B63  # "cvkc"


class KeyMismatch(Exception):
    """The configured master key cannot decrypt the data in this database."""


def _read_or_create(path: Path, make: Callable[[], str], what: str, variable: str, loss: str) -> str:
    if path.exists():
        return path.read_text(encoding="ascii").strip()
    make_data_dir(path.parent)
    value = make()
    # Written whole beside it, then linked into place (which fails if the name exists): processes
    # starting together on a fresh data dir all read the one that won, never a half-written one.
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (value + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(partial, path)
    except FileExistsError:
        return path.read_text(encoding="ascii").strip()
    finally:
        partial.unlink(missing_ok=True)
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
    """Refuse to run with keys that do not match the stored data; record a new key's canary and
    its copy of the token-hash key, and install that hash key in `keyring`.

    One canary per key id: a known plaintext sealed with that key when it was first used. A key
    with a canary must open it. A new current key is accepted on a fresh database, or when an old
    key given in `CVSM_OLD_MASTER_KEYS` opens its own canary (the operator holds the key the data
    is under: a rotation has begun). Whatever the canaries say, a value still sealed under a key
    this server does not have stops start-up: it could not be read.
    """
    async with db.pool_transaction(pool) as cur:
        # Serialises concurrent start-ups (an advisory lock: the server's role may not lock tables).
        await cur.execute("SELECT pg_advisory_xact_lock(%s)", (CANARY_LOCK_ID,))
        rows = await db.fetchall(
            cur, "SELECT key_id, nonce, ciphertext FROM key_canaries ORDER BY created_at, key_id")
        canaries = {r["key_id"]: r for r in rows}
        for key_id in keyring.key_ids:
            if (row := canaries.get(key_id)) is not None:
                try:
                    keyring.open(key_id, row["nonce"], row["ciphertext"], CANARY_AAD)
                except DecryptionError:
                    raise KeyMismatch(f"the master key {key_id} does not decrypt its own check "
                                      "value") from None
        if keyring.key_id not in canaries:
            if canaries and not any(k in canaries for k in keyring.key_ids):
                raise KeyMismatch(
                    "the master key (CVSM_MASTER_KEY or <data dir>/master.key) does not match the "
                    "key this database was encrypted with; start with the original key, or, to "
                    "rotate to a new key, list the original in CVSM_OLD_MASTER_KEYS"
                )
            sealed = keyring.seal(CANARY_PLAINTEXT, CANARY_AAD)
            await cur.execute(
                "INSERT INTO key_canaries (key_id, nonce, ciphertext) VALUES (%s, %s, %s)",
                (sealed.key_id, sealed.nonce, sealed.ciphertext),
            )
            canaries[sealed.key_id] = {"key_id": sealed.key_id}
        await _refuse_missing_keys(cur, keyring)
        await _install_hash_key(cur, keyring, first_key_id=next(iter(canaries)))


async def _refuse_missing_keys(cur, keyring: Keyring) -> None:
    """Stop when a stored value is sealed under a key this server was not given."""
    missing = await rotation.values_under_other_keys(cur, keyring.key_ids)
    if missing:
        listed = ", ".join(f"{n} under key {k}" for k, n in sorted(missing.items()))
        raise KeyMismatch(
            f"{sum(missing.values())} stored value(s) are encrypted with a master key this server "
            f"was not given ({listed}): list that key in CVSM_OLD_MASTER_KEYS (and finish "
            "`cvsm-server rotate-key` before starting without it)"
        )


async def _install_hash_key(cur, keyring: Keyring, first_key_id: str) -> None:
    """The token-hash key: opened from the database's copy under one of our keys, or (a database
    from before rotation existed, or a fresh one) derived from the first key the database was
    used with; stored under the current key when it has no copy yet."""
    rows = {r["key_id"]: r for r in await db.fetchall(
        cur, "SELECT key_id, nonce, ciphertext FROM token_hash_keys ORDER BY created_at, key_id")}
    usable = [k for k in keyring.key_ids if k in rows]
    if usable:
        row = rows[usable[0]]
        try:
            hash_key = keyring.open(row["key_id"], row["nonce"], row["ciphertext"], HASH_KEY_AAD)
        except DecryptionError:
            raise KeyMismatch(f"the master key {row['key_id']} does not decrypt the token hash "
                              "key") from None
    elif rows:
        raise KeyMismatch("the token hash key is stored only under master keys this server was "
                          f"not given ({', '.join(rows)}); list one in CVSM_OLD_MASTER_KEYS")
    elif first_key_id in keyring.key_ids:
        hash_key = keyring.derived_hash_key(first_key_id)
    else:
        raise KeyMismatch(f"the tokens of this database were hashed with master key "
                          f"{first_key_id}, which this server was not given; list it in "
                          "CVSM_OLD_MASTER_KEYS")
    if keyring.key_id not in rows:
        sealed = keyring.seal(hash_key, HASH_KEY_AAD)
        await cur.execute(
            "INSERT INTO token_hash_keys (key_id, nonce, ciphertext) VALUES (%s, %s, %s)",
            (sealed.key_id, sealed.nonce, sealed.ciphertext),
        )
    keyring.use_hash_key(hash_key)
