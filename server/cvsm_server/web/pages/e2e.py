"""What the pages of end-to-end teams (docs/e2e.md) hand to the browser's script
(`static/e2e-pages.js`): the member's public key and wraps, the team's key version and the
member's wrap of its key, a re-key's plan. The script does the cryptography and fills the forms'
hidden fields; the page handlers (account, teams, secrets, members, tokens) pass what it sent to
the `e2e` domain module, which checks its syntax. Nothing here can open a value.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ...core.i18n import N_
from ...core.actor import Actor
from ...core.errors import BadRequest, Forbidden, NotFound
from ...e2e import service as e2e
from ...e2e import syntax as e2e_syntax
from ...secrets import service as domain
from .forms import Form
from .kit import ENVIRONMENTS
from ... import db

BAD_PAYLOAD = N_("Data dari skrip halaman tidak terbaca; muat ulang halaman lalu coba lagi")


async def user_key(conn: db.Connection, actor: Actor) -> dict | None:
    """The signed-in member's key pair as stored (public key and both wraps), or None."""
    try:
        return await e2e.get_user_key(conn, actor)
    except NotFound:
        return None


async def page_context(conn: db.Connection, actor: Actor, page: str) -> dict[str, Any]:
    """The data attributes of `#e2e-context` on a page about the member's own key (`page`:
    account, teams, tokens): who they are and their public key."""
    key = await user_key(conn, actor)
    return {"page": page, "user_id": str(actor.user_id),
            "public_key": e2e_syntax.b64u(key["public_key"]) if key else None,
            "fingerprint": e2e_syntax.fingerprint(key["public_key"]) if key else None,
            "pass_wrap": key["wrapped_private_key"] if key and page == "account" else None,
            "rec_wrap": key["recovery_wrapped_private_key"] if key and page == "account" else None}


async def team_wrap(conn: db.Connection, actor: Actor, team: dict) -> dict[str, Any]:
    """The member's wrap of the team's current key: team_id, key_version, wrapped_key (None
    when they were not granted access); and `wraps`, JSON of every wrap they hold by key version
    (a value sealed before a re-key names an older version); and `links`, JSON of the team's
    back-links by key version and `anchor`, the member's stored anchor or None (format 2,
    docs/e2e.md)."""
    team_id = uuid.UUID(str(team["id"]))
    links: dict[int, str] = {}
    try:
        key = await e2e.read_wrap(conn, actor, team_id)
        version, wrapped, links = key.key_version, key.wrapped_key, key.links
    except Forbidden:
        version, wrapped = team["key_version"], None
    wraps = await e2e.read_wraps(conn, actor, team_id)
    try:  # the member's anchor as stored (format 2): the script opens it and walks down to it
        anchor = (await e2e.read_anchor(conn, actor, team_id))["anchor"]
    except NotFound:
        anchor = None
    return {"team_id": str(team["id"]), "key_version": version, "wrapped_key": wrapped,
            "anchor": anchor,
            "wraps": json.dumps({str(v): w for v, w in wraps.items()}),
            # format 2: the team's back-links by key version, for the script's chain check
            "links": json.dumps({str(v): link for v, link in links.items()})}


async def team_context(conn: db.Connection, actor: Actor, team: dict) -> dict[str, Any] | None:
    """`#e2e-context` on an end-to-end team's pages; None for any other team."""
    if not team.get("e2e"):
        return None
    return {**await page_context(conn, actor, "team"), **await team_wrap(conn, actor, team),
            "team_ref": team["slug"]}  # where the script stores the member's anchor


def json_field(form: Form, name: str) -> Any:
    """A hidden field the script filled with JSON; a 400 page when it is not."""
    try:
        return json.loads(form[name])
    except (ValueError, RecursionError):  # nesting deep enough to exhaust the parser
        raise BadRequest(BAD_PAYLOAD) from None


async def rekey_plan(conn: db.Connection, actor: Actor, keyring: Any, team_id: uuid.UUID
                     ) -> dict[str, Any]:
    """What the browser needs to re-key: the current key version, every recipient of the new
    key (members who hold the current key, the team's live tokens with a public key) and every
    live secret's current envelope (read through the export, so the audit log has the read)."""
    version, members, tokens = await e2e.recipients(conn, actor, team_id)
    # format 2: each with the auth of its wrap of the current version (the script checks it
    # before wrapping the new key) and its fingerprint (the confirmation lists them)
    recipients = [{"user_id": str(m["user_id"]), "public_key": e2e_syntax.b64u(m["public_key"]),
                   "auth": m["auth"], "name": m["username"],
                   "fingerprint": e2e_syntax.fingerprint(m["public_key"])}
                  for m in members if m["has_access"] and m["public_key"] is not None]
    recipients += [{"token_id": str(t["token_id"]), "public_key": e2e_syntax.b64u(t["public_key"]),
                    "auth": t["auth"], "name": t["name"],
                    "fingerprint": e2e_syntax.fingerprint(t["public_key"])}
                   for t in tokens]
    secrets = []
    for environment in ENVIRONMENTS:
        values = await domain.export(conn, actor, keyring, team_id, environment=environment,
                                     fmt="json")
        for name, envelope in values.items():
            parts = e2e_syntax.parse_envelope(envelope)
            secrets.append({"id": str(parts.secret_id), "version": parts.version, "name": name,
                            "environment": environment, "value": envelope})
    return {"key_version": version, "recipients": recipients, "secrets": secrets}
