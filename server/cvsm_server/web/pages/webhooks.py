"""A team's webhooks on the dashboard (Admin and above): the list with each one's recent
deliveries, creating one (its URL and events; its signing secret shown once, through
`once.keep_once`, as a new API token is), sending a test event (`ping`) and deleting one, by
the domain functions the API uses (`web.webhooks`, `webhooks.service`)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ...core.actor import Actor
from ...teams import service as teams
from ...webhooks import service as webhooks
from ..request import path_id
from ..state import KEYRING, POOL, SETTINGS
from .forms import Form
from .kit import done, signed_in
from .once import keep_once, take_once
from .rendering import render_page
from .teams import team_form
from ... import db

# Deliveries shown under each webhook on the page (the API pages through all of them).
RECENT = 5


async def _context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    team_ref = request.match_info["team"]
    team_id = await teams.resolve(conn, team_ref)
    team = await teams.get_team(conn, actor, team_id)
    hooks = await webhooks.list_webhooks(conn, actor, team_id)
    deliveries = {hook["id"]: await webhooks.list_deliveries(conn, actor, team_id, hook["id"],
                                                             limit=RECENT)
                  for hook in hooks}
    return {"team_ref": team_ref, "team": team, "webhooks": hooks, "deliveries": deliveries,
            "events": webhooks.EVENTS, "form": {"events": []}, "created": None,
            "max_webhooks": webhooks.MAX_WEBHOOKS}


@signed_in
async def webhooks_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        context = await _context(request, conn, actor)
    context["created"] = take_once(request, actor, "webhook")
    return render_page(request, "webhooks.html", context, private=context["created"] is not None)


@signed_in
async def create_webhook(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor)
    events = form.getall("events")

    async def again(conn: db.Connection) -> dict[str, Any]:  # what was typed, not the defaults
        return {**await _context(request, conn, actor), "form": {**form.kept(), "events": events}}

    async with form.attempt(request, "webhooks.html", again) as conn:
        team_id = await teams.resolve(conn, request.match_info["team"])
        row, secret = await webhooks.create_webhook(
            conn, actor, request.app[KEYRING], team_id, url=form["url"].strip(), events=events,
            description=form["description"],
            allow_private=request.app[SETTINGS].webhook_allow_private)
    response = done(request, "webhooks.webhooks_page", "webhook_created",
                    team=request.match_info["team"])
    keep_once(request, response, actor, "webhook", {"url": row["url"], "secret": secret})
    return response


@signed_in
async def test_webhook(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with team_form(request, actor) as (_form, conn, team_id):
        await webhooks.send_test(conn, actor, team_id, path_id(request, "webhook_id"))
    return done(request, "webhooks.webhooks_page", "webhook_test_sent",
                team=request.match_info["team"])


@signed_in
async def delete_webhook(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with team_form(request, actor) as (_form, conn, team_id):
        await webhooks.delete_webhook(conn, actor, team_id, path_id(request, "webhook_id"))
    return done(request, "webhooks.webhooks_page", "webhook_deleted",
                team=request.match_info["team"])
