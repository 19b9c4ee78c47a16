"""The public figures: whether the database answers (`/health`) and the landing-page counts."""

from __future__ import annotations

import asyncio

from .. import db
from ..core.errors import ServiceUnavailable

UNREACHABLE = "Basis data tidak dapat dijangkau"


async def check_database(pool: db.Pool, timeout: float = 2.0) -> None:
    """Raise ServiceUnavailable when the database does not answer within `timeout` seconds."""
    try:
        async with asyncio.timeout(timeout):
            async with db.cursor(pool) as cur:
                await cur.execute("SELECT 1")
    except Exception:
        raise ServiceUnavailable(UNREACHABLE) from None


async def stats(conn: db.Connection) -> dict:
    """How many teams and live secrets exist."""
    async with db.cursor(conn) as cur:
        return await db.fetchone(
            cur,
            """SELECT (SELECT count(*) FROM teams) AS teams,
                      (SELECT count(*) FROM secrets WHERE deleted_at IS NULL) AS secrets""",
        )
