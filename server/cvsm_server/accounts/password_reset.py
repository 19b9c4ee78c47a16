"""Password reset by mail: a single-use link that lives one hour; using it sets the new password
and logs out every session of the account.

Asking for a link answers the same, in the same time, whether or not the address has an account:
both paths do the same work (the lookup, a token and a rendered message) and the answer waits
until a fixed floor has passed, so neither the body nor the clock tells. Links per address are
limited, silently, so the form cannot flood someone's inbox.
"""

from __future__ import annotations

import asyncio
import time

from ..audit import log as audit
from .. import db
from ..mail import messages as mail, tokens as mailtokens
from . import ratelimit
from . import sessions
from ..core.actor import Actor
from ..core.config import RateLimit
from ..crypto.sealing import Keyring
from ..core.errors import BadRequest, TooManyRequests
from ..crypto.passwords import MAX_LENGTH, MIN_LENGTH, PasswordHasher

LINK_INVALID = "Tautan atur ulang kata sandi tidak valid, sudah dipakai, atau kedaluwarsa"
PASSWORD_RULE = f"Kata sandi minimal {MIN_LENGTH} karakter"
# Every request for a link takes at least this long, whatever happened (seconds).
RESPONSE_FLOOR = 0.4
# Links mailed to one address.
PER_ADDRESS = RateLimit(limit=3, period=3600)


def link(app_url: str, token: str) -> str:
    return f"{app_url}/reset-password?token={token}"


async def request_link(conn: db.Connection, client: Actor, keyring: Keyring, email: str,
                       app_url: str, *, floor: float = RESPONSE_FLOOR) -> None:
    """Mail a reset link when `email` belongs to an account; otherwise do the same work and
    send nothing. Returns after `floor` seconds either way."""
    started = time.monotonic()
    email = email.strip()[:254]
    try:
        token = mailtokens.generate()
        async with db.transaction(conn) as cur:
            user = await db.fetchone(
                cur, "SELECT id, email, name, language FROM users WHERE lower(email) = lower(%s)",
                (email,))
            target = user or {"email": email or "-", "name": ""}
            message = mail.render("password_reset", target["email"],
                                  {"name": target["name"] or target["email"],
                                   "link": link(app_url, token), "app_url": app_url},
                                  tokens=(token,), language=target.get("language"))
            if user is not None:
                charge = ratelimit.Charge.of("reset_mail", str(user["id"]), PER_ADDRESS)
                try:
                    await ratelimit.hit(conn, charge)
                except TooManyRequests:
                    user = None  # silently: the answer must not differ
            if user is not None:
                await cur.execute(
                    """UPDATE mail_tokens SET used_at = now()
                       WHERE user_id = %s AND purpose = %s AND used_at IS NULL""",
                    (user["id"], mailtokens.PASSWORD_RESET))
                await cur.execute(
                    """INSERT INTO mail_tokens (purpose, token_hash, user_id, email, expires_at)
                       VALUES (%s, %s, %s, %s, now() + %s)""",
                    (mailtokens.PASSWORD_RESET, keyring.token_hash(token), user["id"],
                     user["email"], mailtokens.LIFETIMES[mailtokens.PASSWORD_RESET]))
                await mail.enqueue(cur, keyring, "password_reset", message)
                await audit.record(cur, client.as_user(user["id"], user["email"], via="anonymous"),
                                   "password_reset_requested", "user", resource_id=user["id"])
    finally:
        await asyncio.sleep(max(0.0, floor - (time.monotonic() - started)))


async def reset(conn: db.Connection, client: Actor, hasher: PasswordHasher, keyring: Keyring,
                token: object, password: str, *,
                failures: ratelimit.Charge | None = None) -> dict:
    """Set the new password from a valid link and revoke every session; the account (id, email).

    The link is a credential: it stands behind the failed-credential throttle (`failures`, the
    client's address) and a wrong one is counted there. When the reset is the first proof that
    the account's owner holds its address (`email_verified` was false), every API token is
    revoked too: someone who registered the address first keeps nothing (the mail says so)."""
    if not MIN_LENGTH <= len(password) <= MAX_LENGTH:
        raise BadRequest(PASSWORD_RULE)
    if not mailtokens.well_formed(token):
        raise BadRequest(LINK_INVALID)
    await ratelimit.guard(conn, failures)
    async with db.transaction(conn) as cur:
        used = await mailtokens.consume(cur, keyring, mailtokens.PASSWORD_RESET, token)
        user = used and await db.fetchone(
            cur,
            """SELECT id, email, email_verified FROM users
               WHERE id = %s AND lower(email) = lower(%s) FOR NO KEY UPDATE""",
            (used["user_id"], used["email"]),
        )
        if user:
            await cur.execute("UPDATE users SET password_hash = %s, email_verified = true"
                              " WHERE id = %s", (await hasher.hash(password), user["id"]))
            first_proof = not user["email_verified"]
            sessions_revoked, tokens_revoked = await sessions.end_all_credentials(
                cur, user["id"], tokens=first_proof)
            await audit.record(cur, client.as_user(user["id"], user["email"], via="mail_link"),
                               "password_reset", "user", resource_id=user["id"],
                               metadata={"sessions_revoked": sessions_revoked,
                                         "tokens_revoked": tokens_revoked})
            return {"id": user["id"], "email": user["email"]}
    await ratelimit.failed(conn, failures)
    raise BadRequest(LINK_INVALID)
