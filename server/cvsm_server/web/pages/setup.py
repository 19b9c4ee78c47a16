"""The page of the one-time setup link (`/setup?token=...`, `setup_link`): the signed-in account
that confirms on it becomes the install's first admin.

On a self-hosted server (billing off) the same form asks which plan new teams get, the
suggested one preselected (`instance.settings.suggested_plan`: Professional unless the operator
set `CVSM_DEFAULT_PLAN`); the admin panel changes it later. A managed server (billing on:
teams pay for their plans) does not ask.

Opening the link changes nothing (a preview or a scanner may fetch it): signed in, a button posts
the token with the session's CSRF token; signed out, sign-in and sign-up come back here. A link
that no longer works (used, expired, or there is an admin now) says so and shows no form.
"""

from __future__ import annotations

from aiohttp import web

from ...core.actor import Actor
from ...accounts import setup_link
from ...instance import settings as instance_settings
from ...teams.service import PLANS
from ..state import KEYRING, POOL, SETTINGS, STRIPE
from .forms import Form, failures_of
from .kit import done, link_page, signed_in
from .rendering import render_page
from ... import db


async def setup_page(request: web.Request) -> web.StreamResponse:
    """The link's page: its button only while the link works (`setup_link.usable`); a used,
    expired or unknown link, or one opened once there is an admin, says so and offers nothing."""
    async with db.connection(request.app[POOL]) as conn:
        works = await setup_link.usable(conn, request.app[KEYRING],
                                        request.query.get("token", ""), failures_of(request))
    if not works:
        return render_page(request, "setup.html", {"error": setup_link.SETUP_INVALID},
                           status=400, private=True)
    return link_page(request, "setup.html", setup_link.PATH, setup_link.SETUP_INVALID,
                     plans=PLANS if asks_plan(request) else None,
                     suggested=instance_settings.suggested_plan(request.app[SETTINGS].default_plan),
                     managed_plan=request.app[SETTINGS].default_plan or instance_settings.STARTER)


def asks_plan(request: web.Request) -> bool:
    """Whether the set-up page asks which plan new teams get: on a self-hosted server, billing
    off. With billing on (`CVSM_BILLING=stripe`) the server is a managed one: teams start on the
    operator's plan (`CVSM_DEFAULT_PLAN`, Starter when unset) and pay for more on their plan
    page."""
    return request.app[STRIPE] is None


@signed_in
async def become_admin(request: web.Request, actor: Actor) -> web.StreamResponse:
    """The account becomes admin; on a self-hosted server, the plan chosen (`default_plan`: the
    form's radio buttons, one always checked) is new teams' plan from now on. A post without the
    field (a script) chooses nothing; one that names no plan is a 400 and changes nothing."""
    form = await Form.posted(request, actor)
    plan = form.data.get("default_plan") if asks_plan(request) else None
    async with db.connection(request.app[POOL]) as conn:
        await setup_link.claim(conn, actor, request.app[KEYRING], form["token"], default_plan=plan)
    return done(request, "admin.users_page", "became_admin")
