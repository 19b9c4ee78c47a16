"""The newsletter: subscribe with double opt-in, confirm, unsubscribe, and the opt-in at register.

- `subscribe` answers the same whatever the address's state (the caller always says 202): a
  new, pending or unsubscribed address gets a confirmation mail (the newest link is the one that
  counts); a confirmed one gets nothing.
- `subscribe_at_register` (and an identity provider's first sign-in) subscribes at once, without
  a mail (spec: `newsletter_opt_in` needs no confirmation).
- Every newsletter mail carries an unsubscribe link with its own long-lived, single-use token
  (`newsletter_unsubscribe`); unsubscribing also ends the address's outstanding links.
- The `users.newsletter_opt_in` column follows the subscription of the account with that address.
- Tokens are `mailtokens` (random, HMAC at rest, single use, expiring); every token problem is
  one generic 400.
"""

from __future__ import annotations

from .. import db
from . import messages as mail, tokens as mailtokens
from ..core.actor import Actor
from ..crypto.sealing import Keyring
from ..core.errors import BadRequest
from ..core.inputs import check_email

CONFIRM_PATH = "/newsletter/confirm"
UNSUBSCRIBE_PATH = "/api/v1/public/newsletter/unsubscribe"
TOKEN_INVALID = "Tautan newsletter tidak valid atau sudah tidak berlaku"
SOURCES = ("form", "register", "oauth")



def unsubscribe_link(app_url: str, token: str) -> str:
    return f"{app_url}{UNSUBSCRIBE_PATH}?token={token}"


async def subscribe(conn: db.Connection, actor: Actor, keyring: Keyring, email: str,
                    app_url: str) -> None:
    """Ask `email` to confirm (a mail with the confirmation and unsubscribe links), unless it is
    already confirmed; the caller answers the same either way. 400 for an invalid address."""
    email = check_email(email)
    async with db.transaction(conn) as cur:
        row = await db.fetchone(
            cur,
            """INSERT INTO newsletter_subscriptions (email, status, source)
               VALUES (%s, 'pending', 'form')
               ON CONFLICT ((lower(email))) DO UPDATE
                   SET status = CASE WHEN newsletter_subscriptions.status = 'confirmed'
                                     THEN 'confirmed' ELSE 'pending' END
               RETURNING status, email""",
            (email,),
        )
        if row["status"] == "confirmed":
            return
        # A new confirmation link replaces the earlier ones for this address.
        await _end_links(cur, row["email"], (mailtokens.NEWSLETTER_CONFIRM,))
        confirm = await mailtokens.issue(cur, keyring, mailtokens.NEWSLETTER_CONFIRM,
                                         email=row["email"], replace=False)
        leave = await mailtokens.issue(cur, keyring, mailtokens.NEWSLETTER_UNSUBSCRIBE,
                                       email=row["email"], replace=False)
        await mail.send(cur, keyring, mailtokens.NEWSLETTER_CONFIRM, "newsletter_confirm",
                        row["email"], {
                            "app_url": app_url,
                            "link": f"{app_url}{CONFIRM_PATH}?token={confirm}",
                            "unsubscribe_link": unsubscribe_link(app_url, leave),
                        }, tokens=(confirm, leave))


async def confirm(conn: db.Connection, actor: Actor, keyring: Keyring, token: object) -> None:
    """Follow a confirmation link: the address is subscribed. Generic 400 for any bad token."""
    async with db.transaction(conn) as cur:
        used = await mailtokens.consume(cur, keyring, mailtokens.NEWSLETTER_CONFIRM, token)
        if used is None:
            raise BadRequest(TOKEN_INVALID)
        row = await db.fetchone(
            cur,
            """UPDATE newsletter_subscriptions
               SET status = 'confirmed', confirmed_at = now(), unsubscribed_at = NULL
               WHERE lower(email) = lower(%s) AND status = 'pending' RETURNING email""",
            (used["email"],),
        )
        if row is None:
            raise BadRequest(TOKEN_INVALID)
        await _set_opt_in(cur, row["email"], True)


async def unsubscribe(conn: db.Connection, actor: Actor, keyring: Keyring, token: object) -> None:
    """Follow an unsubscribe link: no more newsletter mail. Generic 400 for any bad token."""
    async with db.transaction(conn) as cur:
        used = await mailtokens.consume(cur, keyring, mailtokens.NEWSLETTER_UNSUBSCRIBE, token)
        if used is None:
            raise BadRequest(TOKEN_INVALID)
        await cur.execute(
            """UPDATE newsletter_subscriptions SET status = 'unsubscribed', unsubscribed_at = now()
               WHERE lower(email) = lower(%s)""",
            (used["email"],),
        )
        await _end_links(cur, used["email"], (mailtokens.NEWSLETTER_CONFIRM,
                                              mailtokens.NEWSLETTER_UNSUBSCRIBE))
        await _set_opt_in(cur, used["email"], False)


async def subscribe_at_register(cur: db.Cursor, email: str, *, source: str = "register") -> None:
    """Subscribe at once, without a mail (the register form's or a provider's opt-in), in the
    caller's transaction."""
    if source not in SOURCES:
        raise ValueError(f"unknown newsletter source {source!r}")
    await cur.execute(
        """INSERT INTO newsletter_subscriptions (email, status, source, confirmed_at)
           VALUES (%s, 'confirmed', %s, now())
           ON CONFLICT ((lower(email))) DO UPDATE
               SET status = 'confirmed', unsubscribed_at = NULL,
                   confirmed_at = coalesce(CASE WHEN newsletter_subscriptions.status = 'confirmed'
                                                THEN newsletter_subscriptions.confirmed_at END,
                                           now())""",
        (email, source),
    )


async def _end_links(cur: db.Cursor, email: str, purposes: tuple[str, ...]) -> None:
    """The address's unused newsletter links of these purposes stop working."""
    await cur.execute(
        """UPDATE mail_tokens SET used_at = now()
           WHERE lower(email) = lower(%s) AND purpose = ANY(%s) AND used_at IS NULL""",
        (email, list(purposes)),
    )


async def _set_opt_in(cur: db.Cursor, email: str, value: bool) -> None:
    await cur.execute("UPDATE users SET newsletter_opt_in = %s WHERE lower(email) = lower(%s)",
                      (value, email))
