"""The newsletter's public pages: subscribing and confirming.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ... import db, newsletter, ratelimit
from ...errors import DomainError
from ..request import app_url
from ..state import ACTOR, KEYRING, POOL, SETTINGS
from .kit import anonymous_csrf, check_anonymous_csrf, form_field, read_page_form, render_page


def newsletter_page(request: web.Request, state: str, *, status: int = 200, **context: Any) -> web.Response:
    """The newsletter's page in one of its states: `form`, `sent`, `confirm` (the button that
    posts a confirmation token), `confirmed`, `unsubscribed`, `error`."""
    if state in ("form", "confirm"):
        context["csrf"] = anonymous_csrf(request)
    return render_page(request, "newsletter.html", {"state": state, **context}, status=status,
                       private=state == "confirm")


async def newsletter_form(request: web.Request) -> web.StreamResponse:
    return newsletter_page(request, "form")


async def newsletter_subscribe(request: web.Request) -> web.StreamResponse:
    """The form's POST; counted under the same `newsletter` limit as the API."""
    app = request.app
    form = await read_page_form(request)
    email = form_field(form, "email")
    try:
        check_anonymous_csrf(request, form)
        async with db.connection(app[POOL]) as conn:
            ip = request[ACTOR].ip or "-"
            await ratelimit.hit(conn, ratelimit.Charge.of("newsletter", ip,
                                                          app[SETTINGS].rate_limit("newsletter")))
            await newsletter.subscribe(conn, request[ACTOR], app[KEYRING], email, app_url(request))
    except DomainError as exc:
        response = newsletter_page(request, "form", status=exc.status, error=exc.message,
                                   form={"email": email})
        response.headers.update(exc.headers)
        return response
    return newsletter_page(request, "sent")


async def newsletter_confirm_page(request: web.Request) -> web.StreamResponse:
    token = request.query.get("token", "")
    if not token:
        return newsletter_page(request, "error", status=400, message=newsletter.TOKEN_INVALID)
    return newsletter_page(request, "confirm", token=token)


async def newsletter_confirm(request: web.Request) -> web.StreamResponse:
    app = request.app
    form = await read_page_form(request)
    try:
        check_anonymous_csrf(request, form)
        async with db.connection(app[POOL]) as conn:
            await newsletter.confirm(conn, request[ACTOR], app[KEYRING], form_field(form, "token"))
    except DomainError as exc:
        return newsletter_page(request, "error", status=exc.status, message=exc.message)
    return newsletter_page(request, "confirmed")
