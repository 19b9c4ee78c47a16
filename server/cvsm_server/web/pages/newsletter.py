"""The newsletter's public pages: subscribing and confirming.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ...mail import newsletter
from ..request import app_url
from ..state import ACTOR, KEYRING
from .forms import Form, beside
from .rendering import render_page


def newsletter_page(request: web.Request, state: str, *, status: int = 200, **context: Any) -> web.Response:
    """The newsletter's page in one of its states: `form`, `sent`, `confirm` (the button that
    posts a confirmation token), `confirmed`, `unsubscribed`, `error`."""
    return render_page(request, "newsletter.html", {"state": state, **context}, status=status,
                       private=state == "confirm")


async def newsletter_form(request: web.Request) -> web.StreamResponse:
    return newsletter_page(request, "form")


async def newsletter_subscribe(request: web.Request) -> web.StreamResponse:
    """The form's POST; counted under the same `newsletter` limit as the API."""
    form = await Form.posted(request)
    async with form.attempt(request, "newsletter.html", {"state": "form"},
                            field=beside("email", 400), rate="newsletter") as conn:
        await newsletter.subscribe(conn, request[ACTOR], request.app[KEYRING], form["email"],
                                   app_url(request))
    return newsletter_page(request, "sent")


async def newsletter_confirm_page(request: web.Request) -> web.StreamResponse:
    token = request.query.get("token", "")
    if not token:
        return newsletter_page(request, "error", status=400, message=newsletter.TOKEN_INVALID)
    return newsletter_page(request, "confirm", token=token)


async def newsletter_confirm(request: web.Request) -> web.StreamResponse:
    form = await Form.posted(request, secret=("token",))
    async with form.attempt(request, "newsletter.html", {"state": "error"}) as conn:
        await newsletter.confirm(conn, request[ACTOR], request.app[KEYRING], form["token"])
    return newsletter_page(request, "confirmed")
