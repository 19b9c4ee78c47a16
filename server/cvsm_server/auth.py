"""Who is calling: JWT sessions, the bearer-credential middleware, rate limits by route kind.

A JWT (HS256; claims `sub`, `iat`, `exp`, `jti`; 12 hours) names a row in `sessions`; logout-all
revokes every session row of the user, so each JWT issued before the call stops working at once
and one issued after works, whatever the clock says. API tokens are checked in `tokens`.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

import jwt
from aiohttp import web

from . import db, ratelimit, tokens
from .clientip import client_ip
from .errors import Unauthorized
from .state import CLIENT_IP, JWT_SECRET, POOL, PRINCIPAL, SETTINGS, Principal
from .timeutil import now

API_PREFIX = "/api/v1/"
PUBLIC_PREFIXES = ("/api/v1/public/", "/api/v1/auth/")
UNLIMITED_PUBLIC = ("/api/v1/health",)

SESSION_INVALID = "Sesi tidak valid atau sudah berakhir"


async def issue_jwt(cur: db.Cursor, app: web.Application, user_id: uuid.UUID) -> str:
    """Open a session for `user_id` and return its JWT."""
    lifetime = app[SETTINGS].jwt_lifetime_seconds
    issued = now()
    session_id = uuid.uuid4()
    await cur.execute(
        "INSERT INTO sessions (id, user_id, expires_at) VALUES (%s, %s, %s)",
        (session_id, user_id, issued + timedelta(seconds=lifetime)),
    )
    claims = {
        "sub": str(user_id),
        "iat": int(issued.timestamp()),
        "exp": int(issued.timestamp()) + lifetime,
        "jti": str(session_id),
    }
    return jwt.encode(claims, app[JWT_SECRET], algorithm="HS256")


async def authenticate_jwt(request: web.Request, token: str) -> Principal:
    try:
        claims = jwt.decode(
            token,
            request.app[JWT_SECRET],
            algorithms=["HS256"],
            options={"require": ["sub", "iat", "exp", "jti"]},
        )
        user_id = uuid.UUID(claims["sub"])
        session_id = uuid.UUID(claims["jti"])
    except (jwt.PyJWTError, ValueError, TypeError, AttributeError):
        raise Unauthorized(SESSION_INVALID) from None
    async with db.cursor(request.app[POOL]) as cur:
        row = await db.fetchone(
            cur,
            """SELECT u.email FROM sessions s JOIN users u ON u.id = s.user_id
               WHERE s.id = %s AND s.user_id = %s AND s.revoked_at IS NULL
                 AND s.expires_at > now()""",
            (session_id, user_id),
        )
    if row is None:
        raise Unauthorized(SESSION_INVALID)
    return Principal(user_id=user_id, email=row["email"], via="jwt", session_id=session_id)


async def authenticate(request: web.Request) -> Principal:
    header = request.headers.get("Authorization", "")
    scheme, _, credential = header.partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential:
        raise Unauthorized("Header Authorization: Bearer <token> diperlukan")
    if credential.startswith("cvsm_"):
        return await tokens.authenticate(request, credential)
    return await authenticate_jwt(request, credential)


@web.middleware
async def auth_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Client IP, per-kind rate limits, and the bearer credential for every private API route."""
    settings = request.app[SETTINGS]
    request[CLIENT_IP] = client_ip(request, settings.trusted_proxies)
    path = request.path
    if request.method == "OPTIONS" or not path.startswith(API_PREFIX) or path in UNLIMITED_PUBLIC:
        return await handler(request)
    pool = request.app[POOL]
    if path.startswith("/api/v1/auth/"):
        await ratelimit.hit(pool, "auth", request[CLIENT_IP], settings.rate_limit("auth"))
        return await handler(request)
    if path.startswith("/api/v1/public/"):
        await ratelimit.hit(pool, "public", request[CLIENT_IP], settings.rate_limit("public"))
        return await handler(request)
    who = await authenticate(request)
    request[PRINCIPAL] = who
    key = f"token:{who.token_id}" if who.token_id else f"user:{who.user_id}"
    await ratelimit.hit(pool, "api", key, settings.rate_limit("api"))
    return await handler(request)


async def purge_expired_sessions(pool) -> None:
    async with db.cursor(pool) as cur:
        await cur.execute("DELETE FROM sessions WHERE expires_at < now() - interval '1 day'")
