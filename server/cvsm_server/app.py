"""The application factory: `create_app(settings)`, used by `cvsm-server`, the tests, the
conformance harness and the benchmarks alike.

Resources open and close in `cleanup_ctx` generators, so cleanup runs only for what started:
the database (`db.open`: embedded PostgreSQL when no `CVSM_DATABASE_URL`, migrations, the pool as
the server's own role) and the master-key check, then background jobs.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator

from aiohttp import web

from . import (audit, audit_chain, changes, credentials, db, deletion, keys, mail, mailtokens,
               oauth, ratelimit, secret_rotation, sessions, setup_link, support, tokens,
               webhook_sender)
from .web import dashboard, lowlevel, metrics
from .config import Settings
from .crypto import Keyring
from .passwords import PasswordHasher
from .web.headers import cors_middleware, on_prepare
from .web.middleware import (auth_middleware, error_middleware, rate_limit_middleware,
                             request_id_middleware)
from .web.routes import setup_routes
from .web.state import (APP_URL, CHANGE_HUB, CHECKPOINT_SIGNER, CREDENTIALS, KEYRING, LEASES,
                        OAUTH, PASSWORDS, POOL, SETTINGS, SIGNER)

log = logging.getLogger("cvsm.app")

# Large enough for a 500-item bulk body; each route reads with its own, smaller limit.
CLIENT_MAX_SIZE = 40 * 1024 * 1024


async def _database(app: web.Application) -> AsyncIterator[None]:
    async with db.open(app[SETTINGS], supervise=True) as database:
        await keys.check_master_key(database.pool, app[KEYRING])
        await support.load_articles(database.pool)  # the help articles the assistant searches
        app[CHECKPOINT_SIGNER] = audit_chain.CheckpointSigner(app[KEYRING])
        app[POOL] = database.pool
        app[CHANGE_HUB] = changes.ChangeHub(database.url)
        try:
            yield
        finally:
            await app[CHANGE_HUB].close()


async def _end_streams(app: web.Application) -> None:
    """At shutdown, before the server waits for its requests: the change streams end."""
    if CHANGE_HUB in app:
        await app[CHANGE_HUB].close()


async def _first_admin(app: web.Application) -> AsyncIterator[None]:
    """An install with no admin yet: a one-time link to become its first, printed on stderr (never
    through logging, so in no log file) by the process that runs the background jobs: once per
    start, and once, not N times, under `--workers N` (`setup_link`)."""
    settings = app[SETTINGS]
    if settings.background_jobs:
        token = await setup_link.issue(app[POOL], app[KEYRING])
        if token is not None:
            base = settings.app_url or app.get(APP_URL) or ""
            print(setup_link.announcement(base, token), file=sys.stderr, flush=True)
    yield


async def _housekeeping(pool: db.Pool) -> None:
    await sessions.purge_expired(pool)
    await ratelimit.purge_old_windows(pool)
    await tokens.purge_old_failures(pool)
    await mailtokens.purge_old(pool)
    await webhook_sender.purge_finished(pool)


async def _housekeeping_loop(pool: db.Pool, interval: float = 600.0) -> None:
    outage = db.OutageLog(log, "housekeeping")
    while True:
        try:
            await _housekeeping(pool)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            outage.failed(exc)
        else:
            outage.ok()
        await asyncio.sleep(interval)


async def _background_jobs(app: web.Application) -> AsyncIterator[None]:
    if not app[SETTINGS].background_jobs:
        yield
        return
    pool, settings = app[POOL], app[SETTINGS]
    sender = mail.MailSender(pool, app[KEYRING], mail.transport_for(settings),
                             poll_seconds=settings.mail_poll_seconds)
    checkpoints = app[CHECKPOINT_SIGNER]
    jobs = [asyncio.create_task(audit.purge_loop(pool, checkpoints)),
            asyncio.create_task(_housekeeping_loop(pool)),
            asyncio.create_task(sender.run()), asyncio.create_task(deletion.purge_loop(pool)),
            asyncio.create_task(audit_chain.checkpoint_loop(pool, checkpoints,
                                                            settings.audit_checkpoint_seconds)),
            asyncio.create_task(audit_chain.seal_loop(pool, settings.audit_seal_seconds))]
    hooks = webhook_sender.WebhookSender(pool, app[KEYRING],
                                         allow_private=settings.webhook_allow_private,
                                         poll_seconds=settings.webhook_poll_seconds)
    jobs.append(asyncio.create_task(hooks.run()))
    rotations = secret_rotation.RotationWorker(pool, app[KEYRING],
                                               allow_private=settings.webhook_allow_private,
                                               poll_seconds=settings.rotation_poll_seconds)
    jobs.append(asyncio.create_task(rotations.run()))
    yield
    # A cancel can be swallowed by a database wait in flight (asyncio.wait_for on Python 3.11):
    # cancel again until the jobs have ended, so shutdown never waits for a job's next sleep.
    for _ in range(10):
        pending = [job for job in jobs if not job.done()]
        if not pending:
            break
        for job in pending:
            job.cancel()
        await asyncio.wait(pending, timeout=1)
    for job in jobs:
        if job.done() and not job.cancelled() and job.exception() is not None:
            log.warning("background job ended with %s", type(job.exception()).__name__)
    await audit_chain.checkpoint_at_stop(pool, checkpoints)  # a stop leaves every head signed


def create_app(settings: Settings | None = None) -> web.Application:
    """A ready-to-run application; the database opens when the app starts."""
    settings = settings or Settings.from_env()
    app = web.Application(
        middlewares=[request_id_middleware, metrics.metrics_middleware, cors_middleware,
                     error_middleware, dashboard.page_errors, auth_middleware,
                     rate_limit_middleware],
        client_max_size=CLIENT_MAX_SIZE,
        handler_args=lowlevel.HANDLER_ARGS,  # the access log, for every runner
    )
    lowlevel.install(app)  # parser-rejected requests: JSON error, security headers, redacted logs
    app[SETTINGS] = settings
    app[KEYRING] = Keyring(keys.load_master_key(settings), settings.old_master_keys)
    app[SIGNER] = sessions.JwtSigner(keys.load_jwt_secret(settings), settings.jwt_lifetime_seconds)
    app[PASSWORDS] = PasswordHasher()
    app[CREDENTIALS] = credentials.CredentialCache(ttl=settings.credential_cache_seconds)
    app[LEASES] = ratelimit.Leases(settings.processes)
    app[OAUTH] = oauth.Providers(settings.oauth_providers)
    if settings.env == "production" and "*" in settings.cors_origins:
        log.warning("CVSM_CORS_ORIGINS is '*' in production: any web origin may call this API")
    app.on_response_prepare.append(on_prepare)
    app.on_shutdown.append(_end_streams)
    app.cleanup_ctx.append(_database)
    app.cleanup_ctx.append(_first_admin)
    app.cleanup_ctx.append(_background_jobs)
    dashboard.setup(app)
    metrics.setup(app)
    setup_routes(app)
    return app
