"""The first administrator of a fresh install, without editing the database: a one-time setup
link printed on the server's terminal.

Why this and not "the first account to sign up is admin": on a server reachable by others, the
first sign-up may not be the operator's, and a race for it is a way in. The link is shown only
to whoever sees the server's terminal (the operator, who could run `cvsm-server admin grant
EMAIL` anyway), and the account that uses it is one its owner signed into.

- `issue`: at start-up, in the one process of an install that runs the background jobs (worker
  0 under `--workers`), when no user is admin: a new random token, stored only as its HMAC
  (`Keyring.token_hash`), valid for `LIFETIME`. The caller prints the link on stderr, not
  through logging: it is in no log file, and the access log writes paths without their query.
- `usable`: whether the link's page may offer its button (unused, unexpired, no admin yet);
  a used, expired or unknown link's page says it no longer works, with no form.
- `claim`: a signed-in user (session JWT, never an API token) who opens the link and confirms
  (a CSRF-checked POST) becomes admin, audited as `admin_grant` (`via: setup_link`). One claim
  at a time; the token is used up; an unknown, used or expired token, or one used when any
  admin exists by now, is refused alike.
- The set-up page of a self-hosted server also asks which plan new teams get: `claim` stores
  it with the grant (`instance.settings`).
- `end_all`: every setup token stops working once anyone is admin (the admin panel or the
  operator's command call it when they grant; `claim` checks for an admin anyway).
"""

from __future__ import annotations

from datetime import timedelta

from ..audit import log as audit
from .. import db
from ..mail import tokens as mailtokens
from . import ratelimit
from . import sessions
from ..core.actor import Actor
from ..crypto.sealing import Keyring
from ..instance import settings as instance_settings
from ..core.errors import BadRequest

LIFETIME = timedelta(hours=24)
PATH = "/setup"
SETUP_INVALID = ("Tautan penyiapan admin tidak berlaku: salah, kedaluwarsa, sudah dipakai, atau "
                 "server ini sudah punya admin")
# One claim at a time across processes (an advisory lock's key; any constant of our own).
_CLAIM_LOCK = 0x63766D5F73657475  # "cvm_setu"


def link(base_url: str, token: str) -> str:
    return f"{base_url}{PATH}?token={token}"


def announcement(base_url: str, token: str) -> str:
    """What the server prints on its terminal when it issues a setup link."""
    hours = int(LIFETIME.total_seconds() // 3600)
    return (f"cvsm-server: this server has no administrator yet. To become its first, sign in (or "
            f"sign up) in a browser and open within {hours} hours:\n\n"
            f"    {link(base_url, token)}\n\n"
            "  It works once, and no longer once anyone is admin; each start prints a new one. "
            "Or: cvsm-server admin grant EMAIL")


async def issue(pool: db.Pool, keyring: Keyring) -> str | None:
    """A new setup token when no user is admin; None when one is (and no token is left then)."""
    async with db.pool_transaction(pool) as cur:
        if await db.fetchone(cur, "SELECT 1 FROM users WHERE is_admin LIMIT 1"):
            await end_all(cur)
            return None
        await cur.execute("DELETE FROM admin_setup_tokens WHERE expires_at < now() - interval '7 days'")
        token = mailtokens.generate()
        await cur.execute(
            "INSERT INTO admin_setup_tokens (token_hash, expires_at) VALUES (%s, now() + %s)",
            (keyring.token_hash(token), LIFETIME))
    return token


async def end_all(cur: db.Cursor) -> None:
    """Every setup token stops working (someone is admin now)."""
    await cur.execute("UPDATE admin_setup_tokens SET used_at = now() WHERE used_at IS NULL")


async def usable(conn: db.Connection, keyring: Keyring, token: object,
                 failures: ratelimit.Charge | None = None) -> bool:
    """Whether `token` would make its opener admin now: a setup token not used, not expired,
    and no account is admin yet. Nothing is changed (a preview may open the link). The link is
    a credential: the lookup stands behind the failed-credential throttle (`failures`, the
    client's address; a 429 while it is limited) and a token that opens nothing is counted."""
    if not mailtokens.well_formed(token):
        return False
    await ratelimit.guard(conn, failures)
    async with db.cursor(conn) as cur:
        found = await db.fetchone(
            cur, """SELECT 1 FROM admin_setup_tokens
                    WHERE token_hash = %s AND used_at IS NULL AND expires_at > now()
                      AND NOT EXISTS (SELECT 1 FROM users WHERE is_admin)""",
            (keyring.token_hash(token),))  # type: ignore[arg-type]
    if found is None:
        await ratelimit.failed(conn, failures)
    return found is not None


async def claim(conn: db.Connection, actor: Actor, keyring: Keyring, token: object, *,
                default_plan: object = None) -> dict:
    """Make the signed-in actor admin with a setup token; returns their `id` and `email`. With
    `default_plan` (a self-hosted server's set-up page asks), that is the plan new teams get
    from now on (`instance.settings`), stored in the same transaction; a name that is no plan
    is a 400 and nothing is done (the link still works)."""
    sessions.require_jwt(actor)
    if default_plan is not None:
        instance_settings.check_plan(default_plan)
    if not mailtokens.well_formed(token):
        raise BadRequest(SETUP_INVALID)
    async with db.transaction(conn) as cur:
        await cur.execute("SELECT pg_advisory_xact_lock(%s)", (_CLAIM_LOCK,))
        if await db.fetchone(cur, "SELECT 1 FROM users WHERE is_admin LIMIT 1"):
            raise BadRequest(SETUP_INVALID)
        used = await db.fetchone(
            cur, """UPDATE admin_setup_tokens SET used_at = now(), used_by = %s
                    WHERE token_hash = %s AND used_at IS NULL AND expires_at > now()
                    RETURNING id""",
            (actor.user_id, keyring.token_hash(token)))  # type: ignore[arg-type]
        if used is None:
            raise BadRequest(SETUP_INVALID)
        user = await db.fetchone(
            cur, """UPDATE users SET is_admin = true WHERE id = %s AND disabled_at IS NULL
                    RETURNING id, email""", (actor.user_id,))
        if user is None:
            raise BadRequest(SETUP_INVALID)
        await end_all(cur)
        await audit.record(cur, actor, "admin_grant", "user", resource_id=user["id"],
                           metadata={"email": user["email"], "via": "setup_link"})
        if default_plan is not None:
            await instance_settings.store_default_plan(cur, actor, default_plan,  # type: ignore[arg-type]
                                                       via="setup_link")
    return user
