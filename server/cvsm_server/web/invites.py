"""Team invitation routes: invite by email, list and revoke pending invitations, accept."""

from __future__ import annotations

from aiohttp import web

from ..teams import invites, service as teams
from ..core.inputs import field
from .schema import OK, ROLE, STRING, TIME, UUID, answer, nullable, obj, ref
from .request import actor, app_url, connection, path_id, read_json, team_of
from .state import KEYRING



async def create_invite(request: web.Request) -> web.Response:
    body = await read_json(request)
    email, role = field(body, "email", str), field(body, "role", str)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row = await invites.create_invite(conn, actor(request), request.app[KEYRING], team_id,
                                          email, role, app_url(request))
    return web.json_response({"invite": invites.invite_json(row)}, status=201)


async def list_invites(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        rows = await invites.list_invites(conn, actor(request), team_id)
    return web.json_response({"invites": [invites.invite_json(r) for r in rows]})


async def revoke_invite(request: web.Request) -> web.Response:
    invite_id = path_id(request, "invite_id")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        await invites.revoke_invite(conn, actor(request), team_id, invite_id)
    return web.json_response({"ok": True})


async def accept_invite(request: web.Request) -> web.Response:
    body = await read_json(request)
    token = field(body, "token", str)
    async with connection(request) as conn:
        team = await invites.accept_invite(conn, actor(request), request.app[KEYRING], token)
    return web.json_response({"team": teams.team_json(team, team["role"])})


# --- OpenAPI: the operations above (`web.schema`), for `web.apidoc` ------------------------------

INVITE = answer({"id": UUID, "team_id": UUID, "email": STRING, "role": ROLE,
                 "invited_by": {**nullable(STRING),
                                "description": "The inviter's email (null once deleted)."},
                 "expires_at": TIME, "created_at": TIME})

OPENAPI = {
    "create_invite": {
        "summary": "Invite an email address to the team and mail it the link (Admin; Owner "
                   "for Admin/Owner).",
        "description": "The answer is the same whether or not an account exists for the "
                       "address. Pending invitations count toward `max_members` (403 when full).",
        "tags": ["invites"],
        "body": obj({"email": {"type": "string", "maxLength": 254, "format": "email"},
                     "role": ROLE}, ("email", "role")),
        "responses": {201: answer({"invite": INVITE})},
        "errors": [409],
    },
    "list_invites": {
        "summary": "The team's pending invitations (Admin; never their tokens).",
        "tags": ["invites"],
        "responses": {200: answer({"invites": {"type": "array", "items": INVITE}})},
    },
    "revoke_invite": {
        "summary": "Revoke a pending invitation (Admin; Owner for Admin/Owner invitations).",
        "tags": ["invites"],
        "responses": {200: OK},
    },
    "accept_invite": {
        "summary": "Join the team of an invitation (session JWT of the invited address).",
        "description": "Every problem with the token (unknown, used, revoked, expired, another "
                       "account, already a member) is the same 400. Marks the email verified.",
        "tags": ["invites"],
        "body": obj({"token": STRING}, ("token",)),
        "responses": {200: answer({"team": ref("Team")})},
    },
}
