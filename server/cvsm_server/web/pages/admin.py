"""The admin panel's pages (`/app/admin/...`): users, teams and their plans, the instance's
numbers, and support tickets. Over the same domain functions as the admin API (`admin`,
`support`), with the dashboard's session, CSRF and CSP (`web.pages.kit`).

Someone signed in who is not an admin gets the 403 page the domain's `require_admin` raises (the
API answers 403 too); the nav shows the "Admin" link only to admins.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ...core.i18n import N_
from ...core.actor import Actor
from ...core.errors import BadRequest
from ...core.inputs import whole_number
from ...teams.service import PLANS, max_environments
from ...billing import service as billing
from ...instance import admin
from ...support import service as support
from ..request import app_url, path_id
from ..state import KEYRING, POOL, SETTINGS, STRIPE
from .forms import Form, beside, form_work, page_number
from .kit import done, redirect_to, signed_in, url_for
from .rendering import render_page
from ... import db

PAGE_SIZE = 25


def _search(request: web.Request) -> str:
    return request.query.get("q", "")[:200]


def _pages(total: int) -> int:
    return max(1, -(-total // PAGE_SIZE))


def _context(request: web.Request, actor: Actor, section: str, **extra: Any) -> dict[str, Any]:
    return {"section": section, **extra}


@signed_in
async def index(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        async with db.cursor(conn) as cur:
            await admin.require_admin(cur, actor)
    return redirect_to(url_for(request, "admin.users_page"))


# Users ----------------------------------------------------------------------------------------

async def _users_context(request: web.Request, conn: db.Connection, actor: Actor, search: str,
                         page: int) -> dict[str, Any]:
    rows, total = await admin.list_users(conn, actor, search=search, limit=PAGE_SIZE,
                                         offset=(page - 1) * PAGE_SIZE)
    return _context(request, actor, "users", users=rows, total=total, q=search, page=page,
                    pages=_pages(total), me=str(actor.user_id))


@signed_in
async def users_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        context = await _users_context(request, conn, actor, _search(request),
                                       page_number(request.query.get("page")))
    return render_page(request, "admin_users.html", context)


USER_ACTIONS = {"grant": {"is_admin": True}, "revoke": {"is_admin": False},
                "disable": {"disabled": True}, "enable": {"disabled": False}}


@signed_in
async def change_user(request: web.Request, actor: Actor) -> web.StreamResponse:
    """Grant or revoke admin, disable or enable (`action`); back to the same search and page."""
    form = await Form.posted(request, actor)
    search, page = form["q"][:200], page_number(form.get("page"))
    async with form.attempt(request, "admin_users.html", lambda conn: _users_context(
            request, conn, actor, search, page), raising=(403,)) as conn:
        change = USER_ACTIONS.get(form["action"])
        if change is None:
            raise BadRequest(N_("Tindakan tidak dikenal"))
        await admin.update_user(conn, actor, path_id(request, "user_id"), **change)
    return done(request, "admin.users_page", "user_changed", {"q": search, "page": str(page)})


# Teams and plans ------------------------------------------------------------------------------

async def _teams_context(request: web.Request, conn: db.Connection, actor: Actor, search: str,
                         page: int) -> dict[str, Any]:
    rows, total = await admin.list_teams(conn, actor, search=search, limit=PAGE_SIZE,
                                         offset=(page - 1) * PAGE_SIZE)
    new_team_plan = await admin.new_team_plan(conn, actor, request.app[SETTINGS].default_plan)
    # With billing on, each team's subscription state (the admin was checked by `list_teams`).
    billing_on = request.app[STRIPE] is not None
    states = await billing.team_states(conn, [r["id"] for r in rows]) if billing_on else {}
    return _context(request, actor, "teams", teams=rows, total=total, q=search, page=page,
                    pages=_pages(total), new_team_plan=new_team_plan, plans=PLANS,
                    billing_on=billing_on, states=states)


@signed_in
async def teams_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        context = await _teams_context(request, conn, actor, _search(request),
                                       page_number(request.query.get("page")))
    return render_page(request, "admin_teams.html", context)


@signed_in
async def set_new_team_plan(request: web.Request, actor: Actor) -> web.StreamResponse:
    """The plan new teams get from now on (`default_plan`); teams that exist keep theirs."""
    form = await Form.posted(request, actor)
    async with form.attempt(request, "admin_teams.html", lambda conn: _teams_context(
            request, conn, actor, "", 1), field="default_plan", raising=(403,)) as conn:
        await admin.set_new_team_plan(conn, actor, form["default_plan"])
    return done(request, "admin.teams_page", "new_team_plan_saved")


def _plan_form(team: dict, plan: str | None) -> dict[str, Any]:
    """What the plan form shows: a plan asked for (`?plan=`) with that plan's defaults, else the
    team's current plan and quotas. Empty means unlimited."""
    if plan in admin.PLAN_FORM_DEFAULTS:
        secrets_quota, members_quota = admin.PLAN_FORM_DEFAULTS[plan]
    else:
        plan, secrets_quota, members_quota = team["plan"], team["max_secrets"], team["max_members"]
    return {"plan": plan, "max_secrets": "" if secrets_quota is None else str(secrets_quota),
            "max_members": "" if members_quota is None else str(members_quota)}


def _plan_context(request: web.Request, actor: Actor, team: dict, form: dict) -> dict[str, Any]:
    return _context(request, actor, "teams", team=team, form=form, plans=list(PLANS),
                    defaults=admin.PLAN_FORM_DEFAULTS, max_quota=admin.MAX_QUOTA,
                    max_environments=max_environments(team["plan"]))


@signed_in
async def plan_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        team = await admin.get_team(conn, actor, path_id(request, "team_id"))
    form = _plan_form(team, request.query.get("plan"))
    return render_page(request, "admin_plan.html", _plan_context(request, actor, team, form))


def _quota_field(name: str, text: str) -> int | None:
    if not text.strip():
        return None
    return whole_number(name, text, maximum=admin.MAX_QUOTA,
                        message=f"Kolom '{name}' harus bilangan bulat 0 sampai {admin.MAX_QUOTA}, "
                                "atau kosong (tanpa batas)")


@signed_in
async def set_plan(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor)
    team_id = path_id(request, "team_id")

    async def again(conn: db.Connection) -> dict[str, Any]:  # the form keeps what was entered
        return _plan_context(request, actor, await admin.get_team(conn, actor, team_id), {})

    async with form.attempt(request, "admin_plan.html", again, raising=(403, 404)) as conn:
        await admin.set_plan(conn, actor, team_id, form["plan"],
                             max_secrets=_quota_field("max_secrets", form["max_secrets"]),
                             max_members=_quota_field("max_members", form["max_members"]))
    return done(request, "admin.plan_page", "plan_saved", team_id=str(team_id))


# Numbers --------------------------------------------------------------------------------------

@signed_in
async def stats_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        numbers = await admin.stats(conn, actor)
        _, open_tickets = await support.list_tickets(conn, actor, status="open", limit=1)
    return render_page(request, "admin_stats.html", _context(request, actor, "stats", stats=numbers,
                                                             open_tickets=open_tickets))


# Support tickets ------------------------------------------------------------------------------

@signed_in
async def tickets_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    status = "closed" if request.query.get("status") == "closed" else "open"
    page = page_number(request.query.get("page"))
    async with db.connection(request.app[POOL]) as conn:
        rows, total = await support.list_tickets(conn, actor, status=status, limit=PAGE_SIZE,
                                                 offset=(page - 1) * PAGE_SIZE)
    return render_page(request, "admin_tickets.html", _context(
        request, actor, "tickets", tickets=rows, total=total, status=status, page=page,
        pages=_pages(total)))


async def _ticket_context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    ticket, messages = await support.get_ticket(conn, actor, path_id(request, "ticket_id"))
    return _context(request, actor, "tickets", ticket=ticket, messages=messages)


@signed_in
async def ticket_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        context = await _ticket_context(request, conn, actor)
    return render_page(request, "admin_ticket.html", context, private=True)


@signed_in
async def reply_ticket(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor)
    ticket_id = path_id(request, "ticket_id")
    async with form.attempt(request, "admin_ticket.html",
                            lambda conn: _ticket_context(request, conn, actor),
                            field=beside("message", 400), raising=(403, 404), private=True) as conn:
        await support.reply_ticket(conn, actor, request.app[KEYRING], ticket_id, form.text("message"),
                                   base_url=app_url(request))
    return done(request, "admin.ticket_page", "reply_sent", ticket_id=str(ticket_id))


@signed_in
async def close_ticket(request: web.Request, actor: Actor) -> web.StreamResponse:
    ticket_id = path_id(request, "ticket_id")
    async with form_work(request, actor) as (_form, conn):
        await support.close_ticket(conn, actor, ticket_id)
    return done(request, "admin.ticket_page", "ticket_closed", ticket_id=str(ticket_id))
