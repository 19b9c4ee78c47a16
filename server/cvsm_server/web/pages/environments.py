"""A team's environments side by side: one table of its names by production, staging and
development, saying where a name is missing and where the values differ (by digests made for
that one answer, never the values: `insights.compare_environments`), with a reveal per cell
(a POST audited as a read: `secrets.read_secret`) that shows the table again, never stored.
"""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from ...core.actor import Actor
from ...core.errors import NotFound
from ...audit import insights
from ...secrets import service as domain
from ...secrets import queries as secret_queries
from ...teams import service as teams
from ..state import KEYRING, POOL
from .e2e import team_context as e2e_context
from .forms import Form
from .kit import signed_in
from .rendering import render_page
from .session import form_field
from ... import db


async def _context(request: web.Request, conn: db.Connection, actor: Actor,
                   team_ref: str) -> dict[str, Any]:
    team_id = await teams.resolve(conn, team_ref)
    team = await teams.get_team(conn, actor, team_id)
    comparison = await insights.compare_environments(conn, actor, request.app[KEYRING], team_id)
    return {"team": team, "e2e": await e2e_context(conn, actor, team),
            "team_ref": team_ref, "comparison": comparison, "revealed": {},
            "differing": sum(row.differs for row in comparison.rows),
            "missing": sum(bool(row.missing) for row in comparison.rows)}


@signed_in
async def environments_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        context = await _context(request, conn, actor, request.match_info["team"])
    return render_page(request, "environments.html", context)


@signed_in
async def reveal_cell(request: web.Request, actor: Actor) -> web.StreamResponse:
    """One cell's value (the secret named in the form), shown in its cell."""
    form = await Form.posted(request, actor)
    try:
        secret_id = uuid.UUID(form_field(form, "secret_id"))
    except ValueError:
        raise NotFound(secret_queries.SECRET_NOT_FOUND) from None
    team_ref = request.match_info["team"]
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        _row, value = await domain.read_secret(conn, actor, request.app[KEYRING], team_id,
                                               secret_id)
        context = await _context(request, conn, actor, team_ref)
    context["revealed"] = {secret_id: value}
    return render_page(request, "environments.html", context, private=True)
