"""The secret page's "Rotasi sekarang" (a CSRF-checked form). The page's rotation section
(`templates/rotation_section.html`: the policy, its latest runs, the last failure as a notice)
is filled by `web.pages.secrets.rotation_context`; the policy itself is set through the API
(`web.rotation`); the rules are in `secret_rotation`."""

from __future__ import annotations

from aiohttp import web

from ...core.actor import Actor
from ...rotation import policy as secret_rotation
from ..request import path_id
from .kit import done, signed_in
from .teams import team_form


@signed_in
async def rotate_now(request: web.Request, actor: Actor) -> web.StreamResponse:
    secret_id = path_id(request, "secret_id")
    async with team_form(request, actor) as (_form, conn, team_id):
        await secret_rotation.rotate_now(conn, actor, team_id, secret_id)
    return done(request, "secrets.secret_page", "rotation_started",
                team=request.match_info["team"], secret_id=str(secret_id))
