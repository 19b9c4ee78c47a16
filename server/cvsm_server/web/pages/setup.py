"""The page of the one-time setup link (`/setup?token=...`, `setup_link`): the signed-in account
that confirms on it becomes the install's first admin.

Opening the link changes nothing (a preview or a scanner may fetch it): signed in, a button posts
the token with the session's CSRF token; signed out, sign-in and sign-up come back here.
"""

from __future__ import annotations

from aiohttp import web

from ... import db, setup_link
from ...actor import Actor
from ..state import KEYRING, POOL
from .kit import Form, done, link_page, signed_in


async def setup_page(request: web.Request) -> web.StreamResponse:
    return link_page(request, "setup.html", setup_link.PATH, setup_link.SETUP_INVALID)


@signed_in
async def become_admin(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        await setup_link.claim(conn, actor, request.app[KEYRING], form["token"])
    return done(request, "admin.users_page", "became_admin")
