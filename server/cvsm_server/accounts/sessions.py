"""JWT sessions: issuing, checking, and logout-all.

A JWT (HS256; claims `sub`, `iat`, `exp`, `jti`; 12 hours by default) names a row in `sessions`.
Logout-all revokes every session row of the user, so each JWT issued before the call stops
working at once, on every process (`credentials.bump`), and one issued after works, whatever the
clock says. It, and every end of all of a user's sessions (`end_all_credentials`: a password
reset, a first proof of the address), also makes every device cookie of the user stop counting
(`devices.forget_all`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import OctKey

from ..core.actor import Actor
from ..core.errors import Forbidden, Unauthorized
from ..core.timeutil import now
from ..audit import log as audit
from .. import db
from . import credentials, devices

SESSION_INVALID = "Sesi tidak valid atau sudah berakhir"
JWT_ONLY = "Endpoint ini memerlukan login, bukan token API"


@dataclass(frozen=True)
class JwtSigner:
    """The signing secret and lifetime; its repr never shows the secret."""

    secret: str
    lifetime_seconds: int = 12 * 3600

    def __repr__(self) -> str:
        return f"JwtSigner(lifetime_seconds={self.lifetime_seconds})"

    def key(self) -> OctKey:
        return OctKey.import_key(self.secret)


# Every claim a session JWT carries is required; `exp` is checked (no leeway).
CLAIMS = jwt.JWTClaimsRegistry(sub={"essential": True}, iat={"essential": True},
                               exp={"essential": True}, jti={"essential": True})


async def issue(cur: db.Cursor, signer: JwtSigner, user_id: uuid.UUID) -> str:
    """Open a session for `user_id` (in the caller's transaction) and return its JWT."""
    issued = now()
    session_id = uuid.uuid4()
    await cur.execute(
        "INSERT INTO sessions (id, user_id, expires_at) VALUES (%s, %s, %s)",
        (session_id, user_id, issued + timedelta(seconds=signer.lifetime_seconds)),
    )
    claims = {
        "sub": str(user_id),
        "iat": int(issued.timestamp()),
        "exp": int(issued.timestamp()) + signer.lifetime_seconds,
        "jti": str(session_id),
    }
    return jwt.encode({"alg": "HS256"}, claims, signer.key())


async def authenticate(pool: db.Pool, cache: credentials.CredentialCache, signer: JwtSigner,
                       token: str, client: Actor) -> Actor:
    """The user behind a JWT, from the cache or one database round trip; 401 otherwise."""
    verified = cache.jwt(token)  # a JWT this process checked already: no second decode
    decoded = verified is None
    if decoded:
        try:
            claims = jwt.decode(token, signer.key(), algorithms=["HS256"]).claims
            CLAIMS.validate(claims)
            verified = credentials.VerifiedJwt(uuid.UUID(claims["sub"]),
                                               uuid.UUID(claims["jti"]), int(claims["exp"]))
        except (JoseError, ValueError, TypeError, AttributeError):
            raise Unauthorized(SESSION_INVALID) from None
    user_id, session_id = verified.user_id, verified.session_id
    entry = cache.session(session_id)
    if entry is not None and entry.user_id == user_id:
        if entry.expires_at <= now():
            raise Unauthorized(SESSION_INVALID)
        if decoded:
            cache.put_jwt(token, verified)
        return client.as_user(user_id, entry.email, via="jwt", session_id=session_id,
                              epoch=cache.epoch)
    async with db.connection(pool) as conn, db.cursor(conn) as cur:
        row = await db.fetchone(
            cur,
            f"""SELECT u.email, s.expires_at, {credentials.EPOCH_SQL} AS epoch
                FROM sessions s JOIN users u ON u.id = s.user_id
                WHERE s.id = %s AND s.user_id = %s AND s.revoked_at IS NULL
                  AND s.expires_at > now() AND u.disabled_at IS NULL""",
            (session_id, user_id),
        )
    if row is None:
        raise Unauthorized(SESSION_INVALID)
    entry = credentials.SessionEntry(user_id, row["email"], row["expires_at"], time.monotonic())
    cache.put_session(session_id, entry, row["epoch"])
    if decoded:
        cache.put_jwt(token, verified)
    return client.as_user(user_id, entry.email, via="jwt", session_id=session_id)


def require_jwt(actor: Actor) -> Actor:
    """Credential management refuses API tokens: a leaked token cannot mint more or lock out
    its owner."""
    if actor.via != "jwt":
        raise Forbidden(JWT_ONLY)
    return actor


async def logout_all(conn: db.Connection, actor: Actor) -> int:
    """Revoke every session of the actor (JWT only); returns how many were open."""
    require_jwt(actor)
    async with db.transaction(conn) as cur:
        await cur.execute(
            "UPDATE sessions SET revoked_at = now() WHERE user_id = %s AND revoked_at IS NULL",
            (actor.user_id,),
        )
        revoked = cur.rowcount
        await devices.forget_all(cur, actor.user_id)
        await credentials.bump(cur)
        await audit.record(cur, actor, "logout_all", "user", resource_id=actor.user_id,
                           metadata={"sessions": revoked})
    return revoked


async def end_all_credentials(cur: db.Cursor, user_id: uuid.UUID, *, tokens: bool,
                              keep_session: uuid.UUID | None = None) -> tuple[int, int]:
    """Revoke every open session of `user_id` but `keep_session` and, with `tokens`, every API
    token (in the caller's transaction; every process stops trusting its cached copies at once).
    Returns how many sessions and tokens were revoked."""
    await cur.execute(
        """UPDATE sessions SET revoked_at = now()
           WHERE user_id = %s AND revoked_at IS NULL AND id IS DISTINCT FROM %s""",
        (user_id, keep_session))
    sessions_revoked = cur.rowcount
    tokens_revoked = 0
    if tokens:
        await cur.execute(
            "UPDATE api_tokens SET revoked_at = now() WHERE user_id = %s AND revoked_at IS NULL",
            (user_id,))
        tokens_revoked = cur.rowcount
    await devices.forget_all(cur, user_id)
    await credentials.bump(cur)
    return sessions_revoked, tokens_revoked


async def purge_expired(pool: db.Pool) -> None:
    async with db.cursor(pool) as cur:
        await cur.execute("DELETE FROM sessions WHERE expires_at < now() - interval '1 day'")
