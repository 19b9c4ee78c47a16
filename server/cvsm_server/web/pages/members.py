"""A team's members and invitations, and the invitation link from mail. An end-to-end team's
page also lists who holds its key, with each member's key fingerprint, and offers the grant and
the re-key forms (`web.pages.e2e`).
"""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from typing import Any

from aiohttp import web

from ...core.actor import Actor
from ...core.errors import BadRequest
from ...e2e import service as e2e
from ...teams import invites, roles, service as teams
from ..e2e import MAX_REKEY_BODY
from ..request import app_url, path_id
from ..state import KEYRING, POOL
from .e2e import BAD_PAYLOAD, json_field, rekey_plan, team_context as e2e_context
from .forms import Form, failures_of
from .kit import done, link_page, signed_in
from .rendering import render_page
from .teams import team_form
from ... import db


async def members_context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    team_ref = request.match_info["team"]
    team_id = await teams.resolve(conn, team_ref)
    team = await teams.get_team(conn, actor, team_id)
    can_invite = roles.RANK[team["role"]] >= roles.RANK[roles.ADMIN]
    members = await teams.list_members(conn, actor, team_id)
    # What each row offers, by the rules `teams.update_member` and `remove_member` enforce.
    owners = sum(member["role"] == roles.OWNER for member in members)
    offers = {str(m["user_id"]): {
        "change": teams.may_change_role(team["role"], m["role"], owners=owners),
        "remove": teams.may_remove(team["role"], m["role"], is_self=m["user_id"] == actor.user_id,
                                   owners=owners),
        "self": m["user_id"] == actor.user_id} for m in members}
    keys = None
    if team.get("e2e"):  # who holds the team key, and each member's key fingerprint
        _version, holders, _tokens = await e2e.recipients(conn, actor, team_id)
        keys = {str(h["user_id"]): e2e.member_key_json(h) for h in holders}
    return {"team_ref": team_ref, "team": team, "members": members,
            "e2e": await e2e_context(conn, actor, team), "e2e_keys": keys, "rekey_plan": None,
            "rekey_recipients": [],
            "roles": list(roles.RANK), "can_invite": can_invite,
            "invites": await invites.list_invites(conn, actor, team_id) if can_invite else [],
            "offers": offers, "grantable": teams.grantable_roles(team["role"]),
            "can": roles.controls(team["role"])}


@signed_in
async def members_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        return render_page(request, "members.html", await members_context(request, conn, actor))


def _member_form(request: web.Request, actor: Actor, form: Form, field: str,
                 statuses: tuple[int, ...]) -> AbstractAsyncContextManager[db.Connection]:
    """The members page's forms: a refusal with one of `statuses` is said beside `field`."""
    return form.attempt(request, "members.html", lambda conn: members_context(request, conn, actor),
                        field=lambda exc: field if exc.status in statuses else None)


def _to_members(request: web.Request, message: str) -> web.Response:
    return done(request, "members.members_page", message, team=request.match_info["team"])


@signed_in
async def add_member(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor)
    async with _member_form(request, actor, form, "identifier", (404, 409)) as conn:
        team_id = await teams.resolve(conn, request.match_info["team"])
        await teams.add_member(conn, actor, team_id, form["identifier"], form["role"])
    return _to_members(request, "member_added")


@signed_in
async def change_member(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with team_form(request, actor) as (form, conn, team_id):
        if form["action"] == "remove":
            await teams.remove_member(conn, actor, team_id, path_id(request, "user_id"))
            return _to_members(request, "member_removed")
        await teams.update_member(conn, actor, team_id, path_id(request, "user_id"), form["role"])
    return _to_members(request, "member_changed")


@signed_in
async def create_invite(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor)
    async with _member_form(request, actor, form, "email", (400, 409)) as conn:
        team_id = await teams.resolve(conn, request.match_info["team"])
        await invites.create_invite(conn, actor, request.app[KEYRING], team_id, form["email"],
                                    form["role"], app_url(request))
    return _to_members(request, "invite_sent")


@signed_in
async def revoke_invite(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with team_form(request, actor) as (_form, conn, team_id):
        await invites.revoke_invite(conn, actor, team_id, path_id(request, "invite_id"))
    return _to_members(request, "invite_revoked")


@signed_in
async def grant_access(request: web.Request, actor: Actor) -> web.StreamResponse:
    """An end-to-end team's key, wrapped by the page's script to the member's public key."""
    async with team_form(request, actor) as (form, conn, team_id):
        await e2e.grant(conn, actor, team_id, path_id(request, "user_id"), form["wrapped_key"],
                        form["public_key"], auth=form["auth"] or None)
    return done(request, "members.members_page", "e2e_granted", team=request.match_info["team"],
                fragment="kunci-tim")


@signed_in
async def store_anchor(request: web.Request, actor: Actor) -> web.StreamResponse:
    """The member's anchor for the team (format 2), sealed by the page's script when it verified
    a newer key version (or at the first open): 204, for the script's request."""
    async with team_form(request, actor) as (form, conn, team_id):
        await e2e.store_anchor(conn, actor, team_id, form["anchor"])
    return web.Response(status=204)


# The re-key's payload is the JSON API's body (every live secret sealed again), form-encoded:
# its limit, and room for the escaped quotes and brackets of up to 1,000 entries.
REKEY_FORM_LIMIT = MAX_REKEY_BODY + 1000 * 256


@signed_in
async def rekey(request: web.Request, actor: Actor) -> web.StreamResponse:
    """An end-to-end team's re-key. The first post (no payload): this page again with the plan
    for the script (`e2e.rekey_plan`: its reads are audited); the second, with the payload the
    script made from it (new wraps, values sealed again): the re-key, in one transaction."""
    form = await Form.posted(request, actor, max_bytes=REKEY_FORM_LIMIT)
    team_ref = request.match_info["team"]
    again = form.attempt(request, "members.html",
                         lambda conn: members_context(request, conn, actor))
    if not form["payload"]:
        async with again as conn:
            team_id = await teams.resolve(conn, team_ref)
            plan = await rekey_plan(conn, actor, request.app[KEYRING], team_id)
            context = await members_context(request, conn, actor)
        return render_page(request, "members.html",
                           {**context, "rekey_plan": json.dumps(plan),
                            "rekey_recipients": plan["recipients"]}, private=True)
    payload = json_field(form, "payload")
    if not isinstance(payload, dict):
        raise BadRequest(BAD_PAYLOAD)
    async with again as conn:
        team_id = await teams.resolve(conn, team_ref)
        await e2e.rekey(conn, actor, team_id, key_version=payload.get("key_version"),
                        wraps=payload.get("wraps"), values=payload.get("secrets"),
                        link=payload.get("link"))
    return done(request, "members.members_page", "e2e_rekeyed", team=team_ref,
                fragment="kunci-tim")


async def invite_page(request: web.Request) -> web.StreamResponse:
    """The link from an invitation mail (`link_page`): it names the team, the inviter and the
    role, or says the link opens nothing any more."""
    async with db.connection(request.app[POOL]) as conn:
        invite = await invites.describe_invite(conn, request.app[KEYRING],
                                               request.query.get("token", ""),
                                               failures_of(request))
    if invite is None:
        return render_page(request, "invite.html", {"error": invites.INVITE_INVALID}, status=400,
                           private=True)
    return link_page(request, "invite.html", "/invites/accept", invites.INVITE_INVALID,
                     invite=invite)


@signed_in
async def accept_invite(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        team = await invites.accept_invite(conn, actor, request.app[KEYRING], form["token"])
    return done(request, "secrets.secrets_page", "invite_accepted", team=team["slug"])
