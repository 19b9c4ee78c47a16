"""CLI sign-in routes (RFC 8628, `accounts.device_flow`): the terminal's code and its polls, and
the token a terminal holds asking about itself (`cvsm whoami`) or revoking itself (`cvsm
logout`). The page that approves a code is `web.pages.device`."""

from __future__ import annotations

from aiohttp import web

from ..accounts import device_flow, ratelimit, tokens
from ..core.inputs import field
from .request import actor, app_url, connection, read_json
from .schema import INT, STRING, UUID, answer, nullable, obj, one_line, ref
from .state import KEYRING, SETTINGS


async def device_code(request: web.Request) -> web.Response:
    body = await read_json(request, optional=True)
    hostname = field(body, "hostname", str, required=False)
    async with connection(request) as conn:
        answer_ = await device_flow.start(conn, actor(request), request.app[KEYRING],
                                         app_url=app_url(request), hostname=hostname)
    return web.json_response(answer_, headers={"Cache-Control": "no-store"})


async def device_token(request: web.Request) -> web.Response:
    body = await read_json(request)
    code = field(body, "device_code", str)
    grant_type = field(body, "grant_type", str, required=False)
    client = actor(request)
    failures = ratelimit.Charge.failed_auth(request.app[SETTINGS], client.ip)
    async with connection(request) as conn:
        row, token, team = await device_flow.poll(conn, client, request.app[KEYRING], code,
                                                  grant_type=grant_type, failures=failures,
                                                  token_days=request.app[SETTINGS].device_token_days)
    return web.json_response({"access_token": token, "token_type": "Bearer",
                              "api_token": tokens.token_json(row), "team": team},
                             headers={"Cache-Control": "no-store"})


async def current_token(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        row, team = await device_flow.current_token(conn, actor(request))
    return web.json_response({"api_token": tokens.token_json(row),
                              "team": ({"id": str(team["id"]), "slug": team["slug"],
                                        "name": team["name"]} if team else None)})


async def revoke_current_token(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        await device_flow.revoke_current_token(conn, actor(request))
    return web.json_response({"ok": True})


# --- OpenAPI ---------------------------------------------------------------------------------

TEAM = obj({"id": UUID, "slug": STRING, "name": STRING}, ("id", "slug", "name"))
_ERRORS = ", ".join(f"`{e}`" for e in (
    device_flow.AUTHORIZATION_PENDING, device_flow.SLOW_DOWN, device_flow.ACCESS_DENIED,
    device_flow.EXPIRED_TOKEN, device_flow.INVALID_GRANT, device_flow.UNSUPPORTED_GRANT_TYPE))

OPENAPI = {
    "device_code": {
        "summary": "Start a CLI sign-in (RFC 8628 device authorization request).",
        "description": "No credential. Show `user_code` and `verification_uri` to the person; "
                       "a signed-in member confirms the code at `{app_url}/device` (or opens "
                       "`verification_uri_complete`) and picks the team. Then poll "
                       "`POST /auth/device/token` every `interval` seconds until `expires_in` "
                       "passes. `hostname` names the machine on the confirmation page and in "
                       "the token's name. Counted against the `auth` limit per address.",
        "tags": ["accounts"],
        "body": obj({"hostname": one_line(device_flow.HOSTNAME_MAX)}),
        "body_required": False,
        "responses": {200: answer({
            "device_code": {"type": "string", "description": "Secret: only the terminal "
                            "keeps it."},
            "user_code": {"type": "string", "pattern": "^[BCDFGHJKLMNPQRSTVWXZ]{4}-"
                          "[BCDFGHJKLMNPQRSTVWXZ]{4}$"},
            "verification_uri": {"type": "string", "format": "uri"},
            "verification_uri_complete": {"type": "string", "format": "uri"},
            "expires_in": INT, "interval": INT,
        })},
    },
    "device_token": {
        "summary": "Poll a CLI sign-in (RFC 8628 device access token request).",
        "description": "Until the code is approved, a 400 whose `error` is one of RFC 8628's "
                       f"values: {_ERRORS} (`slow_down`: polled before `interval` seconds "
                       "passed; add 5 seconds to the interval). Once approved, the new API "
                       "token, bound to the team the approver chose and never wider than the "
                       "approver's role there, is answered once; the device code is spent. "
                       "Counted against the `public` limit per address (a poll every 5 "
                       "seconds).",
        "tags": ["accounts"],
        "body": obj({"device_code": STRING,
                     "grant_type": {"const": device_flow.GRANT_TYPE}}, ("device_code",)),
        "responses": {200: answer({
            "access_token": {"type": "string", "pattern": "^cvsm_[0-9a-f]{64}$"},
            "token_type": {"const": "Bearer"},
            "api_token": ref("ApiToken"),
            "team": TEAM,
        })},
    },
    "current_token": {
        "summary": "The API token this request is made with, and its team (`cvsm whoami`).",
        "description": "API tokens only (a session JWT is a 403).",
        "tags": ["tokens"],
        "responses": {200: answer({"api_token": ref("ApiToken"), "team": nullable(TEAM)})},
    },
    "revoke_current_token": {
        "summary": "Revoke the API token this request is made with (`cvsm logout`).",
        "description": "API tokens only (a session JWT is a 403); the token stops working at "
                       "once, in every server process.",
        "tags": ["tokens"],
        "responses": {200: answer({"ok": {"const": True}})},
    },
}
