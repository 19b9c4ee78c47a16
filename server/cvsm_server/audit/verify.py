"""Verification of the audit chains (`chain`): one ordered pass per chain, from its start or
from a checkpoint the caller trusts, every entry's seq, link and hash and every checkpoint's
signature and head; the chains' spans and their latest good checkpoints."""

from __future__ import annotations

import asyncio
import bisect
import collections
import hashlib
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psycopg2.extensions

from .. import db
from .chain import (CHAIN_IDS, GENESIS, KINDS, CheckpointSigner, chain_is, checkpoint_json,
                    signature_ok)

# Entries one page of the verification walk reads (planning over the partitions costs per
# statement, so pages are large; a page the database checks comes back as a few rows).
VERIFY_PAGE = 20000


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


# One page of a chain in order, from a position: the seals' chain key (0044) walked from the
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
# at the last seq of a page still shows up (as "appears twice"). A seal whose entry is gone
# comes with no text (the walk passes over it, the entry is missing): a page is short only at
# the chain's end (before, a page whose last seal had lost its entry ended the walk there).
# An entry's link (`prev_hash`, which seals no longer store: migration 0042) is the hash of the
# row before it in the page, or for a page's first row, the seal before it
# (`cvsm_audit_prev_hash`: one probe a page); `PREV` in the canonical text stands for it.
_CANONICAL_SQL = """'{"action":' || coalesce(to_json(a.action)::text, 'null')
    || ',"chain":"' || s.chain_id::text
    || '","created_at":"' || to_char(a.created_at AT TIME ZONE 'UTC',
                                     'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
    || '","id":"' || a.id::text
    || '","ip_address":' || coalesce(to_json(a.ip_address)::text, 'null')
    || ',"metadata":' || coalesce(to_json(a.metadata::text)::text, 'null')
    || ',"prev_hash":"' || encode(PREV, 'hex')
    || '","resource":' || coalesce(to_json(a.resource)::text, 'null')
    || ',"resource_id":' || coalesce(to_json(a.resource_id)::text, 'null')
    || ',"seq":' || s.seq::text
    || ',"user_agent":' || coalesce(to_json(a.user_agent)::text, 'null')
    || ',"user_email":' || coalesce(to_json(a.user_email)::text, 'null')
    || ',"v":1}'"""
_ROWS = f"""SELECT s.seq, s.pos, {_CANONICAL_SQL.replace("PREV", "s.prev_hash")},
                  encode(s.prev_hash, 'hex'), encode(s.hash, 'hex')
           FROM (SELECT s.*, coalesce(lag(s.hash) OVER (ORDER BY s.seq, s.pos),
                                      cvsm_audit_prev_hash(s.chain_id, s.seq)) AS prev_hash
                 FROM (SELECT * FROM audit_seals s
                       WHERE {chain_is("s.chain_id", "%(chain)s")}
                         AND s.seq >= %(seq)s AND s.pos <> %(pos)s
                       ORDER BY s.seq LIMIT %(page)s) s) s
           LEFT JOIN LATERAL (SELECT * FROM audit_logs a
                              WHERE a.pos = s.pos AND a.created_at = s.created_at LIMIT 1) a
                  ON true
           ORDER BY s.seq"""


# The same page checked by the database (issue 40: the whole-chain walk's speed): the seals of
# the seqs [lo, hi) with each one's entry (the same probes), the entry's canonical text hashed
# by the database's built-in sha256 and compared with the seal's hash there, and each seal's
# seq and prev_hash compared with the one before it (a window over the page). Only the rows the
# walk has to look at come back: the page's first (its link to the page before) and last (where
# the next starts), those where anything is off, and those at a signed checkpoint's seq (its
# head): a good page is a few rows, whatever its size, and no Python runs per entry. A page with
# anything off is walked again by `_ROWS` (the walk above, in Python), which says what is wrong
# exactly as it always did; so the verdicts are those of the walk. Up to `cap` seals (one more
# than the page holds: a page of more rows than seqs has a seq twice, which the window sees);
# with `pos`, another entry at the seq before the page's (one the walk's cursor would meet).
# Trusting the database's sha256 here is trusting what it returns anyway: a database that lies
# can hand the walk the original text too; what it cannot do is produce a chain whose hashes
# end in a head the server's key signed.
# A checked page's link of each row: the hash of the row before it in the page, or the seal
# before the page's first (one probe a page).
_LINK = "coalesce(lag(s.hash) OVER w, cvsm_audit_prev_hash(s.chain_id, s.seq))"
_CHECK = f"""SELECT seq, pos, ok, encode(prev_hash, 'hex'), encode(hash, 'hex'), pseq,
                   encode(phash, 'hex'), nseq
            FROM (SELECT s.seq, s.pos, {_LINK} AS prev_hash, s.hash,
                         sha256(convert_to({_CANONICAL_SQL.replace("PREV", _LINK)}, 'UTF8'))
                         = s.hash AS ok,
                         lag(s.seq) OVER w AS pseq, lag(s.hash) OVER w AS phash,
                         lead(s.seq) OVER w AS nseq
                  FROM (SELECT * FROM audit_seals s
                        WHERE {chain_is("s.chain_id", "%(chain)s")}
                          AND s.seq >= %(lo)s - 1 AND s.seq < %(hi)s
                          AND (s.seq >= %(lo)s OR s.pos <> %(pos)s)
                        ORDER BY s.seq LIMIT %(cap)s) s
                  CROSS JOIN LATERAL (SELECT * FROM audit_logs a
                                      WHERE a.pos = s.pos AND a.created_at = s.created_at
                                      LIMIT 1) a
                  WINDOW w AS (ORDER BY s.seq, s.pos)) t
            WHERE pseq IS NULL OR nseq IS NULL OR ok IS NOT TRUE OR seq <> pseq + 1
               OR prev_hash <> phash OR seq = ANY(%(marks)s::bigint[])
            ORDER BY seq, pos"""

# Connections one whole-chain walk checks pages on at once (its own and, given a pool, the
# others from it): each page's work is the database's, one backend a page.
VERIFY_WORKERS = max(1, min(4, os.cpu_count() or 1))

Progress = Callable[[int, int], None]


async def chain_span(cur: db.Cursor, chain_id: uuid.UUID) -> tuple[int, int] | None:
    """The chain's first and last sealed seq (two probes of its key); None when empty."""
    row = await db.fetchone(cur, "SELECT min(seq) AS first, max(seq) AS last FROM audit_seals "
                                 f"WHERE {chain_is('chain_id', '%(chain)s')}", {"chain": chain_id})
    return None if row is None or row["last"] is None else (row["first"], row["last"])


async def verify_chain(cur: db.Cursor, signer: CheckpointSigner, chain_id: uuid.UUID, *,
                       since: dict | None = None, progress: Progress | None = None,
                       pool: db.Pool | None = None,
                       workers: int = VERIFY_WORKERS) -> Verdict:
    """Walk one chain in one ordered pass: every entry's seq, link and hash, every checkpoint's
    signature and head. Reports the first broken link (by seq) and the latest good checkpoint.
    From its start, or with `since` (a checkpoint the caller trusts, signed by this server's
    key) from that checkpoint's entry on: the entries and checkpoints before it are not read.
    `progress(checked, to_check)` is called after each page. Entries not sealed yet are not in
    it: callers `seal` first. Pages are checked by the database (`_CHECK`), the next ones
    meanwhile: with `pool`, on up to `workers` connections at once (this cursor's and others
    from `pool`); a page with anything off is walked again row by row (`_ROWS`)."""
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
    heads = {seq: {bytes(cp["head_hash"]).hex() for cp in cps} for seq, cps in at_seq.items()}
    marks = sorted(at_seq)
    latest = checkpoint_json(good[-1]) if good else None
    purges = [cp["seq"] for cp in good if cp["kind"] == "purge"]

    def broken(checked: int, seq: int, reason: str) -> Verdict:
        return Verdict(chain_id, checked, {"seq": seq, "reason": reason}, latest)

    checked = 0
    expected: int | None = None
    prev: str | None = GENESIS.hex()  # hashes in hex, as the page's rows carry them
    cursor = (start_seq, -1)  # (seq, pos) of the last entry walked
    sha256 = hashlib.sha256
    if since is not None:  # the trusted checkpoint's entry comes first, whatever its prev_hash
        expected, prev = since["seq"], None

    def walk(rows: list[tuple]) -> Verdict | None:
        """Check one page in order; the verdict at its first broken link, else None."""
        nonlocal checked, expected, prev
        for row in rows:
            if row[2] is None:  # a seal without its entry: as if neither were there
                continue
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

    def start() -> tuple[int, str | None] | None:
        """Where the next checked page starts and the prev_hash its first entry must carry, as
        the walk would take them; None where only the walk can tell (the chain's start without
        seq 1 or a purge checkpoint before it)."""
        if expected is not None:
            return expected, prev
        if span is None:
            return None
        if span[0] == 1:
            return 1, prev
        anchor = [cp for cp in at_seq.get(span[0] - 1, ()) if cp["kind"] == "purge"]
        return (span[0], bytes(anchor[0]["head_hash"]).hex()) if anchor else None

    def good_page(rows: list[tuple], lo: int, link: str | None) -> tuple | None:
        """The last row of a checked page where nothing in it is off, else None."""
        if not rows or rows[0][0] != lo or (link is not None and rows[0][3] != link):
            return None
        for seq, _, ok, prev_hash, digest, pseq, phash, _ in rows:
            if ok is not True or (pseq is not None and (seq != pseq + 1 or prev_hash != phash)):
                return None
            if seq in heads and heads[seq] != {digest}:
                return None
        return rows[-1]

    page = VERIFY_PAGE
    raw = await cur.connection.cursor(cursor_factory=psycopg2.extensions.cursor)
    free: asyncio.Queue = asyncio.Queue()
    free.put_nowait(raw)
    borrowed: list[tuple[db.Connection, db.Cursor | None]] = []

    async def run(sql: str, args: dict) -> list[tuple]:
        worker = await free.get()
        try:
            await worker.execute(sql, args)
            return await worker.fetchall()
        finally:
            free.put_nowait(worker)

    # Checked pages ahead, in order of seq, each `page` seqs after the one before (where it is
    # where nothing is off), asked for as soon as a connection is free.
    ahead: collections.deque[tuple[int, asyncio.Future]] = collections.deque()

    def check(lo: int, after: int | None) -> None:
        """Ask for the checked page from `lo`; `after` (the pos of the entry at lo - 1 the walk
        read last) brings in another entry at that seq, as the walk's pages do."""
        hi = lo + page
        inside = marks[bisect.bisect_left(marks, lo):bisect.bisect_left(marks, hi)]
        ahead.append((lo, asyncio.ensure_future(run(_CHECK, {
            "chain": chain_id, "lo": lo, "hi": hi, "pos": after, "cap": page + 2,
            "marks": inside}))))

    try:
        for _ in range(max(workers, 1) - 1 if pool is not None else 0):
            borrowed.append((await db.acquire(pool), None))
            worker = await borrowed[-1][0].cursor(cursor_factory=psycopg2.extensions.cursor)
            borrowed[-1] = (borrowed[-1][0], worker)
            free.put_nowait(worker)
        while True:
            begin = start()
            if begin is not None:
                lo, link = begin
                if not ahead:
                    check(lo, cursor[1] if cursor[1] >= 0 else None)
                    while len(ahead) < 1 + len(borrowed):
                        check(ahead[-1][0] + page, None)
                at, pending = ahead.popleft()
                rows = await pending
                last = good_page(rows, lo, link) if at == lo else None
                if last is not None:
                    checked += last[0] - lo + 1
                    expected, prev, cursor = last[0] + 1, last[4], (last[0], last[1])
                    if progress is not None:
                        progress(checked, to_check)
                    if last[0] == lo + page - 1:  # a whole page: the next is (being) asked for
                        check(ahead[-1][0] + page if ahead else lo + page, None)
                        continue
                # something is off, or the chain ends: the walk reads on from the last entry
                await asyncio.gather(*(f for _, f in ahead), return_exceptions=True)
                ahead.clear()
            rows = await run(_ROWS, {"chain": chain_id, "seq": cursor[0], "pos": cursor[1],
                                     "page": page})
            verdict = walk(rows)
            if verdict is not None:
                return verdict
            if rows:
                cursor = (rows[-1][0], rows[-1][1])
                if progress is not None:
                    progress(checked, to_check)
            if len(rows) < page:
                break
    finally:
        # let them end: a cancelled statement would close the connection
        await asyncio.gather(*(f for _, f in ahead), return_exceptions=True)
        raw.close()
        for conn, worker in borrowed:
            if worker is not None:
                worker.close()
            await pool.release(conn)
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
    only: callers `seal` first. From `audit_chains` and a skip scan of the checkpoints, never
    the log."""
    if team is not None:
        return await db.fetchall(
            cur,
            f"""SELECT t.id AS chain_id, t.slug FROM teams t WHERE t.id = %(team)s
                 AND (EXISTS (SELECT 1 FROM audit_seals WHERE {chain_is('chain_id', '%(team)s')})
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
