"""Master-key rotation: every sealed column of the database, and re-sealing what is still under
an old key (`cvsm-server rotate-key`).

Each batch is its own short transaction: it locks up to `batch_size` rows still under another key
(`FOR UPDATE ... SKIP LOCKED`, so a request holding a row is never waited for in the first
pass), opens each with the keyring's old key and seals it under the current one. Servers keep
serving meanwhile: they hold the old keys too and read either kind of row. A killed run loses at
most its open batch; the next run skips the rows already under the current key. Rows skipped
because they were locked are taken by a later pass, which waits for the lock.

An end-to-end team's values, versions and shares are envelopes no server key opens (migration
0018): their rows have no `key_id`, so every query here (`key_id IS NOT NULL`) leaves them out.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass

from .. import db
from .sealing import (DecryptionError, Keyring, mail_aad, rotation_aad, rotation_target_aad,
                      secret_aad, share_aad, totp_aad, webhook_aad)


@dataclass(frozen=True)
class SealedTable:
    """One table's sealed columns, and how to rebuild a row's associated data."""

    table: str
    key_id: str
    nonce: str
    ciphertext: str
    # Extra columns the associated data needs (selected with the row) and a join for them.
    extra: str
    join: str
    aad: Callable[[dict], bytes]


SEALED_TABLES = (
    SealedTable("secrets", "key_id", "nonce", "ciphertext", ", t.team_id, t.version", "",
                lambda r: secret_aad(r["team_id"], r["id"], r["version"])),
    SealedTable("secret_versions", "key_id", "nonce", "ciphertext",
                ", t.secret_id, t.version, s.team_id", "JOIN secrets s ON s.id = t.secret_id",
                lambda r: secret_aad(r["team_id"], r["secret_id"], r["version"])),
    SealedTable("secret_shares", "key_id", "nonce", "ciphertext", "", "",
                lambda r: share_aad(r["id"])),
    SealedTable("users", "totp_key_id", "totp_nonce", "totp_ciphertext", "", "",
                lambda r: totp_aad(r["id"])),
    SealedTable("mail_outbox", "key_id", "nonce", "ciphertext", "", "",
                lambda r: mail_aad(r["id"])),
    SealedTable("webhooks", "key_id", "nonce", "ciphertext", "", "",
                lambda r: webhook_aad(r["id"])),
    SealedTable("secret_rotation_policies", "key_id", "nonce", "ciphertext", "", "",
                lambda r: rotation_target_aad(r["id"])),
    SealedTable("secret_rotations", "key_id", "nonce", "ciphertext", ", t.team_id, t.secret_id",
                "", lambda r: rotation_aad(r["team_id"], r["secret_id"], r["id"])),
)

_NO_ID = uuid.UUID(int=0)


async def values_under_other_keys(cur: db.Cursor, known: Collection[str]) -> dict[str, int]:
    """How many stored values each key id not in `known` seals, over every sealed table.

    The key ids present are found by walking the key-id indexes (one probe per distinct id, not
    a scan), so this is cheap at start-up however many rows there are; only the rows of unknown
    keys are then counted."""
    found: dict[str, int] = {}
    for spec in SEALED_TABLES:
        rows = await db.fetchall(cur, f"""
            WITH RECURSIVE ids(key_id) AS (
                (SELECT {spec.key_id} FROM {spec.table} WHERE {spec.key_id} IS NOT NULL
                 ORDER BY {spec.key_id} LIMIT 1)
                UNION ALL
                SELECT (SELECT {spec.key_id} FROM {spec.table} WHERE {spec.key_id} > ids.key_id
                        ORDER BY {spec.key_id} LIMIT 1)
                FROM ids WHERE ids.key_id IS NOT NULL)
            SELECT key_id FROM ids WHERE key_id IS NOT NULL""")
        for row in rows:
            if row["key_id"] in known:
                continue
            n = await db.fetchone(
                cur, f"SELECT count(*) AS n FROM {spec.table} WHERE {spec.key_id} = %s",
                (row["key_id"],))
            found[row["key_id"]] = found.get(row["key_id"], 0) + n["n"]
    return found


async def remaining(cur: db.Cursor, keyring: Keyring) -> dict[str, int]:
    """Rows per table still sealed under a key other than the current one."""
    left = {}
    for spec in SEALED_TABLES:
        row = await db.fetchone(
            cur, f"SELECT count(*) AS n FROM {spec.table} "
                 f"WHERE {spec.key_id} IS NOT NULL AND {spec.key_id} <> %s", (keyring.key_id,))
        left[spec.table] = row["n"]
    return left


@dataclass
class RotationResult:
    resealed: int
    failed: int
    left: int


async def _batch(pool: db.Pool, keyring: Keyring, spec: SealedTable, after: uuid.UUID,
                 failed: list[uuid.UUID], limit: int, wait: bool) -> tuple[int, uuid.UUID | None]:
    """Re-seal one batch after `after` (by id); returns (rows re-sealed, last id seen or None
    at the end of the table). Rows that do not open are added to `failed` and left as they are."""
    lock = "FOR UPDATE OF t" + ("" if wait else " SKIP LOCKED")
    async with db.pool_transaction(pool) as cur:
        rows = await db.fetchall(cur, f"""
            SELECT t.id, t.{spec.key_id} AS key_id, t.{spec.nonce} AS nonce,
                   t.{spec.ciphertext} AS ciphertext {spec.extra}
            FROM {spec.table} t {spec.join}
            WHERE t.{spec.key_id} IS NOT NULL AND t.{spec.key_id} <> %(current)s
              AND t.id > %(after)s AND NOT (t.id = ANY(%(failed)s::uuid[]))
            ORDER BY t.id LIMIT %(limit)s {lock}""",
            {"current": keyring.key_id, "after": after, "failed": failed, "limit": limit})
        done = 0
        for row in rows:
            aad = spec.aad(row)
            try:
                plaintext = keyring.open(row["key_id"], row["nonce"], row["ciphertext"], aad)
            except DecryptionError:
                failed.append(row["id"])
                continue
            sealed = keyring.seal(plaintext, aad)
            await cur.execute(
                f"UPDATE {spec.table} SET {spec.key_id} = %s, {spec.nonce} = %s, "
                f"{spec.ciphertext} = %s WHERE id = %s",
                (sealed.key_id, sealed.nonce, sealed.ciphertext, row["id"]))
            done += 1
    return done, (rows[-1]["id"] if rows else None)


async def rotate(pool: db.Pool, keyring: Keyring, *, batch_size: int = 500,
                 report: Callable[[str], None] = lambda line: None,
                 max_passes: int = 5) -> RotationResult:
    """Re-seal every value not under `keyring`'s current key, in batches; `report` gets a line
    of progress per batch. Returns how many were re-sealed, failed to open, and are left."""
    async with db.cursor(pool) as cur:
        todo = await remaining(cur, keyring)
    total = sum(todo.values())
    report(f"{total} value(s) to re-encrypt under key {keyring.key_id}"
           + (f" ({', '.join(f'{t} {n}' for t, n in todo.items() if n)})" if total else ""))
    resealed, failed = 0, {spec.table: [] for spec in SEALED_TABLES}
    for attempt in range(max_passes):
        for spec in SEALED_TABLES:
            if not todo.get(spec.table):
                continue
            after, table_done = _NO_ID, 0
            while True:
                done, last = await _batch(pool, keyring, spec, after, failed[spec.table],
                                          batch_size, wait=attempt > 0)
                if last is None:
                    break
                after, table_done, resealed = last, table_done + done, resealed + done
                report(f"{spec.table}: {table_done} re-encrypted")
        async with db.cursor(pool) as cur:
            todo = await remaining(cur, keyring)
        left = sum(todo.values()) - sum(len(ids) for ids in failed.values())
        if left <= 0:
            break
    n_failed = sum(len(ids) for ids in failed.values())
    return RotationResult(resealed, n_failed, sum(todo.values()))
