"""Account routes: register, login, email verification, password reset, /me, logout-all,
two-factor and API tokens."""

from __future__ import annotations

import uuid

from aiohttp import web

from ..accounts import devices, email_verification, password_reset
from ..accounts import ratelimit
from ..accounts import sessions, tokens, totp, users
from ..core.errors import BadRequest, Unauthorized
from ..core.inputs import field, string_list
from ..core.timeutil import iso
from .schema import (BOOL, E2E_AUTH, E2E_PUBLIC_KEY, E2E_WRAP, ENVIRONMENT, OK, PASSWORD, STRING,
                     TEAM_REF_PATTERN, TIME, USERNAME_PATTERN, UUID, answer, nullable, obj,
                     one_line, ref)
from .middleware import bearer
from .request import actor, app_url, connection, path_id, read_json
from .state import CREDENTIALS, KEYRING, PASSWORDS, POOL, SETTINGS, SIGNER



async def register(request: web.Request) -> web.Response:
    body = await read_json(request)
    fields = {
        "email": field(body, "email", str),
        "username": field(body, "username", str),
        "password": field(body, "password", str),
        "name": field(body, "name", str),
        "newsletter_opt_in": field(body, "newsletter_opt_in", bool, required=False, default=False),
    }
    async with connection(request) as conn:
        user, token = await users.register(conn, request.app[PASSWORDS], request.app[SIGNER],
                                           keyring=request.app[KEYRING], app_url=app_url(request),
                                           **fields)
    return web.json_response({"token": token, "user": users.user_json(user)}, status=201)


async def login(request: web.Request) -> web.Response:
    body = await read_json(request)
    identifier = field(body, "identifier", str)  # the 0.3 line's `email` field is gone (0.4.0)
    password = field(body, "password", str)
    code = field(body, "totp_code", str, required=False)
    client = actor(request)
    app = request.app
    failures = ratelimit.Charge.failed_auth(app[SETTINGS], client.ip)
    async with connection(request) as conn:
        # A dashboard's device cookie, when the client sends one, spares the account's wait
        # here too; the API sets none (its clients keep no cookies).
        device = devices.read(app[KEYRING], request.cookies.get(devices.COOKIE))
        user, token = await users.login(conn, client, app[PASSWORDS], app[KEYRING], app[SIGNER],
                                        identifier=identifier, password=password,
                                        totp_code=code, failures=failures, device=device)
    return web.json_response({"token": token, "user": users.user_json(user)})


async def request_verification(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        sent = await email_verification.request_link(conn, actor(request), request.app[KEYRING],
                                                     app_url(request))
    return web.json_response({"ok": True, "sent": sent}, status=202)


async def verify_email(request: web.Request) -> web.Response:
    body = await read_json(request)
    token = field(body, "token", str)
    failures = ratelimit.Charge.failed_auth(request.app[SETTINGS], actor(request).ip)
    async with connection(request) as conn:
        await email_verification.verify(conn, actor(request), request.app[KEYRING], token,
                                        failures=failures, keep_session=await _own_session(request))
    return web.json_response({"ok": True, "email_verified": True})


async def _own_session(request: web.Request) -> uuid.UUID | None:
    """The session of an optional `Authorization: Bearer <JWT>` sent with a mail-link token: the
    one session that verifying the address does not end (the caller holds the account and its
    mail). Anything else is ignored: the route needs no credential."""
    if "Authorization" not in request.headers:
        return None
    app = request.app
    try:
        who = await sessions.authenticate(app[POOL], app[CREDENTIALS], app[SIGNER],
                                          bearer(request), actor(request))
    except Unauthorized:  # a malformed header or a credential that is not a live session
        return None
    return who.session_id


async def request_password_reset(request: web.Request) -> web.Response:
    body = await read_json(request)
    email = field(body, "email", str)
    async with connection(request) as conn:
        await password_reset.request_link(conn, actor(request), request.app[KEYRING], email,
                                          app_url(request))
    return web.json_response({"ok": True}, status=202)


async def reset_password(request: web.Request) -> web.Response:
    body = await read_json(request)
    token, password = field(body, "token", str), field(body, "password", str)
    failures = ratelimit.Charge.failed_auth(request.app[SETTINGS], actor(request).ip)
    async with connection(request) as conn:
        await password_reset.reset(conn, actor(request), request.app[PASSWORDS],
                                   request.app[KEYRING], token, password, failures=failures)
    return web.json_response({"ok": True})


async def me(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        row = await users.profile(conn, actor(request))
    return web.json_response(_profile_json(row))


async def update_me(request: web.Request) -> web.Response:
    """`PATCH /me {language}`: the language of the account's pages and mails."""
    body = await read_json(request)
    if "language" not in body:
        raise BadRequest(users.LANGUAGE_INVALID)
    async with connection(request) as conn:
        row = await users.set_language(conn, actor(request), body["language"])
    return web.json_response(_profile_json(row))


def _profile_json(row) -> dict:
    return {
        "user_id": str(row["id"]),
        "email": row["email"],
        "username": row["username"],
        "name": row["name"],
        "is_admin": row["is_admin"],
        "email_verified": row["email_verified"],
        "has_team": row["has_team"],
        "totp_enabled": row["totp_enabled"],
        "delete_after": iso(row["delete_after"]),
        "language": row["language"],
    }


async def logout_all(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        await sessions.logout_all(conn, actor(request))
    return web.json_response({"ok": True})


async def totp_setup(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        secret, url = await totp.setup(conn, actor(request), request.app[KEYRING])
    return web.json_response({"secret": secret, "otpauth_url": url})


async def totp_enable(request: web.Request) -> web.Response:
    sessions.require_jwt(actor(request))
    body = await read_json(request)
    code = field(body, "code", str)
    async with connection(request) as conn:
        await totp.enable(conn, actor(request), request.app[KEYRING], code)
    return web.json_response({"ok": True, "totp_enabled": True})


async def totp_disable(request: web.Request) -> web.Response:
    sessions.require_jwt(actor(request))
    body = await read_json(request)
    code, password = field(body, "code", str), field(body, "password", str)
    async with connection(request) as conn:
        await totp.disable(conn, actor(request), request.app[KEYRING], request.app[PASSWORDS],
                           code, password)
    return web.json_response({"ok": True, "totp_enabled": False})


async def list_tokens(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        rows = await tokens.list_tokens(conn, actor(request))
    return web.json_response({"tokens": [tokens.token_json(r) for r in rows]})


async def create_token(request: web.Request) -> web.Response:
    sessions.require_jwt(actor(request))
    body = await read_json(request)
    name = field(body, "name", str)
    expires_at = field(body, "expires_at", str, required=False)
    allowed_ips = string_list(body, "allowed_ips", required=False, max_items=100)
    team = field(body, "team_id", str, required=False)
    environments = (string_list(body, "environments", max_items=3)
                    if body.get("environments") is not None else None)
    read_only = field(body, "read_only", bool, required=False, default=False)
    e2e_key = field(body, "e2e", dict, required=False)
    async with connection(request) as conn:
        row, token = await tokens.create_token(conn, actor(request), request.app[KEYRING],
                                               name=name, expires_at=expires_at,
                                               allowed_ips=allowed_ips, team=team,
                                               environments=environments, read_only=read_only,
                                               e2e_key=e2e_key)
    return web.json_response({"api_token": tokens.token_json(row), "token": token}, status=201)


async def revoke_token(request: web.Request) -> web.Response:
    token_id = path_id(request, "token_id")
    async with connection(request) as conn:
        await tokens.revoke_token(conn, actor(request), token_id)
    return web.json_response({"ok": True})


# --- OpenAPI: the operations above (`web.schema`), for `web.apidoc` ------------------------------

_AUTH_ANSWER = answer({"token": {"type": "string", "description": "A session JWT."},
                       "user": ref("User")})

_LANGUAGE = {**nullable({"type": "string", "enum": ["id", "en"]}),
             "description": "The pages' and mails' language the account chose (0.5); null: "
                            "none chosen."}

OPENAPI = {
    "register": {
        "summary": "Create an account and its first session.",
        "tags": ["accounts"],
        "body": obj({
            "email": {"type": "string", "maxLength": 254, "format": "email"},
            "username": {"type": "string", "pattern": USERNAME_PATTERN},
            "password": PASSWORD,
            "name": one_line(200),
            "newsletter_opt_in": {"type": "boolean", "default": False},
        }, ("email", "username", "password", "name")),
        "responses": {201: _AUTH_ANSWER},
        "errors": [409],
    },
    "login": {
        "summary": "Start a session with an email or username and the password.",
        "description": "With two-factor authentication on, `totp_code` is required (401 "
                       "`2fa_required` without it). The 0.3 line's `email` in place of "
                       "`identifier` is gone since 0.4.0.",
        "tags": ["accounts"],
        "body": obj({
            "identifier": {"type": "string", "description": "Email or username."},
            "password": {"type": "string"},
            "totp_code": {"type": "string"},
        }, ("identifier", "password")),
        "responses": {200: _AUTH_ANSWER},
        "errors": [401],
    },
    "request_verification": {
        "summary": "Mail the signed-in user a new email-verification link (session JWT only).",
        "description": "`sent` is false when the address is already verified (no mail). At most "
                       "3 requests an hour per user (429).",
        "tags": ["accounts"],
        "responses": {202: answer({"ok": {"const": True}, "sent": BOOL})},
        "errors": [403, 429],
    },
    "verify_email": {
        "summary": "Verify the account's email with the token from the mailed link (single use, "
                   "48 hours).",
        "description": "The first verification of an address ends every session and revokes "
                       "every API token of the account made before it (someone who registered "
                       "another person's address first keeps nothing). Send the account's own "
                       "session JWT as `Authorization: Bearer` to keep that one session; any "
                       "other credential is ignored.",
        "tags": ["accounts"],
        "body": obj({"token": STRING}, ("token",)),
        "responses": {200: answer({"ok": {"const": True}, "email_verified": {"const": True}})},
    },
    "request_password_reset": {
        "summary": "Mail a password-reset link (single use, 1 hour) if the email has an account.",
        "description": "Always 202 with the same body, in the same time, whether or not the "
                       "account exists.",
        "tags": ["accounts"],
        "body": obj({"email": STRING}, ("email",)),
        "responses": {202: OK},
    },
    "reset_password": {
        "summary": "Set a new password with the token from the mailed link; every session of "
                   "the account is logged out.",
        "tags": ["accounts"],
        "body": obj({"token": STRING, "password": PASSWORD}, ("token", "password")),
        "responses": {200: OK},
    },
    "me": {
        "summary": "The caller's profile.",
        "tags": ["accounts"],
        "responses": {200: answer({
            "user_id": UUID, "email": STRING, "username": STRING, "name": STRING,
            "is_admin": BOOL, "email_verified": BOOL, "has_team": BOOL, "totp_enabled": BOOL,
            "delete_after": {**nullable(TIME), "description": "When a pending account deletion "
                             "takes effect (`POST /me/delete`); null when none is pending."},
            "language": _LANGUAGE,
        })},
    },
    "update_me": {
        "summary": "Choose the language of the caller's dashboard pages and mails (0.5).",
        "description": "`id` (Indonesian) or `en` (English); null clears the choice: pages then "
                       "follow the browser's `Accept-Language`, else the server's "
                       "`CVSM_DEFAULT_LANGUAGE`. API error bodies stay Indonesian whatever the "
                       "choice. Answers the profile as `GET /me` does.",
        "tags": ["accounts"],
        "body": obj({"language": _LANGUAGE}, ("language",)),
        "responses": {200: answer({
            "user_id": UUID, "email": STRING, "username": STRING, "name": STRING,
            "is_admin": BOOL, "email_verified": BOOL, "has_team": BOOL, "totp_enabled": BOOL,
            "delete_after": nullable(TIME), "language": _LANGUAGE,
        })},
    },
    "logout_all": {
        "summary": "Revoke every session of the caller.",
        "tags": ["accounts"],
        "responses": {200: OK},
    },
    "totp_setup": {
        "summary": "Start two-factor set-up: a new TOTP secret (not yet enabled).",
        "tags": ["accounts"],
        "responses": {200: answer({"secret": STRING, "otpauth_url": STRING})},
        "errors": [409],
    },
    "totp_enable": {
        "summary": "Enable two-factor authentication with a current code (session JWT only).",
        "tags": ["accounts"],
        "body": obj({"code": STRING}, ("code",)),
        "responses": {200: answer({"ok": {"const": True}, "totp_enabled": {"const": True}})},
        "errors": [409],
    },
    "totp_disable": {
        "summary": "Disable two-factor authentication (session JWT only).",
        "tags": ["accounts"],
        "body": obj({"code": STRING, "password": STRING}, ("code", "password")),
        "responses": {200: answer({"ok": {"const": True}, "totp_enabled": {"const": False}})},
        "errors": [409],
    },
    "list_tokens": {
        "summary": "The caller's API tokens that are not revoked (session JWT only).",
        "tags": ["tokens"],
        "responses": {200: answer({"tokens": {"type": "array", "items": ref("ApiToken")}})},
    },
    "create_token": {
        "summary": "Create an API token (session JWT only); the token is shown once.",
        "tags": ["tokens"],
        "body": obj({
            "name": one_line(100),
            "expires_at": {"type": "string", "format": "date-time",
                           "description": "In the future."},
            "allowed_ips": {"type": "array", "maxItems": 100,
                            "items": {"type": "string", "description": "An IP or CIDR."}},
            "team_id": {"type": "string", "pattern": TEAM_REF_PATTERN,
                        "description": "Bind the token to one team (id or slug)."},
            "environments": {"type": "array", "items": ENVIRONMENT, "minItems": 1, "maxItems": 3,
                             "description": "Limit the token to these environments."},
            "read_only": {"type": "boolean", "default": False},
            "e2e": obj({"public_key": E2E_PUBLIC_KEY, "wrapped_key": E2E_WRAP,
                        "auth": E2E_AUTH,
                        "key_version": {"type": "integer", "minimum": 1,
                                        "maximum": 2**31 - 1,
                                        "description": "The key version wrapped (409 when it is "
                                                       "no longer the current one)."}},
                       ("public_key", "wrapped_key"),
                       description="Required for a token bound to an end-to-end team (and only "
                                   "there): the token's X25519 public key, the team's current "
                                   "key wrapped to it by a creator who holds it, and the "
                                   "recipient's `auth` (format 2). The client appends the "
                                   "private key and its pin to the token it shows "
                                   "(docs/e2e.md)."),
        }, ("name",)),
        "responses": {201: answer({"api_token": ref("ApiToken"),
                                   "token": {"type": "string", "pattern": "^cvsm_[0-9a-f]{64}$"}})},
        "errors": (404,),  # a `team_id` that is not one of the caller's teams
    },
    "revoke_token": {
        "summary": "Revoke one of the caller's API tokens.",
        "tags": ["tokens"],
        "responses": {200: OK},
    },
}
