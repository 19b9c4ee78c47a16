"""The audit log's proof: hash chains (sealed by the database, migrations 0010, 0012 and 0017),
signed checkpoints of their heads, verification, and the retention purge that keeps both.

Chains: one per team (`chain_id` = the team id at insert time) and one for entries without a
team (the account chain, `ACCOUNT_CHAIN`, the nil UUID). Entry `seq` n stores `prev_hash` (entry
n-1's `hash`, or 32 zero bytes for n = 1) and `hash` = SHA-256 of `canonical(entry)`, defined in
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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from json.encoder import encode_basestring as _encode_string
from typing import Any

import psycopg2.extensions
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from . import months as audit_months
from .. import db
from ..crypto.sealing import Keyring

log = logging.getLogger("cvsm.audit")

ACCOUNT_CHAIN = uuid.UUID(int=0)
GENESIS = bytes(32)
PAGE = 1000
VERIFY_PAGE = 5000
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
        cur, "SELECT seq, hash FROM audit_seals WHERE chain_id = %s ORDER BY seq DESC LIMIT 1",
        (chain_id,))
    if head is None:
        return None
    return await write_checkpoint(cur, signer, chain_id, head["seq"], bytes(head["hash"]), kind)


# Every chain of the seals, one probe of their (chain_id, seq) key per chain (a skip scan): the
# log is never grouped to find them.
_CHAIN_IDS = """WITH RECURSIVE c(id) AS (
                    (SELECT chain_id FROM audit_seals ORDER BY chain_id LIMIT 1)
                    UNION ALL
                    SELECT (SELECT chain_id FROM audit_seals WHERE chain_id > c.id
                            ORDER BY chain_id LIMIT 1)
                    FROM c WHERE c.id IS NOT NULL)
                SELECT id AS chain_id FROM c WHERE id IS NOT NULL"""


async def checkpoint_grown_chains(pool: db.Pool, signer: CheckpointSigner) -> int:
    """Seal, then a `periodic` checkpoint for every chain whose head is past its last one. The
    chains, their heads and their last checkpoints are found by index (three probes a chain)."""
    async with db.cursor(pool) as cur:
        await seal(cur)
        rows = await db.fetchall(
            cur,
            f"""SELECT c.chain_id, h.seq, h.hash FROM ({_CHAIN_IDS}) c
                CROSS JOIN LATERAL (SELECT s.seq, s.hash FROM audit_seals s
                                    WHERE s.chain_id = c.chain_id
                                    ORDER BY s.seq DESC LIMIT 1) h
                WHERE h.seq > coalesce((SELECT k.seq FROM audit_checkpoints k
                                        WHERE k.chain_id = c.chain_id
                                        ORDER BY k.seq DESC LIMIT 1), 0)""")
        for row in rows:
            await write_checkpoint(cur, signer, row["chain_id"], row["seq"], bytes(row["hash"]),
                                   "periodic")
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
    (the archive, `audit.purge_expired`)."""
    async def sign(cur: db.Cursor, chain_id: uuid.UUID, seq: int, head: bytes) -> None:
        await write_checkpoint(cur, signer, chain_id, seq, head, "purge")

    removed, dropped = await audit_months.drop_expired_months(pool, sign, before_drop)
    async with db.cursor(pool) as cur:
        await seal(cur)
        due = await db.fetchall(
            cur,
            f"""SELECT c.chain_id, d.days FROM ({_CHAIN_IDS}) c
                CROSS JOIN LATERAL (SELECT cvsm_audit_retention_days(c.chain_id) AS days) d
                CROSS JOIN LATERAL (SELECT s.pos FROM audit_seals s WHERE s.chain_id = c.chain_id
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
        """SELECT s.seq, s.hash, s.pos, a.created_at < now() - make_interval(days => %(days)s)
                  AS expired
           FROM audit_seals s JOIN audit_logs a ON a.pos = s.pos
           WHERE s.chain_id = %(chain)s ORDER BY s.seq LIMIT %(batch)s""",
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

@dataclass
class Verdict:
    chain_id: uuid.UUID
    checked: int
    first_broken: dict | None
    checkpoint: dict | None

    @property
    def ok(self) -> bool:
        return self.first_broken is None

    def as_json(self) -> dict:
        return {"ok": self.ok, "checked": self.checked, "first_broken": self.first_broken,
                "checkpoint": self.checkpoint}


def checkpoint_json(row: dict) -> dict:
    return {"seq": row["seq"], "hash": bytes(row["head_hash"]).hex(), "kind": row["kind"],
            "signed_at": utc_micro(row["signed_at"]), "key_id": row["key_id"],
            "public_key": bytes(row["public_key"]).hex()}


# One page of a chain in order, from a position: the seals' (chain_id, seq) key walked from the
# cursor, then each seal's entry by `pos` and time (the seal's copy of it: one probe of the
# entry's month partition, migration 0024, forced by the LATERAL: a plain join of the two
# partitioned tables was planned as a hash join of both, seconds a page; an entry whose time was
# changed is missing); pages of VERIFY_PAGE (planning over the partitions costs per statement);
# no page rescans the ones before. Rows are
# tuples (the columns of `_ROW_FIELDS`), uuids as text: the walk's cost is the hashing.
# `seq >= last seq` but not the last entry itself: were the unique key dropped, a second entry
# at the last seq of a page still shows up (as "appears twice").
_ROWS = """SELECT a.id::text, s.chain_id::text, s.seq, s.pos,
                  to_char(a.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                  a.user_email, a.action, a.resource, a.resource_id, a.ip_address, a.user_agent,
                  a.metadata::text AS metadata_text, encode(s.prev_hash, 'hex'),
                  encode(s.hash, 'hex')
           FROM (SELECT * FROM audit_seals s
                 WHERE s.chain_id = %(chain)s AND s.seq >= %(seq)s AND s.pos <> %(pos)s
                 ORDER BY s.seq LIMIT %(page)s) s
           CROSS JOIN LATERAL (SELECT * FROM audit_logs a
                               WHERE a.pos = s.pos AND a.created_at = s.created_at) a
           ORDER BY s.seq"""


def _page_text(row: tuple) -> str:
    """`canonical`'s text of one `_ROWS` tuple (time and hashes as the database writes them
    out, or as a datetime and bytes), in its key order: the walk's hot loop, one f-string."""
    (id_, chain, seq, _pos, created_at, user_email, action, resource, resource_id, ip_address,
     user_agent, metadata_text, prev_hash, _hash) = row
    if not isinstance(created_at, str):
        created_at = _utc_micro(created_at)
    if not isinstance(prev_hash, str):
        prev_hash = bytes(prev_hash).hex()
    enc = _encode_string
    return (f'{{"action":{"null" if action is None else enc(action)},"chain":"{chain}",'
            f'"created_at":"{created_at}","id":"{id_}",'
            f'"ip_address":{"null" if ip_address is None else enc(ip_address)},'
            f'"metadata":{"null" if metadata_text is None else enc(metadata_text)},'
            f'"prev_hash":"{prev_hash}",'
            f'"resource":{"null" if resource is None else enc(resource)},'
            f'"resource_id":{"null" if resource_id is None else enc(resource_id)},'
            f'"seq":{seq},"user_agent":{"null" if user_agent is None else enc(user_agent)},'
            f'"user_email":{"null" if user_email is None else enc(user_email)},"v":1}}')


def _page_hash(row: tuple) -> bytes:
    """`entry_hash` of one `_ROWS` tuple (`test_audit_scale` holds the two equal)."""
    return hashlib.sha256(_page_text(row).encode()).digest()


def _json(value: str | None) -> str:
    return "null" if value is None else _encode_string(value)


def _utc_micro(value: datetime) -> str:
    """`utc_micro`, without strftime for a time already in UTC (as the server's sessions read)."""
    if value.utcoffset() != _ZERO:
        return utc_micro(value)
    return (f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:"
            f"{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}Z")


_ZERO = timedelta(0)


Progress = Callable[[int, int], None]


async def chain_span(cur: db.Cursor, chain_id: uuid.UUID) -> tuple[int, int] | None:
    """The chain's first and last sealed seq (two probes of its key); None when empty."""
    row = await db.fetchone(cur, "SELECT min(seq) AS first, max(seq) AS last FROM audit_seals "
                                 "WHERE chain_id = %s", (chain_id,))
    return None if row is None or row["last"] is None else (row["first"], row["last"])


async def verify_chain(cur: db.Cursor, signer: CheckpointSigner, chain_id: uuid.UUID, *,
                       since: dict | None = None, progress: Progress | None = None) -> Verdict:
    """Walk one chain in one ordered pass: every entry's seq, link and hash, every checkpoint's
    signature and head. Reports the first broken link (by seq) and the latest good checkpoint.
    From its start, or with `since` (a checkpoint the caller trusts, signed by this server's
    key) from that checkpoint's entry on: the entries and checkpoints before it are not read.
    `progress(checked, to_check)` is called after each page. Entries not sealed yet are not in
    it: callers `seal` first."""
    start_seq = 0 if since is None else since["seq"]
    checkpoints = await db.fetchall(
        cur, "SELECT * FROM audit_checkpoints WHERE chain_id = %s AND seq >= %s "
             "ORDER BY seq, signed_at", (chain_id, start_seq))
    if since is not None and since["chain_id"] != chain_id:
        raise ValueError("the trusted checkpoint is of another chain")
    good: list[dict] = []
    for cp in checkpoints:
        if not signer.trusts(cp["key_id"], cp["public_key"]):
            return Verdict(chain_id, 0, {"seq": cp["seq"], "reason": (
                f"the checkpoint at seq {cp['seq']} is signed by key {cp['key_id']}, not by this "
                "server's key")}, None)
        if cp["kind"] not in KINDS or not signature_ok(cp):
            return Verdict(chain_id, 0, {"seq": cp["seq"], "reason": (
                f"the checkpoint at seq {cp['seq']} has an invalid signature")}, None)
        good.append(cp)
    at_seq: dict[int, list[dict]] = {}
    for cp in good:
        at_seq.setdefault(cp["seq"], []).append(cp)
    latest = checkpoint_json(good[-1]) if good else None
    purges = [cp["seq"] for cp in good if cp["kind"] == "purge"]

    def broken(checked: int, seq: int, reason: str) -> Verdict:
        return Verdict(chain_id, checked, {"seq": seq, "reason": reason}, latest)

    checked = 0
    expected: int | None = None
    prev: str | None = GENESIS.hex()  # hashes in hex, as the page's rows carry them
    sha256 = hashlib.sha256
    if since is not None:  # the trusted checkpoint's entry comes first, whatever its prev_hash
        expected, prev = since["seq"], None

    def walk(rows: list[tuple]) -> Verdict | None:
        """Check one page in order; the verdict at its first broken link, else None."""
        nonlocal checked, expected, prev
        for row in rows:
            seq = row[2]
            if expected is None:  # the chain's start: seq 1, or just after a purge checkpoint
                if seq != 1:
                    anchor = [cp for cp in at_seq.get(seq - 1, ()) if cp["kind"] == "purge"]
                    if not anchor:
                        first_missing = max([s for s in purges if s < seq], default=0) + 1
                        return broken(checked, first_missing, (
                            f"entry {first_missing} is missing (the chain starts at {seq} with "
                            "no signed purge checkpoint before it)"))
                    prev = bytes(anchor[0]["head_hash"]).hex()
                expected = seq
            if seq < expected:
                return broken(checked, seq, f"entry {seq} appears twice")
            if seq > expected:
                return broken(checked, expected, f"entry {expected} is missing")
            if prev is not None and row[12] != prev:
                return broken(checked, seq, "its prev_hash is not the hash of the entry before")
            digest = sha256(_page_text(row).encode()).hexdigest()
            if digest != row[13]:
                return broken(checked, seq, "its content does not match its hash (edited)")
            for cp in at_seq.get(seq, ()):
                if bytes(cp["head_hash"]).hex() != digest:
                    return broken(checked, seq, f"the signed checkpoint at seq {seq} names a "
                                                "different hash")
            checked += 1
            prev = digest
            expected = seq + 1
        return None

    span = await chain_span(cur, chain_id)
    to_check = 0 if span is None else span[1] - max(span[0], start_seq) + 1
    raw = await cur.connection.cursor(cursor_factory=psycopg2.extensions.cursor)

    async def fetch(seq: int, pos: int) -> list[tuple]:
        await raw.execute(_ROWS, {"chain": chain_id, "seq": seq, "pos": pos, "page": VERIFY_PAGE})
        return await raw.fetchall()

    # The next page is asked for before this one is hashed: the database reads it meanwhile.
    pending: asyncio.Future | None = asyncio.ensure_future(fetch(start_seq, -1))
    try:
        while pending is not None:
            rows = await pending
            pending = None
            if len(rows) == VERIFY_PAGE:
                pending = asyncio.ensure_future(fetch(rows[-1][2], rows[-1][3]))
            verdict = walk(rows)
            if verdict is not None:
                return verdict
            if progress is not None:
                progress(checked, to_check)
    finally:
        if pending is not None:  # let it end: a cancelled statement would close the connection
            await asyncio.gather(pending, return_exceptions=True)
        raw.close()
    last = expected - 1 if expected is not None and checked else None
    if since is not None and not checked:
        return broken(0, since["seq"], f"entry {since['seq']} is missing (the trusted "
                                       "checkpoint covers it)")
    if good:
        top_seq = max(cp["seq"] for cp in good)
        if last is None and top_seq not in purges:
            first_missing = max(purges, default=0) + 1
            return broken(0, first_missing, f"entry {first_missing} is missing (a signed "
                                            f"checkpoint covers seq {top_seq})")
        if last is not None and top_seq > last:
            return broken(checked, last + 1, f"entry {last + 1} is missing (a signed checkpoint "
                                             f"covers seq {top_seq})")
    return Verdict(chain_id, checked, None, latest)


async def latest_checkpoint(cur: db.Cursor, signer: CheckpointSigner,
                            chain_id: uuid.UUID) -> dict | None:
    """The chain's newest checkpoint whose signature this server's key makes good (one probe of
    its index per checkpoint looked at): where a verification can resume."""
    rows = await db.fetchall(
        cur, "SELECT * FROM audit_checkpoints WHERE chain_id = %s ORDER BY seq DESC, signed_at DESC "
             "LIMIT 16", (chain_id,))
    for cp in rows:
        if signer.trusts(cp["key_id"], cp["public_key"]) and cp["kind"] in KINDS \
                and signature_ok(cp):
            return cp
    return None


async def chains(cur: db.Cursor, *, team: uuid.UUID | None = None) -> list[dict]:
    """Every chain in the log or its checkpoints (or only `team`'s, when it has one): chain id
    and the team's slug (None when the team is gone or for the account chain); sealed entries
    only: callers `seal` first. Skip scans of the two tables' chain indexes, never the log."""
    if team is not None:
        return await db.fetchall(
            cur,
            """SELECT t.id AS chain_id, t.slug FROM teams t WHERE t.id = %(team)s
                 AND (EXISTS (SELECT 1 FROM audit_seals WHERE chain_id = %(team)s)
                      OR EXISTS (SELECT 1 FROM audit_checkpoints WHERE chain_id = %(team)s))""",
            {"team": team})
    return await db.fetchall(
        cur,
        f"""WITH RECURSIVE k(id) AS (
                (SELECT chain_id FROM audit_checkpoints ORDER BY chain_id LIMIT 1)
                UNION ALL
                SELECT (SELECT chain_id FROM audit_checkpoints WHERE chain_id > k.id
                        ORDER BY chain_id LIMIT 1)
                FROM k WHERE k.id IS NOT NULL)
            SELECT c.chain_id, t.slug FROM (
                {_CHAIN_IDS} UNION SELECT id FROM k WHERE id IS NOT NULL) c
            LEFT JOIN teams t ON t.id = c.chain_id
            ORDER BY t.slug NULLS LAST, c.chain_id""")
