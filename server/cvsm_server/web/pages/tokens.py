"""API tokens: the list, creating one (shown once, after a redirect), revoking.

A token bound to an end-to-end team gets its own key pair in the browser (`static/e2e-pages.js`):
the form carries its public key and the team key wrapped to it; the private key stays in the
browser and is appended to the token where the page shows it once.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from ...core.actor import Actor
from ...accounts import tokens
from ...e2e import syntax as e2e_syntax
from ...teams import service as teams
from ..request import path_id
from ..state import KEYRING, POOL
from .e2e import page_context, team_wrap
from .forms import Form, form_work
from .kit import ENVIRONMENTS, done, signed_in
from .once import keep_once, take_once
from .rendering import render_page
from ... import db

# The form's default is the narrowest token (one team, one environment, read-only): the
# docs/server.md's advice for an application or a CI job. The broader choices are there, named.
DEFAULT_ENVIRONMENT = "production"


async def _tokens_context(conn: db.Connection, actor: Actor) -> dict[str, Any]:
    rows = await tokens.list_tokens(conn, actor)
    your_teams = await teams.list_teams(conn, actor)
    names = {team["id"]: team["slug"] for team in your_teams}
    # The member's wrap of each end-to-end team's key, for the script to wrap it to a new token.
    e2e_teams = {}
    for team in your_teams:
        if team.get("e2e"):
            wrap = await team_wrap(conn, actor, team)
            e2e_teams[team["slug"]] = {"teamId": wrap["team_id"], "keyVersion": wrap["key_version"],
                                       "wrappedKey": wrap["wrapped_key"] or "",
                                       "links": wrap["links"], "anchor": wrap["anchor"] or "",
                                       "teamRef": team["slug"]}
    return {"tokens": rows, "teams": your_teams, "team_slugs": names, "environments": ENVIRONMENTS,
            "e2e": await page_context(conn, actor, "tokens"), "e2e_teams": json.dumps(e2e_teams),
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
        e2e_key = ({"public_key": form["e2e_public_key"], "wrapped_key": form["e2e_wrapped_key"],
                    "auth": form["e2e_auth"] or None,
                    "key_version": int(form["e2e_key_version"])
                    if form["e2e_key_version"].isdigit() and len(form["e2e_key_version"]) < 10
                    else None}
                   if form["e2e_public_key"] else None)  # made by the script: see above
        row, token = await tokens.create_token(
            conn, actor, request.app[KEYRING], name=form["name"], team=form["team"] or None,
            environments=environments or None, read_only=form["read_only"] == "on",
            e2e_key=e2e_key)
    # Post/redirect/get: the token goes to the list page sealed for this session, never in
    # the URL; a reload of that page shows it no more and creates nothing.
    response = done(request, "tokens.tokens_page", "token_created")
    public = row.get("e2e_public_key")
    keep_once(request, response, actor, "token", {
        "name": row["name"], "token": token,
        "e2e_public_key": e2e_syntax.b64u(bytes(public)) if public is not None else None})
    return response


@signed_in
async def revoke_token(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with form_work(request, actor) as (_form, conn):
        await tokens.revoke_token(conn, actor, path_id(request, "token_id"))
    return done(request, "tokens.tokens_page", "token_revoked")
