"""A team's read insights (Admin or above): the secrets nobody read and the API tokens nobody
used in 30 days (`insights`), each with a one-click delete or revoke (a POST with CSRF, asked
to confirm) that comes back to this page.
"""

from __future__ import annotations

from aiohttp import web

from ...core.actor import Actor
from ...accounts import tokens
from ...audit import insights
from ...secrets import service as domain
from ...teams import service as teams
from ..request import path_id
from ..state import POOL
from .kit import done, signed_in
from .rendering import render_page
from .teams import team_form
from ... import db


@signed_in
async def insights_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    team_ref = request.match_info["team"]
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        team = await teams.get_team(conn, actor, team_id)
        unread = await insights.unread_secrets(conn, actor, team_id)
        unused = await insights.unused_tokens(conn, actor, team_id)
    return render_page(request, "insights.html", {
        "team": team, "team_ref": team_ref,
        "unread": unread, "unused": unused, "days": insights.WINDOW.days})


@signed_in
async def delete_unread(request: web.Request, actor: Actor) -> web.StreamResponse:
    """Delete a secret from the list of unread ones (`secrets.delete_secret`: Admin or above)."""
    async with team_form(request, actor) as (_form, conn, team_id):
        await domain.delete_secret(conn, actor, team_id, path_id(request, "secret_id"))
    return done(request, "insights.insights_page", "secret_deleted", team=request.match_info["team"])


@signed_in
async def revoke_unused(request: web.Request, actor: Actor) -> web.StreamResponse:
    """Revoke one's own token from the list of unused ones (`tokens.revoke_token`: only its
    holder may)."""
    async with team_form(request, actor) as (_form, conn, team_id):
        await teams.get_team(conn, actor, team_id)
        await tokens.revoke_token(conn, actor, path_id(request, "token_id"))
    return done(request, "insights.insights_page", "token_revoked", team=request.match_info["team"])
