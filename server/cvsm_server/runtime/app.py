"""The application factory: `create_app(settings)`, used by `cvsm-server`, the tests, the
conformance harness and the benchmarks alike.

Resources open and close in `cleanup_ctx` generators, so cleanup runs only for what started:
the database (`db.open`: embedded PostgreSQL when no `CVSM_DATABASE_URL`, migrations, the pool as
the server's own role) and the master-key check, then background jobs (the `jobs` registry).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator

from aiohttp import web

from ..audit import chain as audit_chain
from ..secrets import changes
from ..accounts import credentials
from .. import db
from . import jobs
from ..crypto import keys
from ..accounts import oauth_providers
from ..accounts import ratelimit
from ..accounts import sessions, setup_link
from ..billing.stripe_api import StripeGateway
from ..support import service as support
from ..web import lowlevel, metrics
from ..web.pages import kit as pages
from ..core import i18n
from ..core.config import Settings
from ..crypto.sealing import Keyring
from ..crypto.passwords import PasswordHasher
from ..web.headers import cors_middleware, on_prepare
from ..web.middleware import (auth_middleware, body_gate_middleware, body_limit_middleware,
                              error_middleware, rate_limit_middleware, request_id_middleware)
from ..web.outage import RequestOutage
from ..web.policy import BULK
from ..web.routes import setup_routes
from ..web.state import (APP_URL, CHANGE_HUB, CHECKPOINT_SIGNER, CREDENTIALS, KEYRING, LEASES,
                         OAUTH, PASSWORDS, POOL, REQUEST_OUTAGE, SETTINGS, SIGNER, STRIPE)

log = logging.getLogger("cvsm.app")

# The largest body cap of any route (`web.policy.BULK`); each route reads with its own
# (`web.routes`), and nothing reads with aiohttp's `request.read()` or `post()`.
CLIENT_MAX_SIZE = BULK


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


async def _background_jobs(app: web.Application) -> AsyncIterator[None]:
    if not app[SETTINGS].background_jobs:
        yield
        return
    context = jobs.Context(app[POOL], app[KEYRING], app[SETTINGS], app[CHECKPOINT_SIGNER])
    tasks = jobs.start(context)
    yield
    # A cancel can be swallowed by a database wait in flight (asyncio.wait_for on Python 3.11):
    # cancel again until the jobs have ended, so shutdown never waits for a job's next sleep.
    for _ in range(10):
        pending = [task for task in tasks if not task.done()]
        if not pending:
            break
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=1)
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.warning("background job %s ended with %s", task.get_name(),
                        type(task.exception()).__name__)
    # A stop leaves every chain's head signed.
    await audit_chain.checkpoint_at_stop(app[POOL], app[CHECKPOINT_SIGNER])


def create_app(settings: Settings | None = None) -> web.Application:
    """A ready-to-run application; the database opens when the app starts."""
    settings = settings or Settings.from_env()
    app = web.Application(
        middlewares=[request_id_middleware, metrics.metrics_middleware, cors_middleware,
                     error_middleware, pages.page_errors, body_limit_middleware,
                     auth_middleware, rate_limit_middleware, body_gate_middleware],
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
    app[REQUEST_OUTAGE] = RequestOutage()
    app[OAUTH] = oauth_providers.Providers(settings.oauth_providers)
    app[STRIPE] = StripeGateway.from_settings(settings)
    i18n.load_catalogs()  # the pages' and mails' languages, compiled in memory (core.i18n)
    i18n.set_default(settings.default_language)
    if settings.env == "production" and "*" in settings.cors_origins:
        log.warning("CVSM_CORS_ORIGINS is '*' in production: any web origin may call this API")
    app.on_response_prepare.append(on_prepare)
    app.on_shutdown.append(_end_streams)
    app.cleanup_ctx.append(_database)
    app.cleanup_ctx.append(_first_admin)
    app.cleanup_ctx.append(_background_jobs)
    pages.setup(app)
    metrics.setup(app)
    setup_routes(app)
    return app
