"""The audit log's proof: hash chains (sealed by the database, migrations 0010, 0012 and 0017),
signed checkpoints of their heads, and the retention purge that keeps both; verification is
`audit.verify`.

Chains: one per team (`chain_id` = the team id at insert time) and one for entries without a
team (the account chain, `ACCOUNT_CHAIN`, the nil UUID). Entry `seq` n's seal stores `hash` =
SHA-256 of `canonical(entry)`, which covers its link `prev_hash` (entry n-1's `hash`, or 32 zero
bytes for n = 1; not stored since migration 0042: the seal before holds it), defined in
migration 0010 and reproduced here so that verification does not trust the database's own
function.

Sealing: a writer commits its entry alone (no chain fields); `seal` (the database's
`cvsm_audit_seal`) links the committed entries not sealed yet to the ends of their chains, in
insertion order, under one lock for every process, by appending their chain fields to
`audit_seals` (the entry itself is never rewritten); `audit_chain_entries` is the log joined to
its seals, what everything here reads. `seal_pending` (the `audit_seal` background job, `jobs`)
runs it every `CVSM_AUDIT_SEAL_SECONDS`; verification, export, checkpoints and the purge seal
first, so they see every entry committed before they began.

Checkpoints: Ed25519 signatures over `checkpoint_message(...)` (chain, seq, head hash, kind,
signed-at time). The signing key is derived from the database's token-hash key, which is
stable across master-key rotations (kept sealed under every master key since, keys.py): old
checkpoints stay verifiable after a rotation, and nobody holding only the database can sign.
Each checkpoint stores its key id and public key, so an auditor can verify it offline against
the published public key (`cvsm-server audit verify` prints its id). Kinds: `periodic` (the
background job, for chains that grew, `CVSM_AUDIT_CHECKPOINT_SECONDS` after the last periodic
checkpoint's stored time, so restarts do not start the count again; and once at a clean stop),
`demand` (`checkpoint_now`), `purge` (the retention purge writes one at the new start of a chain
before it removes the prefix up to it).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import uuid
import weakref
from datetime import datetime, timedelta, timezone
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from . import months as audit_months
from .months import chain_is, link_of
from .. import db
from ..crypto.sealing import Keyring

log = logging.getLogger("cvsm.audit")

ACCOUNT_CHAIN = uuid.UUID(int=0)
GENESIS = bytes(32)
PAGE = 1000
KINDS = ("periodic", "demand", "purge")
# Entries one `cvsm_audit_seal` call links at most (one transaction holds the sealer's lock).
SEAL_BATCH = 5000


# --- canonical form ---------------------------------------------------------------------------

def utc_micro(value: datetime) -> str:
    """`YYYY-MM-DDTHH:MM:SS.ffffffZ`, the time as the chain hashes it."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def canonical(row: dict[str, Any]) -> bytes:
    """The bytes an entry's hash covers (migration 0010's `cvsm_audit_canonical`): a JSON object
    with sorted keys, no spaces, non-ASCII as is, NULLs as null; `metadata` is the jsonb text
    PostgreSQL gives (`metadata_text`), as a string."""
    doc = {
        "action": row["action"],
        "chain": str(row["chain_id"]),
        "created_at": utc_micro(row["created_at"]),
        "id": str(row["id"]),
        "ip_address": row["ip_address"],
        "metadata": row["metadata_text"],
        "prev_hash": bytes(row["prev_hash"]).hex(),
        "resource": row["resource"],
        "resource_id": row["resource_id"],
        "seq": row["seq"],
        "user_agent": row["user_agent"],
        "user_email": row["user_email"],
        "v": 1,
    }
    return _CANONICAL.encode(doc).encode()


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def entry_hash(row: dict[str, Any]) -> bytes:
    return hashlib.sha256(canonical(row)).digest()


# --- sealing ----------------------------------------------------------------------------------

async def seal(cur: db.Cursor, *, wait: bool = True) -> int:
    """Link every committed entry not sealed yet into its chain; returns how many. With
    `wait=False` it returns 0 at once when another sealer is at work (it seals the same
    entries). On an autocommit cursor each batch commits on its own."""
    sealed = 0
    while True:
        row = await db.fetchone(cur, "SELECT cvsm_audit_seal(%s, %s) AS n", (SEAL_BATCH, wait))
        if row["n"] is None:
            return sealed
        sealed += row["n"]
        if row["n"] < SEAL_BATCH:
            return sealed


async def seal_pending(pool: db.Pool) -> int:
    """One round of the background sealer; 0 at once when another process is sealing."""
    async with db.cursor(pool) as cur:
        return await seal(cur, wait=False)


# --- signing ----------------------------------------------------------------------------------

def checkpoint_message(chain_id: uuid.UUID, seq: int, head_hash: bytes, kind: str,
                       signed_at: datetime) -> bytes:
    return (f"cvsm-audit-checkpoint-v1\n{chain_id}\n{seq}\n{bytes(head_hash).hex()}\n{kind}\n"
            f"{utc_micro(signed_at)}").encode()


def key_id_of(public_key: bytes) -> str:
    return hashlib.sha256(b"cvsm-audit-key\x00" + public_key).hexdigest()[:16]


class CheckpointSigner:
    """The server's checkpoint key; its repr shows only the key id."""

    def __init__(self, keyring: Keyring) -> None:
        seed = hmac.new(keyring.hash_key, b"cvsm-audit-signing-v1", hashlib.sha256).digest()
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        self.public_key = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key_id = key_id_of(self.public_key)

    def __repr__(self) -> str:
        return f"CheckpointSigner(key_id={self.key_id!r})"

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)

    def trusts(self, key_id: str, public_key: bytes) -> bool:
        return key_id == self.key_id and hmac.compare_digest(bytes(public_key), self.public_key)


def signature_ok(row: dict[str, Any]) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(bytes(row["public_key"])).verify(
            bytes(row["signature"]),
            checkpoint_message(row["chain_id"], row["seq"], row["head_hash"], row["kind"],
                               row["signed_at"]))
    except (InvalidSignature, ValueError):
        return False
    return True


async def write_checkpoint(cur: db.Cursor, signer: CheckpointSigner, chain_id: uuid.UUID,
                           seq: int, head_hash: bytes, kind: str) -> dict:
    signed_at = datetime.now(timezone.utc)
    signature = signer.sign(checkpoint_message(chain_id, seq, head_hash, kind, signed_at))
    return await db.fetchone(
        cur,
        """INSERT INTO audit_checkpoints (chain_id, team_id, seq, head_hash, kind, signed_at,
                                          key_id, public_key, signature)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING *""",
        (chain_id, None if chain_id == ACCOUNT_CHAIN else chain_id, seq, head_hash, kind,
         signed_at, signer.key_id, signer.public_key, signature),
    )


async def checkpoint_now(cur: db.Cursor, signer: CheckpointSigner, chain_id: uuid.UUID,
                         kind: str = "demand") -> dict | None:
    """Seal, then sign the chain's head; None when the chain has no entry."""
    await seal(cur)
    head = await db.fetchone(
        cur, f"SELECT seq, hash FROM audit_seals WHERE {chain_is('chain_id', '%(chain)s')} "
             "ORDER BY seq DESC LIMIT 1", {"chain": chain_id})
    if head is None:
        return None
    return await write_checkpoint(cur, signer, chain_id, head["seq"], bytes(head["hash"]), kind)


# Every chain that has ever had a seal (`audit_chains`, kept by the sealer, migration 0044): the
# log is never grouped to find them.
CHAIN_IDS = "SELECT chain_id FROM audit_chains"


async def checkpoint_grown_chains(pool: db.Pool, signer: CheckpointSigner) -> int:
    """Seal, then a `periodic` checkpoint for every chain whose head is past its last one. The
    chains, their heads and their last checkpoints are found by index (three probes a chain)."""
    async with db.cursor(pool) as cur:
        await seal(cur)
        rows = await db.fetchall(
            cur,
            f"""SELECT c.chain_id, h.seq, h.hash FROM ({CHAIN_IDS}) c
                CROSS JOIN LATERAL (SELECT s.seq, s.hash FROM audit_seals s
                                    WHERE {chain_is('s.chain_id', 'c.chain_id')}
                                    ORDER BY s.seq DESC LIMIT 1) h
                WHERE h.seq > coalesce((SELECT k.seq FROM audit_checkpoints k
                                        WHERE k.chain_id = c.chain_id
                                        ORDER BY k.seq DESC LIMIT 1), 0)""")
        if rows:  # one statement for every chain (a round trip each was most of the job)
            signed_at = datetime.now(timezone.utc)
            await cur.execute(
                """INSERT INTO audit_checkpoints (chain_id, team_id, seq, head_hash, kind,
                                                  signed_at, key_id, public_key, signature)
                   SELECT c, nullif(c, %s), q, h, 'periodic', %s, %s, %s, g
                   FROM unnest(%s::uuid[], %s::bigint[], %s::bytea[], %s::bytea[])
                        AS t(c, q, h, g)""",
                (ACCOUNT_CHAIN, signed_at, signer.key_id, signer.public_key,
                 [row["chain_id"] for row in rows], [row["seq"] for row in rows],
                 [bytes(row["hash"]) for row in rows],
                 [signer.sign(checkpoint_message(row["chain_id"], row["seq"], bytes(row["hash"]),
                                                 "periodic", signed_at)) for row in rows]))
    return len(rows)


async def next_checkpoint_in(pool: db.Pool, interval: float) -> float:
    """Seconds until the periodic checkpoints are due: `interval` after the last `periodic`
    checkpoint's time, as the database stored it (0 when it has none, or when that is past). So
    the schedule survives restarts: a server restarted more often than `interval` still signs."""
    async with db.cursor(pool) as cur:
        row = await db.fetchone(
            cur,
            """SELECT extract(epoch FROM max(signed_at) + make_interval(secs => %s) - now())
                      AS seconds
               FROM audit_checkpoints WHERE kind = 'periodic'""",
            (interval,))
    seconds = row["seconds"] if row else None
    return 0.0 if seconds is None else min(max(float(seconds), 0.0), interval)


async def checkpoint_loop(pool: db.Pool, signer: CheckpointSigner, interval: float) -> None:
    """The background job: a `periodic` checkpoint for every chain that grew, each time one is
    due (`next_checkpoint_in`); when none grew, the next look is `interval` later."""
    outage = db.OutageLog(log, "audit checkpoint job")
    wait = None
    while True:
        try:
            if wait is None:
                wait = await next_checkpoint_in(pool, interval)
            await asyncio.sleep(wait)
            written = await checkpoint_grown_chains(pool, signer)
            if written:
                log.info("audit checkpoints signed for %d chain(s)", written)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            outage.failed(exc)
            wait = min(interval, 5.0)  # due already: again soon
            continue
        outage.ok()
        wait = None if written else interval


async def checkpoint_at_stop(pool: db.Pool, signer: CheckpointSigner,
                             timeout: float = 10.0) -> None:
    """At a clean stop (the background jobs' end): a `periodic` checkpoint for every chain that
    grew since its last, so a stop leaves every chain's head signed. One line if the database is
    away or it takes longer than `timeout`."""
    try:
        written = await asyncio.wait_for(checkpoint_grown_chains(pool, signer), timeout)
    except Exception as exc:  # noqa: BLE001 - the stop goes on
        log.warning("no audit checkpoint at stop: %s",
                    "timed out" if isinstance(exc, asyncio.TimeoutError) else db.first_line(exc))
        return
    if written:
        log.info("audit checkpoints signed at stop for %d chain(s)", written)


# --- retention purge --------------------------------------------------------------------------

# Entries one purge transaction removes at most (with their seals and a signed checkpoint): a
# few hundred milliseconds, far from the statement limit, whatever the log's size.
PURGE_BATCH = 5000
# Checkpoints one thinning call removes at most, and how long one run keeps thinning a backlog.
THIN_BATCH = 10000
THIN_SECONDS = 10.0
# How long every checkpoint is kept; older ones are thinned to one a chain a UTC day. A run
# that removed nothing thins at most every THIN_EVERY_SECONDS (per pool: the job's process).
KEEP_EVERY_CHECKPOINT = timedelta(days=1)
THIN_EVERY_SECONDS = 6 * 3600
_thinned_at: weakref.WeakKeyDictionary[db.Pool, float] = weakref.WeakKeyDictionary()


async def purge_expired(pool: db.Pool, signer: CheckpointSigner, *,
                        batch: int = PURGE_BATCH,
                        before_drop: audit_months.Before | None = None) -> int:
    """Remove, per chain, the longest prefix of entries all past their retention, in
    transactions of at most `batch` entries, each after signing a `purge` checkpoint at its last
    entry (the chain's new start), and the chain's expired days of the read rollup; then
    checkpoints thinned (migration 0023; when nothing went, at most every THIN_EVERY_SECONDS).
    Returns how many entries went. A chain whose first entry is kept costs one probe of its
    index: with nothing expired the run reads nothing else. Whole months go first, as partition
    drops where they can (`audit_months`, migration 0024), each after `before_drop(month)`
    (the archive, `audit.purge_expired`); then the boundary month compacted where most of it
    goes (migration 0026), not archived: what it keeps is no whole month; and the read rollup's
    expired months likewise (migration 0027)."""
    async def sign(cur: db.Cursor, chain_id: uuid.UUID, seq: int, head: bytes) -> None:
        await write_checkpoint(cur, signer, chain_id, seq, head, "purge")

    removed, dropped = await audit_months.drop_expired_months(pool, sign, before_drop)
    async with db.cursor(pool) as cur:
        await seal(cur)
    compacted, touched = await audit_months.compact_boundary_month(pool, sign)
    removed += compacted
    dropped = [*dropped, *touched]
    await audit_months.compact_reads(pool)
    async with db.cursor(pool) as cur:  # sealed above: what was sealed since is not expired
        due = await db.fetchall(
            cur,
            f"""SELECT c.chain_id, d.days FROM ({CHAIN_IDS}) c
                CROSS JOIN LATERAL (SELECT cvsm_audit_retention_days(c.chain_id) AS days) d
                CROSS JOIN LATERAL (SELECT s.pos FROM audit_seals s
                                    WHERE {chain_is('s.chain_id', 'c.chain_id')}
                                    ORDER BY s.seq LIMIT 1) f
                JOIN audit_logs a ON a.pos = f.pos
                WHERE d.days IS NOT NULL
                  AND a.created_at < now() - make_interval(days => d.days)""")
    for chain_id in set(dropped) - {c["chain_id"] for c in due}:
        async with db.cursor(pool) as cur:
            await cur.execute(_PURGE_READS, (chain_id, chain_id))
    for chain in due:
        while True:
            async with db.pool_transaction(pool) as cur:
                gone = await _purge_batch(cur, signer, chain["chain_id"], chain["days"], batch)
            removed += gone
            if gone < batch:
                break
        async with db.cursor(pool) as cur:  # the read rollup's days past the same retention
            await cur.execute(_PURGE_READS, (chain["chain_id"], chain["chain_id"]))
    loop = asyncio.get_running_loop()
    if due or dropped or loop.time() >= _thinned_at.get(pool, float("-inf")) + THIN_EVERY_SECONDS:
        async with db.cursor(pool) as cur:
            await thin_checkpoints(cur)
        _thinned_at[pool] = loop.time()
    return removed


_PURGE_READS = """DELETE FROM audit_reads WHERE team_id = %s
                    AND day < ((now() - make_interval(days => coalesce(
                        cvsm_audit_retention_days(%s), 36500))) AT TIME ZONE 'UTC')::date"""


async def _purge_batch(cur: db.Cursor, signer: CheckpointSigner, chain_id: uuid.UUID, days: int,
                       batch: int) -> int:
    """The chain's first `batch` entries in order, up to the first one kept: a purge checkpoint
    at the last of them, then their deletion (the guard checks each, the seals go with them)."""
    rows = await db.fetchall(
        cur,
        f"""SELECT s.seq, s.hash, s.pos, a.created_at < now() - make_interval(days => %(days)s)
                   AS expired
            FROM audit_seals s JOIN audit_logs a ON a.pos = s.pos
            WHERE {chain_is('s.chain_id', '%(chain)s')} ORDER BY s.seq LIMIT %(batch)s""",
        {"chain": chain_id, "days": days, "batch": batch})
    prefix = 0
    while prefix < len(rows) and rows[prefix]["expired"]:
        prefix += 1
    if not prefix:
        return 0
    end = rows[prefix - 1]
    await write_checkpoint(cur, signer, chain_id, end["seq"], bytes(end["hash"]), "purge")
    await cur.execute("DELETE FROM audit_logs WHERE pos = ANY(%s)",
                      ([r["pos"] for r in rows[:prefix]],))
    return cur.rowcount


async def thin_checkpoints(cur: db.Cursor, *, keep: timedelta = KEEP_EVERY_CHECKPOINT,
                           seconds: float = THIN_SECONDS) -> int:
    """Remove the checkpoints verification and the purge no longer need (those below a chain's
    purge anchor; past `keep`, all but one a chain a day), in calls of THIN_BATCH, for at most
    about `seconds`; returns how many went."""
    gone = 0
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        row = await db.fetchone(cur, "SELECT cvsm_audit_thin_checkpoints(%s, %s) AS n",
                                (keep, THIN_BATCH))
        gone += row["n"]
        if row["n"] < THIN_BATCH or asyncio.get_running_loop().time() > deadline:
            return gone


# --- verification -----------------------------------------------------------------------------

def checkpoint_json(row: dict) -> dict:
    return {"seq": row["seq"], "hash": bytes(row["head_hash"]).hex(), "kind": row["kind"],
            "signed_at": utc_micro(row["signed_at"]), "key_id": row["key_id"],
            "public_key": bytes(row["public_key"]).hex()}
