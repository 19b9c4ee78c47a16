"""Tokens sent by mail: random, single use, expiring, and stored only as an HMAC.

A token is 32 random bytes (URL-safe base64). The database keeps its keyed hash
(`Keyring.token_hash`), so a copy of the database cannot follow a link. `consume` marks the
token used in the same statement that finds it, so two clicks on one link cannot both succeed.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import timedelta

from .. import db
from ..crypto.sealing import Keyring

VERIFY_EMAIL = "verify_email"
PASSWORD_RESET = "password_reset"
NEWSLETTER_CONFIRM = "newsletter_confirm"
NEWSLETTER_UNSUBSCRIBE = "newsletter_unsubscribe"

LIFETIMES = {
    VERIFY_EMAIL: timedelta(hours=48),
    PASSWORD_RESET: timedelta(hours=1),
    NEWSLETTER_CONFIRM: timedelta(hours=48),
    NEWSLETTER_UNSUBSCRIBE: timedelta(days=365),
}
INVITE_LIFETIME = timedelta(days=7)
MAX_TOKEN_LENGTH = 128


def generate() -> str:
    return secrets.token_urlsafe(32)


def well_formed(token: object) -> bool:
    """Cheap shape check before any lookup: a string of URL-safe base64 of sane length."""
    return (isinstance(token, str) and 16 <= len(token) <= MAX_TOKEN_LENGTH
            and all(c.isascii() and (c.isalnum() or c in "-_") for c in token))


async def issue(cur: db.Cursor, keyring: Keyring, purpose: str, *, email: str,
                user_id: uuid.UUID | None = None, replace: bool = True) -> str:
    """A new token for `purpose` (in the caller's transaction); returns the token itself, which
    only the mail will carry. With `replace`, the user's earlier unused tokens of this purpose
    stop working (the newest link is the one that counts)."""
    if replace and user_id is not None:
        await cur.execute(
            """UPDATE mail_tokens SET used_at = now()
               WHERE user_id = %s AND purpose = %s AND used_at IS NULL""",
            (user_id, purpose),
        )
    token = generate()
    await cur.execute(
        """INSERT INTO mail_tokens (purpose, token_hash, user_id, email, expires_at)
           VALUES (%s, %s, %s, %s, now() + %s)""",
        (purpose, keyring.token_hash(token), user_id, email, LIFETIMES[purpose]),
    )
    return token


async def consume(cur: db.Cursor, keyring: Keyring, purpose: str, token: object) -> dict | None:
    """The token's row (`user_id`, `email`), now used; None when it is unknown, used, expired or
    of another purpose (the caller answers all of these alike)."""
    if not well_formed(token):
        return None
    return await db.fetchone(
        cur,
        """UPDATE mail_tokens SET used_at = now()
           WHERE token_hash = %s AND purpose = %s AND used_at IS NULL AND expires_at > now()
           RETURNING id, user_id, email""",
        (keyring.token_hash(token), purpose),
    )


async def purge_old(pool: db.Pool) -> None:
    async with db.cursor(pool) as cur:
        await cur.execute(
            """DELETE FROM mail_tokens
               WHERE expires_at < now() - interval '7 days'
                  OR used_at < now() - interval '7 days'"""
        )
