"""Rotation on the dashboard: the secret page's "Rotasi sekarang" (a CSRF-checked form; the
page's rotation section, `templates/rotation_section.html`, is filled by
`web.pages.secrets.rotation_context`), and a team's rotation page (Admin and above): its
policies listed with their state, one set (created or replaced, through the form's target
fields), run now or deleted, by the same domain functions the API uses (`web.rotation`; the
rules are in `rotation.policy`). A webhook target's new signing secret is shown once
(`once.keep_once`), as a new API token is."""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from ...core.actor import Actor
from ...core.errors import BadRequest
from ...core.i18n import gettext as _
from ...rotation import policy as secret_rotation, targets as rotation_targets
from ...teams import service as teams
from ..request import path_id
from ..state import KEYRING, POOL, SETTINGS
from .forms import Form
from .kit import done, signed_in
from .once import keep_once, take_once
from .rendering import render_page
from .teams import team_form
from ... import db

# The form's target fields, by kind (the API's `target` object is built from them).
DEFAULTS = {"interval_days": "30", "length": str(secret_rotation.DEFAULT_GENERATOR["length"]),
            "classes": list(secret_rotation.DEFAULT_GENERATOR["classes"]), "enabled": "on",
            "target_kind": "none", "value_format": "password"}


@signed_in
async def rotate_now(request: web.Request, actor: Actor) -> web.StreamResponse:
    secret_id = path_id(request, "secret_id")
    async with team_form(request, actor) as (_form, conn, team_id):
        await secret_rotation.rotate_now(conn, actor, team_id, secret_id)
    return done(request, "secrets.secret_page", "rotation_started",
                team=request.match_info["team"], secret_id=str(secret_id))


def _form_of(policy: dict) -> dict[str, Any]:
    """The form's values for an existing policy (its "Ubah" link)."""
    target = policy["target"] or {}
    users = target.get("usernames") or ["", ""]
    return {"secret_id": str(policy["secret_id"]), "interval_days": str(policy["interval_days"]),
            "length": str(policy["generator"].get("length", "")),
            "classes": list(policy["generator"].get("classes", [])),
            "enabled": "on" if policy["enabled"] else "", "target_kind": policy["target_kind"],
            "url": target.get("url", ""), "admin_secret_id": target.get("admin_secret_id", ""),
            "username": target.get("username", ""),
            "value_format": target.get("value_format", "password"),
            "username_a": users[0], "username_b": users[1],
            "owner_group": target.get("owner_group", "")}


async def _context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    team_ref = request.match_info["team"]
    team_id = await teams.resolve(conn, team_ref)
    team = await teams.get_team(conn, actor, team_id)
    policies = await secret_rotation.list_policies(conn, actor, team_id)
    form: dict[str, Any] = dict(DEFAULTS)
    editing = None
    wanted = request.query.get("edit", "")
    for policy in policies:
        if str(policy["secret_id"]) == wanted:
            editing, form = policy, _form_of(policy)
    return {"team_ref": team_ref, "team": team, "policies": policies, "editing": editing,
            "secrets": await secret_rotation.rotatable_secrets(conn, actor, team_id),
            "kinds": rotation_targets.KINDS, "classes": list(secret_rotation.CLASSES),
            "formats": rotation_targets.VALUE_FORMATS, "form": form, "created": None}


@signed_in
async def rotation_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        context = await _context(request, conn, actor)
    context["created"] = take_once(request, actor, "rotation_webhook")
    return render_page(request, "rotation.html", context, private=context["created"] is not None)


def _number(text: str) -> int | str:
    """A form's number as the API's int; anything else as typed (the domain refuses it)."""
    text = text.strip()
    return int(text) if text.isdigit() and len(text) < 10 else text


def _target(form: Form) -> dict[str, Any]:
    kind = form["target_kind"]
    if kind == "webhook":
        return {"kind": kind, "url": form["url"].strip()}
    if kind == "postgres":
        return {"kind": kind, "admin_secret_id": form["admin_secret_id"],
                "username": form["username"].strip(), "value_format": form["value_format"]}
    if kind == "postgres_alternating":
        target = {"kind": kind, "admin_secret_id": form["admin_secret_id"],
                  "usernames": [form["username_a"].strip(), form["username_b"].strip()]}
        if form["owner_group"].strip():
            target["owner_group"] = form["owner_group"].strip()
        return target
    return {"kind": kind}


@signed_in
async def set_rotation(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor)
    classes = form.getall("classes")

    async def again(conn: db.Connection) -> dict[str, Any]:  # what was typed, not the defaults
        return {**await _context(request, conn, actor),
                "form": {**form.kept(), "classes": classes}}

    async with form.attempt(request, "rotation.html", again) as conn:
        team_id = await teams.resolve(conn, request.match_info["team"])
        try:
            secret_id = uuid.UUID(form["secret_id"])
        except ValueError:
            raise BadRequest(_("Pilih secret yang dirotasi")) from None
        _row, signing = await secret_rotation.set_policy(
            conn, actor, request.app[KEYRING], team_id, secret_id,
            interval_days=_number(form["interval_days"]), target=_target(form),
            generator={"length": _number(form["length"]), "classes": classes},
            enabled=form["enabled"] == "on",
            allow_private=request.app[SETTINGS].webhook_allow_private)
        named = {s["id"]: s for s in await secret_rotation.rotatable_secrets(conn, actor, team_id)}
    response = done(request, "rotation.rotation_page", "rotation_policy_saved",
                    team=request.match_info["team"])
    if signing is not None:  # a new webhook target's signing secret: shown once
        shown = named.get(secret_id)
        keep_once(request, response, actor, "rotation_webhook", {
            "secret": f"{shown['name']} ({shown['environment']})" if shown else "",
            "signing_secret": signing})
    return response


@signed_in
async def delete_rotation(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with team_form(request, actor) as (_form, conn, team_id):
        await secret_rotation.delete_policy(conn, actor, team_id, path_id(request, "secret_id"))
    return done(request, "rotation.rotation_page", "rotation_policy_deleted",
                team=request.match_info["team"])


@signed_in
async def run_rotation(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with team_form(request, actor) as (_form, conn, team_id):
        await secret_rotation.rotate_now(conn, actor, team_id, path_id(request, "secret_id"))
    return done(request, "rotation.rotation_page", "rotation_started",
                team=request.match_info["team"])
