"""The page that confirms a `cvsm login` (RFC 8628's verification URI, `/device`;
`accounts.device_flow`): a signed-in member types the code the terminal shows (or opens the
terminal's link with it filled in), sees which machine asked (host name, address, agent, when:
a code someone else sent them shows as a stranger's machine), picks the team and the reach, and
approves or denies. Signed out, sign-in comes back here with the code."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from ...accounts import device_flow
from ...core.actor import Actor
from ...core.errors import BadRequest, DomainError, TooManyRequests
from ...teams import roles, service as teams
from ..state import POOL
from .forms import Form, failures_of
from .kit import ENVIRONMENTS, done, redirect_to, signed_in, url_for
from .rendering import render_page, signed_in_actor
from ... import db

TEMPLATE = "device.html"


async def device_page(request: web.Request) -> web.StreamResponse:
    """The code's form, or with `user_code` in the query the request it names, to decide."""
    code = request.query.get("user_code", "")
    actor = signed_in_actor(request)
    if actor is None:
        back = device_flow.PATH + (f"?{urlencode({'user_code': code[:32]})}" if code else "")
        return redirect_to(url_for(request, "auth.signin_page", {"next": back}))
    return await _shown(request, actor, code)


def _entry(request: web.Request, code: str, error: DomainError | None = None) -> web.Response:
    """The form to type a code in (with `error` beside it)."""
    context: dict[str, Any] = {"step": "enter", "form": {"user_code": code[:32]}}
    if error is not None:
        context["errors"] = {"user_code": error.message}
    response = render_page(request, TEMPLATE, context,
                           status=error.status if error is not None else 200, private=True)
    if error is not None:
        response.headers.update(error.headers)
    return response


async def _shown(request: web.Request, actor: Actor, code: str, *,
                 error: DomainError | None = None,
                 kept: dict[str, Any] | None = None) -> web.Response:
    """The request the code names, to decide (with `error` above the form), or the code's form
    again when it names none."""
    if not code:
        return _entry(request, code)
    async with db.connection(request.app[POOL]) as conn:
        try:
            found = await device_flow.describe(conn, actor, code, failures_of(request))
        except DomainError as exc:
            return _entry(request, code, exc)
        your_teams = await teams.list_teams(conn, actor)
    context: dict[str, Any] = {
        "step": "confirm", "pending": found, "teams": your_teams,
        "environments": ENVIRONMENTS, "viewer": roles.VIEWER,
        "form": kept or {"team": your_teams[0]["slug"] if your_teams else "",
                         "read_only": "on", "environments": []},
    }
    if error is not None:
        context["error"] = error.message
    response = render_page(request, TEMPLATE, context,
                           status=error.status if error is not None else 200, private=True)
    if error is not None:
        response.headers.update(error.headers)
    return response


@signed_in
async def decide(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor)
    decision, code = form["decision"], form["user_code"]
    if decision not in ("approve", "deny"):
        raise BadRequest(device_flow.BAD_DECISION)
    environments = form.getall("environments")
    async with db.connection(request.app[POOL]) as conn:
        try:
            await device_flow.decide(conn, actor, code, approve=decision == "approve",
                                     team=form["team"] or None,
                                     read_only=form["read_only"] == "on",
                                     environments=environments or None,
                                     failures=failures_of(request))
        except DomainError as exc:
            if isinstance(exc, TooManyRequests) or exc.message == device_flow.USER_CODE_UNKNOWN:
                return _entry(request, code, exc)  # counted once already: not looked up again
            failed = exc
        else:
            failed = None
    if failed is not None:
        return await _shown(request, actor, code, error=failed,
                            kept={**form.kept(), "environments": environments})
    return done(request, "device.device_page",
                "device_approved" if decision == "approve" else "device_denied")
