"""The page of the one-time setup link (`/setup?token=...`, `setup_link`): the signed-in account
that confirms on it becomes the install's first admin.

Opening the link changes nothing (a preview or a scanner may fetch it): signed in, a button posts
the token with the session's CSRF token; signed out, sign-in and sign-up come back here.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from ... import db, setup_link
from ...actor import Actor
from ..state import KEYRING, POOL
from .kit import form_field, redirect_to, render_page, signed_form, signed_in, url_for


async def setup_page(request: web.Request) -> web.StreamResponse:
    token = request.query.get("token", "")
    here = f"{setup_link.PATH}?{urlencode({'token': token})}"
    context: dict[str, Any] = {"token": token, "next": urlencode({"next": here})}
    status = 200
    if not token:
        context["error"], status = setup_link.SETUP_INVALID, 400
    return render_page(request, "setup.html", context, status=status, private=True)


@signed_in
async def become_admin(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        await setup_link.claim(conn, actor, request.app[KEYRING], form_field(form, "token"))
    return redirect_to(url_for(request, "admin.users_page", {"saved": "admin"}))
