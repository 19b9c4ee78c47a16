"""Migrations: the numbered SQL files of `cvsm_server/migrations/`, applied in order under an
advisory lock as the schema owner; a schema newer than the code is refused; the embedded
default's login role."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources

import aiopg
import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras

from ..core.config import ConfigError
from .pool import APP_ROLE, UNAVAILABLE, rollback, create_pool, cursor, fetchall, fetchone

log = logging.getLogger("cvsm.db")

# A stable number for pg_advisory_xact_lock while migrating ("cvsm" in ASCII).
MIGRATION_LOCK_ID = 0x6376736D
# A migration of a large audit log (a table rewritten into partitions, a rollup rebuilt) takes
# minutes, and a process starting beside the one migrating waits that long for the lock: neither
# is a request, so neither runs under the pool's 30 s limit per statement.
MIGRATION_STATEMENT_SECONDS = 24 * 3600


async def _migrate_as_owner(owner_url: str, embedded: bool) -> list[int]:
    owner_pool = await create_pool(owner_url, maxsize=2)
    try:
        applied = await migrate(owner_pool)
        if embedded:  # the embedded default serves as cvsm_app itself
            await ensure_app_login(owner_pool)
        return applied
    finally:
        owner_pool.close()
        await owner_pool.wait_closed()


async def migrate_as_owner(owner_url: str, *, embedded: bool) -> list[int]:
    """Apply pending migrations with the owner's URL (`cvsm-server restore`, after loading)."""
    return await _migrate_as_owner(owner_url, embedded)


def migration_files() -> list[tuple[int, str, str]]:
    """(number, name, sql) for every `NNNN_name.sql` shipped in the package, in order."""
    found = []
    for entry in resources.files("cvsm_server.migrations").iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append((int(number), rest[:-4], entry.read_text(encoding="utf-8")))
    return sorted(found)


class SchemaTooNew(ConfigError):
    """The database holds migrations this server does not know: a newer version migrated it."""


def _refuse_newer(done: set[int]) -> None:
    """Stop when the database has migrations this version does not ship (a newer version ran on
    it): this one would write to a schema it does not know. One line with both versions."""
    known = {n for n, _, _ in migration_files()}
    unknown = sorted(done - known)
    if unknown:
        from .. import __version__

        raise SchemaTooNew(
            f"the database's schema is at migration {max(done):04d}, newer than this "
            f"cvsm-server {__version__} knows (up to {max(known):04d}; unknown: "
            f"{', '.join(f'{n:04d}' for n in unknown)}): run the version that migrated it, or "
            "restore a backup taken before that upgrade (docs/operations.md)")


async def _applied(cur: aiopg.Cursor) -> set[int]:
    row = await fetchone(cur, "SELECT to_regclass('schema_migrations') IS NOT NULL AS ok")
    if not row["ok"]:
        return set()
    return {r["version"] for r in await fetchall(cur, "SELECT version FROM schema_migrations")}


async def pending_migrations(pool: aiopg.Pool) -> list[int]:
    async with cursor(pool) as cur:
        done = await _applied(cur)
    _refuse_newer(done)
    return [n for n, _, _ in migration_files() if n not in done]


@asynccontextmanager
async def migration_lock(pool: aiopg.Pool) -> AsyncIterator[aiopg.Cursor]:
    """A cursor on one connection holding the migration lock (a session advisory lock): every
    one-time statement of a start-up runs under it, so processes starting together on one
    database wait for each other instead of failing ("tuple concurrently updated", a unique
    violation of a catalog). Released on the way out, or with the connection if it broke."""
    async with pool.acquire() as conn:
        cur = await conn.cursor(timeout=MIGRATION_STATEMENT_SECONDS)
        try:
            await cur.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_ID,))
            try:
                yield cur
            finally:
                if not conn.closed:  # else the lock went with the session
                    try:
                        await cur.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))
                    except (*UNAVAILABLE, OSError, asyncio.TimeoutError):
                        conn.close()
        finally:
            cur.close()


async def migrate(pool: aiopg.Pool, *, upto: int | None = None) -> list[int]:
    """Apply the migrations not yet recorded in `schema_migrations`, each in its own transaction.

    Concurrent start-ups are serialised by an advisory lock (`migration_lock`); returns the
    numbers applied. With nothing pending it issues no DDL, so a role without CREATE privilege
    may call it. A database with migrations this version does not know is refused
    (`SchemaTooNew`).
    """
    wanted = [n for n in await pending_migrations(pool) if upto is None or n <= upto]
    if not wanted:
        return []
    applied_now = []
    try:
        async with migration_lock(pool) as cur:
            await cur.execute(
                """CREATE TABLE IF NOT EXISTS schema_migrations (
                       version integer PRIMARY KEY,
                       name text NOT NULL,
                       applied_at timestamptz NOT NULL DEFAULT now())"""
            )
            done = await _applied(cur)  # another process may have migrated meanwhile
            _refuse_newer(done)
            for number, name, sql in migration_files():
                if upto is not None and number > upto:
                    break
                if number in done:
                    continue
                log.info("applying migration %04d_%s", number, name)
                await cur.execute("BEGIN")
                try:
                    await cur.execute(sql)
                    await cur.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                        (number, name))
                except BaseException:
                    await rollback(cur.connection, cur)
                    raise
                await cur.execute("COMMIT")
                applied_now.append(number)
    except psycopg2.errors.InsufficientPrivilege:
        raise ConfigError(
            "database migrations are pending and this role may not apply them: run "
            "`cvsm-server migrate` with CVSM_MIGRATION_DATABASE_URL set to the schema owner"
        ) from None
    return applied_now


async def ensure_app_login(pool: aiopg.Pool) -> None:
    """The embedded default serves as `cvsm_app` itself: let it log in (once, under the lock)."""
    async with cursor(pool) as cur:
        row = await fetchone(cur, "SELECT rolcanlogin FROM pg_roles WHERE rolname = %s",
                             (APP_ROLE,))
    if row is not None and row["rolcanlogin"]:
        return
    async with migration_lock(pool) as cur:
        row = await fetchone(cur, "SELECT rolcanlogin FROM pg_roles WHERE rolname = %s",
                             (APP_ROLE,))
        if row is not None and not row["rolcanlogin"]:
            await cur.execute(f"ALTER ROLE {APP_ROLE} LOGIN")
