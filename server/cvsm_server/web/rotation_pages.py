"""The secret page's rotation section (`templates/rotation_section.html`): the policy, its
latest runs, the last failure as a notice, and "Rotasi sekarang" (a CSRF-checked form). The
policy itself is set through the API (`web.rotation`); the rules are in `secret_rotation`."""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from .. import db, roles, secret_rotation, teams
from ..actor import Actor
from .dashboard import _redirect, _signed_form, signed_in
from .request import path_id
from .state import POOL


async def rotation_context(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                           secret_id: uuid.UUID, role: str) -> dict[str, Any]:
    """What the secret page shows of rotation (it is shown to every member)."""
    policy, runs = await secret_rotation.get_policy(conn, actor, team_id, secret_id)
    return {"policy": policy, "runs": runs,
            "can_rotate": policy is not None and roles.RANK[role] >= roles.RANK[roles.MEMBER]}


@signed_in
async def rotate_now(request: web.Request, actor: Actor) -> web.StreamResponse:
    await _signed_form(request, actor)
    team_ref = request.match_info["team"]
    secret_id = path_id(request, "secret_id")
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        await secret_rotation.rotate_now(conn, actor, team_id, secret_id)
    return _redirect(f"/app/teams/{team_ref}/secrets/{secret_id}")
