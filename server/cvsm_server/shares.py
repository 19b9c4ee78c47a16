"""Share links: create, list and revoke (Member or above), and the anonymous view.

A share keeps the secret's value as it was at creation, sealed with AES-256-GCM bound to the
share (`share_aad`). Its token (`shr_` + 32 random bytes, URL-safe) is shown once, inside `url`,
and stored only as a keyed hash. `GET /public/share/:token` consumes exactly one view with one
conditional UPDATE ... RETURNING, in the transaction that writes its `share_view` audit entry,
so concurrent views never pass `max_views` and no value leaves without its audit entry.
Unknown token: 404. Revoked, expired or used up: 410. Deleting the secret revokes its shares
(`secrets.soft_delete`).
"""

from __future__ import annotations

import logging
import secrets as random
import uuid
from datetime import timedelta

from aiohttp import web

from . import audit, db, secrets, teams
from .crypto import DecryptionError, share_aad
from .errors import BadRequest, Gone, NotFound
from .inputs import field, path_uuid, read_json
from .state import KEYRING, POOL, SETTINGS, principal
from .timeutil import iso, now

log = logging.getLogger("cvsm.shares")

TOKEN_PREFIX = "shr_"
TOKEN_BYTES = 32
MAX_TOKEN_LENGTH = 200
MAX_VIEWS = (1, 10)
TTL_HOURS = (1, 168)

SHARE_NOT_FOUND = "Tautan berbagi tidak ditemukan"
SHARE_GONE = "Tautan berbagi sudah kedaluwarsa, habis dilihat, atau dicabut"

_COLUMNS = "id, team_id, secret_id, max_views, view_count, expires_at, revoked_at, created_at"


def share_json(row: dict) -> dict:
    """A share as the API shows it: never its token, hash or value."""
    return {
        "id": str(row["id"]),
        "secret_id": str(row["secret_id"]),
        "max_views": row["max_views"],
        "view_count": row["view_count"],
        "expires_at": iso(row["expires_at"]),
        "revoked_at": iso(row["revoked_at"]),
        "created_at": iso(row["created_at"]),
    }


def _bounded_int(body: dict, name: str, default: int, bounds: tuple[int, int]) -> int:
    value = field(body, name, int, required=False, default=default)
    low, high = bounds
    if not low <= value <= high:
        raise BadRequest(f"Kolom '{name}' harus bilangan bulat {low} sampai {high}")
    return value


async def create_share(request: web.Request) -> web.Response:
    """POST .../secrets/:secretId/shares {max_views=1, ttl_hours=24} -> 201 {share, url}."""
    team_id = path_uuid(request, "team_id")
    secret_id = path_uuid(request, "secret_id")
    body = await read_json(request, max_bytes=4096) if request.body_exists else {}
    max_views = _bounded_int(body, "max_views", 1, MAX_VIEWS)
    ttl_hours = _bounded_int(body, "ttl_hours", 24, TTL_HOURS)
    who = principal(request)
    keyring = request.app[KEYRING]
    token = TOKEN_PREFIX + random.token_urlsafe(TOKEN_BYTES)
    share_id = uuid.uuid4()
    async with db.transaction(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, who.user_id, teams.MEMBER)
        secret = await secrets.load_secret(cur, team_id, secret_id)
        try:
            value = secrets.open_value(keyring, secret)
        except DecryptionError:
            log.error("secret %s does not decrypt with the configured master key", secret_id)
            raise
        sealed = keyring.seal(value.encode("utf-8"), share_aad(share_id))
        row = await db.fetchone(
            cur,
            f"""INSERT INTO secret_shares (id, team_id, secret_id, token_hash, key_id, nonce,
                                          ciphertext, max_views, expires_at, created_by)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}""",
            (share_id, team_id, secret_id, keyring.token_hash(token), sealed.key_id, sealed.nonce,
             sealed.ciphertext, max_views, now() + timedelta(hours=ttl_hours), who.user_id),
        )
        await audit.record(cur, request, "share_create", "share", team_id=team_id,
                           resource_id=share_id,
                           metadata={"secret_id": str(secret_id), "name": secret["name"],
                                     "max_views": max_views, "ttl_hours": ttl_hours})
    url = f"{request.app[SETTINGS].app_url}/share/{token}"
    return web.json_response({"share": share_json(row), "url": url}, status=201)


async def list_shares(request: web.Request) -> web.Response:
    """GET .../secrets/:secretId/shares -> {shares: [...]}, newest first."""
    team_id = path_uuid(request, "team_id")
    secret_id = path_uuid(request, "secret_id")
    async with db.cursor(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, principal(request).user_id, teams.MEMBER)
        await secrets.load_secret(cur, team_id, secret_id)
        rows = await db.fetchall(
            cur,
            f"""SELECT {_COLUMNS} FROM secret_shares WHERE secret_id = %s AND team_id = %s
                ORDER BY created_at DESC, id""",
            (secret_id, team_id),
        )
    return web.json_response({"shares": [share_json(r) for r in rows]})


async def revoke_share(request: web.Request) -> web.Response:
    """DELETE .../secrets/:secretId/shares/:shareId -> {ok: true}; revoking twice is fine."""
    team_id = path_uuid(request, "team_id")
    secret_id = path_uuid(request, "secret_id")
    share_id = path_uuid(request, "share_id")
    async with db.transaction(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, principal(request).user_id, teams.MEMBER)
        await secrets.load_secret(cur, team_id, secret_id)
        row = await db.fetchone(
            cur,
            """UPDATE secret_shares SET revoked_at = coalesce(revoked_at, now())
               WHERE id = %s AND secret_id = %s AND team_id = %s RETURNING id""",
            (share_id, secret_id, team_id),
        )
        if row is None:
            raise NotFound(SHARE_NOT_FOUND)
        await audit.record(cur, request, "share_revoke", "share", team_id=team_id,
                           resource_id=share_id, metadata={"secret_id": str(secret_id)})
    return web.json_response({"ok": True})


async def view_share(request: web.Request) -> web.Response:
    """GET /public/share/:token (anonymous) -> {secret_name, value, view_count, max_views,
    expires_at}; each call consumes one view."""
    token = request.match_info["token"]
    if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_LENGTH:
        raise NotFound(SHARE_NOT_FOUND)
    keyring = request.app[KEYRING]
    token_hash = keyring.token_hash(token)
    async with db.transaction(request.app[POOL]) as cur:
        # Row lock + re-check under READ COMMITTED: of concurrent views, only those that still
        # find a view left after the previous one committed get a row back.
        row = await db.fetchone(
            cur,
            f"""UPDATE secret_shares s SET view_count = s.view_count + 1
                FROM secrets sec
                WHERE s.token_hash = %s AND sec.id = s.secret_id AND s.revoked_at IS NULL
                  AND s.expires_at > now() AND s.view_count < s.max_views
                RETURNING {", ".join("s." + c.strip() for c in _COLUMNS.split(","))},
                          s.key_id, s.nonce, s.ciphertext, sec.name AS secret_name""",
            (token_hash,),
        )
        if row is None:
            exists = await db.fetchone(
                cur, "SELECT 1 FROM secret_shares WHERE token_hash = %s", (token_hash,)
            )
            raise Gone(SHARE_GONE) if exists else NotFound(SHARE_NOT_FOUND)
        try:
            value = keyring.open(row["key_id"], row["nonce"], row["ciphertext"],
                                 share_aad(row["id"])).decode("utf-8")
        except DecryptionError:
            log.error("share %s does not decrypt with the configured master key", row["id"])
            raise
        await audit.record(cur, request, "share_view", "share", team_id=row["team_id"],
                           resource_id=row["id"],
                           metadata={"secret_id": str(row["secret_id"]),
                                     "view_count": row["view_count"],
                                     "max_views": row["max_views"]})
    return web.json_response({
        "secret_name": row["secret_name"],
        "value": value,
        "view_count": row["view_count"],
        "max_views": row["max_views"],
        "expires_at": iso(row["expires_at"]),
    })


def setup_routes(app: web.Application) -> None:
    base = "/api/v1/teams/{team_id}/secrets/{secret_id}/shares"
    app.router.add_post(base, create_share)
    app.router.add_get(base, list_shares)
    app.router.add_delete(base + "/{share_id}", revoke_share)
    app.router.add_get("/api/v1/public/share/{token}", view_share)
