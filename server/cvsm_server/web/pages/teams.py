"""The teams page, creating a team, and a team's audit log.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from ...core.i18n import N_
from ...core.actor import Actor
from ...core.errors import BadRequest
from ...audit import log as audit
from ...secrets import inputs as secret_inputs
from ...teams import service as teams
from ..state import POOL, SETTINGS
from . import audit_rows
from .e2e import page_context
from .forms import Form, form_work, page_number
from .kit import done, signed_in, url_for
from .rendering import render_page
from ... import db

E2E_NEEDS_SCRIPT = N_("Tim end-to-end dibuat oleh skrip halaman ini, yang memerlukan JavaScript "
                      "dan HTTPS (atau localhost): buka dashboard lewat HTTPS lalu coba lagi")


@contextlib.asynccontextmanager
async def team_form(request: web.Request,
                    actor: Actor) -> AsyncIterator[tuple[Form, db.Connection, uuid.UUID]]:
    """A form of a team's pages that no page re-renders (a button: delete, revoke, rotate...):
    `kit.form_work` with the team of the path (`{team}`) resolved."""
    async with form_work(request, actor) as (form, conn):
        yield form, conn, await teams.resolve(conn, request.match_info["team"])


async def _teams_context(conn: db.Connection, actor: Actor) -> dict[str, Any]:
    return {"teams": await teams.list_teams(conn, actor),
            "e2e": await page_context(conn, actor, "teams")}


@signed_in
async def teams_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        return render_page(request, "teams.html", await _teams_context(conn, actor))


@signed_in
async def create_team(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor)
    async with form.attempt(request, "teams.html", lambda conn: _teams_context(conn, actor)) as conn:
        # An end-to-end team: the script made its id and its first key, wrapped to the
        # creator's public key (an e2e box sent without them is refused by `create_team`).
        e2e = form["e2e"] == "1"
        if e2e and not form["wrapped_key"]:  # the script did not run (no HTTPS, no JavaScript)
            raise BadRequest(E2E_NEEDS_SCRIPT)
        team = await teams.create_team(conn, actor, form["name"], form["slug"],
                                       configured_plan=request.app[SETTINGS].default_plan,
                                       e2e_wrapped_key=form["wrapped_key"] if e2e else None,
                                       e2e_auth=(form["auth"] or None) if e2e else None,
                                       team_id=secret_inputs.check_id(form["id"]) if e2e else None)
    return done(request, "secrets.secrets_page", "team_created", team=team["slug"])


AUDIT_PAGE = 50


@signed_in
async def audit_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    """The team's audit log, newest first, 50 entries a page, walked by cursor: `before` (the
    older page after an entry) and `after` (the newer page before one), each an index walk from
    the cursor; `page` alone (offset) still works and, beside a cursor, only numbers the page."""
    page = page_number(request.query.get("page"))
    before = audit.Cursor.parse(request.query.get("before"))
    after = None if before else audit.Cursor.parse(request.query.get("after"))
    team_ref = request.match_info["team"]
    filters = audit.Filters.parse(request.query)  # action, person, secret, from, to: links
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        team = await teams.get_team(conn, actor, team_id)
        result = None
        if after is not None:
            result = await audit.list_page(conn, actor, team_id, limit=AUDIT_PAGE, after=after,
                                           filters=filters, with_choices=True)
            if not result.newer:  # back at the top: the newest page, whole
                result, page = None, 1
        if result is None:
            result = await audit.list_page(
                conn, actor, team_id, limit=AUDIT_PAGE, before=before,
                offset=0 if before else (page - 1) * AUDIT_PAGE, filters=filters,
                with_choices=True)
    choices = result.choices
    total = result.total
    pages = None if total is None else max(1, -(-total // AUDIT_PAGE))

    @functools.cache
    def made(changes: tuple[tuple[str, str | int | None], ...]) -> str:
        query = {**filters.as_query(), **{k: str(v) for k, v in changes if v}}
        query = {k: v for k, v in query.items() if dict(changes).get(k, v)}
        return url_for(request, "teams.audit_page", query, team=team_ref)

    def link(**changes: str | int | None) -> str:
        """This page with the filters set, one changed (None: dropped), from its first page
        (each made once a page: a page's rows share their people, actions and secrets)."""
        return made(tuple(sorted(changes.items())))

    entries = result.entries
    newer = link(after=str(audit.Cursor.of(entries[0])), page=page - 1) \
        if page > 1 and entries else (link() if page > 1 else None)
    older = link(before=str(result.next_before), page=page + 1) if result.next_before else None
    return render_page(request, "audit.html", {"team": team, "team_ref": team_ref,
                                               "rows": audit_rows.rows(entries, link),
                                               "total": total, "page": page,
                                               "pages": pages, "filters": filters,
                                               "choices": choices, "link": link,
                                               "newer": newer, "older": older,
                                               "count_cap": audit.COUNT_CAP})
