"""Admin API routes (`/api/v1/admin/...`): users, teams and plans, the instance's numbers.
Only for signed-in admins (session JWT); everyone else gets 403."""

from __future__ import annotations

from aiohttp import web

from ..instance import admin
from ..core.errors import BadRequest
from ..core.i18n import Text
from ..core.inputs import field
from .schema import BOOL, INT, STRING, TIME, UUID, answer, nullable, obj, query
from .request import actor, connection, path_id, query_int, query_text, read_json

PAGE_DEFAULT, PAGE_MAX = 50, 200


def _page(request: web.Request) -> dict:
    return {"search": query_text(request, "q") or "",
            "limit": query_int(request, "limit", default=PAGE_DEFAULT, minimum=1, maximum=PAGE_MAX),
            "offset": query_int(request, "offset", default=0, minimum=0)}


async def admin_list_users(request: web.Request) -> web.Response:
    page = _page(request)
    async with connection(request) as conn:
        rows, total = await admin.list_users(conn, actor(request), **page)
    return web.json_response({"users": [admin.user_json(r) for r in rows], "total": total,
                              "limit": page["limit"], "offset": page["offset"]})


async def admin_update_user(request: web.Request) -> web.Response:
    user_id = path_id(request, "user_id")
    body = await read_json(request)
    changes = {"is_admin": field(body, "is_admin", bool, required=False),
               "disabled": field(body, "disabled", bool, required=False)}
    async with connection(request) as conn:
        row = await admin.update_user(conn, actor(request), user_id, **changes)
    return web.json_response({"user": admin.user_json(row)})


async def admin_list_teams(request: web.Request) -> web.Response:
    page = _page(request)
    async with connection(request) as conn:
        rows, total = await admin.list_teams(conn, actor(request), **page)
    return web.json_response({"teams": [admin.team_json(r) for r in rows], "total": total,
                              "limit": page["limit"], "offset": page["offset"]})


async def admin_set_plan(request: web.Request) -> web.Response:
    team_id = path_id(request, "team_id")
    body = await read_json(request)
    plan = field(body, "plan", str)
    quotas = {}
    for name in ("max_secrets", "max_members"):
        if name in body:
            value = body[name]
            if isinstance(value, float) and value.is_integer():  # 5.0 is the integer 5 in JSON
                value = int(value)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise BadRequest(Text("Kolom '{name}' memiliki tipe yang salah", name=name))
            quotas[name] = value
    async with connection(request) as conn:
        row = await admin.set_plan(conn, actor(request), team_id, plan, **quotas)
    return web.json_response({"team": admin.team_json(row)})


async def admin_stats(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        numbers = await admin.stats(conn, actor(request))
    return web.json_response(numbers)


# --- OpenAPI ---------------------------------------------------------------------------------

_PAGE_QUERY = [
    query("q", {"type": "string", "maxLength": 200}, "Text the email, username or name (users), "
          "or the slug or name (teams) contains."),
    query("limit", {"type": "integer", "minimum": 1, "default": PAGE_DEFAULT},
          f"Page size; above {PAGE_MAX} counts as {PAGE_MAX}."),
    query("offset", {"type": "integer", "minimum": 0, "default": 0}),
]
_USER = obj({"id": UUID, "email": STRING, "username": STRING, "name": STRING, "is_admin": BOOL,
             "email_verified": BOOL, "disabled": BOOL, "teams": INT, "created_at": TIME},
            ("id", "email", "username", "name", "is_admin", "email_verified", "disabled", "teams",
             "created_at"))
_TEAM = obj({"id": UUID, "slug": STRING, "name": STRING, "plan": STRING,
             "max_secrets": nullable(INT), "max_members": nullable(INT),
             "max_environments": nullable(INT), "members": INT, "secrets": INT, "created_at": TIME},
            ("id", "slug", "name", "plan", "max_secrets", "max_members", "max_environments",
             "members", "secrets", "created_at"))
_QUOTA = nullable({"type": "integer", "minimum": 0, "maximum": admin.MAX_QUOTA})

OPENAPI = {
    "admin_list_users": {
        "summary": "Users, newest first, searched and paged (admin).",
        "tags": ["admin"],
        "query": _PAGE_QUERY,
        "responses": {200: answer({"users": {"type": "array", "items": _USER}, "total": INT,
                                   "limit": INT, "offset": INT})},
    },
    "admin_update_user": {
        "summary": "Grant or revoke admin, disable or enable a user (admin).",
        "description": "A disabled user's sessions and API tokens fail at once; enabling restores "
                       "them. Admins cannot revoke their own admin right or disable themselves.",
        "tags": ["admin"],
        "body": obj({"is_admin": BOOL, "disabled": BOOL}),
        "responses": {200: answer({"user": _USER})},
    },
    "admin_list_teams": {
        "summary": "Teams, newest first, searched and paged (admin).",
        "tags": ["admin"],
        "query": _PAGE_QUERY,
        "responses": {200: answer({"teams": {"type": "array", "items": _TEAM}, "total": INT,
                                   "limit": INT, "offset": INT})},
    },
    "admin_set_plan": {
        "summary": "Put a team on a plan, with its quotas (admin).",
        "description": "Quotas left out take the plan's own (the plan table): "
                       + admin.plan_defaults_text() + ".",
        "tags": ["admin"],
        "body": obj({"plan": {"type": "string", "enum": list(admin.PLAN_FORM_DEFAULTS)},
                     "max_secrets": _QUOTA, "max_members": _QUOTA}, ("plan",)),
        "responses": {200: answer({"team": _TEAM})},
    },
    "admin_stats": {
        "summary": "Counts across the instance (admin).",
        "tags": ["admin"],
        "responses": {200: answer({
            "users": INT, "disabled_users": INT, "admins": INT, "teams": INT, "secrets": INT,
            "active_tokens": INT, "audit_entries_24h": INT,
            "teams_by_plan": {"type": "object", "additionalProperties": INT}})},
    },
}
