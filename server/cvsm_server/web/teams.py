"""Team, member and audit-log routes: parse, call `teams` / `audit`, shape the answer."""

from __future__ import annotations

from aiohttp import web

from ..audit import log as audit
from ..secrets import inputs as secret_inputs
from ..teams import service as teams
from ..core.inputs import field
from .schema import (E2E_AUTH, E2E_WRAP, INT, OK, ROLE, SLUG_PATTERN, STRING, UUID, answer, nullable,
                     obj, one_line, query, ref)
from .request import actor, connection, path_id, query_int, read_json, team_of
from .state import SETTINGS



async def list_teams(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        rows = await teams.list_teams(conn, actor(request))
    return web.json_response({"teams": [teams.team_json(r, r["role"]) for r in rows]})


async def create_team(request: web.Request) -> web.Response:
    body = await read_json(request)
    name, slug = field(body, "name", str), field(body, "slug", str)
    e2e = field(body, "e2e", dict, required=False)
    wrapped_key = auth = None
    if e2e is not None:
        wrapped_key = field(e2e, "wrapped_key", str)
        auth = field(e2e, "auth", str, required=False)
    team_id = secret_inputs.check_id(field(body, "id", str, required=False))
    async with connection(request) as conn:
        team = await teams.create_team(conn, actor(request), name, slug,
                                       configured_plan=request.app[SETTINGS].default_plan,
                                       e2e_wrapped_key=wrapped_key, e2e_auth=auth,
                                       team_id=team_id)
    return web.json_response({"team": teams.team_json(team, team["role"])}, status=201)


async def get_team(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        team = await teams.get_team(conn, actor(request), team_id)
    return web.json_response({"team": teams.team_json(team, team["role"])})


async def delete_team(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        await teams.delete_team(conn, actor(request), team_id)
    return web.json_response({"ok": True})


async def list_members(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        rows = await teams.list_members(conn, actor(request), team_id)
    return web.json_response({"members": [teams.member_json(r) for r in rows]})


async def add_member(request: web.Request) -> web.Response:
    body = await read_json(request)
    identifier, role = field(body, "identifier", str), field(body, "role", str)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row = await teams.add_member(conn, actor(request), team_id, identifier, role)
    return web.json_response({"member": teams.member_json(row)}, status=201)


async def update_member(request: web.Request) -> web.Response:
    user_id = path_id(request, "user_id")
    body = await read_json(request)
    role = field(body, "role", str)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row = await teams.update_member(conn, actor(request), team_id, user_id, role)
    return web.json_response({"member": teams.member_json(row)})


async def remove_member(request: web.Request) -> web.Response:
    user_id = path_id(request, "user_id")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        await teams.remove_member(conn, actor(request), team_id, user_id)
    return web.json_response({"ok": True})


async def list_audit(request: web.Request) -> web.Response:
    limit = query_int(request, "limit", default=audit.DEFAULT_LIMIT, minimum=1,
                      maximum=audit.MAX_LIMIT)
    offset = query_int(request, "offset", default=0, minimum=0)
    before = audit.Cursor.parse(request.query.get("before"))
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        page = await audit.list_page(conn, actor(request), team_id, limit=limit, offset=offset,
                                     before=before)
    return web.json_response({
        "logs": [audit.entry_json(r) for r in page.entries], "total": page.total,
        "limit": limit, "offset": offset,
        "next_before": str(page.next_before) if page.next_before else None})


# --- OpenAPI: the operations above (`web.schema`), for `web.apidoc` ------------------------------

_TEAM = answer({"team": ref("Team")})
_MEMBER = answer({"member": ref("Member")})

OPENAPI = {
    "list_teams": {
        "summary": "The caller's teams, with the caller's role in each.",
        "tags": ["teams"],
        "responses": {200: answer({"teams": {"type": "array", "items": ref("Team")}})},
    },
    "create_team": {
        "summary": "Create a team; the caller becomes its Owner.",
        "tags": ["teams"],
        "description": "With `e2e`, the team is end-to-end (docs/e2e.md), for good: its values "
                       "are sealed in the clients under a team key the server never holds. The "
                       "creator must have a key pair (`PUT /me/e2e-key`; 400 otherwise); "
                       "`wrapped_key` is the first key (version 1) wrapped to their public key "
                       "for the team's `id`, which the client chooses (required with `e2e`, "
                       "refused without; 409 when taken).",
        "body": obj({"name": one_line(100),
                     "slug": {"type": "string", "pattern": SLUG_PATTERN},
                     "id": UUID,
                     "e2e": obj({"wrapped_key": E2E_WRAP, "auth": E2E_AUTH},
                                ("wrapped_key",))},
                    ("name", "slug")),
        "responses": {201: _TEAM},
        "errors": [409],
    },
    "get_team": {"summary": "One team.", "tags": ["teams"], "responses": {200: _TEAM}},
    "delete_team": {"summary": "Delete the team and everything in it (Owner).",
                    "tags": ["teams"], "responses": {200: OK}},
    "list_members": {
        "summary": "The team's members.",
        "tags": ["teams"],
        "responses": {200: answer({"members": {"type": "array", "items": ref("Member")}})},
    },
    "add_member": {
        "summary": "Add a registered user by email or username (Admin; Owner for Admin/Owner).",
        "tags": ["teams"],
        "body": obj({"identifier": {"type": "string", "description": "Email or username."},
                     "role": ROLE}, ("identifier", "role")),
        "responses": {201: _MEMBER},
        "errors": [409],
    },
    "update_member": {
        "summary": "Change a member's role.",
        "tags": ["teams"],
        "body": obj({"role": ROLE}, ("role",)),
        "responses": {200: _MEMBER},
        "errors": [409],
    },
    "remove_member": {"summary": "Remove a member (or leave the team).", "tags": ["teams"],
                      "responses": {200: OK}, "errors": [409]},
    "list_audit": {
        "summary": "A page of the team's audit log, newest first (Admin).",
        "tags": ["teams"],
        "query": [
            query("limit", {"type": "integer", "minimum": 1, "default": audit.DEFAULT_LIMIT},
                  f"Page size; above {audit.MAX_LIMIT} counts as {audit.MAX_LIMIT}."),
            query("offset", {"type": "integer", "minimum": 0, "default": 0}),
            query("before", {"type": "string", "pattern": "^([0-9]{1,17}_[0-9]{1,18})?$"},
                  "A cursor: the `next_before` of the previous page. The page starts just "
                  "after (older than) that page's last entry, whatever was written since; "
                  "`offset` then counts from there. Walking by cursor costs the page, not "
                  "the log."),
        ],
        "responses": {200: answer({"logs": {"type": "array", "items": ref("AuditEntry")},
                                   "total": INT, "limit": INT, "offset": INT,
                                   "next_before": nullable(STRING)})},
    },
}
