"""Share links: create, list and revoke (Member or above), and the anonymous view.

A share keeps the secret's value as it was at creation, sealed with AES-256-GCM bound to the
share (`share_aad`). Its token (`shr_` + 32 random bytes, URL-safe) is shown once, inside the
link, and stored only as a keyed hash. `view` consumes exactly one view with one conditional
UPDATE ... RETURNING, in the transaction that writes its `share_view` audit entry, so concurrent
views never pass `max_views` and no value leaves without its audit entry. `peek` answers the same
status as a view would without consuming or auditing anything (HTTP HEAD).
Unknown token: 404. Revoked, expired or used up: 410. Deleting the secret revokes its shares
(`secrets.soft_delete`).
A share of an end-to-end team holds the `cvsm-share1.` envelope its creator's client sealed under
a key that only the link's #fragment carries (docs/e2e.md); it is stored and served as it came.
"""

from __future__ import annotations

import logging
import secrets as random
import uuid
from collections.abc import Mapping
from datetime import timedelta

from ..core.actor import Actor
from ..core.errors import BadRequest, Forbidden, Gone, NotFound
from ..core.i18n import Text
from ..core.timeutil import iso, now
from ..crypto.sealing import DecryptionError, Keyring, share_aad
from ..audit import log as audit
from ..e2e import syntax as e2e_syntax
from ..teams import roles
from .. import db
from . import service as secrets, queries as secret_queries

log = logging.getLogger("cvsm.shares")

TOKEN_PREFIX = "shr_"
TOKEN_BYTES = 32
MAX_TOKEN_LENGTH = 200
MAX_VIEWS = (1, 10)
TTL_HOURS = (1, 168)

SHARE_NOT_FOUND = "Tautan berbagi tidak ditemukan"
SHARE_GONE = "Tautan berbagi sudah kedaluwarsa, habis dilihat, atau dicabut"
E2E_VALUE_REQUIRED = ("Tim end-to-end: kirim kolom 'value' berisi amplop cvsm-share1 yang "
                      "disegel di klien (kuncinya hanya di #fragment tautan)")
VALUE_ONLY_E2E = "Kolom 'value' hanya untuk tautan berbagi tim end-to-end"

_COLUMNS = "id, team_id, secret_id, max_views, view_count, expires_at, revoked_at, created_at"


def share_json(row: Mapping) -> dict:
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


def _bounded(name: str, value: int, bounds: tuple[int, int]) -> int:
    low, high = bounds
    if not low <= value <= high:
        raise BadRequest(Text("Kolom '{name}' harus bilangan bulat {low} sampai {high}", name=name,
                              low=low, high=high))
    return value


async def create_share(conn: db.Connection, actor: Actor, keyring: Keyring, team_id: uuid.UUID,
                       secret_id: uuid.UUID, *, max_views: int = 1, ttl_hours: int = 24,
                       envelope: object = None) -> tuple[dict, str]:
    """A new share of the secret's current value; returns the row and its token (shown once).
    For an end-to-end team the value is `envelope` (`cvsm-share1.`), sealed by the client."""
    max_views = _bounded("max_views", max_views, MAX_VIEWS)
    ttl_hours = _bounded("ttl_hours", ttl_hours, TTL_HOURS)
    if envelope is not None:
        e2e_syntax.check_share(envelope)
    token = TOKEN_PREFIX + random.token_urlsafe(TOKEN_BYTES)
    share_id = uuid.uuid4()
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.MEMBER)
        secret = await secret_queries.load_secret(cur, team_id, secret_id)
        roles.check_environment_write(actor, secret["environment"])
        if secret["admin_credential"]:  # never leaves through a link, whoever asks
            raise Forbidden(secrets.ADMIN_CREDENTIAL)
        if secret["envelope"] is not None:
            if envelope is None:
                raise BadRequest(E2E_VALUE_REQUIRED)
            stored = (None, None, None, envelope)
        else:
            if envelope is not None:
                raise BadRequest(VALUE_ONLY_E2E)
            value = secret_queries.open_value(keyring, secret)
            sealed = keyring.seal(value.encode("utf-8"), share_aad(share_id))
            stored = (sealed.key_id, sealed.nonce, sealed.ciphertext, None)
        row = await db.fetchone(
            cur,
            f"""INSERT INTO secret_shares (id, team_id, secret_id, token_hash, key_id, nonce,
                                          ciphertext, envelope, max_views, expires_at, created_by)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}""",
            (share_id, team_id, secret_id, keyring.token_hash(token), *stored,
             max_views, now() + timedelta(hours=ttl_hours), actor.user_id),
        )
        await audit.record(cur, actor, "share_create", "share", team_id=team_id,
                           resource_id=share_id,
                           metadata={"secret_id": str(secret_id), "name": secret["name"],
                                     "max_views": max_views, "ttl_hours": ttl_hours})
    return row, token


async def list_shares(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                      secret_id: uuid.UUID) -> list[dict]:
    """The secret's shares, newest first (Member or above)."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, roles.MEMBER)
        secret = await secret_queries.load_secret(cur, team_id, secret_id)
        roles.check_environment_write(actor, secret["environment"])
        return await db.fetchall(
            cur,
            f"""SELECT {_COLUMNS} FROM secret_shares WHERE secret_id = %s AND team_id = %s
                ORDER BY created_at DESC, id""",
            (secret_id, team_id),
        )


async def revoke_share(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                       secret_id: uuid.UUID, share_id: uuid.UUID) -> None:
    """Revoke a share (Member or above); revoking twice is fine."""
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.MEMBER)
        secret = await secret_queries.load_secret(cur, team_id, secret_id)
        roles.check_environment_write(actor, secret["environment"])
        row = await db.fetchone(
            cur,
            """UPDATE secret_shares SET revoked_at = coalesce(revoked_at, now())
               WHERE id = %s AND secret_id = %s AND team_id = %s RETURNING id""",
            (share_id, secret_id, team_id),
        )
        if row is None:
            raise NotFound(SHARE_NOT_FOUND)
        await audit.record(cur, actor, "share_revoke", "share", team_id=team_id,
                           resource_id=share_id, metadata={"secret_id": str(secret_id)})


def _token_hash(keyring: Keyring, token: str) -> bytes:
    if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_LENGTH:
        raise NotFound(SHARE_NOT_FOUND)
    return keyring.token_hash(token)


async def view(conn: db.Connection, actor: Actor, keyring: Keyring, token: str) -> tuple[dict, str]:
    """Consume one view of the share named by `token`: its row (with `secret_name`) and value."""
    token_hash = _token_hash(keyring, token)
    async with db.transaction(conn) as cur:
        # Row lock + re-check under READ COMMITTED: of concurrent views, only those that still
        # find a view left after the previous one committed get a row back.
        row = await db.fetchone(
            cur,
            f"""UPDATE secret_shares s SET view_count = s.view_count + 1
                FROM secrets sec
                WHERE s.token_hash = %s AND sec.id = s.secret_id AND s.revoked_at IS NULL
                  AND s.expires_at > now() AND s.view_count < s.max_views
                RETURNING {", ".join("s." + c.strip() for c in _COLUMNS.split(","))},
                          s.key_id, s.nonce, s.ciphertext, s.envelope, sec.name AS secret_name""",
            (token_hash,),
        )
        if row is None:
            await _missing(cur, token_hash)
        try:
            value = row["envelope"]  # an end-to-end team's share: served as it came
            if value is None:
                value = keyring.open(row["key_id"], row["nonce"], row["ciphertext"],
                                     share_aad(row["id"])).decode("utf-8")
        except DecryptionError:
            log.error("share %s does not decrypt with the configured master key", row["id"])
            raise
        await audit.record(cur, actor, "share_view", "share", team_id=row["team_id"],
                           resource_id=row["id"],
                           metadata={"secret_id": str(row["secret_id"]),
                                     "view_count": row["view_count"],
                                     "max_views": row["max_views"]})
    return row, value


async def peek(conn: db.Connection, keyring: Keyring, token: str) -> bool:
    """Raise what `view` would raise, consuming nothing and writing nothing; otherwise whether
    the share is end-to-end (its value an envelope that the link's #fragment opens)."""
    token_hash = _token_hash(keyring, token)
    async with db.cursor(conn) as cur:
        row = await db.fetchone(
            cur,
            """SELECT envelope IS NOT NULL AS e2e FROM secret_shares
               WHERE token_hash = %s AND revoked_at IS NULL
                 AND expires_at > now() AND view_count < max_views""",
            (token_hash,),
        )
        if row is None:
            await _missing(cur, token_hash)
    return bool(row["e2e"])


async def _missing(cur: db.Cursor, token_hash: bytes) -> None:
    exists = await db.fetchone(cur, "SELECT 1 FROM secret_shares WHERE token_hash = %s",
                               (token_hash,))
    raise Gone(SHARE_GONE) if exists else NotFound(SHARE_NOT_FOUND)
