"""A team's plan and its quotas: what is used of each, and what to do when one refuses
(`teams.plan_usage`). Shown to every member.

With billing on (`CVSM_BILLING=stripe`, docs/billing.md) the page also says the subscription's
state (`billing.billing_state`) to every member, and gives the Owner the controls: each paid
plan with its quotas and a button that starts a Stripe Checkout (a POST answered by a 303 to
the Checkout URL), and, once the team has had a subscription, the Customer Portal (card,
invoices, plan, cancellation). Members who are not Owner see no billing control; with billing
off the page says nothing about payment. The plan changes when Stripe's webhook says so, never
on the way back from Checkout (`?checkout=done` only says that the payment is being confirmed).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from ...billing import rules as billing_rules
from ...billing import service as billing
from ...core.actor import Actor
from ...core.errors import DomainError
from ...teams import service as teams
from ...teams.roles import OWNER
from ..request import app_url
from ..state import POOL, SETTINGS, STRIPE
from .forms import Answer, Form
from .kit import redirect_to, signed_in
from .rendering import CSP, render_page
from ... import db

# Where the Owner's browser goes from this page's forms besides this site: Stripe's Checkout and
# Customer Portal (the pages' CSP allows only 'self', which a form's redirect obeys too).
STRIPE_ORIGINS = ("https://checkout.stripe.com", "https://billing.stripe.com")
BILLING_CSP = CSP.replace("form-action 'self'", "form-action 'self' " + " ".join(STRIPE_ORIGINS))


async def _context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    team_ref = request.match_info["team"]
    team_id = await teams.resolve(conn, team_ref)
    team = await teams.get_team(conn, actor, team_id)
    usage = await teams.plan_usage(conn, actor, team_id)
    state = await billing.billing_state(conn, actor, team_id, request.app[STRIPE],
                                        grace_days=request.app[SETTINGS].billing_grace_days)
    subscribed = state["status"] in billing_rules.LIVE or state["status"] in billing_rules.GRACE
    owner = state["enabled"] and team["role"] == OWNER
    return {"team": team, "team_ref": team_ref, "usage": usage, "plans": teams.PLANS,
            "billing": state,
            # The Owner's controls: a checkout while the team has no live subscription (the
            # portal changes one), the portal once it has had one.
            "can_checkout": owner and not subscribed,
            "can_manage": owner and state["status"] is not None,
            "checkout_done": request.query.get("checkout") == "done"}


def _page(request: web.Request, context: dict[str, Any], **kwargs: Any) -> web.Response:
    response = render_page(request, "plan.html", context, **kwargs)
    if context["can_checkout"] or context["can_manage"]:
        response.headers["Content-Security-Policy"] = BILLING_CSP
    return response


@signed_in
async def plan_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        context = await _context(request, conn, actor)
    return _page(request, context)


@contextlib.asynccontextmanager
async def _billing_form(request: web.Request,
                        actor: Actor) -> AsyncIterator[tuple[Form, db.Connection]]:
    """The Owner's billing buttons: the form once its CSRF token is checked, and a connection.
    A refusal the page can say (a bad plan 400, a subscription already there 409, Stripe out of
    reach 503) is the plan page again with the message; any other is the error page."""
    form = await Form.posted(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        try:
            yield form, conn
        except DomainError as exc:
            if exc.status in (403, 404):
                raise
            context = {**await _context(request, conn, actor), "error": exc.message}
            response = _page(request, context, status=exc.status)
            response.headers.update(exc.headers)
            raise Answer(response) from None


@signed_in
async def checkout(request: web.Request, actor: Actor) -> web.StreamResponse:
    """The Owner chose a paid plan (`plan`): 303 to Stripe's Checkout for it."""
    async with _billing_form(request, actor) as (form, conn):
        team_id = await teams.resolve(conn, request.match_info["team"])
        url = await billing.start_checkout(conn, actor, team_id, form["plan"],
                                           request.app[STRIPE], app_url=app_url(request))
    return redirect_to(url)


@signed_in
async def portal(request: web.Request, actor: Actor) -> web.StreamResponse:
    """The Owner manages billing: 303 to Stripe's Customer Portal for the team."""
    async with _billing_form(request, actor) as (_form, conn):
        team_id = await teams.resolve(conn, request.match_info["team"])
        url = await billing.open_portal(conn, actor, team_id, request.app[STRIPE],
                                        app_url=app_url(request))
    return redirect_to(url)
