"""One secret's values on its page: the current value or any version's, and a diff of two
versions' values. Each is a POST (the value never rides in a URL) that shows the secret page
again with the value on it, never stored (`no-store`); each value read is audited as a `read`
(`secrets.read_secret` for the current value, `secrets.read_versions` for a version and for
both sides of a diff).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from ...core.i18n import N_
from ...core.actor import Actor
from ...core.errors import BadRequest
from ...core.inputs import whole_number
from ...secrets import service as domain
from ...teams import service as teams
from ..request import path_id
from ..state import KEYRING, POOL
from .forms import Form
from .kit import signed_in
from .rendering import render_page
from .secrets import secret_context
from .session import form_field
from ... import db

BAD_VERSION = N_("Pilih nomor versi yang ada")
SAME_VERSION = N_("Pilih dua versi yang berbeda untuk dibandingkan")


def _version(form: Mapping[str, Any], name: str) -> int:
    return whole_number(name, form_field(form, name), minimum=1, message=BAD_VERSION)


def diff_lines(old: str, new: str) -> list[tuple[str, str]]:
    """The lines of a unified diff of `old` to `new`, each as (kind, text): `del`, `add`,
    `hunk` (an `@@` line) or `same`; the file header lines are left out."""
    lines = []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=3):
        if line.startswith(("---", "+++")):
            continue
        kind = {"-": "del", "+": "add", "@": "hunk"}.get(line[:1], "same")
        lines.append((kind, line))
    return lines


@signed_in
async def reveal_value(request: web.Request, actor: Actor) -> web.StreamResponse:
    """The current value (`version` empty) or one version's, shown on the secret page."""
    form = await Form.posted(request, actor)
    secret_id = path_id(request, "secret_id")
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, request.match_info["team"])
        if form_field(form, "version").strip():
            version = _version(form, "version")
            _meta, values = await domain.read_versions(conn, actor, request.app[KEYRING],
                                                       team_id, secret_id, [version])
            value = values[version]
        else:
            row, value = await domain.read_secret(conn, actor, request.app[KEYRING], team_id,
                                                  secret_id)
            version = row["version"]
        context = await secret_context(request, conn, actor)
    context["revealed"] = {version: value}
    return render_page(request, "secret.html", context, private=True)


@signed_in
async def diff_versions(request: web.Request, actor: Actor) -> web.StreamResponse:
    """What changed between two versions' values (both reads audited), on the secret page."""
    form = await Form.posted(request, actor)
    old, new = _version(form, "from"), _version(form, "to")
    if old == new:
        raise BadRequest(SAME_VERSION)
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, request.match_info["team"])
        _meta, values = await domain.read_versions(conn, actor, request.app[KEYRING], team_id,
                                                   path_id(request, "secret_id"), [old, new])
        context = await secret_context(request, conn, actor)
    context["diff"] = {"from": old, "to": new, "lines": diff_lines(values[old], values[new])}
    return render_page(request, "secret.html", context, private=True)
