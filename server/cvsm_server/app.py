"""The application factory: `create_app(settings)`, used by `cvsm-server`, the tests, the
conformance harness and the benchmarks alike.

Resources open and close in `cleanup_ctx` generators, so cleanup runs only for what started:
embedded PostgreSQL (when no `CVSM_DATABASE_URL`), the pool, migrations and the master-key check,
then background jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from . import (audit, auth, bulk, db, keys, pages, public, ratelimit, secrets, shares, teams,
               tokens, totp, users)
from . import lowlevel
from .config import Settings
from .crypto import Keyring
from .errors import error_middleware
from .headers import cors_middleware, on_prepare
from .passwords import PasswordHasher
from .state import JWT_SECRET, KEYRING, PASSWORDS, POOL, SETTINGS

log = logging.getLogger("cvsm.app")

# Large enough for a 500-item bulk body; each route reads with its own, smaller limit.
CLIENT_MAX_SIZE = 40 * 1024 * 1024

DATABASE_URL = web.AppKey("database_url", str)


async def _database(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    embedded = None
    if settings.database_url:
        url = settings.database_url
    else:
        embedded = db.EmbeddedPostgres(settings.data_dir)
        url = await asyncio.get_running_loop().run_in_executor(None, embedded.start)
        log.info("embedded PostgreSQL running in %s", embedded.pgdata)
    app[DATABASE_URL] = url
    try:
        pool = await db.create_pool(url)
        try:
            await db.migrate(pool)
            await keys.check_master_key(pool, app[KEYRING])
            app[POOL] = pool
            yield
        finally:
            pool.close()
            await pool.wait_closed()
    finally:
        if embedded is not None:
            await asyncio.get_running_loop().run_in_executor(None, embedded.stop)


async def _housekeeping(pool) -> None:
    await auth.purge_expired_sessions(pool)
    await ratelimit.purge_old_windows(pool)
    await tokens.purge_old_failures(pool)


async def _housekeeping_loop(pool, interval: float = 600.0) -> None:
    while True:
        try:
            await _housekeeping(pool)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("housekeeping failed")
        await asyncio.sleep(interval)


async def _background_jobs(app: web.Application) -> AsyncIterator[None]:
    if not app[SETTINGS].background_jobs:
        yield
        return
    pool = app[POOL]
    jobs = [asyncio.create_task(audit.purge_loop(pool)), asyncio.create_task(_housekeeping_loop(pool))]
    yield
    for job in jobs:
        job.cancel()
    for job in jobs:
        with contextlib.suppress(asyncio.CancelledError):
            await job


def create_app(settings: Settings | None = None) -> web.Application:
    """A ready-to-run application; the database opens when the app starts."""
    settings = settings or Settings.from_env()
    app = web.Application(
        middlewares=[cors_middleware, error_middleware, auth.auth_middleware],
        client_max_size=CLIENT_MAX_SIZE,
        handler_args=lowlevel.HANDLER_ARGS,  # the access log, for every runner
    )
    lowlevel.install(app)  # parser-rejected requests: JSON error, security headers, redacted logs
    app[SETTINGS] = settings
    app[KEYRING] = Keyring(keys.load_master_key(settings))
    app[JWT_SECRET] = keys.load_jwt_secret(settings)
    app[PASSWORDS] = PasswordHasher()
    if settings.env == "production" and "*" in settings.cors_origins:
        log.warning("CVSM_CORS_ORIGINS is '*' in production: any web origin may call this API")
    app.on_response_prepare.append(on_prepare)
    app.cleanup_ctx.append(_database)
    app.cleanup_ctx.append(_background_jobs)

    public.setup_routes(app)
    users.setup_routes(app)
    totp.setup_routes(app)
    tokens.setup_routes(app)
    teams.setup_routes(app)
    audit.setup_routes(app)
    bulk.setup_routes(app)  # before secrets: /secrets/bulk must not match /secrets/{secret_id}
    shares.setup_routes(app)
    secrets.setup_routes(app)
    pages.setup_routes(app)
    return app
