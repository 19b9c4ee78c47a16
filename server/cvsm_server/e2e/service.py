"""End-to-end teams on the server's side (docs/e2e.md): the syntax of what clients seal, members'
keys, the wraps of team keys (read, grant, drop) and the re-key of a team.

The server never opens anything here and imports nothing that could: it checks that an envelope,
a wrap or a wrapped private key has the shape docs/e2e.md defines (canonical base64url, the
right sizes) and that an envelope names the key version, secret and version being written, and
stores them as they came. A wrap is read by its recipient only: a member (session JWT) gets the
member's wrap, an API token the token's own.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from ..accounts.sessions import require_jwt
from ..core.actor import Actor
from ..core.errors import BadRequest, Conflict, Forbidden, NotFound
from ..core.i18n import Text
from ..core.inputs import parse_uuid
from ..core.timeutil import iso
from ..audit import log as audit
from ..teams import roles
from .syntax import (DUPLICATE, MEMBER_HAS_NO_KEY, MEMBER_KEY_CHANGED, MEMBER_NOT_FOUND, NOT_E2E,
                     NO_ANCHOR, NO_USER_KEY, NO_WRAP, ONE_RECIPIENT, RECIPIENT_KEY_CHANGED,
                     REKEY_RECIPIENTS, REKEY_SECRETS, REKEY_VERSION, USER_KEY_EXISTS, b64u,
                     check_anchor, check_auth, check_envelope, check_link, check_passphrase_wrap,
                     check_public_key, check_recovery_wrap, check_wrap, fingerprint, parse_envelope)
from .. import db

# --- syntax ------------------------------------------------------------------------------------


# --- the team's mode ---------------------------------------------------------------------------

async def key_version_of(cur: db.Cursor, team_id: uuid.UUID, *,
                         share: bool = False) -> int | None:
    """The team's current key version; None for a team that is not end-to-end. With `share`,
    the team row stays locked against a re-key (which locks it for update) until the caller's
    transaction ends, so what the caller wraps for that version is not left behind."""
    row = await db.fetchone(
        cur, "SELECT key_version FROM teams WHERE id = %s" + (" FOR SHARE" if share else ""),
        (team_id,))
    if row is None:
        raise NotFound(roles.TEAM_NOT_FOUND)
    return row["key_version"]


async def require_e2e(cur: db.Cursor, team_id: uuid.UUID, *, lock: bool = False) -> int:
    """The current key version of an end-to-end team (the row locked with `lock`); 400 else."""
    row = await db.fetchone(
        cur, "SELECT key_version FROM teams WHERE id = %s" + (" FOR NO KEY UPDATE" if lock else ""),
        (team_id,))
    if row is None:
        raise NotFound(roles.TEAM_NOT_FOUND)
    if row["key_version"] is None:
        raise BadRequest(NOT_E2E)
    return row["key_version"]


# --- members' keys -----------------------------------------------------------------------------

def user_key_json(row: Mapping) -> dict:
    return {"public_key": b64u(row["public_key"]), "fingerprint": fingerprint(row["public_key"]),
            "wrapped_private_key": row["wrapped_private_key"],
            "recovery_wrapped_private_key": row["recovery_wrapped_private_key"],
            "created_at": iso(row["created_at"]), "updated_at": iso(row["updated_at"])}


async def get_user_key(conn: db.Connection, actor: Actor) -> dict:
    """The actor's key pair as stored (public key, both wraps of the private key); session JWT
    only (an API token could take the passphrase wrap away to guess at)."""
    require_jwt(actor)
    async with db.cursor(conn) as cur:
        row = await db.fetchone(cur, "SELECT * FROM user_e2e_keys WHERE user_id = %s",
                                (actor.user_id,))
    if row is None:
        raise NotFound(NO_USER_KEY)
    return row


async def set_user_key(conn: db.Connection, actor: Actor, *, public_key: object,
                       wrapped_private_key: object, recovery_wrapped_private_key: object,
                       replace: bool = False) -> tuple[dict, bool]:
    """Store the actor's key pair (session JWT only). The same public key again replaces its
    wraps (a new passphrase); another public key needs `replace` (409 without) and deletes every
    wrap of a team key made for the old one, which it could no longer open. Returns the row and
    whether it was created."""
    require_jwt(actor)
    key = check_public_key(public_key)
    wrapped = check_passphrase_wrap(wrapped_private_key)
    recovery = check_recovery_wrap(recovery_wrapped_private_key)
    async with db.transaction(conn) as cur:
        # The key's row first, then the wraps: the order a grant and a re-key take (they hold
        # it FOR SHARE while they store wraps for it), so a wrap to the old key is either
        # stored before this and deleted by it, or refused (409) after it.
        old = await db.fetchone(
            cur, "SELECT public_key FROM user_e2e_keys WHERE user_id = %s FOR UPDATE",
            (actor.user_id,))
        changed = old is not None and bytes(old["public_key"]) != key
        if changed and not replace:
            raise Conflict(USER_KEY_EXISTS)
        row = await db.fetchone(
            cur,
            """INSERT INTO user_e2e_keys (user_id, public_key, wrapped_private_key,
                                          recovery_wrapped_private_key)
               VALUES (%s, %s, %s, %s)
               ON CONFLICT (user_id) DO UPDATE SET
                   public_key = EXCLUDED.public_key,
                   wrapped_private_key = EXCLUDED.wrapped_private_key,
                   recovery_wrapped_private_key = EXCLUDED.recovery_wrapped_private_key,
                   updated_at = now()
               RETURNING *""",
            (actor.user_id, key, wrapped, recovery))
        dropped = 0
        if changed:
            await cur.execute("DELETE FROM team_key_wraps WHERE user_id = %s", (actor.user_id,))
            dropped = cur.rowcount
        action = ("e2e_key_set" if old is None
                  else "e2e_key_replace" if changed else "e2e_key_rewrap")
        await audit.record(cur, actor, action, "user", resource_id=actor.user_id,
                           metadata={"fingerprint": fingerprint(key), "wraps_dropped": dropped})
    return row, old is None


# --- wraps -------------------------------------------------------------------------------------

async def insert_wrap(cur: db.Cursor, actor: Actor, team_id: uuid.UUID, key_version: int, *,
                      wrapped_key: str, auth: str | None = None, user_id: uuid.UUID | None = None,
                      token_id: uuid.UUID | None = None) -> None:
    """Store (or replace) the wrap of key version `key_version` for a member or a token, with
    the recipient's authentication made by the client that wrapped it (None: format 1)."""
    column, recipient = ("user_id", user_id) if user_id is not None else ("token_id", token_id)
    await cur.execute(
        f"""INSERT INTO team_key_wraps (team_id, key_version, {column}, wrapped_key, auth,
                                        created_by)
            VALUES (%s, %s, %s, %s, %s, %s)
            ON CONFLICT (team_id, key_version, {column}) WHERE {column} IS NOT NULL
            DO UPDATE SET wrapped_key = EXCLUDED.wrapped_key, auth = EXCLUDED.auth,
                          created_by = EXCLUDED.created_by, created_at = now()""",
        (team_id, key_version, recipient, wrapped_key, auth, actor.user_id))


async def caller_holds(cur: db.Cursor, actor: Actor, team_id: uuid.UUID, key_version: int) -> bool:
    """Whether the actor (the token itself, for an API token) has a wrap of `key_version`."""
    row = await db.fetchone(cur, _CALLER_WRAP, _caller_params(actor, team_id, key_version))
    return row is not None


_CALLER_WRAP = """SELECT wrapped_key, auth, created_at FROM team_key_wraps
                  WHERE team_id = %(team)s AND key_version = %(version)s
                    AND (CASE WHEN %(token)s::uuid IS NULL THEN user_id = %(user)s
                              ELSE token_id = %(token)s::uuid END)"""


def _caller_params(actor: Actor, team_id: uuid.UUID, key_version: int) -> dict:
    return {"team": team_id, "version": key_version, "user": actor.user_id,
            "token": actor.token_id}


async def drop_member_wraps(cur: db.Cursor, team_id: uuid.UUID, user_id: uuid.UUID) -> int:
    """Delete every wrap of the team's keys made for the member and for their API tokens (when
    they leave or are removed); returns how many."""
    await cur.execute(
        """DELETE FROM team_key_wraps
           WHERE team_id = %(team)s
             AND (user_id = %(user)s
                  OR token_id IN (SELECT id FROM api_tokens WHERE user_id = %(user)s))""",
        {"team": team_id, "user": user_id})
    dropped = cur.rowcount
    await cur.execute("DELETE FROM team_e2e_anchors WHERE team_id = %s AND user_id = %s",
                      (team_id, user_id))
    return dropped


@dataclass(frozen=True, slots=True)
class CallerKey:
    """The caller's wrap of one key version, its auth, and the team's back-links by version."""

    key_version: int
    wrapped_key: str
    auth: str | None
    links: dict[int, str]

    def __repr__(self) -> str:
        return f"CallerKey(key_version={self.key_version}, links={sorted(self.links)})"


async def read_wrap(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                    key_version: int | None = None, since: int | None = None) -> CallerKey:
    """The caller's wrap of the team key (the current version unless `key_version`): a member's
    own, or an API token's own, with its auth and the team's back-links (those of key versions
    above `since` when given; a client walks them down to its pin or anchor). Viewer or above;
    400 for a team that is not end-to-end, 403 when the caller holds none."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, roles.VIEWER)
        current = await require_e2e(cur, team_id)
        version = current if key_version is None else key_version
        row = None
        if 1 <= version <= current:
            row = await db.fetchone(cur, _CALLER_WRAP, _caller_params(actor, team_id, version))
        if row is None:
            raise Forbidden(NO_WRAP)
        links = await db.fetchall(
            cur,
            """SELECT key_version, link FROM team_key_links
               WHERE team_id = %s AND key_version > %s AND key_version <= %s
               ORDER BY key_version""",
            (team_id, since or 0, current))
    return CallerKey(version, row["wrapped_key"], row["auth"],
                     {r["key_version"]: r["link"] for r in links})


async def read_wraps(conn: db.Connection, actor: Actor, team_id: uuid.UUID) -> dict[int, str]:
    """Every wrap of the team's keys that the caller holds, by key version (to open values
    sealed before a re-key). Viewer or above; 400 for a team that is not end-to-end; empty when
    the caller holds none."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, roles.VIEWER)
        current = await require_e2e(cur, team_id)
        rows = await db.fetchall(
            cur,
            """SELECT key_version, wrapped_key FROM team_key_wraps
               WHERE team_id = %(team)s AND key_version <= %(version)s
                 AND (CASE WHEN %(token)s::uuid IS NULL THEN user_id = %(user)s
                           ELSE token_id = %(token)s::uuid END)
               ORDER BY key_version""",
            _caller_params(actor, team_id, current))
    return {row["key_version"]: row["wrapped_key"] for row in rows}


async def recipients(conn: db.Connection, actor: Actor, team_id: uuid.UUID
                     ) -> tuple[int, list[dict], list[dict]]:
    """The key version, the members (with their public key and whether they hold the current
    key) and, for an Admin or above, the team's live tokens that have a public key (the
    recipients a re-key must wrap to). Viewer or above; 400 for a team that is not end-to-end."""
    async with db.cursor(conn) as cur:
        role = await roles.require(cur, team_id, actor, roles.VIEWER)
        current = await require_e2e(cur, team_id)
        members = await db.fetchall(
            cur,
            """SELECT m.user_id, m.role, u.username, u.name, k.public_key,
                      w.id IS NOT NULL AS has_access, w.auth
               FROM team_members m JOIN users u ON u.id = m.user_id
               LEFT JOIN user_e2e_keys k ON k.user_id = m.user_id
               LEFT JOIN team_key_wraps w ON w.team_id = m.team_id
                    AND w.key_version = %(version)s AND w.user_id = m.user_id
               WHERE m.team_id = %(team)s ORDER BY u.username""",
            {"team": team_id, "version": current})
        tokens = []
        if roles.may(role, roles.ADMIN):
            tokens = await db.fetchall(cur, _LIVE_TOKENS + " ORDER BY t.created_at, t.id",
                                       {"team": team_id, "version": current})
    return current, members, tokens


# Tokens bound to the team, with a public key, not revoked or expired, whose user is a member.
_LIVE_TOKENS = """
SELECT t.id AS token_id, t.name, t.token_prefix, t.user_id, t.e2e_public_key AS public_key,
       w.id IS NOT NULL AS has_access, w.auth
FROM api_tokens t JOIN team_members m ON m.team_id = t.team_id AND m.user_id = t.user_id
LEFT JOIN team_key_wraps w ON w.team_id = t.team_id AND w.key_version = %(version)s
     AND w.token_id = t.id
WHERE t.team_id = %(team)s AND t.e2e_public_key IS NOT NULL AND t.revoked_at IS NULL
  AND (t.expires_at IS NULL OR t.expires_at > now())"""


def member_key_json(row: Mapping) -> dict:
    key = row["public_key"]
    return {"user_id": str(row["user_id"]), "username": row["username"], "name": row["name"],
            "role": row["role"], "public_key": b64u(key) if key is not None else None,
            "fingerprint": fingerprint(key) if key is not None else None,
            "has_access": row["has_access"], "auth": row.get("auth")}


def token_key_json(row: Mapping) -> dict:
    return {"token_id": str(row["token_id"]), "name": row["name"],
            "token_prefix": row["token_prefix"], "user_id": str(row["user_id"]),
            "public_key": b64u(row["public_key"]), "fingerprint": fingerprint(row["public_key"]),
            "has_access": row["has_access"], "auth": row.get("auth")}


async def grant(conn: db.Connection, actor: Actor, team_id: uuid.UUID, user_id: uuid.UUID,
                wrapped_key: object, public_key: object,
                key_version: int | None = None, auth: object = None) -> int:
    """Give a member a wrap of the team key (the current version unless `key_version`), made by
    the caller's client for `public_key`, which must be the member's current one (409 when they
    replaced it meanwhile: the wrap would open nothing), with the recipient's `auth` the client
    made (format 2). Admin or above, holding that key version themself; the member must have
    set up a key pair (409). Returns the key version."""
    wrapped = check_wrap(wrapped_key)
    wrapped_to = check_public_key(public_key)
    recipient_auth = check_auth(auth)
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN)
        current = await require_e2e(cur, team_id, lock=True)
        version = current if key_version is None else key_version
        if not 1 <= version <= current or not await caller_holds(cur, actor, team_id, version):
            raise Forbidden(NO_WRAP)
        member = await db.fetchone(
            cur,
            """SELECT m.user_id, u.email FROM team_members m JOIN users u ON u.id = m.user_id
               WHERE m.team_id = %s AND m.user_id = %s""",
            (team_id, user_id))
        if member is None:
            raise NotFound(MEMBER_NOT_FOUND)
        # Held until the wrap is stored, so a replacement of the key waits (`set_user_key`).
        key = await db.fetchone(
            cur, "SELECT public_key FROM user_e2e_keys WHERE user_id = %s FOR SHARE", (user_id,))
        if key is None:
            raise Conflict(MEMBER_HAS_NO_KEY)
        if bytes(key["public_key"]) != wrapped_to:
            raise Conflict(MEMBER_KEY_CHANGED)
        await insert_wrap(cur, actor, team_id, version, wrapped_key=wrapped, auth=recipient_auth,
                          user_id=user_id)
        await audit.record(cur, actor, "e2e_grant", "member", team_id=team_id,
                           resource_id=user_id,
                           metadata={"email": member["email"], "key_version": version,
                                     "fingerprint": fingerprint(key["public_key"])})
    return version


# --- re-key ------------------------------------------------------------------------------------

def _entries(items: object, name: str) -> list[dict]:
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise BadRequest(Text("Kolom '{name}' harus daftar objek", name=name))
    return items  # type: ignore[return-value]


def _uuid_of(item: dict, name: str, field_name: str) -> uuid.UUID:
    value = item.get(field_name)
    parsed = parse_uuid(value) if isinstance(value, str) else None
    if parsed is None:
        raise BadRequest(Text("Setiap entri '{name}' memerlukan '{field_name}' berupa UUID",
                              name=name, field_name=field_name))
    return parsed


async def rekey(conn: db.Connection, actor: Actor, team_id: uuid.UUID, *, key_version: object,
                wraps: object, values: object, link: object = None) -> dict:
    """Move the team to key version `key_version` (current + 1) in one transaction: the new
    key's wraps for every member who holds the current key and every live token of the team
    with a public key (members with a key pair but no access may be added), and one envelope
    per live secret sealed for its next version under the new key, which becomes its current
    value (the old one is kept as a version, under the old key). Admin or above, holding the
    current key. 409 when the set of recipients or secrets is not exactly the team's (changed
    meanwhile) or an envelope names another key version, secret or version. `link` (format 2)
    is the new version's back-link and each wrap's `auth` its recipient's authentication, both
    made by the re-keyer's client; the server stores them as they came."""
    if not isinstance(key_version, int) or isinstance(key_version, bool):
        raise BadRequest("Kolom 'key_version' harus bilangan bulat")
    back_link = check_link(link)
    wrap_items, value_items = _entries(wraps, "wraps"), _entries(values, "secrets")
    by_user: dict[uuid.UUID, tuple[str, str | None]] = {}
    by_token: dict[uuid.UUID, tuple[str, str | None]] = {}
    wrapped_to: dict[uuid.UUID, bytes] = {}  # the public key each member's wrap was made for
    for item in wrap_items:
        wrapped = (check_wrap(item.get("wrapped_key")), check_auth(item.get("auth"), "wraps.auth"))
        if (item.get("token_id") is None) == (item.get("user_id") is None):
            raise BadRequest(ONE_RECIPIENT)
        if item.get("token_id") is not None:
            target, recipient = by_token, _uuid_of(item, "wraps", "token_id")
        else:
            target, recipient = by_user, _uuid_of(item, "wraps", "user_id")
            wrapped_to[recipient] = check_public_key(item.get("public_key"))
        if recipient in target:
            raise BadRequest(Text(DUPLICATE, name="wraps"))
        target[recipient] = wrapped
    sealed: dict[uuid.UUID, str] = {}
    for item in value_items:
        secret_id = _uuid_of(item, "secrets", "id")
        if secret_id in sealed:
            raise BadRequest(Text(DUPLICATE, name="secrets"))
        value = item.get("value")
        parse_envelope(value)
        sealed[secret_id] = value  # type: ignore[assignment]
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN)
        current = await require_e2e(cur, team_id, lock=True)
        if key_version != current + 1:
            raise Conflict(Text(REKEY_VERSION, want=current + 1))
        if not await caller_holds(cur, actor, team_id, current):
            raise Forbidden(NO_WRAP)
        params = {"team": team_id, "version": current}
        holders = {r["user_id"] for r in await db.fetchall(
            cur,
            """SELECT w.user_id FROM team_key_wraps w
               JOIN team_members m ON m.team_id = w.team_id AND m.user_id = w.user_id
               WHERE w.team_id = %(team)s AND w.key_version = %(version)s""", params)}
        # The members' keys are held FOR SHARE until the new wraps are stored (`set_user_key`).
        keyed = {r["user_id"]: bytes(r["public_key"]) for r in await db.fetchall(
            cur,
            """SELECT m.user_id, k.public_key FROM team_members m
               JOIN user_e2e_keys k ON k.user_id = m.user_id
               WHERE m.team_id = %(team)s ORDER BY m.user_id FOR SHARE OF k""", params)}
        tokens = {r["token_id"] for r in await db.fetchall(cur, _LIVE_TOKENS, params)}
        missing = len(holders - set(by_user)) + len(tokens - set(by_token))
        unknown = len(set(by_user) - set(keyed)) + len(set(by_token) - tokens)
        if missing or unknown:
            raise Conflict(Text(REKEY_RECIPIENTS, missing=missing, unknown=unknown))
        changed = sum(keyed[user_id] != key for user_id, key in wrapped_to.items())
        if changed:
            raise Conflict(Text(RECIPIENT_KEY_CHANGED, count=changed))
        live = {r["id"]: r for r in await db.fetchall(
            cur,
            """SELECT id, version FROM secrets WHERE team_id = %(team)s AND deleted_at IS NULL
               ORDER BY id FOR UPDATE""", params)}
        if set(live) != set(sealed):
            raise Conflict(Text(REKEY_SECRETS, missing=len(set(live) - set(sealed)),
                                unknown=len(set(sealed) - set(live))))
        for secret_id, value in sealed.items():
            check_envelope(value, key_version=key_version, secret_id=secret_id,
                           version=live[secret_id]["version"] + 1)
        await cur.execute("UPDATE teams SET key_version = %s WHERE id = %s", (key_version, team_id))
        for user_id, (wrapped, auth) in by_user.items():
            await insert_wrap(cur, actor, team_id, key_version, wrapped_key=wrapped, auth=auth,
                              user_id=user_id)
        for token_id, (wrapped, auth) in by_token.items():
            await insert_wrap(cur, actor, team_id, key_version, wrapped_key=wrapped, auth=auth,
                              token_id=token_id)
        if back_link is not None:
            await cur.execute(
                """INSERT INTO team_key_links (team_id, key_version, link, created_by)
                   VALUES (%s, %s, %s, %s)""", (team_id, key_version, back_link, actor.user_id))
        if sealed:
            ids = [str(i) for i in sealed]
            # The current values become versions (under the old key), then the new ones current.
            await cur.execute(
                """INSERT INTO secret_versions (secret_id, version, envelope, created_by)
                   SELECT id, version, envelope, %s FROM secrets WHERE id = ANY(%s::uuid[])""",
                (actor.user_id, ids))
            await cur.execute(
                """UPDATE secrets s SET version = s.version + 1, envelope = n.envelope,
                                        updated_at = now()
                   FROM unnest(%s::uuid[], %s::text[]) AS n(id, envelope) WHERE s.id = n.id""",
                (ids, list(sealed.values())))
        summary = {"key_version": key_version, "members": len(by_user), "tokens": len(by_token),
                   "secrets": len(sealed), "link": back_link is not None}
        await audit.record(cur, actor, "e2e_rekey", "team", team_id=team_id, resource_id=team_id,
                           metadata=summary)
    return summary


# --- anchors -----------------------------------------------------------------------------------

async def read_anchor(conn: db.Connection, actor: Actor, team_id: uuid.UUID) -> dict:
    """The member's own anchor for the team (the newest key version and commitment their client
    verified, sealed under a key only their private key gives). Session JWT only, Viewer or
    above; 400 for a team that is not end-to-end, 404 when none is stored."""
    require_jwt(actor)
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, roles.VIEWER)
        await require_e2e(cur, team_id)
        row = await db.fetchone(
            cur, "SELECT anchor, updated_at FROM team_e2e_anchors WHERE user_id = %s AND team_id = %s",
            (actor.user_id, team_id))
    if row is None:
        raise NotFound(NO_ANCHOR)
    return row


async def store_anchor(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                       anchor: object) -> tuple[dict, bool]:
    """Store (or replace) the member's own anchor for the team; the server checks its shape only
    (it cannot tell an older one from a newer one: the client moves it forward). Session JWT
    only, Viewer or above. Returns the row and whether it was created."""
    require_jwt(actor)
    text = check_anchor(anchor)
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.VIEWER)
        await require_e2e(cur, team_id)
        row = await db.fetchone(
            cur,
            """INSERT INTO team_e2e_anchors (user_id, team_id, anchor) VALUES (%s, %s, %s)
               ON CONFLICT (user_id, team_id) DO UPDATE SET anchor = EXCLUDED.anchor,
                                                            updated_at = now()
               RETURNING anchor, updated_at, (xmax = 0) AS created""",
            (actor.user_id, team_id, text))
    return row, bool(row["created"])
