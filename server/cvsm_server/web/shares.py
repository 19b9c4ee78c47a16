"""Share routes, and the public endpoints (`/health`, `/public/stats`, the share view)."""

from __future__ import annotations

from aiohttp import web

from .. import __version__
from ..instance import public
from ..secrets import shares
from ..core.inputs import field
from ..core.timeutil import iso
from .schema import BOOL, E2E_SHARE, INT, OK, STRING, TIME, answer, obj, ref
from .request import actor, app_url, connection, path_id, read_json, team_of
from .state import KEYRING, POOL


async def create_share(request: web.Request) -> web.Response:
    secret_id = path_id(request, "secret_id")
    # (the route's cap, `VALUE`: an end-to-end team's share envelope, even \u-escaped, fits)
    body = await read_json(request, optional=True)
    max_views = field(body, "max_views", int, required=False, default=1)
    ttl_hours = field(body, "ttl_hours", int, required=False, default=24)
    envelope = field(body, "value", str, required=False)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row, token = await shares.create_share(conn, actor(request), request.app[KEYRING],
                                               team_id, secret_id, max_views=max_views,
                                               ttl_hours=ttl_hours, envelope=envelope)
    url = f"{app_url(request)}/share/{token}"
    return web.json_response({"share": shares.share_json(row), "url": url}, status=201)


async def list_shares(request: web.Request) -> web.Response:
    secret_id = path_id(request, "secret_id")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        rows = await shares.list_shares(conn, actor(request), team_id, secret_id)
    return web.json_response({"shares": [shares.share_json(r) for r in rows]})


async def revoke_share(request: web.Request) -> web.Response:
    secret_id = path_id(request, "secret_id")
    share_id = path_id(request, "share_id")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        await shares.revoke_share(conn, actor(request), team_id, secret_id, share_id)
    return web.json_response({"ok": True})


async def view_share(request: web.Request) -> web.Response:
    """GET consumes one view; HEAD answers the same status and consumes nothing, and says in
    `Cvsm-Share-E2E` (1 or 0) whether the share is end-to-end, so the share page can refuse a
    link without its #fragment before a view is spent."""
    token = request.match_info["token"]
    async with connection(request) as conn:
        if request.method == "HEAD":
            e2e = await shares.peek(conn, request.app[KEYRING], token)
            return web.json_response({}, headers={"Cvsm-Share-E2E": "1" if e2e else "0"})
        row, value = await shares.view(conn, actor(request), request.app[KEYRING], token)
    return web.json_response({
        "secret_name": row["secret_name"],
        "value": value,
        "view_count": row["view_count"],
        "max_views": row["max_views"],
        "expires_at": iso(row["expires_at"]),
        "e2e": row["envelope"] is not None,
    })


async def health(request: web.Request) -> web.Response:
    """200 `{status: "ok", version}`; 503 when the database does not answer within 2 seconds."""
    await public.check_database(request.app[POOL])
    return web.json_response({"status": "ok", "version": __version__})


async def stats(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        row = await public.stats(conn)
    return web.json_response({"teams": row["teams"], "secrets": row["secrets"]})


# --- OpenAPI: the operations above (`web.schema`), for `web.apidoc` ------------------------------

OPENAPI = {
    "health": {
        "summary": "Liveness: the server and its database answer.",
        "tags": ["public"],
        "responses": {200: answer({"status": {"const": "ok"}, "version": STRING})},
        "errors": [503],
    },
    "stats": {
        "summary": "Counts of teams and secrets.",
        "tags": ["public"],
        "responses": {200: answer({"teams": INT, "secrets": INT})},
    },
    "view_share": {
        "summary": "Reveal a shared value; consumes one view (HEAD consumes nothing and "
                   "answers `Cvsm-Share-E2E: 1` for an end-to-end share, else 0).",
        "tags": ["public"],
        "description": "With `e2e` true (a share of an end-to-end team), `value` is the "
                       "`cvsm-share1.` envelope that the key in the link's #fragment opens.",
        "responses": {200: answer({"secret_name": STRING, "value": STRING, "view_count": INT,
                                   "max_views": INT, "expires_at": TIME, "e2e": BOOL})},
        "errors": [410],
    },
    "create_share": {
        "summary": "A one-time link to the secret's current value (Member).",
        "tags": ["shares"],
        "body": obj({
            "max_views": {"type": "integer", "minimum": shares.MAX_VIEWS[0],
                          "maximum": shares.MAX_VIEWS[1], "default": 1},
            "ttl_hours": {"type": "integer", "minimum": shares.TTL_HOURS[0],
                          "maximum": shares.TTL_HOURS[1], "default": 24},
            "value": {**E2E_SHARE, "description": "For an end-to-end team only, where it is "
                                                  "required: the value sealed in the client "
                                                  "under the key the link's #fragment carries "
                                                  "(docs/e2e.md)."},
        }),
        "body_required": False,
        "responses": {201: answer({"share": ref("Share"), "url": STRING})},
    },
    "list_shares": {
        "summary": "The secret's shares (never their tokens).",
        "tags": ["shares"],
        "responses": {200: answer({"shares": {"type": "array", "items": ref("Share")}})},
    },
    "revoke_share": {"summary": "Revoke a share.", "tags": ["shares"],
                     "responses": {200: OK}},
}
