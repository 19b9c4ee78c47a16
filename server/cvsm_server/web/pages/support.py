"""The support assistant's page (`/app/support`): the user's conversation, a form that asks,
and "Bicara dengan manusia" (escalate). Works without JavaScript (each form posts and the page
comes back); `static/support.js` posts the same forms with `Accept: application/json` and shows
the answer without a reload. The rules are in `cvsm_server.support.service`.
"""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from ...core.actor import Actor
from ...core.errors import DomainError, NotFound
from ...support import service as support
from ..request import app_url
from ..state import KEYRING, POOL, SETTINGS
from ..support import charge
from .forms import Form
from .kit import done, signed_in
from .messages import FLASHES
from .rendering import choose_language, render_page
from ...core import i18n
from ... import db

ESCALATED = FLASHES["support_escalated"][1]


def _wants_json(request: web.Request) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _conversation_ref(text: str) -> uuid.UUID | None:
    if not text:
        return None
    try:
        return uuid.UUID(text)
    except ValueError:
        raise NotFound(support.CONVERSATION_NOT_FOUND) from None


async def _context(request: web.Request, conn: db.Connection, actor: Actor,
                   conversation_id: uuid.UUID | None) -> dict[str, Any]:
    conversation = None
    if conversation_id is not None:
        conversation = await support.conversation(conn, actor, conversation_id)
    return {"conversation": conversation,
            "messages": conversation["messages"] if conversation else [],
            "max_message": support.MAX_MESSAGE}


@signed_in
async def support_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    """`?c=<id>` opens that conversation (yours only), `?new=1` a blank one, else your latest."""
    async with db.connection(request.app[POOL]) as conn:
        conversation_id = _conversation_ref(request.query.get("c", ""))
        if conversation_id is None and not request.query.get("new"):
            conversation_id = await support.latest_conversation(conn, actor)
        context = await _context(request, conn, actor, conversation_id)
    return render_page(request, "support.html", context, private=True)


def _json_error(request: web.Request, exc: DomainError) -> web.Response:
    """The page script's refusal (`static/support.js` shows it on the page): in the page's
    language, as the page itself would show it (the API's `/support/*` stay Indonesian)."""
    choose_language(request)
    return web.json_response({"error": i18n.translate(exc.message)}, status=exc.status,
                             headers=exc.headers)


@signed_in
async def ask(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor)
    message = form.text("message")
    async with db.connection(request.app[POOL]) as conn:
        try:
            conversation_id = _conversation_ref(form["conversation_id"])
            result = await support.chat(conn, actor, message, conversation_id=conversation_id,
                                        language=choose_language(request),
                                        charge=charge(request, actor))
        except DomainError as exc:
            if _wants_json(request):
                return _json_error(request, exc)
            if exc.status == 404:
                raise
            context = await _context(request, conn, actor,
                                     _conversation_ref(form["conversation_id"]))
            context.update(error=exc.message, form={"message": message})
            response = render_page(request, "support.html", context, status=exc.status, private=True)
            response.headers.update(exc.headers)
            return response
    if _wants_json(request):
        return web.json_response(result, headers={"Cache-Control": "no-store"})
    return done(request, "support.support_page", query={"c": str(result["conversation_id"])},
                fragment="akhir")


@signed_in
async def escalate(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor)
    app = request.app
    async with db.connection(app[POOL]) as conn:
        try:
            conversation_id = _conversation_ref(form["conversation_id"])
            if conversation_id is None:
                raise NotFound(support.CONVERSATION_NOT_FOUND)
            ticket = await support.escalate(conn, actor, app[KEYRING], conversation_id,
                                            form.text("note"),
                                            support_email=app[SETTINGS].support_email,
                                            base_url=app_url(request), charge=charge(request, actor))
        except DomainError as exc:
            if _wants_json(request):
                return _json_error(request, exc)
            if exc.status == 404:
                raise
            context = await _context(request, conn, actor, conversation_id)
            context.update(escalate_error=exc.message, note=form["note"])
            response = render_page(request, "support.html", context, status=exc.status, private=True)
            response.headers.update(exc.headers)
            return response
    if _wants_json(request):
        choose_language(request)
        return web.json_response({"ticket": ticket, "notice": i18n.gettext(ESCALATED)}, status=201,
                                 headers={"Cache-Control": "no-store"})
    return done(request, "support.support_page", "support_escalated",
                {"c": str(conversation_id)})
