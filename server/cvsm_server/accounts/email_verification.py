"""Email verification: a mailed, single-use link (48 hours) proves the account's address.

Registering sends the first link; a signed-in user may ask for another (the newest link is the
only one that works, and asking is limited per user so nobody can turn the server into a mail
cannon). Following the link marks `email_verified` only while the account still has the address
the link was sent to.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from ..audit import log as audit
from .. import db
from ..mail import messages as mail, tokens as mailtokens
from . import ratelimit
from . import sessions
from ..core.actor import Actor
from ..core.config import RateLimit
from ..crypto.sealing import Keyring
from ..core.errors import BadRequest, NotFound
from .sessions import require_jwt

LINK_INVALID = "Tautan verifikasi tidak valid, sudah dipakai, atau kedaluwarsa"
# Mails a signed-in user may ask for (registering sends one more).
REQUEST_LIMIT = RateLimit(limit=3, period=3600)
TOO_MANY = "Terlalu banyak permintaan email verifikasi; coba lagi nanti"


def link(app_url: str, token: str) -> str:
    return f"{app_url}/verify-email?token={token}"


async def send_link(cur: db.Cursor, keyring: Keyring, user: Mapping, app_url: str) -> None:
    """Queue a verification mail for `user` (id, email, name) in the caller's transaction."""
    token = await mailtokens.issue(cur, keyring, mailtokens.VERIFY_EMAIL, email=user["email"],
                                   user_id=user["id"])
    await mail.send(cur, keyring, "verify_email", "verify_email", user["email"],
                    {"name": user["name"] or user["email"], "link": link(app_url, token),
                     "app_url": app_url}, tokens=(token,))


async def request_link(conn: db.Connection, actor: Actor, keyring: Keyring, app_url: str) -> bool:
    """Mail the signed-in user a new link; False (and no mail) when the address is verified."""
    require_jwt(actor)
    charge = ratelimit.Charge.of("verify_mail", str(actor.user_id), REQUEST_LIMIT)
    async with db.transaction(conn) as cur:
        user = await db.fetchone(
            cur, "SELECT id, email, name, email_verified FROM users WHERE id = %s FOR NO KEY UPDATE",
            (actor.user_id,))
        if user is None:
            raise NotFound("Akun tidak ditemukan")
        if user["email_verified"]:
            return False
    await ratelimit.hit(conn, charge, TOO_MANY)
    async with db.transaction(conn) as cur:
        await send_link(cur, keyring, user, app_url)
        await audit.record(cur, actor, "email_verification_requested", "user",
                           resource_id=actor.user_id)
    return True


async def verify(conn: db.Connection, client: Actor, keyring: Keyring, token: object, *,
                 failures: ratelimit.Charge | None = None,
                 keep_session: uuid.UUID | None = None) -> dict:
    """Mark the address the link was sent to as verified; the account (id, email).

    The link is a credential: it stands behind the failed-credential throttle (`failures`) and a
    wrong one is counted. The first proof that the owner holds the address ends every session and
    revokes every API token made before it: whoever registered someone else's address first
    keeps nothing once its owner follows the link (the mail says so). Only `keep_session`, the
    session that presented the link (a signed-in browser or an API call of the same account,
    which holds both the account and its mail), stays."""
    await ratelimit.guard(conn, failures)
    async with db.transaction(conn) as cur:
        used = await mailtokens.consume(cur, keyring, mailtokens.VERIFY_EMAIL, token)
        user = used and await db.fetchone(
            cur,
            """UPDATE users u SET email_verified = true
               FROM (SELECT id, email_verified FROM users WHERE id = %s FOR NO KEY UPDATE) before
               WHERE u.id = before.id AND lower(u.email) = lower(%s)
               RETURNING u.id, u.email, before.email_verified AS was_verified""",
            (used["user_id"], used["email"]),
        )
        if user:
            metadata = {}
            if not user["was_verified"]:
                sessions_revoked, tokens_revoked = await sessions.end_all_credentials(
                    cur, user["id"], tokens=True, keep_session=keep_session)
                metadata = {"sessions_revoked": sessions_revoked,
                            "tokens_revoked": tokens_revoked}
            await audit.record(cur, client.as_user(user["id"], user["email"], via="mail_link"),
                               "email_verified", "user", resource_id=user["id"],
                               metadata=metadata or None)
            return {"id": user["id"], "email": user["email"],
                    "credentials_ended": not user["was_verified"]}
    await ratelimit.failed(conn, failures)
    raise BadRequest(LINK_INVALID)
