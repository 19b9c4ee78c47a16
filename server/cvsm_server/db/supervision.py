"""Opening the database for a process: the embedded PostgreSQL started (and supervised: started
again when its postmaster dies) or the external one used, migrations applied as the schema
owner, and the pool opened as the server's own role, refusing a superuser."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiopg

from ..core.config import ConfigError, Settings
from .embedded import EmbeddedPostgres
from .postmaster import EmbeddedStartError
from .migrations import migrate_as_owner
from .pool import (APP_ROLE, JOB_CONNECTIONS, connection_budget, create_pool, cursor, fetchone,
                   pool_size_for, with_user)

log = logging.getLogger("cvsm.db")

# The embedded PostgreSQL's supervision (`_supervise`): how often its postmaster is looked at,
# and how many starts in a row may fail before the server gives up and stops (exit status 1).
WATCH_SECONDS = 1.0
RESTART_TRIES = 5
_lost: list[str] = []


def embedded_lost() -> str | None:
    """Why this process stopped its server because the embedded PostgreSQL could not be started
    again (`cvsm-server serve` then exits 1), or None."""
    return _lost[-1] if _lost else None


async def _supervise(embedded: EmbeddedPostgres) -> None:
    """Watch the embedded postmaster; start it again when it has died (one line when it goes,
    one when it is back). After RESTART_TRIES failed starts in a row: one error line, and SIGTERM
    to this process, which stops the server gracefully; `embedded_lost` says why."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(WATCH_SECONDS)
        if embedded.running():
            continue
        pid, began = embedded.pid, time.monotonic()
        log.warning("embedded PostgreSQL (pid %s) has stopped; starting it again", pid)
        for attempt in range(1, RESTART_TRIES + 1):
            try:
                await loop.run_in_executor(None, embedded.restart)
                break
            except EmbeddedStartError as exc:
                reason = str(exc)
            if attempt == RESTART_TRIES:
                log.error("%s (%d tries); stopping the server so that its supervisor restarts it",
                          reason, attempt)
                _lost.append(reason)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            await asyncio.sleep(min(2.0 ** attempt, 10.0))
        log.warning("embedded PostgreSQL running again (pid %s, %.1f s after it stopped)",
                    embedded.pid, time.monotonic() - began)


@dataclass
class Database:
    """An open database: the pool requests use, and the URL it was opened with."""

    pool: aiopg.Pool
    url: str


@asynccontextmanager
async def _cluster(settings: Settings, *,
                   supervise: bool = False) -> AsyncIterator[tuple[str, str, bool]]:
    """(owner URL, server URL, embedded?): the embedded PostgreSQL runs while this is open;
    `supervise`: and is started again when it dies (`_supervise`)."""
    if settings.database_url:
        yield (settings.migration_database_url or settings.database_url,
               settings.database_url, False)
        return
    loop = asyncio.get_running_loop()
    embedded = EmbeddedPostgres(settings.data_dir)
    owner_url = await loop.run_in_executor(None, embedded.start)
    log.info("embedded PostgreSQL running in %s", embedded.pgdata)
    supervisor = asyncio.create_task(_supervise(embedded)) if supervise else None
    try:
        yield owner_url, with_user(owner_url, APP_ROLE), True
    finally:
        if supervisor is not None:
            supervisor.cancel()
            await asyncio.gather(supervisor, return_exceptions=True)
        await loop.run_in_executor(None, embedded.stop)


@asynccontextmanager
async def schema_owner(settings: Settings) -> AsyncIterator[tuple[str, Path | None]]:
    """(owner URL, the embedded PostgreSQL's bin directory or None for an external database),
    for operator commands (`backup`, `restore`); the embedded PostgreSQL runs while open."""
    if settings.database_url:
        yield settings.migration_database_url or settings.database_url, None
        return
    loop = asyncio.get_running_loop()
    embedded = EmbeddedPostgres(settings.data_dir)
    owner_url = await loop.run_in_executor(None, embedded.start)
    try:
        yield owner_url, embedded.bin_dir
    finally:
        await loop.run_in_executor(None, embedded.stop)


async def migrate_database(settings: Settings) -> list[int]:
    """Apply pending migrations as the schema owner (`cvsm-server migrate`)."""
    async with _cluster(settings) as (owner_url, _, embedded):
        return await migrate_as_owner(owner_url, embedded=embedded)


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[tuple[str, str]]:
    """Start the embedded PostgreSQL when no URL is configured and apply pending migrations as
    the schema owner; yields (owner URL, server URL) and, for the embedded one, stops it on exit.
    `serve --workers` runs this once in its parent; the workers `open` the URLs it gives."""
    async with _cluster(settings, supervise=True) as (owner_url, url, embedded):
        await migrate_as_owner(owner_url, embedded=embedded)
        yield owner_url, url


@asynccontextmanager
async def open(settings: Settings, *, maxsize: int | None = None,
               supervise: bool = False) -> AsyncIterator[Database]:
    """Start the embedded PostgreSQL when no URL is configured, apply pending migrations as the
    schema owner, and open a pool as the server's own (unprivileged) role. The app factory and
    `cvsm-server serve` use this.

    The pool holds at most `maxsize` connections; by default `settings.pool_size` (what
    `serve --workers` gave this worker) or, for a single process, what PostgreSQL leaves it
    (`pool_size_for`), plus the background jobs' connections when they run here.
    `supervise`: an embedded PostgreSQL that dies is started again (`_supervise`)."""
    async with _cluster(settings, supervise=supervise) as (owner_url, url, embedded):
        await migrate_as_owner(owner_url, embedded=embedded)
        if maxsize is None:
            size = settings.pool_size or pool_size_for(await connection_budget(url), 1,
                                                       jobs=settings.background_jobs)
            maxsize = size + (JOB_CONNECTIONS if settings.background_jobs else 0)
        pool = await create_pool(url, maxsize=maxsize)
        try:
            await refuse_superuser(pool, settings.allow_superuser)
            yield Database(pool, url)
        finally:
            pool.close()
            await pool.wait_closed()


async def refuse_superuser(pool: aiopg.Pool, allowed: bool) -> None:
    """Stop start-up when the serving role could switch the audit guard off."""
    async with cursor(pool) as cur:
        row = await fetchone(
            cur,
            """SELECT r.rolsuper, r.rolbypassrls, current_user AS name,
                      coalesce(pg_has_role(current_user, (SELECT relowner FROM pg_class
                                                          WHERE oid = to_regclass('audit_logs')),
                                           'USAGE'), false) AS owns_audit
               FROM pg_roles r WHERE r.rolname = current_user""",
        )
    if row["rolsuper"] or row["owns_audit"]:
        what = "a superuser" if row["rolsuper"] else "the owner of the audit log"
        if not allowed:
            raise ConfigError(
                f"the database role {row['name']!r} is {what}: it could switch off the audit "
                f"log's protection. Connect as a role in {APP_ROLE} (docs/deploy.md, 'An external PostgreSQL'), or set "
                "CVSM_ALLOW_SUPERUSER=1 to run anyway"
            )
        log.warning("serving as %s (%s) because CVSM_ALLOW_SUPERUSER=1", row["name"], what)
