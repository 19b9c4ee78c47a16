"""A team's plan and its quotas: what is used of each, and what to do when one refuses
(`teams.plan_usage`). Shown to every member.
"""

from __future__ import annotations

from aiohttp import web

from ...core.actor import Actor
from ...teams import service as teams
from ..state import POOL
from .kit import signed_in
from .rendering import render_page
from ... import db


@signed_in
async def plan_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    team_ref = request.match_info["team"]
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        team = await teams.get_team(conn, actor, team_id)
        usage = await teams.plan_usage(conn, actor, team_id)
    return render_page(request, "plan.html", {
        "team": team, "team_ref": team_ref,
        "usage": usage, "plans": teams.PLANS})
