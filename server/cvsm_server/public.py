"""Public endpoints: `/health` and `/public/stats` (no credential)."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from . import __version__, db
from .errors import ServiceUnavailable
from .state import POOL

log = logging.getLogger("cvsm.public")


async def health(request: web.Request) -> web.Response:
    """200 `{status: "ok", version}`; 503 when the database does not answer within 2 seconds."""
    try:
        async with asyncio.timeout(2):
            async with db.cursor(request.app[POOL]) as cur:
                await cur.execute("SELECT 1")
    except Exception:
        log.warning("health check: database unreachable")
        raise ServiceUnavailable("Basis data tidak dapat dijangkau") from None
    return web.json_response({"status": "ok", "version": __version__})


async def stats(request: web.Request) -> web.Response:
    async with db.cursor(request.app[POOL]) as cur:
        row = await db.fetchone(
            cur,
            """SELECT (SELECT count(*) FROM teams) AS teams,
                      (SELECT count(*) FROM secrets WHERE deleted_at IS NULL) AS secrets""",
        )
    return web.json_response({"teams": row["teams"], "secrets": row["secrets"]})


def setup_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/health", health)
    app.router.add_get("/api/v1/public/stats", stats)
