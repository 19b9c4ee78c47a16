"""API tokens: the list, creating one (shown once, after a redirect), revoking.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ... import db, teams, tokens
from ...actor import Actor
from ..request import path_id
from ..state import KEYRING, POOL
from .kit import ENVIRONMENTS, Form, done, form_work, render_page, signed_in
from .once import keep_once, take_once

# The form's default is the narrowest token (one team, one environment, read-only): the
# README's advice for an application or a CI job. The broader choices are there, named.
DEFAULT_ENVIRONMENT = "production"


async def _tokens_context(conn: db.Connection, actor: Actor) -> dict[str, Any]:
    rows = await tokens.list_tokens(conn, actor)
    your_teams = await teams.list_teams(conn, actor)
    names = {team["id"]: team["slug"] for team in your_teams}
    return {"tokens": rows, "teams": your_teams, "team_slugs": names, "environments": ENVIRONMENTS,
            "created": None, "form": {"team": your_teams[0]["slug"] if your_teams else "",
                                      "environments": [DEFAULT_ENVIRONMENT], "read_only": "on"}}


@signed_in
async def tokens_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        context = await _tokens_context(conn, actor)
    # A token just created is shown this once (its cookie is deleted, the page never stored).
    context["created"] = take_once(request, actor, "token")
    return render_page(request, "tokens.html", context)


@signed_in
async def create_token(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor)
    environments = form.getall("environments")

    async def again(conn: db.Connection) -> dict[str, Any]:  # what was chosen, not the defaults
        return {**await _tokens_context(conn, actor),
                "form": {**form.kept(), "environments": environments}}

    async with form.attempt(request, "tokens.html", again) as conn:
        row, token = await tokens.create_token(
            conn, actor, request.app[KEYRING], name=form["name"], team=form["team"] or None,
            environments=environments or None, read_only=form["read_only"] == "on")
    # Post/redirect/get: the token goes to the list page sealed for this session, never in
    # the URL; a reload of that page shows it no more and creates nothing.
    response = done(request, "tokens.tokens_page", "token_created")
    keep_once(request, response, actor, "token", {"name": row["name"], "token": token})
    return response


@signed_in
async def revoke_token(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with form_work(request, actor) as (_form, conn):
        await tokens.revoke_token(conn, actor, path_id(request, "token_id"))
    return done(request, "tokens.tokens_page", "token_revoked")
