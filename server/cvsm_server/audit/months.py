"""The audit log stored by month (migration 0024): partitions made ahead, and retention as the
drop of a whole month where it can be one.

`audit_logs` and `audit_seals` are partitioned by RANGE of `created_at`, a partition a UTC month
and a DEFAULT partition each. `make_ahead` makes the current month's and the next `AHEAD`
months' partitions (the hourly retention job calls it first, so an insert never lacks one).

`drop_expired_months` looks at the oldest month partitions whose end is past the shortest
retention: for each, per chain in it, the chain's last entry of the month (its new start once
the month goes) and the few entries of the chain outside the month with a lower seq (entries
written around midnight at the month's end can be sealed in another order than their times).
In one transaction it signs a `purge` checkpoint at each such head, deletes those stragglers
(bounded, through the guard, as the per-entry purge does), and asks the database to drop the
month (`cvsm_audit_drop_month`), which checks again that every entry of the month is past its
chain's retention, sealed, covered by a checkpoint and a prefix of its chain, and raises
otherwise (everything is then rolled back: the month stays for the per-entry purge). A drop
writes no WAL per entry, and the space goes back to the system at once.

`compact_boundary_month` then looks at the oldest month left (the boundary month: its newest
entries not expired yet): per chain, the expired prefix of its entries there (up to the first
entry kept, by seq). Where at most a third of the month stays (COMPACT_KEPT_SHARE), it signs a
`purge` checkpoint at each chain's cut and asks the database to copy the entries that stay into
fresh partitions that replace the month's (`cvsm_audit_compact_month`, migration 0026: it
checks what the guard checks and raises otherwise): WAL in proportion to what stays, not to
what goes (issue 40: <= 100 B per removed entry), the space back at once. Otherwise (or where
the database refuses) the per-entry purge removes them, as before.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import date, datetime, timezone

import psycopg2

from .. import db

log = logging.getLogger("cvsm.audit")

AHEAD = 2
# Entries of a chain outside the month a drop removes first; more means the month is no prefix
# of that chain (the per-entry purge handles it).
STRAGGLERS = 1000
# A boundary month is compacted (what stays copied, the month's partitions replaced) where at
# most this share of its entries stays; copying an entry writes about twice the WAL that
# deleting one does (its row, seal and index entries against two delete records and page images).
COMPACT_KEPT_SHARE = 1 / 3


async def make_ahead(cur: db.Cursor, ahead: int = AHEAD) -> int:
    """The partitions of this month and the next `ahead` months; returns how many were made."""
    row = await db.fetchone(cur, "SELECT cvsm_audit_make_partitions(%s) AS n", (ahead,))
    return row["n"]


async def expired_months(cur: db.Cursor) -> list[date]:
    """The month partitions (oldest first) that ended before the shortest retention began."""
    rows = await db.fetchall(
        cur,
        """SELECT m.month FROM (
               SELECT to_date(substr(c.relname, 12), '"y"YYYY"m"MM') AS month
               FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               WHERE i.inhparent = 'audit_logs'::regclass
                 AND c.relname ~ '^audit_logs_y[0-9]{4}m[0-9]{2}$') m
           WHERE (m.month + interval '1 month') AT TIME ZONE 'UTC' < now() - interval '30 days'
           ORDER BY 1""")
    return [row["month"] for row in rows]


def chain_is(column: str, value: str) -> str:
    """SQL: the seal's `column` (its chain_id) is the chain `value`, as the seals' chain key
    finds it (migration 0044: the key holds the chain's 64-bit hash, then its seq)."""
    return (f"uuid_hash_extended({column}, 0) = uuid_hash_extended({value}, 0) "
            f"AND {column} = {value}")


def link_of(seals: str) -> str:
    """SQL: the link (`prev_hash`) of each row of `seals` (an alias of seal rows in seq order
    under the window `w`, ORDER BY seq): the hash of the row before where that is the seq
    before, else the seal or purge checkpoint before it (migration 0042)."""
    return (f"CASE WHEN lag({seals}.seq) OVER w = {seals}.seq - 1 THEN lag({seals}.hash) OVER w "
            f"ELSE cvsm_audit_prev_hash({seals}.chain_id, {seals}.seq) END")


# The chains with seals in [lo, hi), one probe of the month's chain key for each chain there
# is (`audit_chains`, migration 0044) instead of grouping the month.
_CHAINS_IN_MONTH = f"""WITH k(id) AS (
        SELECT c.chain_id FROM audit_chains c
        CROSS JOIN LATERAL (SELECT 1 FROM audit_seals s
                            WHERE s.created_at >= %(lo)s AND s.created_at < %(hi)s
                              AND {chain_is("s.chain_id", "c.chain_id")} LIMIT 1) x)
"""


HEADS = _CHAINS_IN_MONTH + f"""
            SELECT k.id AS chain_id, h.seq, h.hash,
                   cvsm_audit_retention_days(k.id) IS NOT NULL
                   AND %(hi)s::timestamptz < now() - make_interval(
                       days => cvsm_audit_retention_days(k.id)) AS expired
            FROM k CROSS JOIN LATERAL (
                SELECT s.seq, s.hash FROM audit_seals s
                WHERE s.created_at >= %(lo)s AND s.created_at < %(hi)s
                  AND {chain_is("s.chain_id", "k.id")}
                ORDER BY s.seq DESC LIMIT 1) h
            WHERE k.id IS NOT NULL"""

# The first chain of the month that keeps entries (the hourly run that cannot drop stops at it:
# one probe and one retention look-up where the month's first chain keeps its entries).
_KEPT = _CHAINS_IN_MONTH + """
            SELECT k.id AS chain_id FROM k
            WHERE k.id IS NOT NULL
              AND NOT coalesce(%(hi)s::timestamptz < now() - make_interval(
                      days => cvsm_audit_retention_days(k.id)), false)
            LIMIT 1"""

_STRAGGLERS = f"""SELECT s.pos FROM audit_seals s
                 WHERE {chain_is("s.chain_id", "%(chain)s")} AND s.seq < %(seq)s
                   AND (s.created_at < %(lo)s OR s.created_at >= %(hi)s)
                 ORDER BY s.seq LIMIT %(limit)s"""


def month_span(month: date) -> dict[str, str]:
    """The month's bounds as query parameters `lo` (inclusive) and `hi`, UTC."""
    lo = date(month.year, month.month, 1)
    hi = date(month.year + (month.month == 12), month.month % 12 + 1, 1)
    return {"lo": f"{lo.isoformat()}T00:00:00Z", "hi": f"{hi.isoformat()}T00:00:00Z"}


Sign = Callable[[db.Cursor, uuid.UUID, int, bytes], Awaitable[object]]
Before = Callable[[date], Awaitable[object]]


async def drop_month(pool: db.Pool, sign: Sign, month: date,
                     before: Before | None = None) -> tuple[int, list[uuid.UUID]]:
    """Drop one month (see the module's text): `sign(cur, chain, seq, hash)` writes the purge
    checkpoint at each chain's new start, `before(month)` runs first (the archive). Returns
    (entries removed, chains it held), or raises the database's reason (nothing changed)."""
    lo = date(month.year, month.month, 1)
    span = month_span(lo)
    async with db.cursor(pool) as cur:  # the cheap check first: the hourly run that cannot
        kept = await db.fetchone(cur, _KEPT, span)  # drop is short (and archives nothing)
    if kept is not None:
        raise psycopg2.ProgrammingError(f"audit month {lo}: chain {kept['chain_id']} keeps "
                                        "entries")
    if before is not None:
        await before(lo)
    async with db.pool_transaction(pool) as cur:
        heads = await db.fetchall(cur, HEADS, span)
        kept = next((h["chain_id"] for h in heads if not h["expired"]), None)
        if kept is not None:
            raise psycopg2.ProgrammingError(f"audit month {lo}: chain {kept} keeps entries")
        removed = 0
        for head in heads:
            stray = await db.fetchall(cur, _STRAGGLERS, {**span, "chain": head["chain_id"],
                                                         "seq": head["seq"],
                                                         "limit": STRAGGLERS + 1})
            if len(stray) > STRAGGLERS:
                raise psycopg2.ProgrammingError(
                    f"audit month {lo}: chain {head['chain_id']} is no prefix of it")
            await sign(cur, head["chain_id"], head["seq"], bytes(head["hash"]))
            if stray:
                await cur.execute("DELETE FROM audit_logs WHERE pos = ANY(%s)",
                                  ([r["pos"] for r in stray],))
                removed += cur.rowcount
        row = await db.fetchone(cur, "SELECT cvsm_audit_drop_month(%s) AS n", (lo,))
        removed += row["n"]
    return removed, [h["chain_id"] for h in heads]


async def drop_expired_months(pool: db.Pool, sign: Sign, before: Before | None = None
                              ) -> tuple[int, list[uuid.UUID]]:
    """Drop the expired months, oldest first, up to the first that cannot go yet (`sign` and
    `before` as for `drop_month`); returns the entries removed and the chains that lost
    entries."""
    async with db.cursor(pool) as cur:
        await make_ahead(cur)
        months = await expired_months(cur)
    removed = 0
    chains: list[uuid.UUID] = []
    for month in months:
        try:
            gone, touched = await drop_month(pool, sign, month, before)
        except psycopg2.Error as exc:
            log.info("audit month %s kept for the per-entry purge: %s", month.isoformat()[:7],
                     db.first_line(exc))
            break
        removed += gone
        chains.extend(touched)
        log.info("audit month %s dropped: %d entries", month.isoformat()[:7], gone)
    return removed, chains


_CUTS = _CHAINS_IN_MONTH + f"""
           SELECT k.id AS chain_id, e.first, e.last,
                  (SELECT min(s.seq) FROM audit_seals s
                   WHERE s.created_at >= %(lo)s AND s.created_at < %(hi)s
                     AND {chain_is("s.chain_id", "k.id")}
                     AND s.created_at >= now() - make_interval(days => d.days)) AS first_kept
           FROM k CROSS JOIN LATERAL (SELECT cvsm_audit_retention_days(k.id) AS days) d
           CROSS JOIN LATERAL (
               SELECT min(s.seq) AS first, max(s.seq) AS last FROM audit_seals s
               WHERE s.created_at >= %(lo)s AND s.created_at < %(hi)s
                 AND {chain_is("s.chain_id", "k.id")}) e
           WHERE k.id IS NOT NULL AND d.days IS NOT NULL"""


async def oldest_month(cur: db.Cursor) -> date | None:
    row = await db.fetchone(
        cur,
        """SELECT min(to_date(substr(c.relname, 12), '"y"YYYY"m"MM')) AS month
           FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
           WHERE i.inhparent = 'audit_logs'::regclass
             AND c.relname ~ '^audit_logs_y[0-9]{4}m[0-9]{2}$'""")
    return None if row is None else row["month"]


async def compact_boundary_month(pool: db.Pool, sign: Sign, *,
                                 kept_share: float = COMPACT_KEPT_SHARE
                                 ) -> tuple[int, list[uuid.UUID]]:
    """Compact the oldest month (see the module's text) where at most `kept_share` of it stays;
    returns (entries removed, chains that lost entries), (0, []) where it was not compacted."""
    async with db.cursor(pool) as cur:
        month = await oldest_month(cur)
        if month is None or month >= datetime.now(timezone.utc).date().replace(day=1):
            return 0, []
        span = month_span(month)
        cuts = []
        for row in await db.fetchall(cur, _CUTS, span):
            cut = row["last"] if row["first_kept"] is None else row["first_kept"] - 1
            if cut >= row["first"]:
                cuts.append((row["chain_id"], cut, cut - row["first"] + 1))
        going = sum(n for _, _, n in cuts)
        if not going:
            return 0, []
        total = (await db.fetchone(
            cur, "SELECT count(*) AS n FROM audit_logs WHERE created_at >= %(lo)s "
                 "AND created_at < %(hi)s", span))["n"]
    if total - going > kept_share * total:
        return 0, []
    try:
        async with db.pool_transaction(pool) as cur:
            for chain_id, cut, _ in cuts:
                head = await db.fetchone(
                    cur, f"SELECT hash FROM audit_seals WHERE {chain_is('chain_id', '%(chain)s')} "
                         "AND seq = %(seq)s", {"chain": chain_id, "seq": cut})
                await sign(cur, chain_id, cut, bytes(head["hash"]))
            removed = (await db.fetchone(
                cur, "SELECT cvsm_audit_compact_month(%s, %s::uuid[], %s::bigint[]) AS n",
                (month, [c for c, _, _ in cuts], [cut for _, cut, _ in cuts])))["n"]
    except psycopg2.Error as exc:
        log.info("audit month %s kept for the per-entry purge: %s", month.isoformat()[:7],
                 db.first_line(exc))
        return 0, []
    log.info("audit month %s compacted: %d entries removed, %d kept", month.isoformat()[:7],
             removed, total - removed)
    return removed, [c for c, _, _ in cuts]


async def compact_reads(pool: db.Pool) -> int:
    """The read rollup's months (migration 0027), oldest first while they started before the
    shortest retention: each whose expired rows are most of it loses them by a partition drop
    or copy (`cvsm_audit_compact_reads`); stops at the first left to the per-team delete.
    Returns how many rows went."""
    async with db.cursor(pool) as cur:
        months = [r["month"] for r in await db.fetchall(
            cur,
            """SELECT m.month FROM (
                   SELECT to_date(substr(c.relname, 13), '"y"YYYY"m"MM') AS month
                   FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                   WHERE i.inhparent = 'audit_reads'::regclass
                     AND c.relname ~ '^audit_reads_y[0-9]{4}m[0-9]{2}$') m
               WHERE m.month::timestamp AT TIME ZONE 'UTC' < now() - interval '30 days'
               ORDER BY 1""")]
    gone = 0
    for month in months:
        try:
            async with db.pool_transaction(pool) as cur:
                row = await db.fetchone(cur, "SELECT cvsm_audit_compact_reads(%s) AS n", (month,))
        except psycopg2.Error as exc:
            log.info("audit reads month %s kept for the per-team delete: %s",
                     month.isoformat()[:7], db.first_line(exc))
            break
        if row["n"] is None:
            break
        gone += row["n"]
    return gone
