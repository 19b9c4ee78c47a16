"""The audit list's statements (`log.list_page`): keyset pages walked month by month over the
log's partitions, by the page indexes' hashes (migration 0035), exact where hashes are shared.

Separate from `log` for its size only; `log` re-exports `list_sql`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from .. import db

# `log.Filters` and `log.Cursor` (not imported: `log` imports this module)
Filters = Any
Cursor = Any


# The newest-first order of every list, and its keyset: each filter walks one index in its
# order (created_at DESC; ties of time, rare, sorted by pos as they come).
_ORDER = "ORDER BY created_at DESC, pos DESC"
_COLUMNS = """id, pos, team_id, user_id, user_email, action, resource, resource_id, ip_address,
              user_agent, metadata, created_at"""

# The page indexes key the team and the filtered value by 4-byte hashes (migration 0035). A
# statement names the hashes (what the index finds: `_found`) and the values behind them (what
# the index cannot tell: `_exact`). A page's statements keep the values out of their WHERE
# (the planner, multiplying the two, would expect a handful of rows where there are thousands,
# and sort them all) and return whether each row is exact instead; a page that met a row another
# value (or team) shares a hash with, which is rare, is read again with the values in the WHERE.
TEAM_FOUND = "uuid_hash(team_id) = uuid_hash(%(team)s::uuid)"


def _found(filters: Filters, before: Cursor | None, after: Cursor | None = None) -> list[str]:
    """The conditions an index decides, shared by every branch: team, action and person by
    their hashes, time, cursors."""
    out = [TEAM_FOUND]
    if filters.action == "read":  # the time index (migration 0040): reads are the log's bulk
        out.append("action = 'read'")
    elif filters.action:  # the action index, which leaves reads out (by value, not hash)
        out.append("action = %(f_action)s AND action <> 'read'")
    if filters.person:
        out.append("hashtext(lower(user_email)) = hashtext(lower(%(f_person)s::text))")
    if filters.start:
        out.append("created_at >= %(f_start)s")
    if filters.end:
        out.append("created_at < %(f_end)s")
    if before is not None:
        out.append("created_at <= %(b_at)s AND (created_at, pos) < (%(b_at)s, %(b_pos)s)")
    if after is not None:
        out.append("created_at >= %(a_at)s AND (created_at, pos) > (%(a_at)s, %(a_pos)s)")
    return out


def _exact(filters: Filters) -> list[str]:
    """The values behind `_found`'s hashes."""
    out = ["team_id = %(team)s"]
    if filters.action:
        out.append("action = %(f_action)s")
    if filters.person:
        out.append("lower(user_email) = lower(%(f_person)s)")
    return out


# The filter by secret (its id or name) as disjoint branches, each an index walk in the list's
# order (migration 0022): the secret's own entries by id, entries naming it by name (reads
# apart: below), shares (and others) naming it by id in their metadata. Each is (found, exact),
# as above.
_SECRET_BRANCHES = (
    ("resource = 'secret' AND hashtext(resource_id) = hashtext(%(f_secret)s::text)",
     "resource_id = %(f_secret)s"),
    ("""resource IN ('secret', 'share') AND action <> 'read'
        AND hashtext(metadata->>'name') = hashtext(%(f_secret)s::text)
        AND NOT (resource = 'secret' AND resource_id IS NOT DISTINCT FROM %(f_secret)s)""",
     "metadata->>'name' = %(f_secret)s"),
    ("""resource IN ('secret', 'share') AND metadata ? 'secret_id'
        AND hashtext(metadata->>'secret_id') = hashtext(%(f_secret)s::text)
        AND NOT (resource = 'secret' AND resource_id IS NOT DISTINCT FROM %(f_secret)s)
        AND (metadata->>'name') IS DISTINCT FROM %(f_secret)s""",
     "metadata->>'secret_id' = %(f_secret)s"),
)
# The reads of the secrets the name has named in the team (a read names its secret by id and
# the name index leaves reads out, migration 0040; a secret's name never changes), one walk of
# the secret-by-id index for each, the secret named by the filter's own id apart (the first
# branch has its entries).
_NAMED = """SELECT s.id::text AS sid FROM secrets s
            WHERE s.team_id = %(team)s::uuid AND s.name = %(f_secret)s
              AND s.id::text IS DISTINCT FROM %(f_secret)s"""
_NAMED_READ = "resource = 'secret' AND action = 'read' AND hashtext(resource_id) = hashtext(n.sid)"
_NAMED_READ_EXACT = ["resource_id = n.sid", "metadata->>'name' = %(f_secret)s"]


def list_sql(filters: Filters, before: Cursor | None, after: Cursor | None = None, *,
             segment: str | None = None, exact: bool = True) -> str:
    """The page's statement: newest first from `before`, `limit` rows after `offset`; with
    `after`, the `limit` entries just newer than it (oldest first: the caller reverses them).
    `segment`: a condition on created_at that keeps it to one partition of the log. `exact`:
    the values in the WHERE; otherwise each row says whether it is exact (column `exact`)."""
    found = _found(filters, before, after) + ([segment] if segment else [])
    order = _ORDER if after is None else "ORDER BY created_at, pos"
    branches = [(b, [e]) for b, e in _SECRET_BRANCHES] if filters.secret else [(None, [])]

    def branch_select(branch: list[str], branch_exact: list[str]) -> str:
        checks = _exact(filters) + branch_exact
        where = found + branch + (checks if exact else [])
        flag = "true" if exact else "(" + " AND ".join(checks) + ")"
        return (f"SELECT {_COLUMNS}, {flag} AS exact FROM audit_logs "
                f"WHERE {' AND '.join(where)} {order}")

    selects = [branch_select([branch] if branch else [], branch_exact)
               for branch, branch_exact in branches]
    if filters.secret and filters.action in (None, "read"):
        selects.append(f"SELECT x.* FROM ({_NAMED}) n, LATERAL "
                       f"({branch_select([_NAMED_READ], _NAMED_READ_EXACT)} "
                       f"LIMIT %(limit)s + %(offset)s) x {order}")
    if len(selects) == 1:
        return f"{selects[0]} LIMIT %(limit)s OFFSET %(offset)s"
    union = " UNION ALL ".join(f"({q} LIMIT %(limit)s + %(offset)s)" for q in selects)
    return f"SELECT * FROM ({union}) u {order} LIMIT %(limit)s OFFSET %(offset)s"


# The log's month partitions (migration 0024), oldest first: a page reads them one at a time
# from its cursor, each statement naming the month's range, so that it is planned for that one
# partition (planning a statement over every partition cost more than running it). One more
# statement reads everything else: the default partition (times no month covers; usually
# empty) and the months made ahead (empty). The list is kept a minute: a month made or dropped
# meanwhile is read by that other statement (its range is outside the months listed), or read
# empty.
_MONTHS = """SELECT to_date(substr(c.relname, 12), '"y"YYYY"m"MM') AS month
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'audit_logs'::regclass
               AND c.relname ~ '^audit_logs_y[0-9]{4}m[0-9]{2}$'
             ORDER BY 1"""
MONTHS_KEPT_SECONDS = 60.0
_months_cache: tuple[float, list[datetime]] | None = None


@dataclass(frozen=True, slots=True)
class _Segment:
    sql: str
    args: dict[str, Any]
    lo: datetime | None = None  # a month's range; None for everything else
    hi: datetime | None = None


async def segments(cur: db.Cursor) -> tuple[list[_Segment], _Segment]:
    """The month partitions begun by now (oldest first), and everything else, as `_Segment`s."""
    global _months_cache
    clock = asyncio.get_running_loop().time()
    if _months_cache is None or clock - _months_cache[0] > MONTHS_KEPT_SECONDS:
        starts = [datetime(r["month"].year, r["month"].month, 1, tzinfo=timezone.utc)
                  for r in await db.fetchall(cur, _MONTHS)]
        _months_cache = (clock, starts)
    now = datetime.now(timezone.utc)
    months = []
    for lo in _months_cache[1]:
        if lo > now:
            break
        hi = datetime(lo.year + lo.month // 12, lo.month % 12 + 1, 1, tzinfo=timezone.utc)
        months.append(_Segment("created_at >= %(s_lo)s AND created_at < %(s_hi)s",
                               {"s_lo": lo, "s_hi": hi}, lo, hi))
    # the rest: before, between and after those months
    edges = [None, *[t for m in months for t in (m.lo, m.hi)], None]
    outside, args = [], {}
    for i in range(0, len(edges), 2):
        lo, hi = edges[i], edges[i + 1]
        if lo is not None and lo == hi:
            continue
        parts = []
        if lo is not None:
            parts.append(f"created_at >= %(d{i}_lo)s")
            args[f"d{i}_lo"] = lo
        if hi is not None:
            parts.append(f"created_at < %(d{i}_hi)s")
            args[f"d{i}_hi"] = hi
        outside.append("(" + (" AND ".join(parts) or "true") + ")")
    return months, _Segment("(" + " OR ".join(outside) + ")", args)


async def _holds(cur: db.Cursor, outside: _Segment, args: dict[str, Any]) -> bool:
    """Whether the team has entries outside the months (usually none): one probe of the time
    index, planned cheaply where the filters' statement over those partitions is not."""
    row = await db.fetchone(cur, f"SELECT EXISTS (SELECT 1 FROM audit_logs WHERE {TEAM_FOUND} "
                                 f"AND {outside.sql}) AS x", {**args, **outside.args})
    return row["x"]


@dataclass(frozen=True, slots=True)
class Reach:
    """Where a page's statements look: the month partitions begun by now (oldest first), the
    rest (`segments`), and whether the team has entries in the rest (`_holds`), found once a
    page for its walk and its count."""

    months: list[_Segment]
    outside: _Segment
    holds: bool


async def reach(cur: db.Cursor, args: dict[str, Any]) -> Reach:
    months, outside = await segments(cur)
    return Reach(months, outside, await _holds(cur, outside, args))


def _in_reach(month: _Segment, filters: Filters, before: Cursor | None,
              after: Cursor | None) -> bool:
    """Whether the month may hold an entry of the page (its range against the time filters and
    the cursor)."""
    return not ((filters.start and month.hi <= filters.start)
                or (filters.end and month.lo >= filters.end)
                or (before is not None and month.lo > before.created_at)
                or (after is not None and month.hi <= after.created_at))


# The largest LIMIT PostgreSQL takes (a bigint): an offset counted past every entry is one
# (`offset` is any integer >= 0: the count of a month up to offset + 1 must not overflow).
_BIGINT_MAX = 2**63 - 1


def _key(row: dict) -> tuple[datetime, int]:
    return row["created_at"], row["pos"]


async def walk(cur: db.Cursor, filters: Filters, before: Cursor | None, after: Cursor | None,
               args: dict[str, Any], *, exact: bool, where: Reach | None = None
               ) -> list[dict] | None:
    """The page's rows (`args`' limit after its offset), read month by month from the cursor,
    newest first (oldest first with `after`); None where a row skipped by the offset was not
    exact (read again with `exact`). An offset skips whole months by counting their entries
    (what it skips, it reads: O(offset), as documented), then the rest in the month it ends in.
    Entries outside the months (rare) with an offset: one statement over every partition."""
    limit, skip = args["limit"], args["offset"]
    where = where or await reach(cur, args)
    months, outside = where.months, where.outside
    rows: list[dict] = []
    if where.holds:
        if skip:
            return await db.fetchall(cur, list_sql(filters, before, after, exact=True), args)
        rows = await db.fetchall(cur, list_sql(filters, before, after, segment=outside.sql,
                                               exact=exact), args | outside.args)
    got: list[dict] = []
    for month in (months if after is not None else reversed(months)):
        if len(got) >= limit:
            break
        if not _in_reach(month, filters, before, after):
            continue
        if skip:
            row = await db.fetchone(
                cur, "SELECT count(*) AS n, coalesce(bool_and(exact), true) AS ok FROM "
                     f"({list_sql(filters, before, after, segment=month.sql, exact=exact)}) m",
                args | month.args | {"limit": min(skip + 1, _BIGINT_MAX), "offset": 0})
            if not row["ok"]:
                return None
            if row["n"] <= skip:
                skip -= row["n"]
                continue
        got += await db.fetchall(cur, list_sql(filters, before, after, segment=month.sql,
                                               exact=exact),
                                 args | month.args | {"limit": limit - len(got), "offset": skip})
        skip = 0
    return sorted(rows + got, key=_key, reverse=after is None)[:limit]


async def count(cur: db.Cursor, filters: Filters, args: dict[str, Any], cap: int, *,
                exact: bool, where: Reach | None = None) -> tuple[int, bool]:
    """How many entries the filters keep, up to `cap` + 1, month by month (newest first), and
    whether every one counted is exact."""
    where = where or await reach(cur, args)
    total, ok = 0, True
    for segment in (where.outside, *reversed(where.months)):
        if total > cap:
            break
        if segment.lo is None and not where.holds:
            continue
        if segment.lo is not None and not _in_reach(segment, filters, None, None):
            continue
        row = await db.fetchone(
            cur, "SELECT count(*) AS n, coalesce(bool_and(exact), true) AS ok FROM "
                 f"({list_sql(filters, None, segment=segment.sql, exact=exact)}) m",
            {**args, **segment.args, "limit": cap + 1 - total, "offset": 0})
        total, ok = total + row["n"], ok and row["ok"]
    return total, ok
