"""Account deletion: a request opens a 7-day window, the user may cancel within it, and then a
background job hard-deletes the account (spec: "hard-deleted after a 7-day window").

- `request_deletion` (a session JWT only) re-checks who is asking: the password, and the TOTP
  code when two-factor is on. Every attempt counts against the client's `failed_auth` limit
  (the one failed logins count against) before anything is checked, so past the limit even the
  right password answers 429: whoever holds a stolen session cannot use this route to guess
  the password. A wrong answer is audited (`account_deletion_failed`). An account without a password (created through an identity provider) confirms
  by typing its own email address as `confirm`, plus the code when two-factor is on. It sets
  `users.delete_after` and mails the date and how to cancel.
- During the window everything keeps working, API tokens included: a program in production does
  not break before its owner could change their mind (cancelling is signing in and pressing one
  button). Signing in stays possible for the same reason.
- `cancel_deletion` clears the date and mails a confirmation.
- `purge_due(pool, now)` deletes every account whose window ended, each in its own transaction,
  claimed `FOR UPDATE SKIP LOCKED` so several server processes never take one account twice.
  First go the teams where the user is the only Owner (their secrets, versions, shares, invites
  and the tokens bound to them go by cascade); in teams with another Owner only the membership
  goes. Then the user row (sessions, API tokens, identities and mail tokens by cascade) and the
  newsletter subscription of the address. Audit entries stay with their `user_email` text and a
  nulled actor (the foreign keys do it; the audit guard of migration 0004 allows exactly that),
  and the job writes one entry per deleted team and user as `Actor.system()`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from ..audit import log as audit
from . import credentials
from .. import db
from ..mail import messages as mail
from . import ratelimit
from . import sessions, totp
from ..core import i18n
from ..core.actor import Actor
from ..crypto.sealing import Keyring
from ..core.errors import BadRequest, Conflict, Unauthorized
from ..crypto.passwords import MAX_LENGTH, PasswordHasher
from ..teams.roles import OWNER
from ..core.timeutil import iso

log = logging.getLogger("cvsm.deletion")

WINDOW = timedelta(days=7)
PURGE_INTERVAL = 600.0  # seconds between two runs of the background job
MAIL_PURPOSE = "account_deletion"

ALREADY_PENDING = "Penghapusan akun sudah dijadwalkan"
NOTHING_PENDING = "Tidak ada penghapusan akun yang dijadwalkan"
WRONG_PASSWORD = "Kata sandi salah"
PASSWORD_REQUIRED = "Kolom 'password' wajib diisi untuk menghapus akun"
CONFIRM_REQUIRED = ("Akun ini tidak memiliki kata sandi: ketik alamat email akun Anda di kolom "
                    "'confirm' untuk menghapus akun")
WRONG_CONFIRM = "Alamat email konfirmasi tidak cocok dengan email akun"
CODE_REQUIRED = "Kode dua faktor wajib diisi untuk menghapus akun"
WRONG_CODE = "Kode dua faktor tidak valid"
STILL_SUBSCRIBED = i18n.N_("Tim {teams} masih berlangganan dan akan terhapus bersama akun ini: "
                           "batalkan langganannya dulu di portal tagihan (halaman Paket tim), atau "
                           "jadikan anggota lain Owner, lalu hapus akun")
# A team the user is the only Owner of goes with the account; one that still pays through
# billing (docs/billing.md) must not, or its Stripe subscription would go on charging for a team
# that no longer exists. Deletion waits for it (the request is refused; a subscription taken
# during the 7 days holds the purge until it ends).
_SUBSCRIBED_SOLE_TEAMS = """
    SELECT t.slug FROM teams t
      JOIN team_members m ON m.team_id = t.id AND m.user_id = {user} AND m.role = 'Owner'
      JOIN team_billing b ON b.team_id = t.id
     WHERE b.status IN ('active', 'trialing', 'past_due', 'unpaid')
       AND NOT EXISTS (SELECT 1 FROM team_members o
                        WHERE o.team_id = t.id AND o.role = 'Owner' AND o.user_id <> {user})"""

_MONTHS = ("Januari", "Februari", "Maret", "April", "Mei", "Juni", "Juli", "Agustus",
           "September", "Oktober", "November", "Desember")


_MONTHS_EN = ("January", "February", "March", "April", "May", "June", "July", "August",
              "September", "October", "November", "December")


def format_when(value: datetime) -> str:
    """A moment as readers of the current language (`core.i18n`) write it, in UTC: `12 Juni
    2025 pukul 14.03 UTC`, in English `12 June 2025 at 14:03 UTC`."""
    at = value.astimezone(timezone.utc)
    if i18n.current_language() == "en":
        return f"{at.day} {_MONTHS_EN[at.month - 1]} {at.year} at {at:%H:%M} UTC"
    return f"{at.day} {_MONTHS[at.month - 1]} {at.year} pukul {at:%H.%M} UTC"


_USER = """SELECT id, email, name, password_hash, delete_after, totp_enabled, totp_key_id,
                  totp_nonce, totp_ciphertext, totp_last_step
           FROM users WHERE id = %s FOR NO KEY UPDATE"""


async def status(conn: db.Connection, actor: Actor) -> dict[str, Any]:
    """What the account page shows: `delete_after` (or None), whether the account has a
    password, two-factor state, and the teams that would go with it (the actor is their only
    Owner), each with how many other members it has."""
    async with db.cursor(conn) as cur:
        user = await db.fetchone(
            cur,
            """SELECT delete_after, password_hash IS NOT NULL AS has_password, totp_enabled
               FROM users WHERE id = %s""",
            (actor.user_id,),
        )
        teams = await db.fetchall(
            cur,
            """SELECT t.id, t.slug, t.name,
                      (SELECT count(*) FROM team_members o
                       WHERE o.team_id = t.id AND o.user_id <> m.user_id) AS others
               FROM teams t JOIN team_members m ON m.team_id = t.id
               WHERE m.user_id = %s AND m.role = 'Owner'
                 AND NOT EXISTS (SELECT 1 FROM team_members o
                                 WHERE o.team_id = t.id AND o.role = 'Owner'
                                   AND o.user_id <> m.user_id)
               ORDER BY t.name, t.slug""",
            (actor.user_id,),
        )
    return {**user, "teams_to_delete": teams}


async def request_deletion(conn: db.Connection, actor: Actor, hasher: PasswordHasher,
                           keyring: Keyring, password: str | None, totp_code: str | None,
                           app_url: str, *, confirm: str | None = None,
                           failures: ratelimit.Charge | None = None) -> datetime:
    """Schedule the actor's account for deletion 7 days from now; returns that moment.

    Needs a session JWT (403 for an API token), the password (or, for an account without one,
    its email as `confirm`) and the TOTP code when two-factor is on. A wrong password, email or
    code is a 401 (audited); 409 when a deletion is already pending; 429 past the client's
    `failed_auth` limit, which every attempt counts against."""
    sessions.require_jwt(actor)
    await ratelimit.hit(conn, failures, ratelimit.FAILED_AUTH)
    async with db.transaction(conn) as cur:
        user = await db.fetchone(cur, _USER, (actor.user_id,))
        if user["delete_after"] is not None:
            raise Conflict(ALREADY_PENDING)
        paying = await db.fetchall(cur, _SUBSCRIBED_SOLE_TEAMS.format(user="%s") + " ORDER BY t.slug",
                                   (actor.user_id, actor.user_id))
        if paying:
            raise Conflict(i18n.Text(STILL_SUBSCRIBED, teams=", ".join(r["slug"] for r in paying)))
        if user["password_hash"] is not None:
            if not password:
                raise BadRequest(PASSWORD_REQUIRED)
            ok = await hasher.verify(password[:MAX_LENGTH], user["password_hash"])
            failure = WRONG_PASSWORD
        else:
            if not confirm:
                raise BadRequest(CONFIRM_REQUIRED)
            ok = confirm.strip().lower() == user["email"].lower()
            failure = WRONG_CONFIRM
        if ok and user["totp_enabled"]:
            if not totp_code:
                raise BadRequest(CODE_REQUIRED)
            ok = await totp.consume_code(cur, keyring, user, totp_code.strip())
            failure = WRONG_CODE
        if ok:
            row = await db.fetchone(
                cur,
                "UPDATE users SET delete_after = now() + %s WHERE id = %s RETURNING delete_after",
                (WINDOW, actor.user_id),
            )
            delete_after = row["delete_after"]
            await audit.record(cur, actor, "account_deletion_requested", "user",
                               resource_id=actor.user_id,
                               metadata={"delete_after": iso(delete_after)})
            await mail.send(cur, keyring, MAIL_PURPOSE, "account_deletion_requested",
                            user["email"], _mail_context(user, app_url, delete_after))
            return delete_after
    async with db.transaction(conn) as cur:
        await audit.record(cur, actor, "account_deletion_failed", "user", resource_id=actor.user_id)
    raise Unauthorized(failure)


async def cancel_deletion(conn: db.Connection, actor: Actor, keyring: Keyring, app_url: str) -> None:
    """Cancel the actor's pending deletion (session JWT only); 409 when none is pending."""
    sessions.require_jwt(actor)
    async with db.transaction(conn) as cur:
        user = await db.fetchone(
            cur, "SELECT email, name, delete_after FROM users WHERE id = %s FOR NO KEY UPDATE",
            (actor.user_id,),
        )
        if user is None or user["delete_after"] is None:
            raise Conflict(NOTHING_PENDING)
        await cur.execute("UPDATE users SET delete_after = NULL WHERE id = %s", (actor.user_id,))
        await audit.record(cur, actor, "account_deletion_cancelled", "user",
                           resource_id=actor.user_id,
                           metadata={"delete_after": iso(user["delete_after"])})
        await mail.send(cur, keyring, MAIL_PURPOSE, "account_deletion_cancelled", user["email"],
                        _mail_context(user, app_url, user["delete_after"]))


def _mail_context(user: Mapping, app_url: str, delete_after: datetime) -> dict[str, Any]:
    return {"name": user["name"], "app_url": app_url, "account_url": f"{app_url}/app/account",
            "when": format_when(delete_after)}


# The job ----------------------------------------------------------------------------------------

async def purge_due(pool: db.Pool, now: datetime) -> list[uuid.UUID]:
    """Hard-delete every account whose `delete_after` is at or before `now`; returns their ids.

    Each account goes in its own transaction. One that fails is logged and left for the next
    run; the others still go."""
    purged: list[uuid.UUID] = []
    failed: list[uuid.UUID] = []
    while True:
        user = None
        try:
            async with db.connection(pool) as conn, db.transaction(conn) as cur:
                user = await db.fetchone(
                    cur,
                    """SELECT id, email, delete_after FROM users
                       WHERE delete_after IS NOT NULL AND delete_after <= %s
                         AND NOT (id = ANY(%s::uuid[]))
                         AND NOT EXISTS (""" + _SUBSCRIBED_SOLE_TEAMS.format(user="users.id") + """)
                       ORDER BY delete_after, id LIMIT 1 FOR UPDATE SKIP LOCKED""",
                    (now, failed),
                )
                if user is None:
                    return purged
                await _purge_user(cur, user)
        except asyncio.CancelledError:
            raise
        except Exception:
            if user is None:
                raise
            log.exception("account deletion of user %s failed; it is retried on the next run",
                          user["id"])
            failed.append(user["id"])
            continue
        purged.append(user["id"])
        log.info("account %s deleted (requested deletion was due %s)", user["id"],
                 iso(user["delete_after"]))


async def _purge_user(cur: db.Cursor, user: Mapping) -> None:
    system = Actor.system()
    user_id = user["id"]
    # Every team it is in, locked in one order before anything changes: two accounts that own a
    # team together and go at once cannot both see the other as the Owner who stays, and one
    # that deletes a team never waits on a member's purge that waits on it.
    teams = await db.fetchall(
        cur,
        """SELECT t.id, t.slug, m.role FROM teams t JOIN team_members m ON m.team_id = t.id
           WHERE m.user_id = %s ORDER BY t.id FOR UPDATE OF t""",
        (user_id,),
    )
    deleted_teams = []
    for team in (t for t in teams if t["role"] == OWNER):
        other = await db.fetchone(
            cur,
            """SELECT 1 AS one FROM team_members
               WHERE team_id = %s AND role = 'Owner' AND user_id <> %s LIMIT 1""",
            (team["id"], user_id),
        )
        if other is not None:
            continue  # another Owner stays: only the membership goes, with the user below
        await audit.record(cur, system, "team_delete", "team", resource_id=team["id"],
                           metadata={"slug": team["slug"], "reason": "account_deletion",
                                     "user_id": str(user_id)})
        await cur.execute("DELETE FROM teams WHERE id = %s", (team["id"],))
        deleted_teams.append(team["slug"])
    await audit.record(cur, system, "account_deleted", "user", resource_id=user_id,
                       metadata={"email": user["email"], "teams_deleted": deleted_teams})
    await cur.execute("DELETE FROM newsletter_subscriptions WHERE lower(email) = lower(%s)",
                      (user["email"],))
    await cur.execute("DELETE FROM users WHERE id = %s", (user_id,))
    await credentials.bump(cur)  # cached sessions and tokens of the user stop on every process
