"""PostgreSQL: the aiopg pool, transactions and migrations.

With `CVSM_DATABASE_URL` unset the server runs an embedded PostgreSQL in `<data dir>/pg`; that
lives in `embedded.py` (re-exported here as `db.EmbeddedPostgres` for its callers).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

import aiopg
import psycopg2
import psycopg2.extensions
import psycopg2.extras

from .embedded import EmbeddedPostgres  # noqa: F401

log = logging.getLogger("cvsm.db")

# A stable number for pg_advisory_xact_lock while migrating ("cvsm" in ASCII).
MIGRATION_LOCK_ID = 0x6376736D

Cursor = aiopg.Cursor


async def create_pool(url: str, *, maxsize: int = 20) -> aiopg.Pool:
    return await aiopg.create_pool(
        url,
        minsize=1,
        maxsize=maxsize,
        timeout=30,
        options="-c TimeZone=UTC",
        cursor_factory=psycopg2.extras.RealDictCursor,
    )


@asynccontextmanager
async def transaction(pool: aiopg.Pool) -> AsyncIterator[aiopg.Cursor]:
    """A cursor inside BEGIN/COMMIT; any exception rolls back. A broken connection is dropped."""
    async with pool.acquire() as conn:
        cur = await conn.cursor()
        try:
            await cur.execute("BEGIN")
            try:
                yield cur
            except BaseException:
                await _rollback(conn, cur)
                raise
            await cur.execute("COMMIT")
        finally:
            cur.close()


async def _rollback(conn: Any, cur: aiopg.Cursor) -> None:
    try:
        await asyncio.shield(cur.execute("ROLLBACK"))
    except BaseException:
        conn.close()  # the pool discards a closed connection


@asynccontextmanager
async def cursor(pool: aiopg.Pool) -> AsyncIterator[aiopg.Cursor]:
    """A cursor in autocommit mode, for single statements."""
    async with pool.acquire() as conn:
        cur = await conn.cursor()
        try:
            yield cur
        finally:
            cur.close()


async def fetchone(cur: aiopg.Cursor, sql: str, args: tuple | dict | None = None) -> dict | None:
    await cur.execute(sql, args)
    return await cur.fetchone()


async def fetchall(cur: aiopg.Cursor, sql: str, args: tuple | dict | None = None) -> list[dict]:
    await cur.execute(sql, args)
    return list(await cur.fetchall())


def is_unique_violation(exc: BaseException) -> bool:
    return isinstance(exc, psycopg2.errors.UniqueViolation)


def migration_files() -> list[tuple[int, str, str]]:
    """(number, name, sql) for every `NNNN_name.sql` shipped in the package, in order."""
    found = []
    for entry in resources.files("cvsm_server.migrations").iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append((int(number), rest[:-4], entry.read_text(encoding="utf-8")))
    return sorted(found)


async def migrate(pool: aiopg.Pool, *, upto: int | None = None) -> list[int]:
    """Apply the migrations not yet recorded in `schema_migrations`, each in its own transaction.

    Concurrent start-ups are serialised by an advisory lock; returns the numbers applied.
    """
    applied_now = []
    async with cursor(pool) as cur:
        await cur.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version integer PRIMARY KEY,
                   name text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
    for number, name, sql in migration_files():
        if upto is not None and number > upto:
            break
        async with transaction(pool) as cur:
            await cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_ID,))
            if await fetchone(cur, "SELECT 1 FROM schema_migrations WHERE version = %s", (number,)):
                continue
            log.info("applying migration %04d_%s", number, name)
            await cur.execute(sql)
            await cur.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (number, name)
            )
            applied_now.append(number)
    return applied_now
