"""Webhook routes (Admin or above): parse, call `webhooks`, shape the answer. The signing
secret appears in one answer only: the creation's."""

from __future__ import annotations

from aiohttp import web

from ..webhooks import service as webhooks
from ..core.inputs import field
from .schema import INT, OK, STRING, TIME, UUID, answer, nullable, obj, query
from .request import actor, connection, path_id, query_int, read_json, team_of
from .state import KEYRING, SETTINGS



async def create_webhook(request: web.Request) -> web.Response:
    body = await read_json(request)
    url = field(body, "url", str)
    events = field(body, "events", list)
    description = field(body, "description", str, required=False, default="")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row, secret = await webhooks.create_webhook(
            conn, actor(request), request.app[KEYRING], team_id, url=url, events=events,
            description=description,
            allow_private=request.app[SETTINGS].webhook_allow_private)
    return web.json_response({"webhook": webhooks.webhook_json(row), "secret": secret},
                             status=201)


async def list_webhooks(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        rows = await webhooks.list_webhooks(conn, actor(request), team_id)
    return web.json_response({"webhooks": [webhooks.webhook_json(r) for r in rows]})


async def delete_webhook(request: web.Request) -> web.Response:
    webhook_id = path_id(request, "webhook_id")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        await webhooks.delete_webhook(conn, actor(request), team_id, webhook_id)
    return web.json_response({"ok": True})


async def list_webhook_deliveries(request: web.Request) -> web.Response:
    webhook_id = path_id(request, "webhook_id")
    limit = query_int(request, "limit", default=webhooks.DEFAULT_LIMIT, minimum=1,
                      maximum=webhooks.MAX_LIMIT)
    offset = query_int(request, "offset", default=0, minimum=0)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        rows = await webhooks.list_deliveries(conn, actor(request), team_id, webhook_id,
                                              limit=limit, offset=offset)
    return web.json_response({"deliveries": [webhooks.delivery_json(r) for r in rows],
                              "limit": limit, "offset": offset})


async def send_webhook_test(request: web.Request) -> web.Response:
    webhook_id = path_id(request, "webhook_id")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row = await webhooks.send_test(conn, actor(request), team_id, webhook_id)
    return web.json_response({"delivery": webhooks.delivery_json(row)}, status=202)


# --- OpenAPI: the operations above (`web.schema`), for `web.apidoc` ------------------------------

EVENT = {"type": "string", "enum": list(webhooks.EVENTS)}
WEBHOOK = answer({"id": UUID, "url": STRING,
                  "events": {"type": "array", "items": EVENT},
                  "description": STRING, "created_at": TIME})
DELIVERY = answer({
    "id": UUID, "webhook_id": UUID, "event_id": UUID,
    "event": {"type": "string", "enum": [*webhooks.EVENTS, webhooks.PING]},
    "status": {"type": "string", "enum": ["pending", "delivered", "failed"]},
    "attempts": INT, "last_status_code": nullable(INT), "last_error": nullable(STRING),
    "created_at": TIME, "last_attempt_at": nullable(TIME), "next_attempt_at": nullable(TIME),
    "delivered_at": nullable(TIME), "failed_at": nullable(TIME),
})

OPENAPI = {
    "create_webhook": {
        "summary": "Add a webhook (Admin); the answer holds its signing secret, shown only here.",
        "description": "The URL must be `http(s)://`, without user or password, and (unless the "
                       "server allows private targets) resolve only to global addresses. "
                       "Deliveries are signed: `Cvsm-Signature: t=<unix>,v1=<hex HMAC-SHA256 "
                       "of \"<t>.<body>\" keyed with the secret>`.",
        "tags": ["webhooks"],
        "body": obj({"url": {"type": "string", "maxLength": webhooks.MAX_URL_LENGTH},
                     "events": {"type": "array", "items": EVENT, "minItems": 1},
                     "description": {"type": "string",
                                     "maxLength": webhooks.MAX_DESCRIPTION}},
                    ("url", "events")),
        "responses": {201: answer({"webhook": WEBHOOK,
                                   "secret": {"type": "string", "pattern": "^whsec_"}})},
    },
    "list_webhooks": {
        "summary": "The team's webhooks, without their secrets (Admin).",
        "tags": ["webhooks"],
        "responses": {200: answer({"webhooks": {"type": "array", "items": WEBHOOK}})},
    },
    "delete_webhook": {
        "summary": "Delete a webhook and its delivery log (Admin).",
        "tags": ["webhooks"],
        "responses": {200: OK},
    },
    "list_webhook_deliveries": {
        "summary": "The webhook's delivery log, newest first (Admin); never a body.",
        "tags": ["webhooks"],
        "query": [
            query("limit", {"type": "integer", "minimum": 1, "default": webhooks.DEFAULT_LIMIT},
                  f"Page size; above {webhooks.MAX_LIMIT} counts as {webhooks.MAX_LIMIT}."),
            query("offset", {"type": "integer", "minimum": 0, "default": 0}),
        ],
        "responses": {200: answer({"deliveries": {"type": "array", "items": DELIVERY},
                                   "limit": INT, "offset": INT})},
    },
    "send_webhook_test": {
        "summary": "Queue a `ping` event to this webhook (Admin).",
        "tags": ["webhooks"],
        "responses": {202: answer({"delivery": DELIVERY})},
    },
}
