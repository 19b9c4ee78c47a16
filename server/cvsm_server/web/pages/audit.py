"""The audit log page's export buttons: the same CSV or JSON-lines download as the API's
`GET .../audit/export` (`web.audit.stream_export`, audited as `audit_export`), asked by a POST
with the session's CSRF token instead of a bearer token, over the date range the page shows.
"""

from __future__ import annotations

from aiohttp import web

from ...core.actor import Actor
from ...audit import log as audit
from ..audit import stream_export
from .kit import signed_in
from .teams import team_form


@signed_in
async def export_audit(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with team_form(request, actor) as (form, conn, team_id):
        fmt = audit.check_export_format(form["format"])
        start, end = audit.parse_export_range(form["from"], form["to"])
        return await stream_export(request, conn, actor, team_id, fmt, start, end)
