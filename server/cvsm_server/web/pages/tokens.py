"""API tokens: the list, creating one (shown once), revoking.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ... import db, teams, tokens
from ...actor import Actor
from ...errors import DomainError
from ..request import path_id
from ..state import KEYRING, POOL
from .kit import (ENVIRONMENTS, form_field, redirect_to, render_page, session_csrf, signed_form,
                  signed_in, url_for)


async def _tokens_context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    rows = await tokens.list_tokens(conn, actor)
    your_teams = await teams.list_teams(conn, actor)
    names = {team["id"]: team["slug"] for team in your_teams}
    return {"user": actor, "csrf": session_csrf(request, actor), "tokens": rows, "teams": your_teams,
            "team_slugs": names, "environments": ENVIRONMENTS, "created": None}


@signed_in
async def tokens_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        return render_page(request, "tokens.html", await _tokens_context(request, conn, actor))


@signed_in
async def create_token(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await signed_form(request, actor)
    environments = [e for e in form.getall("environments", []) if isinstance(e, str)]
    async with db.connection(request.app[POOL]) as conn:
        try:
            row, token = await tokens.create_token(
                conn, actor, request.app[KEYRING], name=form_field(form, "name"),
                team=form_field(form, "team") or None, environments=environments or None,
                read_only=form_field(form, "read_only") == "on")
        except DomainError as exc:
            context = await _tokens_context(request, conn, actor)
            context.update(error=exc.message, form={"name": form_field(form, "name")})
            return render_page(request, "tokens.html", context, status=exc.status)
        context = await _tokens_context(request, conn, actor)
    # The token is shown this once, on a page that is never stored.
    context["created"] = {"name": row["name"], "token": token}
    return render_page(request, "tokens.html", context, private=True)


@signed_in
async def revoke_token(request: web.Request, actor: Actor) -> web.StreamResponse:
    await signed_form(request, actor)
    token_id = path_id(request, "token_id")
    async with db.connection(request.app[POOL]) as conn:
        await tokens.revoke_token(conn, actor, token_id)
    return redirect_to(url_for(request, "tokens.tokens_page"))
