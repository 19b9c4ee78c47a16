"""The audit log page's export buttons: the same CSV or JSON-lines download as the API's
`GET .../audit/export` (`web.audit.stream_export`, audited as `audit_export`), asked by a POST
with the session's CSRF token instead of a bearer token, over the date range the page shows.
"""

from __future__ import annotations

from aiohttp import web

from ... import audit, db, teams
from ...actor import Actor
from ..audit import stream_export
from ..state import POOL
from .kit import form_field, signed_form, signed_in


@signed_in
async def export_audit(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await signed_form(request, actor)
    fmt = audit.check_export_format(form_field(form, "format"))
    start, end = audit.parse_export_range(form_field(form, "from"), form_field(form, "to"))
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, request.match_info["team"])
        return await stream_export(request, conn, actor, team_id, fmt, start, end)
