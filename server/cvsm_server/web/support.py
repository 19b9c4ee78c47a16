"""Support assistant routes (`/api/v1/support/...`, session JWT) and the admins' ticket routes
(`/api/v1/admin/tickets/...`). The rules are in `cvsm_server.support.service`."""

from __future__ import annotations

import uuid

from aiohttp import web

from ..accounts import ratelimit
from ..support import service as support
from ..core.actor import Actor
from ..core.errors import NotFound
from ..core.inputs import field
from .admin import PAGE_DEFAULT, PAGE_MAX
from .schema import BOOL, INT, STRING, TIME, UUID, answer, nullable, obj, query, trimmed
from .request import (actor, app_url, connection, path_id, query_int, query_text, read_json)
from .state import KEYRING, SETTINGS



def charge(request: web.Request, who: Actor) -> ratelimit.Charge | None:
    """Questions and escalations count per user under the `support` limit."""
    return ratelimit.Charge.of("support", str(who.user_id),
                               request.app[SETTINGS].rate_limit("support"))


def _conversation_id(value: str) -> uuid.UUID:
    """A conversation id from the body; anything but a UUID names no conversation (404)."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound(support.CONVERSATION_NOT_FOUND) from None


async def support_chat(request: web.Request) -> web.Response:
    body = await read_json(request)
    message = field(body, "message", str)
    given = field(body, "conversation_id", str, required=False)
    conversation_id = None if given is None else _conversation_id(given)
    who = actor(request)
    async with connection(request) as conn:
        result = await support.chat(conn, who, message, conversation_id=conversation_id,
                                    charge=charge(request, who))
    return web.json_response(result)


async def support_escalate(request: web.Request) -> web.Response:
    body = await read_json(request)
    conversation_id = _conversation_id(field(body, "conversation_id", str))
    note = field(body, "note", str)
    who = actor(request)
    async with connection(request) as conn:
        ticket = await support.escalate(
            conn, who, request.app[KEYRING], conversation_id, note,
            support_email=request.app[SETTINGS].support_email, base_url=app_url(request),
            charge=charge(request, who))
    return web.json_response({"ticket": ticket}, status=201)


async def support_conversation(request: web.Request) -> web.Response:
    conversation_id = path_id(request, "conversation_id")
    async with connection(request) as conn:
        result = await support.conversation(conn, actor(request), conversation_id)
    return web.json_response({"conversation": result})


async def admin_list_tickets(request: web.Request) -> web.Response:
    status = query_text(request, "status") or "open"
    limit = query_int(request, "limit", default=PAGE_DEFAULT, minimum=1, maximum=PAGE_MAX)
    offset = query_int(request, "offset", default=0, minimum=0)
    async with connection(request) as conn:
        rows, total = await support.list_tickets(conn, actor(request),
                                                 status=None if status == "all" else status,
                                                 limit=limit, offset=offset)
    return web.json_response({"tickets": [support.ticket_json(r) for r in rows], "total": total,
                              "limit": limit, "offset": offset})


async def admin_get_ticket(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        ticket, messages = await support.get_ticket(conn, actor(request),
                                                    path_id(request, "ticket_id"))
    return web.json_response({"ticket": support.ticket_json(ticket),
                              "messages": [support.message_json(m) for m in messages]})


async def admin_reply_ticket(request: web.Request) -> web.Response:
    ticket_id = path_id(request, "ticket_id")
    body = await read_json(request)
    message = field(body, "message", str)
    async with connection(request) as conn:
        ticket = await support.reply_ticket(conn, actor(request), request.app[KEYRING], ticket_id,
                                            message, base_url=app_url(request))
    return web.json_response({"ticket": support.ticket_json(ticket)})


async def admin_close_ticket(request: web.Request) -> web.Response:
    ticket_id = path_id(request, "ticket_id")
    async with connection(request) as conn:
        ticket = await support.close_ticket(conn, actor(request), ticket_id)
    return web.json_response({"ticket": support.ticket_json(ticket)})


# --- OpenAPI ---------------------------------------------------------------------------------

_MESSAGE_TEXT = trimmed(support.MAX_MESSAGE)
_ARTICLE = obj({"slug": STRING, "title": STRING}, ("slug", "title"))
_ARTICLES = {"type": "array", "items": _ARTICLE}
_MESSAGE = obj({"id": UUID, "author": {"type": "string", "enum": ["user", "assistant", "admin"]},
                "body": STRING, "articles": _ARTICLES, "created_at": TIME},
               ("id", "author", "body", "articles", "created_at"))
_TICKET = obj({"id": UUID, "conversation_id": UUID,
               "status": {"type": "string", "enum": list(support.TICKET_STATUSES)},
               "note": STRING,
               "user": obj({"id": UUID, "email": STRING}, ("id", "email")),
               "created_at": TIME, "updated_at": TIME, "closed_at": nullable(TIME)},
              ("id", "conversation_id", "status", "note", "user", "created_at", "updated_at",
               "closed_at"))

OPENAPI = {
    "support_chat": {
        "summary": "Ask the support assistant (session JWT).",
        "description": "The answer quotes the most relevant paragraph of the best-matching help "
                       "article (PostgreSQL full-text search) and lists the articles used; "
                       "without a match `matched` is false and the answer offers a human. Without "
                       "`conversation_id` a new conversation starts. Counted per user under the "
                       "`support` rate limit.",
        "tags": ["support"],
        "body": obj({"message": _MESSAGE_TEXT, "conversation_id": UUID}, ("message",)),
        "responses": {200: answer({"conversation_id": UUID, "answer": STRING,
                                   "articles": _ARTICLES, "matched": BOOL})},
        "errors": [404],
    },
    "support_escalate": {
        "summary": "Hand a conversation to a human: a ticket (session JWT).",
        "description": "Mailed to `CVSM_SUPPORT_EMAIL` when set; admins answer in the panel. "
                       "One open ticket per conversation (409 while it is open).",
        "tags": ["support"],
        "body": obj({"conversation_id": UUID, "note": _MESSAGE_TEXT}, ("conversation_id", "note")),
        "responses": {201: answer({"ticket": _TICKET})},
        "errors": [404, 409],
    },
    "support_conversation": {
        "summary": "One of your conversations with the assistant, with its messages.",
        "tags": ["support"],
        "responses": {200: answer({"conversation": obj({
            "id": UUID, "created_at": TIME, "messages": {"type": "array", "items": _MESSAGE},
            "ticket": nullable(obj({"id": UUID, "status": STRING}, ("id", "status")))},
            ("id", "created_at", "messages", "ticket"))})},
    },
    "admin_list_tickets": {
        "summary": "Support tickets, newest first, paged (admin).",
        "tags": ["admin"],
        "query": [query("status", {"type": "string", "enum": ["open", "closed", "all"],
                                   "default": "open"}),
                  query("limit", {"type": "integer", "minimum": 1, "default": PAGE_DEFAULT},
                        f"Page size; above {PAGE_MAX} counts as {PAGE_MAX}."),
                  query("offset", {"type": "integer", "minimum": 0, "default": 0})],
        "responses": {200: answer({"tickets": {"type": "array", "items": _TICKET}, "total": INT,
                                   "limit": INT, "offset": INT})},
    },
    "admin_get_ticket": {
        "summary": "One support ticket with its conversation (admin).",
        "tags": ["admin"],
        "responses": {200: answer({"ticket": _TICKET,
                                   "messages": {"type": "array", "items": _MESSAGE}})},
    },
    "admin_reply_ticket": {
        "summary": "Answer a ticket: the reply joins the conversation and is mailed to the user "
                   "(admin).",
        "tags": ["admin"],
        "body": obj({"message": _MESSAGE_TEXT}, ("message",)),
        "responses": {200: answer({"ticket": _TICKET})},
        "errors": [409],
    },
    "admin_close_ticket": {
        "summary": "Close a ticket (admin).",
        "tags": ["admin"],
        "responses": {200: answer({"ticket": _TICKET})},
    },
}
