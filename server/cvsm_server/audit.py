"""The audit log: the one writer of entries (inside the caller's transaction), listing, and the
retention purge.

Every entry is written by the INSERT in this module: `record` for ordinary actions, and
`INSERT_ENTRY` as a fragment for statements that write their entry themselves (the
single-statement secret read). Entries are immutable in the database itself (migrations 0003
and 0004): only the retention purge and nulling the actor of a deleted user or team get through,
and the server's database role holds no UPDATE or TRUNCATE on the table.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from psycopg2.extras import Json

from . import db, roles, webhooks
from .actor import Actor
from .timeutil import iso

log = logging.getLogger("cvsm.audit")

# The columns every entry is written with; `record` and the read statement both use this.
INSERT_ENTRY = """INSERT INTO audit_logs (team_id, user_id, user_email, action, resource,
                                          resource_id, ip_address, user_agent, metadata)"""

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


def actor_params(actor: Actor | None) -> dict[str, Any]:
    """The actor, address and agent as named SQL parameters."""
    return {
        "actor_id": actor.user_id if actor else None,
        "actor_email": actor.email if actor else None,
        "ip": actor.ip if actor else None,
        "user_agent": actor.user_agent if actor else None,
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
    """Write one entry in the current transaction; if it fails, the whole action fails."""
    await cur.execute(
        INSERT_ENTRY + """ VALUES (%(team_id)s, %(actor_id)s, %(actor_email)s, %(action)s,
                                   %(resource)s, %(resource_id)s, %(ip)s, %(user_agent)s,
                                   %(metadata)s)""",
        {
            **actor_params(actor),
            "team_id": team_id,
            "action": action,
            "resource": resource,
            "resource_id": str(resource_id) if resource_id is not None else None,
            "metadata": Json(metadata or {}),
        },
    )
    await webhooks.emit(cur, actor, action, resource, team_id=team_id, resource_id=resource_id,
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


async def list_entries(conn: db.Connection, actor: Actor, team_id: uuid.UUID, *,
                       limit: int = DEFAULT_LIMIT, offset: int = 0) -> tuple[list[dict], int]:
    """A page of the team's entries, newest first, and the total; Admin or above."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN, reading=True)
        rows = await db.fetchall(
            cur,
            """SELECT * FROM audit_logs WHERE team_id = %s
               ORDER BY created_at DESC, id DESC LIMIT %s OFFSET %s""",
            (team_id, limit, offset),
        )
        total = await db.fetchone(cur, "SELECT count(*) AS n FROM audit_logs WHERE team_id = %s",
                                  (team_id,))
    return rows, total["n"]


async def purge_expired(pool: db.Pool) -> int:
    """Delete entries older than their team's plan retention; returns how many."""
    async with db.cursor(pool) as cur:
        await cur.execute(
            """DELETE FROM audit_logs
               WHERE cvsm_audit_retention_days(team_id) IS NOT NULL
                 AND created_at < now() - make_interval(days => cvsm_audit_retention_days(team_id))"""
        )
        return cur.rowcount


async def purge_loop(pool: db.Pool, interval: float = 3600.0) -> None:
    while True:
        try:
            removed = await purge_expired(pool)
            if removed:
                log.info("audit retention purge removed %d entries", removed)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("audit retention purge failed")
        await asyncio.sleep(interval)
