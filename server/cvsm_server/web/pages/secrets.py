"""A team's secrets: the list, creating, revealing and deleting one; one secret's page (versions,
rollback, shares, its rotation section); the .env import and export.

An end-to-end team's pages (docs/e2e.md) are the same pages: the browser's script seals what a
form sends and opens what a page shows (`web.pages.e2e`), so its forms carry envelopes, a
revealed value is its envelope, and the .env import and export are done in the browser (the
import posts the envelopes it sealed, the export is a page with the envelopes to open).
"""

from __future__ import annotations

import json
import uuid
from contextlib import AbstractAsyncContextManager
from typing import Any

from aiohttp import web

from ...core.i18n import N_, translate
from ...core.actor import Actor
from ...core.errors import BadRequest, NotFound
from ...core.inputs import whole_number
from ...audit import insights
from ...rotation import policy as secret_rotation
from ...secrets import bulk, dotenv, service as domain, shares, shell_export
from ...secrets import inputs as secret_inputs
from ...teams import roles, service as teams
from ..request import app_url, path_id
from ..state import KEYRING, POOL
from .e2e import json_field, team_context as e2e_context
from .forms import Form
from .kit import ENVIRONMENTS, done, signed_in
from .once import keep_once, take_once
from .rendering import choose_language, render_page
from .teams import team_form
from ... import db


def _environment(value: str | None) -> str:
    if value in ENVIRONMENTS:
        return value  # type: ignore[return-value]
    if value:
        raise NotFound(N_("Environment tidak dikenal"))
    return "production"


async def _secrets_context(request: web.Request, conn: db.Connection, actor: Actor,
                           team_ref: str, environment: str, search: str) -> dict[str, Any]:
    team_id = await teams.resolve(conn, team_ref)
    team = await teams.get_team(conn, actor, team_id)
    rows, total = await domain.list_secrets(conn, actor, team_id, environment=environment,
                                            search=search or None, limit=500)
    return {"team": team, "team_ref": team_ref,
            "environment": environment, "environments": ENVIRONMENTS, "types": secret_inputs.TYPES, "search": search,
            "secrets": rows, "total": total, "revealed": {}, "form": {"environment": environment},
            "can": roles.controls(team["role"]), "e2e": await e2e_context(conn, actor, team),
            "exported": None}


@signed_in
async def secrets_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    environment = _environment(request.query.get("environment"))
    search = request.query.get("q", "")[:255]
    async with db.connection(request.app[POOL]) as conn:
        context = await _secrets_context(request, conn, actor, request.match_info["team"],
                                         environment, search)
    context["imported"] = take_once(request, actor, "import")  # an import's result, once
    return render_page(request, "secrets.html", context)


def _list_form(request: web.Request, actor: Actor, form: Form,
               environment: str) -> AbstractAsyncContextManager[db.Connection]:
    """The secrets list's forms: a refusal is the list again, the message above the form."""
    return form.attempt(request, "secrets.html", lambda conn: _secrets_context(
        request, conn, actor, request.match_info["team"], environment, ""))


@signed_in
async def create_secret(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor, secret=("value",))  # the value is asked again
    team_ref = request.match_info["team"]
    environment = _environment(form["environment"])
    async with _list_form(request, actor, form, environment) as conn:
        team_id = await teams.resolve(conn, team_ref)
        item = secret_inputs.SecretInput.checked(
            name=form["name"].strip(), value=form.text("value"), environment=environment,
            type=form.get("type", "credential"), description=form.text("description"),
            id=form["id"] or None)  # an end-to-end team's: the id the value was sealed for
        await domain.create_secret(conn, actor, request.app[KEYRING], team_id, item)
    return done(request, "secrets.secrets_page", "secret_created", {"environment": environment},
                team=team_ref)


@signed_in
async def reveal_secret(request: web.Request, actor: Actor) -> web.StreamResponse:
    team_ref = request.match_info["team"]
    async with team_form(request, actor) as (form, conn, team_id):
        row, value = await domain.read_secret(conn, actor, request.app[KEYRING], team_id,
                                              path_id(request, "secret_id"))
        context = await _secrets_context(request, conn, actor, team_ref, row["environment"],
                                         form["q"][:255])
    context["revealed"] = {str(row["id"]): value}
    return render_page(request, "secrets.html", context, private=True)


@signed_in
async def delete_secret(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with team_form(request, actor) as (form, conn, team_id):
        environment = _environment(form["environment"])
        await domain.delete_secret(conn, actor, team_id, path_id(request, "secret_id"))
    return done(request, "secrets.secrets_page", "secret_deleted", {"environment": environment},
                team=request.match_info["team"])


async def rotation_context(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                           secret_id: uuid.UUID, role: str) -> dict[str, Any]:
    """What the secret page shows of rotation (it is shown to every member)."""
    policy, runs = await secret_rotation.get_policy(conn, actor, team_id, secret_id)
    return {"policy": policy, "runs": runs,
            "can_rotate": policy is not None and roles.RANK[role] >= roles.RANK[roles.MEMBER]}


async def _secret_context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    team_ref = request.match_info["team"]
    team_id = await teams.resolve(conn, team_ref)
    team = await teams.get_team(conn, actor, team_id)
    secret, versions = await domain.secret_history(conn, actor, team_id, path_id(request, "secret_id"))
    can_share = roles.RANK[team["role"]] >= roles.RANK[roles.MEMBER]
    share_rows = await shares.list_shares(conn, actor, team_id, secret["id"]) if can_share else []
    rotation = await rotation_context(conn, actor, team_id, secret["id"], team["role"])
    can = roles.controls(team["role"])
    # Who read it in the last 30 days (the audit log's reads), for those who may see the log.
    readers = await insights.secret_readers(conn, actor, team_id, secret["id"]) \
        if can["insights"] else []
    return {"team": team, "team_ref": team_ref,
            "secret": secret, "versions": versions, "shares": share_rows, "can_share": can_share,
            "share_url": None, "types": secret_inputs.TYPES, "rotation": rotation, "can": can,
            "readers": readers, "revealed": {}, "diff": None,
            "e2e": await e2e_context(conn, actor, team)}


async def secret_context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    """The secret page's context, for the handlers that show the page again with more on it
    (`web.pages.versions`: a revealed value, a diff)."""
    return await _secret_context(request, conn, actor)


@signed_in
async def secret_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        context = await _secret_context(request, conn, actor)
    # A share link just made is shown this once (its cookie is deleted, the page never stored).
    shared = take_once(request, actor, "share")
    context["share_url"] = shared["url"] if shared else None
    return render_page(request, "secret.html", context)


def _whole(form: Form, name: str, default: int) -> int:
    return whole_number(name, form.get(name, str(default)))


@signed_in
async def update_secret(request: web.Request, actor: Actor) -> web.StreamResponse:
    """A new value (left empty: kept), type or description; a changed value becomes a version."""
    form = await Form.posted(request, actor, secret=("value",))  # the value is asked again
    async with form.attempt(request, "secret.html",
                            lambda conn: _secret_context(request, conn, actor)) as conn:
        team_id = await teams.resolve(conn, request.match_info["team"])
        update = secret_inputs.SecretUpdate.checked(value=form.text("value") or None,
                                             type=form["type"] or None,
                                             description=form.text("description"))
        await domain.update_secret(conn, actor, request.app[KEYRING], team_id,
                                   path_id(request, "secret_id"), update)
    return _to_secret(request, "secret_updated")


def _to_secret(request: web.Request, message: str) -> web.Response:
    return done(request, "secrets.secret_page", message, team=request.match_info["team"],
                secret_id=str(path_id(request, "secret_id")))


@signed_in
async def rollback_secret(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with team_form(request, actor) as (form, conn, team_id):
        await domain.rollback(conn, actor, request.app[KEYRING], team_id, path_id(request, "secret_id"),
                              _whole(form, "version", 0))
    return _to_secret(request, "secret_rolled_back")


@signed_in
async def create_share(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with team_form(request, actor) as (form, conn, team_id):
        _row, token = await shares.create_share(
            conn, actor, request.app[KEYRING], team_id, path_id(request, "secret_id"),
            max_views=_whole(form, "max_views", 1), ttl_hours=_whole(form, "ttl_hours", 24),
            envelope=form["value"] or None)  # an end-to-end team's: sealed by the script
    # Shown once on the secret's page after the redirect, never in a URL (`keep_once`).
    response = _to_secret(request, "share_created")
    keep_once(request, response, actor, "share", {"url": f"{app_url(request)}/share/{token}"})
    return response


@signed_in
async def revoke_share(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with team_form(request, actor) as (_form, conn, team_id):
        await shares.revoke_share(conn, actor, team_id, path_id(request, "secret_id"),
                                  path_id(request, "share_id"))
    return _to_secret(request, "share_revoked")


# An end-to-end team's import posts each value sealed (base64url: 4/3 of the plaintext, and
# the envelope's header) in JSON, form-encoded: twice the .env limit, and room for every item's
# line, name and id.
IMPORT_FORM_LIMIT = 2 * bulk.MAX_DOTENV_BYTES + bulk.MAX_ITEMS * 512 + 64 * 1024


@signed_in
async def import_dotenv(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor, secret=("content",), max_bytes=IMPORT_FORM_LIMIT,
                             too_large=bulk.DOTENV_TOO_LARGE)
    upload = form.data.get("file")
    content = form.text("content")  # the textarea's; a file is read as it is
    if isinstance(upload, web.FileField) and upload.filename:
        try:
            content = upload.file.read(bulk.MAX_DOTENV_BYTES + 1).decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest(N_("Berkas .env harus UTF-8")) from None
    team_ref = request.match_info["team"]
    environment = _environment(form["environment"])
    async with _list_form(request, actor, form, environment) as conn:  # refused whole: a quota
        team_id = await teams.resolve(conn, team_ref)
        if form["items"]:  # an end-to-end team's: parsed and sealed by the script
            results, summary = await _import_sealed(conn, actor, request, team_id, form,
                                                    environment)
        else:
            _parsed, results, summary = await bulk.import_dotenv(
                conn, actor, request.app[KEYRING], team_id, content, environment)
    # The result (counts, and the lines refused with their names and reasons: never a value)
    # is shown once by the list after the redirect, so a reload imports nothing again.
    # (each reason in the page's language: it is kept as text, its values in it)
    choose_language(request)
    problems = [{"line": r.get("line"), "name": (r.get("name") or "")[:64],
                 "error": translate(r["error"])} for r in results if not r.get("ok")]
    response = done(request, "secrets.secrets_page", "secrets_imported",
                    {"environment": environment}, team=team_ref)
    keep_once(request, response, actor, "import", {
        "summary": {"ok": summary["ok"], "failed": summary["failed"]},
        "problems": problems[:IMPORT_PROBLEMS_SHOWN],
        "more": max(0, len(problems) - IMPORT_PROBLEMS_SHOWN)})
    return response


IMPORT_PROBLEMS_SHOWN = 8  # the rest are counted (the cookie that carries them holds 4 KB)


async def _import_sealed(conn: db.Connection, actor: Actor, request: web.Request,
                         team_id: uuid.UUID, form: Form, environment: str
                         ) -> tuple[list[dict], dict]:
    """An end-to-end team's .env import: the script parsed the file as the server would and
    sent each entry's line and name, with the envelope it sealed (and the id it chose), or the
    parser's message; the envelopes are created by the bulk create."""
    entries = json_field(form, "items")
    if not isinstance(entries, list) or not all(_item_shaped(e) for e in entries):
        raise BadRequest(BAD_ITEMS)
    sealed = [e for e in entries if "error" not in e]
    created, _summary = await bulk.bulk_create(
        conn, actor, request.app[KEYRING], team_id,
        [{"name": e.get("name"), "value": e.get("value"), "id": e.get("id"),
          "environment": environment} for e in sealed])
    lines = [e.get("line") for e in sealed]
    results = [{**r, "line": lines[r["index"]]} for r in created]
    results += [{"ok": False, "line": e.get("line"), "name": e.get("name"),
                 "error": str(e["error"])[:200]} for e in entries if "error" in e]
    results.sort(key=lambda r: r["line"] if isinstance(r.get("line"), int) else 0)
    return results, bulk.summary_of(results)


BAD_ITEMS = N_("Daftar impor dari skrip halaman tidak terbaca; muat ulang halaman lalu "
                 "coba lagi")


def _item_shaped(entry: object) -> bool:
    """An item as the script sends it: a whole line number and either the parser's message
    (`error`, the name when it read one) or the name, the id and the envelope, each a string."""
    if not isinstance(entry, dict) or type(entry.get("line")) is not int:
        return False
    if "error" in entry:
        return isinstance(entry["error"], str) and isinstance(entry.get("name"), str | None)
    return all(isinstance(entry.get(key), str) for key in ("name", "id", "value"))


# The dashboard's downloads: a renderer and the file's extension per export format.
_DOWNLOADS = {"dotenv": (dotenv.render, "env"), "shell": (shell_export.render, "sh")}


@signed_in
async def export_dotenv(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor)
    team_ref = request.match_info["team"]
    environment = _environment(form["environment"])
    fmt = form.get("format", "dotenv")
    if fmt not in _DOWNLOADS:
        raise BadRequest(secret_inputs.INVALID_EXPORT_FORMAT)
    render, extension = _DOWNLOADS[fmt]
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        team = await teams.get_team(conn, actor, team_id)
        if team.get("e2e"):  # the envelopes, for the page's script to open and write as .env
            values = await domain.export(conn, actor, request.app[KEYRING], team_id,
                                         environment=environment, fmt="json")
            context = await _secrets_context(request, conn, actor, team_ref, environment, "")
            context["exported"] = json.dumps(values)
            return render_page(request, "secrets.html", context, private=True)
        values = await domain.export(conn, actor, request.app[KEYRING], team_id,
                                     environment=environment, fmt=fmt)
    response = web.Response(text=render(values), content_type="text/plain", charset="utf-8")
    response.headers["Content-Disposition"] = f'attachment; filename="{environment}.{extension}"'
    response.headers["Cache-Control"] = "no-store"
    return response
