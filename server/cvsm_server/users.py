"""Accounts: register, login (password, then TOTP when enabled), /me, and logout-all.

Login failures answer one generic 401 whatever went wrong (unknown user, wrong password, wrong
code), and an unknown user still costs a full password-hash comparison.
"""

from __future__ import annotations

import re

from aiohttp import web

from . import audit, auth, db, totp
from .errors import BadRequest, Conflict, Unauthorized
from .inputs import field, read_json
from .passwords import MAX_LENGTH, MIN_LENGTH
from .state import PASSWORDS, POOL, Principal, principal
from .tokens import require_jwt

USERNAME_RE = re.compile(r"[A-Za-z0-9_]{3,40}\Z")
EMAIL_RE = re.compile(r"[^@\s]{1,64}@[^@\s]+\.[^@\s]+\Z")
RESERVED_USERNAMES = frozenset(
    "admin administrator root system support api help security staff owner me null undefined "
    "settings login logout register auth public health www".split()
)
LOGIN_FAILED = "Email/username atau kata sandi salah"


def validate_username(username: str) -> str:
    if not USERNAME_RE.match(username):
        raise BadRequest("Username harus 3-40 karakter: huruf, angka, dan garis bawah saja")
    if username.lower() in RESERVED_USERNAMES:
        raise BadRequest("Username ini tidak dapat digunakan")
    return username


def _user_json(row: dict) -> dict:
    return {"id": str(row["id"]), "email": row["email"], "username": row["username"],
            "name": row["name"]}


async def register(request: web.Request) -> web.Response:
    body = await read_json(request, max_bytes=16 * 1024)
    email = field(body, "email", str).strip()
    username = validate_username(field(body, "username", str).strip())
    password = field(body, "password", str)
    name = field(body, "name", str).strip()
    newsletter = field(body, "newsletter_opt_in", bool, required=False, default=False)
    if len(email) > 254 or not EMAIL_RE.match(email):
        raise BadRequest("Alamat email tidak valid")
    if not MIN_LENGTH <= len(password) <= MAX_LENGTH:
        raise BadRequest(f"Kata sandi minimal {MIN_LENGTH} karakter")
    if not 1 <= len(name) <= 200:
        raise BadRequest("Kolom 'name' harus 1 sampai 200 karakter")
    password_hash = await request.app[PASSWORDS].hash(password)
    async with db.transaction(request.app[POOL]) as cur:
        clash = await db.fetchone(
            cur,
            """SELECT lower(email) = lower(%s) AS email_taken FROM users
               WHERE lower(email) = lower(%s) OR lower(username) = lower(%s)
               ORDER BY 1 DESC LIMIT 1""",
            (email, email, username),
        )
        if clash is not None:
            raise Conflict("Email sudah terdaftar" if clash["email_taken"] else "Username sudah digunakan")
        try:
            user = await db.fetchone(
                cur,
                """INSERT INTO users (email, username, name, password_hash, newsletter_opt_in)
                   VALUES (%s, %s, %s, %s, %s) RETURNING id, email, username, name""",
                (email, username, name, password_hash, newsletter),
            )
        except Exception as exc:
            if db.is_unique_violation(exc):
                raise Conflict("Email atau username sudah terdaftar") from None
            raise
        token = await auth.issue_jwt(cur, request.app, user["id"])
    return web.json_response({"token": token, "user": _user_json(user)}, status=201)


async def login(request: web.Request) -> web.Response:
    body = await read_json(request, max_bytes=16 * 1024)
    identifier = field(body, "identifier", str, required=False)
    if identifier is None:
        identifier = field(body, "email", str, required=False)  # legacy until v0.4
    if identifier is None:
        raise BadRequest("Kolom 'identifier' wajib diisi")
    password = field(body, "password", str)
    code = field(body, "totp_code", str, required=False)
    identifier = identifier.strip()
    column = "email" if "@" in identifier else "username"
    pool = request.app[POOL]
    async with db.transaction(pool) as cur:
        user = await db.fetchone(
            cur,
            f"""SELECT id, email, username, name, password_hash, totp_enabled, totp_key_id,
                       totp_nonce, totp_ciphertext, totp_last_step
                FROM users WHERE lower({column}) = lower(%s) FOR UPDATE""",
            (identifier,),
        )
        ok = await request.app[PASSWORDS].verify(password[:MAX_LENGTH], user and user["password_hash"])
        if ok and user["totp_enabled"]:
            if not code:
                # The password was right: ask for the second factor (the spec's fixed value).
                raise Unauthorized("2fa_required")
            ok = await totp.consume_code(cur, request.app, user, code.strip())
        if ok:
            token = await auth.issue_jwt(cur, request.app, user["id"])
            actor = Principal(user_id=user["id"], email=user["email"], via="jwt")
            await audit.record(cur, request, "login", "user", resource_id=user["id"], actor=actor)
    if not ok:
        # Audited for unknown accounts too (no actor, and never the identifier, which is sometimes
        # a mistyped password), so both failures cost the same work.
        async with db.transaction(pool) as cur:
            actor = Principal(user_id=user["id"], email=user["email"], via="jwt") if user else None
            await audit.record(cur, request, "login_failed", "user",
                               resource_id=user["id"] if user else None, actor=actor)
        raise Unauthorized(LOGIN_FAILED)
    return web.json_response({"token": token, "user": _user_json(user)})


async def me(request: web.Request) -> web.Response:
    who = principal(request)
    async with db.cursor(request.app[POOL]) as cur:
        row = await db.fetchone(
            cur,
            """SELECT u.id, u.email, u.username, u.name, u.is_admin, u.email_verified, u.totp_enabled,
                      EXISTS (SELECT 1 FROM team_members m WHERE m.user_id = u.id) AS has_team
               FROM users u WHERE u.id = %s""",
            (who.user_id,),
        )
    return web.json_response({
        "user_id": str(row["id"]),
        "email": row["email"],
        "username": row["username"],
        "name": row["name"],
        "is_admin": row["is_admin"],
        "email_verified": row["email_verified"],
        "has_team": row["has_team"],
        "totp_enabled": row["totp_enabled"],
    })


async def logout_all(request: web.Request) -> web.Response:
    """POST /me/logout-all — every JWT of the user issued before this call stops working."""
    who = require_jwt(request)
    async with db.transaction(request.app[POOL]) as cur:
        await cur.execute(
            "UPDATE sessions SET revoked_at = now() WHERE user_id = %s AND revoked_at IS NULL",
            (who.user_id,),
        )
        revoked = cur.rowcount
        await audit.record(cur, request, "logout_all", "user", resource_id=who.user_id,
                           metadata={"sessions": revoked})
    return web.json_response({"ok": True})


def setup_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/auth/register", register)
    app.router.add_post("/api/v1/auth/login", login)
    app.router.add_get("/api/v1/me", me)
    app.router.add_post("/api/v1/me/logout-all", logout_all)
