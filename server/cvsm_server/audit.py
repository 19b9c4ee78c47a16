"""The audit log: writing entries (inside the caller's transaction), listing, retention purge.

Entries are immutable in the database itself (see migration 0003): only the retention purge and
nulling the actor of a deleted user or team get through.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from aiohttp import web
from psycopg2.extras import Json

from . import db, teams
from .inputs import path_uuid, query_int
from .state import CLIENT_IP, POOL, PRINCIPAL, Principal, principal
from .timeutil import iso

log = logging.getLogger("cvsm.audit")


async def record(
    cur: db.Cursor,
    request: web.Request,
    action: str,
    resource: str,
    *,
    team_id: uuid.UUID | None = None,
    resource_id: object | None = None,
    actor: Principal | None = None,
    metadata: dict[str, Any] | None = None,
) -> None:
    """Write one entry in the current transaction; if it fails, the whole request fails."""
    who = actor if actor is not None else request.get(PRINCIPAL)
    params = actor_params(request)
    await cur.execute(
        """INSERT INTO audit_logs (team_id, user_id, user_email, action, resource, resource_id,
                                   ip_address, user_agent, metadata)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)""",
        (
            team_id,
            who.user_id if who else None,
            who.email if who else None,
            action,
            resource,
            str(resource_id) if resource_id is not None else None,
            params["ip"],
            params["user_agent"],
            Json(metadata or {}),
        ),
    )


def actor_params(request: web.Request) -> dict[str, Any]:
    """The request's actor, address and agent as SQL parameters (for statements that write an
    entry themselves, like the single-statement secret read)."""
    who = request.get(PRINCIPAL)
    return {
        "actor_id": who.user_id if who else None,
        "actor_email": who.email if who else None,
        "ip": request.get(CLIENT_IP),
        "user_agent": (request.headers.get("User-Agent") or "")[:512],
    }


def _entry(row: dict) -> dict:
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


async def list_audit(request: web.Request) -> web.Response:
    """GET /teams/:teamId/audit — newest first; Admin or above."""
    team_id = path_uuid(request, "team_id")
    limit = query_int(request, "limit", default=50, minimum=1, maximum=200)
    offset = query_int(request, "offset", default=0, minimum=0)
    async with db.cursor(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, principal(request).user_id, teams.ADMIN)
        rows = await db.fetchall(
            cur,
            """SELECT * FROM audit_logs WHERE team_id = %s
               ORDER BY created_at DESC, id DESC LIMIT %s OFFSET %s""",
            (team_id, limit, offset),
        )
        total = await db.fetchone(cur, "SELECT count(*) AS n FROM audit_logs WHERE team_id = %s", (team_id,))
    return web.json_response({"logs": [_entry(r) for r in rows], "total": total["n"],
                              "limit": limit, "offset": offset})


async def purge_expired(pool) -> int:
    """Delete entries older than their team's plan retention; returns how many."""
    async with db.cursor(pool) as cur:
        await cur.execute(
            """DELETE FROM audit_logs
               WHERE cvsm_audit_retention_days(team_id) IS NOT NULL
                 AND created_at < now() - make_interval(days => cvsm_audit_retention_days(team_id))"""
        )
        return cur.rowcount


async def purge_loop(pool, interval: float = 3600.0) -> None:
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


def setup_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/teams/{team_id}/audit", list_audit)
