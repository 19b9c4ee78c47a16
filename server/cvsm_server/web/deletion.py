"""Account deletion routes: request it (a 7-day window) and cancel it; see `deletion`."""

from __future__ import annotations

from aiohttp import web

from ..accounts import deletion
from ..accounts import ratelimit
from ..accounts import sessions
from ..core.inputs import field
from ..core.timeutil import iso
from .schema import OK, TIME, answer, obj
from .request import actor, app_url, connection, read_json
from .state import KEYRING, PASSWORDS, SETTINGS



async def request_deletion(request: web.Request) -> web.Response:
    client = sessions.require_jwt(actor(request))
    body = await read_json(request)
    password = field(body, "password", str, required=False)
    code = field(body, "totp_code", str, required=False)
    confirm = field(body, "confirm", str, required=False)
    app = request.app
    failures = ratelimit.Charge.failed_auth(app[SETTINGS], client.ip)
    async with connection(request) as conn:
        delete_after = await deletion.request_deletion(
            conn, client, app[PASSWORDS], app[KEYRING], password, code, app_url(request),
            confirm=confirm, failures=failures)
    return web.json_response({"delete_after": iso(delete_after)}, status=202)


async def cancel_deletion(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        await deletion.cancel_deletion(conn, actor(request), request.app[KEYRING], app_url(request))
    return web.json_response({"ok": True})


# --- OpenAPI: the operations above (`web.schema`), for `web.apidoc` ------------------------------

OPENAPI = {
    "request_deletion": {
        "summary": "Schedule the caller's account for deletion in 7 days (session JWT only).",
        "description": "The account, its sessions and API tokens, and the teams where the caller "
                       "is the only Owner (with their secrets) are hard-deleted once the window "
                       "ends; until then everything keeps working and `POST /me/delete/cancel` "
                       "undoes it. Confirm with `password` (and `totp_code` with two-factor on); "
                       "an account without a password (made through an identity provider) "
                       "types its own email as `confirm` instead. A wrong password, email or "
                       "code is 401; a deletion already pending is 409. A mail says when, and "
                       "how to cancel.",
        "tags": ["accounts"],
        "body": obj({
            "password": {"type": "string", "minLength": 1},
            "totp_code": {"type": "string", "description": "Needed with two-factor on."},
            "confirm": {"type": "string", "minLength": 1,
                        "description": "The account's email, for an account without a password."},
        }, anyOf=[{"required": ["password"]}, {"required": ["confirm"]}]),
        "responses": {202: answer({"delete_after": TIME})},
        "errors": [401, 409],
    },
    "cancel_deletion": {
        "summary": "Cancel the caller's pending account deletion (session JWT only).",
        "description": "409 when no deletion is pending. A mail confirms it.",
        "tags": ["accounts"],
        "responses": {200: OK},
        "errors": [409],
    },
}
