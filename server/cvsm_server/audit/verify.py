"""Verification of the audit chains (`chain`): one ordered pass per chain, from its start or
from a checkpoint the caller trusts, every entry's seq, link and hash and every checkpoint's
signature and head; the chains' spans and their latest good checkpoints."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psycopg2.extensions

from .. import db
from .chain import (CHAIN_IDS, GENESIS, KINDS, CheckpointSigner, checkpoint_json,
                    signature_ok)

# Entries one page of the verification walk reads (planning over the partitions costs per
# statement, so pages are large).
VERIFY_PAGE = 5000


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


# One page of a chain in order, from a position: the seals' (chain_id, seq) key walked from the
# cursor, then each seal's entry by `pos` and time (the seal's copy of it: one probe of the
# entry's month partition, migration 0024; an entry whose time was changed is missing). The
# subquery's LIMIT keeps the planner from flattening the LATERAL into a plain join, which it
# planned as a hash join over a scan of the whole log for every page (a whole chain quadratic:
# ~4 s a page at 1M entries, 256 s for 2M); so each page is a nested loop of probes. Pages of
# VERIFY_PAGE (planning over the partitions costs per statement); no page rescans the ones
# before. Rows are tuples (seq, pos, canonical text, prev_hash and hash
# in hex): the database writes each entry's canonical text out (`_CANONICAL_SQL`, built-in
# functions only, never the database's own `cvsm_audit_canonical`) and the walk hashes it
# (hashlib): no Python object per column, no JSON encoding in Python (issue 40).
# `seq >= last seq` but not the last entry itself: were the unique key dropped, a second entry
# at the last seq of a page still shows up (as "appears twice").
_CANONICAL_SQL = """'{"action":' || coalesce(to_json(a.action)::text, 'null')
    || ',"chain":"' || s.chain_id::text
    || '","created_at":"' || to_char(a.created_at AT TIME ZONE 'UTC',
                                     'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
    || '","id":"' || a.id::text
    || '","ip_address":' || coalesce(to_json(a.ip_address)::text, 'null')
    || ',"metadata":' || coalesce(to_json(a.metadata::text)::text, 'null')
    || ',"prev_hash":"' || encode(s.prev_hash, 'hex')
    || '","resource":' || coalesce(to_json(a.resource)::text, 'null')
    || ',"resource_id":' || coalesce(to_json(a.resource_id)::text, 'null')
    || ',"seq":' || s.seq::text
    || ',"user_agent":' || coalesce(to_json(a.user_agent)::text, 'null')
    || ',"user_email":' || coalesce(to_json(a.user_email)::text, 'null')
    || ',"v":1}'"""
_ROWS = f"""SELECT s.seq, s.pos, {_CANONICAL_SQL}, encode(s.prev_hash, 'hex'),
                  encode(s.hash, 'hex')
           FROM (SELECT * FROM audit_seals s
                 WHERE s.chain_id = %(chain)s AND s.seq >= %(seq)s AND s.pos <> %(pos)s
                 ORDER BY s.seq LIMIT %(page)s) s
           CROSS JOIN LATERAL (SELECT * FROM audit_logs a
                               WHERE a.pos = s.pos AND a.created_at = s.created_at LIMIT 1) a
           ORDER BY s.seq"""


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
            seq = row[0]
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
            if prev is not None and row[3] != prev:
                return broken(checked, seq, "its prev_hash is not the hash of the entry before")
            digest = sha256(row[2].encode()).hexdigest()
            if digest != row[4]:
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
                pending = asyncio.ensure_future(fetch(rows[-1][0], rows[-1][1]))
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
                {CHAIN_IDS} UNION SELECT id FROM k WHERE id IS NOT NULL) c
            LEFT JOIN teams t ON t.id = c.chain_id
            ORDER BY t.slug NULLS LAST, c.chain_id""")
