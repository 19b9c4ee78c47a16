"""The request pipeline, outermost first: request id, CORS, errors, the pages' errors (an error
page instead of JSON, `web.pages.kit.page_errors`), the actor (client address and credential),
rate limits.

- `request_id_middleware`: every answer carries `X-Request-Id` (a sane incoming one is kept,
  otherwise a new one is made); it is in the access-log and error-log lines.
- `error_middleware`: every failure becomes `{"error": "<Indonesian message>"}` with its status;
  a database outage (a connection lost or refused, a statement unanswered in time) is a 503 with
  `Retry-After`, logged once per outage (`web.outage`); anything unexpected a 500 with no
  detail.
- `auth_middleware`: builds the request's `Actor` once (client IP, user agent) and, as the
  route's policy says (`web.policy`), the user behind it: from the bearer credential on API
  routes (`sessions`, `tokens`), from the session cookie on session pages (with what every page
  shows, `users.page_state`, in the same statement that confirms a cached session). A revocation
  noticed mid-request is checked in the database and the request runs once more, at both doors.
- `rate_limit_middleware`: counts the request against the limit its route declares, or leaves
  the charge to a handler that counts it inside its own statement (`own_charge`). The same
  statement confirms a credential served from the process's cache (`credentials`).

Request bodies (issue 36): nothing reads a body before the route's handler, and the handler
runs only for a caller the route accepts. Before that:
- `body_limit_middleware` (before the credential is checked): a declared length above the
  route's cap (`body` in `web.routes`) is a 413 at once;
- `auth_middleware`: no valid credential, a 401 (a page's redirect to sign in);
- `body_gate_middleware` (last): a body for a team route is read only once the caller is known
  to be in that team (`teams.require_member`; 404 otherwise, as the route would answer).
A body left unread (refused, or a route that reads none) is never read into memory: the answer
carries `Connection: close`, what still arrives is discarded for at most
`lowlevel.LINGERING_SECONDS` (so a proxy sending a body it buffered reads the answer instead of
a reset), and the connection ends (`request_id_middleware`).
"""

from __future__ import annotations

import itertools
import logging
import re
import secrets
from collections.abc import Awaitable, Callable

from aiohttp import web

from ..instance import admin
from ..accounts import credentials
from .. import db
from ..accounts import ratelimit
from ..accounts import sessions
from ..teams import service as teams
from ..accounts import tokens, users
from ..core.actor import Actor
from ..core.clientip import cached_client_ip
from ..core.errors import (DomainError, PayloadTooLarge, ServerError, ServiceUnavailable,
                           Unauthorized)
from .outage import RequestOutage
from .policy import EITHER, OPEN, SESSION, UNMATCHED, Policy, policy_of
from .state import (ACTOR, CREDENTIALS, KEYRING, LEASES, PAGE_STATE, POOL, RATE_CHARGE,
                    REQUEST_ID, REQUEST_OUTAGE, SESSION_COOKIE, SETTINGS, SIGNER)

log = logging.getLogger("cvsm.errors")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}\Z")

# Messages for the errors aiohttp raises itself (unknown route, wrong method, body too large).
_HTTP_MESSAGES = {
    400: "Permintaan tidak valid",
    404: "Tidak ditemukan",
    405: "Metode tidak diizinkan",
    413: "Isi permintaan terlalu besar",
    415: "Jenis konten tidak didukung",
}


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


# A new request id is this process's random prefix and a counter: unique across processes and
# restarts without a random read (a system call) per request. No run of 32 hex digits, which
# the logs would redact as a token's tail.
_ID_PREFIX = secrets.token_hex(8)
_ids = itertools.count(1)


def new_request_id() -> str:
    return f"{_ID_PREFIX}-{next(_ids):x}"


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    incoming = request.headers.get("X-Request-Id")
    request[REQUEST_ID] = incoming if incoming and REQUEST_ID_RE.match(incoming) \
        else new_request_id()
    response = await handler(request)
    if request.body_exists and not request.content.is_eof():
        # A body refused or not read: answer and close (`lowlevel.LINGERING_SECONDS`).
        response.force_close()
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer every failure as `{"error": "<Indonesian message>"}` with the right status."""
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = _HTTP_MESSAGES.get(exc.status, "Permintaan tidak dapat diproses")
        headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
        return error_response(exc.status, message, headers)
    except Exception as exc:  # noqa: BLE001 - every failure is answered, none with its detail
        failure = failure_of(request, exc)
        return error_response(failure.status, failure.message, failure.headers)
    if response.status != 503 and (outage := request.app.get(REQUEST_OUTAGE)) is not None \
            and outage.since is not None:
        outage.ok()
    return response


def failure_of(request: web.Request, exc: Exception) -> DomainError:
    """What a failure is answered with (as JSON here, as the error page under a page,
    `web.pages.kit.page_errors`), logged once: a domain error is itself; a database outage a
    503 with `Retry-After`; anything unexpected a 500 with no detail, its traceback in the log."""
    if isinstance(exc, ServiceUnavailable):
        _outage(request, exc.message)
        return exc
    if isinstance(exc, DomainError):
        if exc.status >= 500:
            log.warning("[%s] %s on %s %s", request.get(REQUEST_ID), exc.message, request.method,
                        _route(request))
        return exc
    if isinstance(exc, DATABASE_AWAY):
        _outage(request, f"{type(exc).__name__}: {db.first_line(exc)}")
        return ServiceUnavailable()
    # The traceback names code locations only; request bodies and values are never logged,
    # and the route is named by its pattern (never a token from the path).
    log.error("[%s] unhandled error on %s %s", request.get(REQUEST_ID), request.method,
              _route(request), exc_info=exc)
    return ServerError()


# What a request meets when the database goes away: psycopg2's errors for a connection lost or
# refused, and a statement that got no answer within aiopg's limit.
DATABASE_AWAY = (*db.UNAVAILABLE, db.StatementTimeout)
_NO_APP_OUTAGE = RequestOutage()


def _outage(request: web.Request, cause: str) -> None:
    """One line per outage (`web.outage`), with the first request's id, route and cause."""
    outage = request.app.get(REQUEST_OUTAGE) or _NO_APP_OUTAGE  # an app not from the factory
    outage.failed(request.get(REQUEST_ID), f"{request.method} {_route(request)}", cause)


def _route(request: web.Request) -> str:
    """The matched route's pattern: never the path itself, which may carry a share token."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "-"


def bearer(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, credential = header.partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential:
        raise Unauthorized("Header Authorization: Bearer <token> diperlukan")
    return credential


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The request's actor: the client, and the user behind its credential where the route's
    policy reads one (a bearer credential, or the session cookie of a page)."""
    app = request.app
    settings = app[SETTINGS]
    peer = request.transport.get_extra_info("peername") if request.transport else None
    ip = cached_client_ip(peer[0] if peer else None,
                          tuple(request.headers.getall("X-Forwarded-For", ())),
                          settings.trusted_proxies)
    client = Actor.anonymous(ip, request.headers.get("User-Agent"))
    request[ACTOR] = client
    auth = policy_of(request).auth
    if request.method == "OPTIONS" or auth == OPEN:
        return await handler(request)
    request[ACTOR] = await _user(request, auth, client)
    try:
        return await handler(request)
    except credentials.StaleCredential:
        # A credential was revoked somewhere since this process cached the caller's: check it
        # in the database now (the statement that noticed did nothing), then run the request.
        app[CREDENTIALS].clear()
        request[ACTOR] = await _user(request, auth, client)
        return await handler(request)


async def _user(request: web.Request, auth: str, client: Actor) -> Actor:
    if auth == SESSION or (auth == EITHER and "Authorization" not in request.headers):
        return await session_actor(request, client)
    return await authenticate_credential(request.app, bearer(request), client)


async def session_actor(request: web.Request, client: Actor) -> Actor:
    """The signed-in person behind the session cookie, with `PAGE_STATE` set; the client when
    there is no valid session (a page that needs one sends the browser to sign in)."""
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        return client
    app = request.app
    try:
        try:
            actor = await sessions.authenticate(app[POOL], app[CREDENTIALS], app[SIGNER], token,
                                                client)
            async with db.connection(app[POOL]) as conn:
                state = await users.page_state(conn, actor)
        except credentials.StaleCredential:  # a session from the cache, revoked since
            app[CREDENTIALS].clear()
            actor = await sessions.authenticate(app[POOL], app[CREDENTIALS], app[SIGNER], token,
                                                client)
            async with db.connection(app[POOL]) as conn:
                state = await users.page_state(conn, actor)
    except Unauthorized:
        return client
    if state is None:
        return client
    request[PAGE_STATE] = state
    return actor


async def authenticate_credential(app: web.Application, credential: str, client: Actor) -> Actor:
    if credential.startswith("cvsm_"):
        failures = ratelimit.Charge.failed_auth(app[SETTINGS], client.ip)
        return await tokens.authenticate(app[POOL], app[CREDENTIALS], app[KEYRING], credential,
                                         client, failures=failures)
    return await sessions.authenticate(app[POOL], app[CREDENTIALS], app[SIGNER], credential,
                                       client)


def charge_for(request: web.Request, policy: Policy) -> ratelimit.Charge | None:
    """What this request counts against, as its route declares: per client IP for `auth`,
    `public` and `newsletter`, per credential for `api`; nothing for preflights."""
    kind = policy.rate
    if kind is None or request.method == "OPTIONS":
        return None
    settings = request.app[SETTINGS]
    who = request[ACTOR]
    if kind == "api":
        return ratelimit.Charge.of("api", who.rate_key, settings.rate_limit("api"))
    return ratelimit.Charge.of(kind, who.ip or "-", settings.rate_limit(kind))


@web.middleware
async def rate_limit_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count the request, confirming a cached credential in the same statement; a handler that
    counts in its own statement gets the charge instead (and confirms the credential there).

    The per-credential `api` limit is paid from this process's lease (`ratelimit.Leases`): a
    unit held here costs no statement (a cached credential is still confirmed: by the handler's
    own statement, or by the epoch read here); only a request that leases more counts."""
    policy = policy_of(request)
    charge = charge_for(request, policy)
    epoch = request[ACTOR].epoch
    if charge is not None and charge.key.startswith("api:"):
        charge = await request.app[LEASES].charge(charge)
    try:
        if policy.own_charge:
            if charge is not None:
                request[RATE_CHARGE] = charge
        # (a page's session was confirmed with its `PAGE_STATE`: no second statement)
        elif charge is not None or (epoch is not None and not policy.page):
            async with db.connection(request.app[POOL]) as conn:
                if charge is not None and charge.lease is not None:
                    await ratelimit.lease(conn, charge, epoch=epoch)
                else:
                    await ratelimit.hit(conn, charge, epoch=epoch)
        return await handler(request)
    finally:
        if charge is not None and charge.lease is not None:
            charge.lease.settle()  # a lease that failed: the next request leases again


@web.middleware
async def body_limit_middleware(request: web.Request,
                                handler: Handler) -> web.StreamResponse:
    """A declared body over the route's cap is refused before anything else is done (no
    credential check, no database), and never read (`request_id_middleware` closes)."""
    length = request.content_length
    policy = policy_of(request)
    # (no route matched: aiohttp's own 404 or 405 follows, and reads nothing)
    if length is not None and length > policy.body and policy is not UNMATCHED:
        raise PayloadTooLarge()
    return await handler(request)


@web.middleware
async def body_gate_middleware(request: web.Request,
                               handler: Handler) -> web.StreamResponse:
    """A team route's body is read only for a member of that team (or a token within it), an
    admin route's only for a site admin: one statement before the handler, only when a body
    was sent."""
    policy = policy_of(request)
    who = request[ACTOR]
    if (policy.team is not None or policy.admin) and request.body_exists \
            and who.user_id is not None and request.method != "OPTIONS":
        async with db.connection(request.app[POOL]) as conn:
            if policy.team is not None:
                await teams.require_member(conn, who, request.match_info[policy.team])
            else:
                await admin.check_admin(conn, who)
    return await handler(request)
