"""The audit log: the one writer of entries (inside the caller's transaction), listing, the
export (CSV or JSON lines), verification of a team's chain, and the retention purge.

Every entry is written by the INSERT in this module: `record` for ordinary actions, and
`INSERT_ENTRY` as a fragment for statements that write their entry themselves (the
single-statement secret read). Entries are immutable in the database itself (migrations 0003
and 0004): only the retention purge and nulling the actor of a deleted user or team get through,
and the server's database role holds no UPDATE or TRUNCATE on the table. Each entry is a link
of its chain (`chain`): the sealer appends its chain fields to `audit_seals` once it commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg2.errors
from psycopg2.extras import Json

from . import archive as audit_archive, chain as audit_chain, listing, verify as audit_verify
from .listing import list_sql  # noqa: F401 (re-exported)
from .. import db
from ..teams import roles
from ..webhooks import events as webhook_events
from ..core.actor import Actor
from ..core.errors import BadRequest, ServiceUnavailable
from ..core.i18n import N_, Text
from ..core.timeutil import iso, parse_iso

log = logging.getLogger("cvsm.audit")

# The columns every entry is written with; `record` and the read statement both use this.
INSERT_ENTRY = """INSERT INTO audit_logs (team_id, user_id, user_email, action, resource,
                                          resource_id, ip_address, user_agent, metadata)"""

# The metadata an entry written by an API token adds: which token ("via token <name>"); empty
# for any other actor. A fragment of both writers' SQL, so the name is the one at write time.
VIA_TOKEN = """COALESCE((SELECT jsonb_build_object('via_token', t.name, 'token_id', t.id::text)
                         FROM api_tokens t WHERE t.id = %(token_id)s), '{}'::jsonb)"""

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


def actor_params(actor: Actor | None) -> dict[str, Any]:
    """The actor, address and agent as named SQL parameters."""
    return {
        "actor_id": actor.user_id if actor else None,
        "actor_email": actor.email if actor else None,
        "ip": actor.ip if actor else None,
        "user_agent": actor.user_agent if actor else None,
        "token_id": actor.token_id if actor else None,
    }


async def record(
    cur: db.Cursor,
    actor: Actor | None,
    action: str,
    resource: str,
    *,
    team_id: uuid.UUID | None = None,
    resource_id: object | None = None,
    metadata: dict[str, Any] | None = None,
) -> None:
    """Write one entry in the current transaction; if it fails, the whole action fails. An
    entry made with an API token names the token in its metadata (`via_token`, `token_id`)."""
    await cur.execute(
        INSERT_ENTRY + """ VALUES (%(team_id)s, %(actor_id)s, %(actor_email)s, %(action)s,
                                   %(resource)s, %(resource_id)s, %(ip)s, %(user_agent)s,
                                   %(metadata)s::jsonb || """ + VIA_TOKEN + ")",
        {
            **actor_params(actor),
            "team_id": team_id,
            "action": action,
            "resource": resource,
            "resource_id": str(resource_id) if resource_id is not None else None,
            "metadata": Json(metadata or {}),
        },
    )
    await webhook_events.emit(cur, actor, action, resource, team_id=team_id, resource_id=resource_id,
                        metadata=metadata)


def entry_json(row: dict) -> dict:
    return {
        "id": str(row["id"]),
        "action": row["action"],
        "resource": row["resource"],
        "resource_id": row["resource_id"],
        "user_email": row["user_email"],
        "ip_address": row["ip_address"],
        "user_agent": row["user_agent"],
        "metadata": row["metadata"],
        "created_at": iso(row["created_at"]),
    }


@dataclass(frozen=True, slots=True)
class Filters:
    """What the audit page narrows the list to; every field empty shows everything.

    `action` is an exact action name, `person` an actor's e-mail (any case), `secret` a secret's
    id or name (its entries: read, create, update, rollback, delete, rotation...), `start`
    (inclusive) and `end` (exclusive) the time range."""

    action: str | None = None
    person: str | None = None
    secret: str | None = None
    start: datetime | None = None
    end: datetime | None = None

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Filters:
        """The filters from query parameters (`action`, `person`, `secret`, `from`, `to`); 400
        with a message for a malformed one. Unknown parameters are ignored."""
        def text(name: str, pattern: re.Pattern[str], message: str) -> str | None:
            value = (params.get(name) or "").strip()
            if not value:
                return None
            if not pattern.fullmatch(value):
                raise BadRequest(message)
            return value
        start, end = parse_export_range(params.get("from"), params.get("to"))
        return cls(action=text("action", _ACTION_RE, BAD_ACTION),
                   person=text("person", _PERSON_RE, BAD_PERSON),
                   secret=text("secret", _SECRET_RE, BAD_SECRET), start=start, end=end)

    def as_query(self) -> dict[str, str]:
        """The set filters as query parameters (for links that keep or change one of them)."""
        out = {"action": self.action, "person": self.person, "secret": self.secret,
               "from": iso(self.start), "to": iso(self.end)}
        return {k: v for k, v in out.items() if v}

    def params(self) -> dict[str, Any]:
        return {"f_action": self.action, "f_person": self.person, "f_secret": self.secret,
                "f_start": self.start, "f_end": self.end}


_ACTION_RE = re.compile(r"[a-z0-9_]{1,64}")
_PERSON_RE = re.compile(r"[^\s<>]{1,320}")
_SECRET_RE = re.compile(r"[A-Za-z0-9_-]{1,255}")
BAD_ACTION = "Filter aksi tidak valid"
BAD_PERSON = "Filter orang tidak valid (gunakan alamat email)"
BAD_SECRET = "Filter secret tidak valid (gunakan nama atau id secret)"
BAD_CURSOR = "Kursor halaman tidak valid (gunakan next_before atau tautan dari halaman sebelumnya)"

# A page's statements run under this limit (below the pool's 30 s), so a page that cannot be
# served in time is a clear 503 with the reason, never a 500 or a request left hanging.
PAGE_STATEMENT_SECONDS = 10
# A filtered list counts its matches up to this many (an index walk of that length at most).
COUNT_CAP = 1000
TOO_SLOW = N_("Log audit tidak dapat dibaca dalam batas waktu ({seconds} detik); persempit filter "
              "atau coba lagi nanti")


@contextlib.asynccontextmanager
async def bounded(conn: db.Connection, seconds: float | None = None
                  ) -> AsyncIterator[db.Cursor]:
    """A read transaction whose every statement PostgreSQL cancels after `seconds` (default
    PAGE_STATEMENT_SECONDS), lock waits included; a cancelled one is a 503
    (`ServiceUnavailable`) that says so."""
    seconds = PAGE_STATEMENT_SECONDS if seconds is None else seconds
    try:
        async with db.transaction(conn) as cur:
            await cur.execute(f"SET LOCAL statement_timeout = {int(seconds * 1000)}")
            yield cur
    except psycopg2.errors.QueryCanceled:
        raise ServiceUnavailable(Text(TOO_SLOW, seconds=format(seconds, "g"))) from None
    except asyncio.CancelledError:
        # aiopg raises a statement PostgreSQL cancelled (QueryCanceledError) as CancelledError;
        # only a task that is itself being cancelled lets that one through.
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        raise ServiceUnavailable(Text(TOO_SLOW, seconds=format(seconds, "g"))) from None


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a page of the list starts: just after (older than) the entry at `created_at`,
    `pos`. Its text form (`next_before` / `before`) is `<microseconds since 1970>_<pos>`."""

    created_at: datetime
    pos: int

    @classmethod
    def of(cls, row: dict) -> Cursor:
        return cls(row["created_at"], row["pos"])

    @classmethod
    def parse(cls, text: str | None) -> Cursor | None:
        """The cursor in `text`; None when absent or empty (a first page: a page's form or a
        shell loop sends `before=`); 400 when malformed."""
        if text is None or text == "":
            return None
        match = _CURSOR_RE.fullmatch(text)
        if match is None:
            raise BadRequest(BAD_CURSOR)
        try:
            at = _EPOCH + timedelta(microseconds=int(match[1]))
        except OverflowError:
            raise BadRequest(BAD_CURSOR) from None
        return cls(at, int(match[2]))

    def __str__(self) -> str:
        delta = self.created_at.astimezone(timezone.utc) - _EPOCH
        micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
        return f"{micros}_{self.pos}"


_CURSOR_RE = re.compile(r"([0-9]{1,17})_([0-9]{1,18})")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

# The log's entries not sealed yet: its tail from the sealer's mark (the last second or so while
# the sealer runs), which the chain's counts and the read rollups (migration 0022) do not hold.
# The mark (`%(mark)s`, from `sealed_mark`) is given as a value, so that the plan is the
# primary key's range from it (a subquery's value is unknown when planning: a scan of the log).
UNSEALED = """SELECT * FROM audit_logs a
              WHERE a.pos >= %(mark)s
                AND NOT EXISTS (SELECT 1 FROM audit_seals s WHERE s.pos = a.pos)"""


async def sealed_mark(cur: db.Cursor) -> int:
    """The sealer's mark: every entry below this position is sealed (`UNSEALED`'s `mark`)."""
    return (await db.fetchone(cur, "SELECT sealed_below FROM audit_seal_state"))["sealed_below"]

# The team's entries without reading them: a chain is gap-free from its first kept entry to its
# head (two probes of audit_seals' chain key, 0044), plus its entries not sealed yet.
_TOTAL = f"""SELECT coalesce((SELECT max(seq) - min(seq) + 1 FROM audit_seals
                             WHERE {audit_chain.chain_is("chain_id", "%(team)s")}), 0)
                  + (SELECT count(*) FROM ({UNSEALED}) u WHERE u.team_id = %(team)s) AS n"""


@dataclass(frozen=True, slots=True)
class Page:
    """A page of the list, newest first: its entries, the cursor of the next (older) page (None
    on the last), the total (the team's entries, or those the filters keep; None when these are
    more than COUNT_CAP, which would mean counting them all), and whether newer entries exist before it (only known for a page asked `after`)."""

    entries: list[dict]
    next_before: Cursor | None
    total: int | None
    newer: bool = False
    choices: dict[str, list[str]] | None = None  # `filter_choices`, when asked with the page


async def list_page(conn: db.Connection, actor: Actor, team_id: uuid.UUID, *,
                    limit: int = DEFAULT_LIMIT, offset: int = 0, before: Cursor | None = None,
                    after: Cursor | None = None, filters: Filters | None = None,
                    with_choices: bool = False) -> Page:
    """A page of the team's entries (those `filters` keep), newest first, from `before` (the
    previous page's `next_before`) and/or `offset`; or, with `after`, the page just newer than
    that entry (the dashboard's way back). Admin or above. Each statement walks an index from
    the cursor: the page costs its size, not the log's."""
    filters = filters or Filters()
    args = {"team": team_id, "limit": limit + 1, "offset": offset, **filters.params(),
            "b_at": before.created_at if before else None, "b_pos": before.pos if before else None,
            "a_at": after.created_at if after else None, "a_pos": after.pos if after else None}
    async with bounded(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN, reading=True)
        where = await listing.reach(cur, args)  # once for the walk and the count
        rows = await listing.walk(cur, filters, before, after, args, exact=False, where=where)
        if rows is None or not all(r["exact"] for r in rows):  # a shared hash: with the values
            rows = await listing.walk(cur, filters, before, after, args, exact=True,
                                      where=where) or []
        mark = await sealed_mark(cur) if filters == Filters() or with_choices else 0
        if filters == Filters():
            total = (await db.fetchone(cur, _TOTAL, {**args, "mark": mark}))["n"]
        else:  # counted up to a bound: a page never reads every match
            total, ok = await listing.count(cur, filters, args, COUNT_CAP, exact=False,
                                            where=where)
            if not ok:
                total, _ = await listing.count(cur, filters, args, COUNT_CAP, exact=True,
                                               where=where)
            total = None if total > COUNT_CAP else total
        # the dashboard's filter choices, in the page's transaction
        choices = await _choices(cur, team_id, mark) if with_choices else None
    for row in rows:
        del row["exact"]
    more = len(rows) > limit
    rows = rows[:limit]
    if after is not None:
        rows.reverse()
        return Page(rows, Cursor.of(rows[-1]) if rows else after, total, newer=more,
                    choices=choices)
    return Page(rows, Cursor.of(rows[-1]) if more else None, total, choices=choices)


async def list_entries(conn: db.Connection, actor: Actor, team_id: uuid.UUID, *,
                       limit: int = DEFAULT_LIMIT, offset: int = 0,
                       filters: Filters | None = None) -> tuple[list[dict], int | None]:
    """A page of the team's entries and their total (`list_page` by offset)."""
    page = await list_page(conn, actor, team_id, limit=limit, offset=offset, filters=filters)
    return page.entries, page.total


# The team's actions and people for the audit page's filter links (migration 0035): those of
# `audit_choices` whose newest entry is within the team's retention (a day's slack: `last_at`
# moves a day at a time), and those of the log's unsealed tail.
_CHOICES = f"""WITH tail AS MATERIALIZED (
                   SELECT u.action, lower(u.user_email) AS person FROM ({UNSEALED}) u
                   WHERE u.team_id = %(team)s)
               SELECT kind, value FROM audit_choices
               WHERE team_id = %(team)s
                 AND (cvsm_audit_retention_days(%(team)s) IS NULL
                      OR last_at >= now() - make_interval(days => cvsm_audit_retention_days(
                                                              %(team)s) + 1))
               UNION
               SELECT 'action', action FROM tail
               UNION
               SELECT 'person', person FROM tail WHERE person IS NOT NULL"""


async def filter_choices(conn: db.Connection, actor: Actor, team_id: uuid.UUID
                         ) -> dict[str, list[str]]:
    """The actions and people found in the team's log, sorted, for the audit page's filter
    links; Admin or above. One index range of `audit_choices` and the log's unsealed tail."""
    async with bounded(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN, reading=True)
        return await _choices(cur, team_id, await sealed_mark(cur))


async def _choices(cur: db.Cursor, team_id: uuid.UUID, mark: int) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {"action": [], "person": []}
    for row in await db.fetchall(cur, _CHOICES, {"team": team_id, "mark": mark}):
        found[row["kind"]].append(row["value"])
    return {"actions": sorted(found["action"]), "people": sorted(found["person"])}


async def purge_expired(pool: db.Pool, signer: audit_chain.CheckpointSigner,
                        archive_dir: Path | None = None) -> int:
    """Delete entries older than their team's plan retention, as whole months or prefixes of
    their chains each ended by a signed checkpoint, each month archived first to `archive_dir`
    when given (`audit_archive.purge_expired`); returns how many."""
    return await audit_archive.purge_expired(pool, signer, archive_dir)


# --- export ------------------------------------------------------------------------------------

EXPORT_FORMATS = ("csv", "jsonl")
EXPORT_PAGE = 500
CSV_COLUMNS = ("seq", "id", "created_at", "action", "resource", "resource_id", "user_email",
               "ip_address", "user_agent", "metadata", "prev_hash", "hash")
# A spreadsheet reads a cell starting with one of these as a formula (or strips it first).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
BAD_FORMAT = "Format ekspor harus csv atau jsonl"
BAD_TIME = N_("Waktu '{name}' tidak valid (gunakan ISO 8601)")
BAD_RANGE = "Waktu 'from' harus sebelum 'to'"


def parse_export_range(start: str | None, end: str | None) -> tuple[datetime | None, datetime | None]:
    """`from` (inclusive) and `to` (exclusive) as times; 400 when malformed or reversed."""
    out = []
    for name, text in (("from", start), ("to", end)):
        if text is None or text == "":
            out.append(None)
            continue
        try:
            out.append(parse_iso(text).astimezone(timezone.utc))
        except (ValueError, OverflowError):
            raise BadRequest(Text(BAD_TIME, name=name)) from None
    if out[0] is not None and out[1] is not None and out[0] >= out[1]:
        raise BadRequest(BAD_RANGE)
    return out[0], out[1]


def check_export_format(fmt: str | None) -> str:
    fmt = fmt or "csv"
    if fmt not in EXPORT_FORMATS:
        raise BadRequest(BAD_FORMAT)
    return fmt


def export_json(row: dict) -> dict:
    """One JSON-lines object: the list API's entry plus its chain fields."""
    link = row["prev_hash"]  # None only in a chain that lost entries without a purge checkpoint
    return {**entry_json(row), "seq": row["seq"],
            "prev_hash": bytes(link).hex() if link is not None else None,
            "hash": bytes(row["hash"]).hex()}


def safe_cell(value: object) -> str:
    """A CSV cell a spreadsheet shows as text: a leading formula character gets a `'`."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def csv_line(cells: list[str] | tuple[str, ...]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerow(cells)
    return out.getvalue()


def csv_header() -> str:
    return csv_line(CSV_COLUMNS)


def csv_row(row: dict) -> str:
    entry = export_json(row)
    entry["metadata"] = json.dumps(entry["metadata"], sort_keys=True, separators=(",", ":"),
                                   ensure_ascii=False)
    return csv_line([safe_cell(entry[c]) for c in CSV_COLUMNS])


def jsonl_row(row: dict) -> str:
    return json.dumps(export_json(row), ensure_ascii=False, separators=(",", ":")) + "\n"


async def start_export(conn: db.Connection, actor: Actor, team_id: uuid.UUID, fmt: str,
                       start: datetime | None, end: datetime | None) -> str:
    """Check the caller (Admin or above) and record the export (committed before any row is
    sent); returns the team's slug for the file name."""
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN, reading=True)
        await record(cur, actor, "audit_export", "audit", team_id=team_id, metadata={
            "format": fmt, "from": iso(start), "to": iso(end)})
        team = await db.fetchone(cur, "SELECT slug FROM teams WHERE id = %s", (team_id,))
    return team["slug"]


# A page of the export: the team's entries after a seq, in the time range, each with its link
# (`prev_hash`: the hash of the entry before it, the row before where that is the one; else the
# seal or purge checkpoint before it, `cvsm_audit_prev_hash`, migration 0042).
_EXPORT_PAGE = f"""
    SELECT e.*, {audit_chain.link_of("e")} AS prev_hash
    FROM (SELECT * FROM audit_chain_entries
          WHERE {audit_chain.chain_is("chain_id", "%(team)s")} AND seq > %(after)s
            AND (%(start)s::timestamptz IS NULL OR created_at >= %(start)s)
            AND (%(end)s::timestamptz IS NULL OR created_at < %(end)s)
          ORDER BY seq LIMIT %(page)s) e
    WINDOW w AS (ORDER BY e.seq)
    ORDER BY e.seq"""


async def export_rows(conn: db.Connection, team_id: uuid.UUID, start: datetime | None,
                      end: datetime | None, *, page: int = EXPORT_PAGE) -> AsyncIterator[dict]:
    """The team's entries in chain order, read in keyset pages of `page` rows (never all at
    once), sealed first (every entry committed before the export began is in it); call
    `start_export` first."""
    async with db.cursor(conn) as cur:
        await audit_chain.seal(cur)
    after = 0
    while True:
        async with db.cursor(conn) as cur:
            rows = await db.fetchall(
                cur, _EXPORT_PAGE,
                {"team": team_id, "after": after, "start": start, "end": end, "page": page})
        for row in rows:
            yield row
        if len(rows) < page:
            return
        after = rows[-1]["seq"]


# --- verification ------------------------------------------------------------------------------

async def verify_team(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                      signer: audit_chain.CheckpointSigner) -> audit_verify.Verdict:
    """Seal, then verify the team's chain (Admin or above)."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN, reading=True)
        await audit_chain.seal(cur)
        return await audit_verify.verify_chain(cur, signer, team_id)


async def checkpoint_team(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                          signer: audit_chain.CheckpointSigner) -> dict | None:
    """Sign the team's chain head now (Admin or above); None when the chain is empty."""
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN, reading=True)
        return await audit_chain.checkpoint_now(cur, signer, team_id)
