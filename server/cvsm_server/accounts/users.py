"""Accounts: register, login (password, then TOTP when enabled) and the caller's profile.

Login failures answer one generic 401 whatever went wrong (unknown user, wrong password, wrong
code), and an unknown user still costs a full password-hash comparison. Failed logins are audited
for unknown accounts too (never with the identifier, which is sometimes a mistyped password), so
both failures cost the same work. Every check stands behind `ratelimit.guard`: while the client
address is at its `failed_auth` limit, or the identifier (the account's two-factor step) is in its
progressive delay, the answer is 429 before the password or code is looked at, so a right guess
made then is refused like a wrong one, and nothing more is stored. A browser with a valid device
cookie for the account (devices.py) is spared the account's wait: its own wrong passwords count
against the cookie instead.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import NoReturn

from ..audit import log as audit
from . import credentials
from .. import db
from . import email_verification
from ..mail import newsletter
from . import ratelimit
from . import devices, sessions, totp
from ..core.actor import Actor
from ..crypto.sealing import Keyring
from ..core.errors import BadRequest, Conflict, Unauthorized
from ..core.i18n import Text
from ..core.inputs import check_email, check_line
from ..crypto.passwords import MAX_LENGTH, MIN_LENGTH, PasswordHasher

USERNAME_RE = re.compile(r"[A-Za-z0-9_]{3,40}\Z")
RESERVED_USERNAMES = frozenset(
    "admin administrator root system support api help security staff owner me null undefined "
    "settings login logout register auth public health www".split()
)
LOGIN_FAILED = "Email/username atau kata sandi salah"
# The second step's own message: by then the password was right, so saying so reveals nothing.
CODE_FAILED = "Kode autentikasi salah atau sudah dipakai"


class SecondFactorRequired(Unauthorized):
    """The password was right and two-factor is on: the spec's fixed 401 `2fa_required`.

    It carries the user id for a caller that runs the second step itself (the dashboard); the
    JSON API answers only the message."""

    def __init__(self, user_id: uuid.UUID) -> None:
        super().__init__("2fa_required")
        self.user_id = user_id


def validate_username(username: str) -> str:
    if not USERNAME_RE.match(username):
        raise BadRequest("Username harus 3-40 karakter: huruf, angka, dan garis bawah saja")
    if username.lower() in RESERVED_USERNAMES:
        raise BadRequest("Username ini tidak dapat digunakan")
    return username


@dataclass(frozen=True, slots=True)
class PageState:
    """What every signed-in page shows besides its own content: the pending deletion's date
    (the banner with its cancel button) and whether the nav links the admin panel."""
    delete_after: datetime | None
    is_admin: bool
    # The account's chosen language (`id`, `en`), None when it chose none.
    language: str | None = None


async def page_state(conn: db.Connection, actor: Actor) -> PageState | None:
    """The signed-in user's `PageState`, in one statement that also confirms a session served
    from the process's cache (`actor.epoch`: a moved epoch raises `StaleCredential`); None when
    the account is gone."""
    async with db.cursor(conn) as cur:
        row = await db.fetchone(
            cur,
            f"""SELECT {credentials.EPOCH_SQL} AS epoch, u.delete_after,
                       u.is_admin AND u.disabled_at IS NULL AS is_admin, u.language
                FROM users u WHERE u.id = %s""",
            (actor.user_id,))
    if row is None:
        return None
    if actor.epoch is not None and row["epoch"] != actor.epoch:
        raise credentials.StaleCredential()
    return PageState(row["delete_after"], bool(row["is_admin"]), row["language"])


LANGUAGES = ("id", "en")  # core.i18n.LANGUAGES
LANGUAGE_INVALID = "Kolom 'language' harus 'id' atau 'en'"


async def set_language(conn: db.Connection, actor: Actor, language: object) -> dict:
    """Choose the language of the account's pages and mails (`id` or `en`; None: none chosen,
    the browser's and then the server's default apply). Answers the profile as `profile` does."""
    if language is not None and language not in LANGUAGES:
        raise BadRequest(LANGUAGE_INVALID)
    async with db.cursor(conn) as cur:
        await cur.execute("UPDATE users SET language = %s WHERE id = %s", (language, actor.user_id))
    return await profile(conn, actor)


def user_json(row: Mapping) -> dict:
    return {"id": str(row["id"]), "email": row["email"], "username": row["username"],
            "name": row["name"]}


async def register(conn: db.Connection, hasher: PasswordHasher, signer: sessions.JwtSigner, *,
                   email: str, username: str, password: str, name: str,
                   newsletter_opt_in: bool = False, keyring: Keyring | None = None,
                   app_url: str | None = None) -> tuple[dict, str]:
    """A new account and its first session: (user row, JWT).

    With `keyring` and `app_url`, the verification mail is queued in the same transaction: an
    account exists only with its mail queued, and a failure leaves neither (a retry can
    register again)."""
    name = name.strip()
    username = validate_username(username.strip())
    email = check_email(email)
    if not MIN_LENGTH <= len(password) <= MAX_LENGTH:
        raise BadRequest(Text("Kata sandi minimal {n} karakter", n=MIN_LENGTH))
    if not 1 <= len(name) <= 200:
        raise BadRequest("Kolom 'name' harus 1 sampai 200 karakter")
    check_line("name", name)
    password_hash = await hasher.hash(password)
    async with db.transaction(conn) as cur:
        clash = await db.fetchone(
            cur,
            """SELECT lower(email) = lower(%s) AS email_taken FROM users
               WHERE lower(email) = lower(%s) OR lower(username) = lower(%s)
               ORDER BY 1 DESC LIMIT 1""",
            (email, email, username),
        )
        if clash is not None:
            raise Conflict("Email sudah terdaftar" if clash["email_taken"] else "Username sudah digunakan")
        async with db.unique_as_conflict(cur, "Email atau username sudah terdaftar"):
            user = await db.fetchone(
                cur,
                """INSERT INTO users (email, username, name, password_hash, newsletter_opt_in)
                   VALUES (%s, %s, %s, %s, %s) RETURNING id, email, username, name""",
                (email, username, name, password_hash, newsletter_opt_in),
            )
        if newsletter_opt_in:  # spec: subscribed at once, without a confirmation mail
            await newsletter.subscribe_at_register(cur, user["email"])
        if keyring is not None and app_url is not None:
            await email_verification.send_link(cur, keyring, user, app_url)
        token = await sessions.issue(cur, signer, user["id"])
    return user, token


async def login(conn: db.Connection, client: Actor, hasher: PasswordHasher, keyring: Keyring,
                signer: sessions.JwtSigner, *, identifier: str, password: str,
                totp_code: str | None = None,
                failures: ratelimit.Charge | None = None,
                device: devices.Device | None = None) -> tuple[dict, str]:
    """(user row, JWT) for the right password (and code, with two-factor on); else 401.

    `device`: the browser's device cookie (`devices.read`); when it is valid for the account the
    identifier names, the account's wait does not apply, the cookie's own does."""
    identifier = identifier.strip()
    column = "email" if "@" in identifier else "username"
    account = login_throttle_key(keyring, identifier)
    if await devices.trusted(conn, device, user_sql=f"lower(u.{column}) = lower(%s)",
                             user_args=(identifier,)):
        account = device.throttle_key
    await ratelimit.guard(conn, failures, account)
    async with db.transaction(conn) as cur:
        user = await db.fetchone(
            cur,
            f"SELECT {_LOGIN_COLUMNS} FROM users WHERE lower({column}) = lower(%s) FOR NO KEY UPDATE",
            (identifier,),
        )
        ok = await hasher.verify(password[:MAX_LENGTH], user and user["password_hash"])
        ok = ok and user["disabled_at"] is None  # a disabled account fails like a wrong password
        if ok and user["totp_enabled"]:
            if not totp_code:
                # The password was right: ask for the second factor (the spec's fixed value).
                await ratelimit.passed(cur, account)
                raise SecondFactorRequired(user["id"])
            ok = await totp.consume_code(cur, keyring, user, totp_code.strip())
        if ok:
            await ratelimit.passed(cur, account)
            return user, await _open_session(cur, client, signer, user)
    await _login_failed(conn, client, user, failures, account)


async def complete_login(conn: db.Connection, client: Actor, keyring: Keyring,
                         signer: sessions.JwtSigner, *, user_id: uuid.UUID, totp_code: str,
                         failures: ratelimit.Charge | None = None,
                         device: devices.Device | None = None) -> tuple[dict, str]:
    """The second step of a sign-in that answered `SecondFactorRequired(user_id)`: the code.

    The caller proves the first step with something only this server could have issued (the
    dashboard signs the user id with a five-minute lifetime); the password is not asked again.
    A valid device cookie for the account spares the wait as in `login`."""
    account = f"2fa:{user_id}"
    if await devices.trusted(conn, device, user_sql="u.id = %s", user_args=(user_id,)):
        account = device.throttle_key
    await ratelimit.guard(conn, failures, account)
    async with db.transaction(conn) as cur:
        user = await db.fetchone(cur, f"SELECT {_LOGIN_COLUMNS} FROM users WHERE id = %s FOR NO KEY UPDATE",
                                 (user_id,))
        problem = CODE_FAILED
        if user is not None and user["totp_enabled"] and user["disabled_at"] is None:
            problem = await totp.code_problem(cur, keyring, user, totp_code.strip())
            if problem is None:
                await ratelimit.passed(cur, account)
                return user, await _open_session(cur, client, signer, user)
    # What was wrong with the code (its form, wrong, or already used): the password was right.
    await _login_failed(conn, client, user, failures, account, message=problem)


_LOGIN_COLUMNS = ("id, email, username, name, password_hash, totp_enabled, totp_key_id, "
                  "totp_nonce, totp_ciphertext, totp_last_step, disabled_at, device_generation")


async def _open_session(cur: db.Cursor, client: Actor, signer: sessions.JwtSigner, user: Mapping) -> str:
    token = await sessions.issue(cur, signer, user["id"])
    actor = client.as_user(user["id"], user["email"], via="jwt")
    await audit.record(cur, actor, "login", "user", resource_id=user["id"])
    return token


def login_throttle_key(keyring: Keyring, identifier: str) -> str:
    """The throttle's key for a login identifier: a keyed hash, since an identifier is sometimes
    a mistyped password; case-insensitive like the lookup."""
    return "login:" + keyring.token_hash(identifier.strip().lower()).hex()


async def _login_failed(conn: db.Connection, client: Actor, user: Mapping | None,
                        failures: ratelimit.Charge | None, account: str,
                        message: str = LOGIN_FAILED) -> NoReturn:
    await ratelimit.failed(conn, failures, account)
    async with db.transaction(conn) as cur:
        actor = client.as_user(user["id"], user["email"]) if user else client
        await audit.record(cur, actor, "login_failed", "user",
                           resource_id=user["id"] if user else None)
    raise Unauthorized(message)


async def profile(conn: db.Connection, actor: Actor) -> dict:
    """The actor's account as GET /me shows it."""
    async with db.cursor(conn) as cur:
        row = await db.fetchone(
            cur,
            """SELECT u.id, u.email, u.username, u.name, u.is_admin, u.email_verified, u.totp_enabled,
                      u.delete_after, u.language,
                      EXISTS (SELECT 1 FROM team_members m WHERE m.user_id = u.id) AS has_team
               FROM users u WHERE u.id = %s""",
            (actor.user_id,),
        )
    if row is None:  # the account is gone (a credential cached a moment ago)
        raise Unauthorized(sessions.SESSION_INVALID)
    return row
