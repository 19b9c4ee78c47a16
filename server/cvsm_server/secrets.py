"""Secrets: list, read (audited, fail-closed), create, update with versions, soft delete,
rollback and export.

Values are sealed with AES-256-GCM bound to (team, secret, version); they leave the server only
in a transaction whose audit entry was written.
"""

from __future__ import annotations

import logging
import re
import uuid

from aiohttp import web

from . import audit, db, dotenv, teams
from .crypto import DecryptionError, Keyring, secret_aad
from .errors import BadRequest, Conflict, Forbidden, NotFound
from .inputs import check_text, field, path_uuid, query_int, query_text, read_json
from .state import KEYRING, POOL, principal
from .timeutil import iso

log = logging.getLogger("cvsm.secrets")

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}\Z")
TYPES = ("credential", "api_key", "certificate", "connection_string", "password", "token", "other")
ENVIRONMENTS = ("production", "staging", "development")
MAX_VALUE_BYTES = 65536
MAX_DESCRIPTION = 1000

SECRET_NOT_FOUND = "Secret tidak ditemukan"
SECRET_EXISTS = "Secret dengan nama ini sudah ada di environment tersebut"
SECRET_QUOTA = "Kuota secret tim untuk paket ini sudah penuh"

_COLUMNS = "id, team_id, name, type, environment, description, version, created_at, updated_at"


def secret_json(row: dict) -> dict:
    return {
        "id": str(row["id"]),
        "name": row["name"],
        "type": row["type"],
        "environment": row["environment"],
        "description": row["description"],
        "version": row["version"],
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


# --- validation -------------------------------------------------------------------------------

def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise BadRequest("Nama secret harus diawali huruf atau garis bawah, lalu huruf, angka, "
                         "atau garis bawah (maksimal 255 karakter)")
    return name


def check_environment(environment: object) -> str:
    if environment not in ENVIRONMENTS:
        raise BadRequest("Environment harus salah satu dari production, staging, development")
    return environment  # type: ignore[return-value]


def check_type(kind: object) -> str:
    if kind not in TYPES:
        raise BadRequest("Tipe secret harus salah satu dari " + ", ".join(TYPES))
    return kind  # type: ignore[return-value]


def check_value(value: object) -> str:
    if not isinstance(value, str):
        raise BadRequest("Kolom 'value' harus berupa teks")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadRequest("Kolom 'value' berisi karakter yang tidak valid") from None
    if size > MAX_VALUE_BYTES:
        raise BadRequest(f"Nilai secret maksimal {MAX_VALUE_BYTES} byte")
    return value


def check_description(description: object) -> str:
    if not isinstance(description, str):
        raise BadRequest("Kolom 'description' harus berupa teks")
    check_text("description", description)
    if len(description) > MAX_DESCRIPTION:
        raise BadRequest(f"Deskripsi maksimal {MAX_DESCRIPTION} karakter")
    return description


# --- storage helpers used here and by bulk, shares and rollback -------------------------------

def seal_value(keyring: Keyring, team_id: uuid.UUID, secret_id: uuid.UUID, version: int,
               value: str):
    return keyring.seal(value.encode("utf-8"), secret_aad(team_id, secret_id, version))


def open_value(keyring: Keyring, row: dict, *, version: int | None = None) -> str:
    """Decrypt a secret row (or a version row, with `version`)."""
    v = row["version"] if version is None else version
    team_id = row["team_id"]
    secret_id = row.get("secret_id", row["id"])
    return keyring.open(row["key_id"], row["nonce"], row["ciphertext"],
                        secret_aad(team_id, secret_id, v)).decode("utf-8")


async def check_quota(cur: db.Cursor, team_id: uuid.UUID, adding: int) -> None:
    """Lock the team and refuse when `adding` more live secrets would pass `max_secrets`."""
    team = await teams.lock_team(cur, team_id)
    if team["max_secrets"] is None:
        return
    row = await db.fetchone(
        cur, "SELECT count(*) AS n FROM secrets WHERE team_id = %s AND deleted_at IS NULL", (team_id,)
    )
    if row["n"] + adding > team["max_secrets"]:
        raise Forbidden(SECRET_QUOTA)


async def insert_secret(cur: db.Cursor, keyring: Keyring, team_id: uuid.UUID, *, name: str,
                        value: str, environment: str, kind: str, description: str,
                        created_by: uuid.UUID | None) -> dict:
    """Insert one live secret (version 1). Raises Conflict on a duplicate name."""
    secret_id = uuid.uuid4()
    sealed = seal_value(keyring, team_id, secret_id, 1, value)
    await cur.execute("SAVEPOINT insert_secret")
    try:
        row = await db.fetchone(
            cur,
            f"""INSERT INTO secrets (id, team_id, name, type, environment, description, version,
                                     key_id, nonce, ciphertext, created_by)
                VALUES (%s, %s, %s, %s, %s, %s, 1, %s, %s, %s, %s) RETURNING {_COLUMNS}""",
            (secret_id, team_id, name, kind, environment, description, sealed.key_id,
             sealed.nonce, sealed.ciphertext, created_by),
        )
    except Exception as exc:
        if db.is_unique_violation(exc):
            await cur.execute("ROLLBACK TO SAVEPOINT insert_secret")
            raise Conflict(SECRET_EXISTS) from None
        raise
    await cur.execute("RELEASE SAVEPOINT insert_secret")
    return row


async def load_secret(cur: db.Cursor, team_id: uuid.UUID, secret_id: uuid.UUID, *,
                      for_update: bool = False) -> dict:
    row = await db.fetchone(
        cur,
        f"""SELECT {_COLUMNS}, key_id, nonce, ciphertext FROM secrets
            WHERE id = %s AND team_id = %s AND deleted_at IS NULL
            {"FOR UPDATE" if for_update else ""}""",
        (secret_id, team_id),
    )
    if row is None:
        raise NotFound(SECRET_NOT_FOUND)
    return row


async def store_new_value(cur: db.Cursor, keyring: Keyring, current: dict, value: str,
                          actor: uuid.UUID) -> int:
    """Keep the current value as a version record and make `value` the next version."""
    await cur.execute(
        """INSERT INTO secret_versions (secret_id, version, key_id, nonce, ciphertext, created_by)
           VALUES (%s, %s, %s, %s, %s, %s)""",
        (current["id"], current["version"], current["key_id"], current["nonce"],
         current["ciphertext"], actor),
    )
    version = current["version"] + 1
    sealed = seal_value(keyring, current["team_id"], current["id"], version, value)
    await cur.execute(
        """UPDATE secrets SET version = %s, key_id = %s, nonce = %s, ciphertext = %s,
                              updated_at = now() WHERE id = %s""",
        (version, sealed.key_id, sealed.nonce, sealed.ciphertext, current["id"]),
    )
    return version


def _decrypt_or_fail(keyring: Keyring, row: dict, **kw) -> str:
    try:
        return open_value(keyring, row, **kw)
    except DecryptionError:
        log.error("secret %s does not decrypt with the configured master key", row["id"])
        raise


# --- handlers ---------------------------------------------------------------------------------

def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def list_secrets(request: web.Request) -> web.Response:
    team_id = path_uuid(request, "team_id")
    environment = request.query.get("environment")
    if environment is not None:
        check_environment(environment)
    search = query_text(request, "search")
    limit = query_int(request, "limit", default=None, minimum=1, maximum=1000)
    offset = query_int(request, "offset", default=0, minimum=0)
    where, args = ["team_id = %s", "deleted_at IS NULL"], [team_id]
    if environment:
        where.append("environment = %s")
        args.append(environment)
    if search:
        where.append("name ILIKE %s ESCAPE '\\'")
        args.append(_like_pattern(search[:255]))
    clause = " AND ".join(where)
    async with db.cursor(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, principal(request).user_id, teams.VIEWER)
        rows = await db.fetchall(
            cur,
            f"""SELECT {_COLUMNS} FROM secrets WHERE {clause}
                ORDER BY name, array_position(ARRAY['production','staging','development'], environment)
                LIMIT %s OFFSET %s""",
            (*args, limit, offset),
        )
        total = await db.fetchone(cur, f"SELECT count(*) AS n FROM secrets WHERE {clause}", tuple(args))
    return web.json_response({"secrets": [secret_json(r) for r in rows], "total": total["n"]})


# One statement: the membership check, the row and its `read` audit entry. A statement is atomic,
# so the row comes back only if the entry was written (fail-closed), in one round trip.
_READ_AUDITED = f"""
WITH s AS (
    SELECT {", ".join("s." + c.strip() for c in _COLUMNS.split(","))}, s.key_id, s.nonce, s.ciphertext
    FROM secrets s JOIN team_members m ON m.team_id = s.team_id AND m.user_id = %(actor_id)s
    WHERE s.id = %(secret_id)s AND s.team_id = %(team_id)s AND s.deleted_at IS NULL
), entry AS (
    INSERT INTO audit_logs (team_id, user_id, user_email, action, resource, resource_id,
                            ip_address, user_agent, metadata)
    SELECT s.team_id, %(actor_id)s, %(actor_email)s, 'read', 'secret', s.id::text, %(ip)s,
           %(user_agent)s, jsonb_build_object('name', s.name, 'environment', s.environment)
    FROM s
    RETURNING id
)
SELECT s.* FROM s WHERE EXISTS (SELECT 1 FROM entry)
"""


async def read_secret(request: web.Request) -> web.Response:
    """GET one secret with its value; the `read` audit entry commits with it or nothing leaves."""
    team_id = path_uuid(request, "team_id")
    secret_id = path_uuid(request, "secret_id")
    params = {**audit.actor_params(request), "team_id": team_id, "secret_id": secret_id}
    async with db.cursor(request.app[POOL]) as cur:
        row = await db.fetchone(cur, _READ_AUDITED, params)
        if row is None:  # tell "not your team" from "no such secret" only on the miss path
            await teams.require_role(cur, team_id, params["actor_id"], teams.VIEWER)
            raise NotFound(SECRET_NOT_FOUND)
    value = _decrypt_or_fail(request.app[KEYRING], row)
    return web.json_response({"secret": secret_json(row), "value": value})


async def create_secret(request: web.Request) -> web.Response:
    team_id = path_uuid(request, "team_id")
    body = await read_json(request)
    name = check_name(field(body, "name", str))
    value = check_value(field(body, "value", str, allow_nul=True))
    environment = check_environment(field(body, "environment", str))
    kind = check_type(field(body, "type", str, required=False, default="credential"))
    description = check_description(field(body, "description", str, required=False, default=""))
    who = principal(request)
    async with db.transaction(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, who.user_id, teams.MEMBER)
        await check_quota(cur, team_id, 1)
        row = await insert_secret(cur, request.app[KEYRING], team_id, name=name, value=value,
                                  environment=environment, kind=kind, description=description,
                                  created_by=who.user_id)
        await audit.record(cur, request, "create", "secret", team_id=team_id, resource_id=row["id"],
                           metadata={"name": name, "environment": environment})
    return web.json_response({"secret": secret_json(row)}, status=201)


async def update_secret(request: web.Request) -> web.Response:
    team_id = path_uuid(request, "team_id")
    secret_id = path_uuid(request, "secret_id")
    body = await read_json(request)
    if "name" in body:
        raise BadRequest("Nama secret tidak dapat diubah")
    value = body.get("value")
    if value is not None:
        check_value(value)
    changes = {}
    if body.get("type") is not None:
        changes["type"] = check_type(body["type"])
    if body.get("environment") is not None:
        changes["environment"] = check_environment(body["environment"])
    if body.get("description") is not None:
        changes["description"] = check_description(body["description"])
    who = principal(request)
    keyring = request.app[KEYRING]
    async with db.transaction(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, who.user_id, teams.MEMBER)
        current = await load_secret(cur, team_id, secret_id, for_update=True)
        changed = [k for k, v in changes.items() if current[k] != v]
        if value is not None and _decrypt_or_fail(keyring, current) != value:
            await store_new_value(cur, keyring, current, value, who.user_id)
            changed.append("value")
        if any(k != "value" for k in changed):
            sets = ", ".join(f"{k} = %s" for k in changed if k != "value")
            try:  # a unique violation aborts the transaction; Conflict rolls it all back
                await cur.execute(
                    f"UPDATE secrets SET {sets}, updated_at = now() WHERE id = %s",
                    (*[changes[k] for k in changed if k != "value"], secret_id),
                )
            except Exception as exc:
                if db.is_unique_violation(exc):
                    raise Conflict(SECRET_EXISTS) from None
                raise
        if changed:
            await audit.record(cur, request, "update", "secret", team_id=team_id,
                               resource_id=secret_id,
                               metadata={"name": current["name"], "fields": sorted(changed)})
        row = await load_secret(cur, team_id, secret_id)
    return web.json_response({"secret": secret_json(row)})


async def delete_secret(request: web.Request) -> web.Response:
    team_id = path_uuid(request, "team_id")
    secret_id = path_uuid(request, "secret_id")
    async with db.transaction(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, principal(request).user_id, teams.ADMIN)
        row = await load_secret(cur, team_id, secret_id, for_update=True)
        await soft_delete(cur, [secret_id])
        await audit.record(cur, request, "delete", "secret", team_id=team_id, resource_id=secret_id,
                           metadata={"name": row["name"], "environment": row["environment"]})
    return web.json_response({"ok": True})


async def soft_delete(cur: db.Cursor, secret_ids: list[uuid.UUID]) -> None:
    """Mark secrets deleted and revoke their share links."""
    await cur.execute(
        "UPDATE secrets SET deleted_at = now() WHERE id = ANY(%s::uuid[]) AND deleted_at IS NULL",
        ([str(i) for i in secret_ids],),
    )
    await cur.execute(
        """UPDATE secret_shares SET revoked_at = now()
           WHERE secret_id = ANY(%s::uuid[]) AND revoked_at IS NULL""",
        ([str(i) for i in secret_ids],),
    )


async def list_versions(request: web.Request) -> web.Response:
    team_id = path_uuid(request, "team_id")
    secret_id = path_uuid(request, "secret_id")
    async with db.cursor(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, principal(request).user_id, teams.VIEWER)
        current = await load_secret(cur, team_id, secret_id)
        rows = await db.fetchall(
            cur,
            "SELECT version, created_at FROM secret_versions WHERE secret_id = %s ORDER BY version DESC",
            (secret_id,),
        )
    return web.json_response({
        "current_version": current["version"],
        "versions": [{"version": r["version"], "created_at": iso(r["created_at"])} for r in rows],
    })


async def rollback(request: web.Request) -> web.Response:
    """POST .../rollback {version} — the value of `version` becomes a new current version."""
    team_id = path_uuid(request, "team_id")
    secret_id = path_uuid(request, "secret_id")
    body = await read_json(request, max_bytes=4096)
    target = field(body, "version", int)
    who = principal(request)
    keyring = request.app[KEYRING]
    async with db.transaction(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, who.user_id, teams.MEMBER)
        current = await load_secret(cur, team_id, secret_id, for_update=True)
        old = await db.fetchone(
            cur,
            """SELECT v.*, s.team_id FROM secret_versions v JOIN secrets s ON s.id = v.secret_id
               WHERE v.secret_id = %s AND v.version = %s""",
            (secret_id, target),
        )
        if old is None:
            raise NotFound("Versi secret tidak ditemukan")
        value = _decrypt_or_fail(keyring, old, version=target)
        new_version = await store_new_value(cur, keyring, current, value, who.user_id)
        await audit.record(cur, request, "rollback", "secret", team_id=team_id,
                           resource_id=secret_id,
                           metadata={"name": current["name"], "from_version": current["version"],
                                     "restored_version": target, "new_version": new_version})
        row = await load_secret(cur, team_id, secret_id)
    return web.json_response({"secret": secret_json(row)})


async def export(request: web.Request) -> web.StreamResponse:
    """GET .../secrets/export?format=dotenv|json&environment= — audited like reads.

    Without an environment every environment is exported; a name present in several takes its
    production, then staging, then development value.
    """
    team_id = path_uuid(request, "team_id")
    fmt = request.query.get("format", "dotenv")
    if fmt not in ("dotenv", "json"):
        raise BadRequest("Format ekspor harus dotenv atau json")
    environment = request.query.get("environment")
    if environment is not None:
        check_environment(environment)
    keyring = request.app[KEYRING]
    async with db.transaction(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, principal(request).user_id, teams.VIEWER)
        rows = await db.fetchall(
            cur,
            f"""SELECT {_COLUMNS}, key_id, nonce, ciphertext FROM secrets
                WHERE team_id = %s AND deleted_at IS NULL {"AND environment = %s" if environment else ""}
                ORDER BY name, array_position(ARRAY['production','staging','development'], environment)""",
            (team_id, environment) if environment else (team_id,),
        )
        values: dict[str, str] = {}
        for row in rows:
            if row["name"] not in values:  # first per name is the highest-precedence environment
                values[row["name"]] = _decrypt_or_fail(keyring, row)
        await audit.record(cur, request, "export", "secret", team_id=team_id,
                           metadata={"format": fmt, "environment": environment,
                                     "count": len(values)})
    if fmt == "json":
        return web.json_response(values)
    return web.Response(text=dotenv.render(values), content_type="text/plain", charset="utf-8")


def setup_routes(app: web.Application) -> None:
    base = "/api/v1/teams/{team_id}/secrets"
    app.router.add_get(base, list_secrets)
    app.router.add_post(base, create_secret)
    app.router.add_get(base + "/export", export)
    app.router.add_get(base + "/{secret_id}", read_secret)
    app.router.add_put(base + "/{secret_id}", update_secret)
    app.router.add_delete(base + "/{secret_id}", delete_secret)
    app.router.add_get(base + "/{secret_id}/versions", list_versions)
    app.router.add_post(base + "/{secret_id}/rollback", rollback)
