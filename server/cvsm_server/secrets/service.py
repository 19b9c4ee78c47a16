"""Secrets: the input rule (`SecretInput`), list, read (audited, fail-closed), create, update
with versions, soft delete, rollback and export.

Values are sealed with AES-256-GCM bound to (team, secret, version); they leave the server only
in a transaction whose audit entry was written. Every function takes the acting `Actor` and a
connection, holds its SQL, and raises domain errors; none knows about HTTP.

An end-to-end team's values arrive sealed by the client (`e2e` checks the envelope's shape and
that it names the key version, secret and version being written) and are stored and served as
those envelopes (the `envelope` column, no master-key ciphertext); what would need their
plaintext (.env and shell export, .env import, rollback, a move without a new value) is refused
with the reason, and done in the client.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping

from ..core.actor import Actor
from ..core.environments import order_sql
from ..core.errors import BadRequest, Forbidden, NotFound
from ..core.timeutil import iso
from ..crypto.sealing import Keyring
from ..accounts import credentials, ratelimit
from ..audit import log as audit
from ..e2e import service as e2e
from ..teams import roles, service as teams
from .inputs import (E2E_MOVE, E2E_ROLLBACK, E2E_TEXT_EXPORT, ENVIRONMENTS, MAX_VERSION, NAME_RE,
                     SecretInput, SecretUpdate, check_environment, check_export_format,
                     check_stored_value)
from .queries import (COLUMNS, READ_BY_ID, READ_BY_NAME, SECRET_EXISTS, SECRET_NOT_FOUND,
                      check_environments, check_quota, insert_secret, load_secret, open_value,
                      soft_delete, store_new_value)
from .. import db


ADMIN_CREDENTIAL = ("Secret ini kredensial admin sebuah kebijakan rotasi: hanya Admin atau Owner "
                    "yang masuk (bukan lewat token API) dapat membaca atau mengubahnya, dan ia "
                    "tidak pernah ikut ekspor atau tautan berbagi")

_ENV_ORDER = order_sql()


def secret_json(row: Mapping) -> dict:
    return {
        "id": str(row["id"]),
        "name": row["name"],
        "type": row["type"],
        "environment": row["environment"],
        "description": row["description"],
        "version": row["version"],
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
        "e2e": bool(row.get("e2e")),
    }


# --- the input rule, shared by create, bulk create and .env import ---------------------------


# --- storage helpers used here and by bulk and shares ----------------------------------------


# --- operations --------------------------------------------------------------------------------

def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def list_secrets(conn: db.Connection, actor: Actor, team_id: uuid.UUID, *,
                       environment: str | None = None, search: str | None = None,
                       limit: int | None = None, offset: int = 0) -> tuple[list[dict], int]:
    """The team's live secrets (metadata only), by name then environment, and their total."""
    if environment is not None:
        check_environment(environment)
    where, args = ["team_id = %s", "deleted_at IS NULL"], [team_id]
    if environment:
        where.append("environment = %s")
        args.append(environment)
    if search:
        where.append("name ILIKE %s ESCAPE '\\'")
        args.append(_like_pattern(search[:255]))
    if actor.environments is not None:  # a scoped token sees only its environments
        where.append("environment = ANY(%s::text[])")
        args.append(actor.environments)
    clause = " AND ".join(where)
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, roles.VIEWER)
        rows = await db.fetchall(
            cur,
            f"""SELECT {COLUMNS}, count(*) OVER () AS total FROM secrets WHERE {clause}
                ORDER BY name, {_ENV_ORDER} LIMIT %s OFFSET %s""",
            (*args, limit, offset),
        )
        if rows or not offset:
            total = rows[0]["total"] if rows else 0
        else:  # a page past the end still reports the total
            total = (await db.fetchone(cur, f"SELECT count(*) AS n FROM secrets WHERE {clause}",
                                       tuple(args)))["n"]
    return rows, total


async def read_secret(conn: db.Connection, actor: Actor, keyring: Keyring, team_id: uuid.UUID,
                      secret_id: uuid.UUID, *, charge: ratelimit.Charge | None = None
                      ) -> tuple[dict, str]:
    """One secret and its value; the `read` audit entry commits with it or nothing leaves.

    With `charge`, the caller's rate-limit count happens in the same statement, and a cached
    credential (`actor.epoch`) is confirmed there too: one round trip for the whole read. A
    moved epoch raises `credentials.StaleCredential` before anything is read or audited."""
    return await _read(conn, actor, keyring, team_id, READ_BY_ID, {"secret_id": secret_id},
                       charge)


async def read_secret_by_name(conn: db.Connection, actor: Actor, keyring: Keyring,
                              team_id: uuid.UUID, name: str, environment: str = "production", *,
                              charge: ratelimit.Charge | None = None) -> tuple[dict, str]:
    """`read_secret` for the live secret called exactly `name` in `environment`."""
    environment = check_environment(environment)
    if not NAME_RE.match(name):
        raise NotFound(SECRET_NOT_FOUND)  # no secret can have that name
    return await _read(conn, actor, keyring, team_id, READ_BY_NAME,
                       {"name": name, "environment": environment}, charge)


async def _read(conn: db.Connection, actor: Actor, keyring: Keyring, team_id: uuid.UUID,
                statements: dict[str, db.Statement], match: dict, charge: ratelimit.Charge | None
                ) -> tuple[dict, str]:
    if actor.scope is not None and not actor.scope.allows_team(team_id):
        raise NotFound(roles.TEAM_NOT_FOUND)
    params = {**audit.actor_params(actor), **match, "team_id": team_id, "epoch": actor.epoch,
              "environments": actor.environments,
              "full_power": may_hold_admin_credentials(actor)}
    cur = await db.row_cursor(conn)
    if charge is not None:
        params.update(charge.params())
        row = await statements["charged"].fetchone(cur, params)
    elif actor.epoch is not None:
        row = await statements["confirming"].fetchone(cur, params)
    else:
        row = await statements["plain"].fetchone(cur, params)
    if charge is not None or actor.epoch is not None:
        if actor.epoch is not None and row["current_epoch"] != actor.epoch:
            if charge is not None:
                charge.keep(row["rate_count"], row["rate_remaining"])
            raise credentials.StaleCredential()
        if charge is not None:
            charge.check(row["rate_count"], row["rate_remaining"])
        if row["id"] is None:
            row = None
    if row is None:  # tell "not your team" from "no such secret" only on the miss path
        async with db.cursor(conn) as cur:
            await roles.require(cur, team_id, actor, roles.VIEWER)
            where = "id = %(secret_id)s" if "secret_id" in match else \
                "name = %(name)s AND environment = %(environment)s"
            held = await db.fetchone(
                cur, f"""SELECT 1 FROM secrets WHERE {where} AND team_id = %(team_id)s
                         AND deleted_at IS NULL AND admin_credential
                         AND (%(environments)s::text[] IS NULL
                              OR environment = ANY(%(environments)s::text[]))""", params)
        if held is not None:
            raise Forbidden(ADMIN_CREDENTIAL)
        raise NotFound(SECRET_NOT_FOUND)
    return row, open_value(keyring, row)


def may_hold_admin_credentials(actor: Actor) -> bool:
    """Whether the credential may reach a rotation's admin credential at all (with the role of
    an Admin or Owner): a signed-in person, not an API token."""
    return actor.scope is None and actor.via != "api_token"


async def check_admin_credential(cur: db.Cursor, actor: Actor, team_id: uuid.UUID,
                                 row: Mapping, role: str | None = None) -> None:
    """403 unless the actor may read or change `row` when it is a rotation's admin credential:
    an Admin or Owner, signed in (not through an API token)."""
    if not row.get("admin_credential"):
        return
    if role is None:
        role = await roles.role_of(cur, team_id, actor.user_id)
    if not may_hold_admin_credentials(actor) or not roles.may(role, roles.ADMIN):
        raise Forbidden(ADMIN_CREDENTIAL)


async def create_secret(conn: db.Connection, actor: Actor, keyring: Keyring,
                        team_id: uuid.UUID, item: SecretInput) -> dict:
    """A new secret (Member or above), within the plan's quota, audited as `create`."""
    roles.check_environment_write(actor, item.environment)
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.MEMBER)
        team = await check_quota(cur, team_id, 1, [item.environment])
        row = await insert_secret(cur, actor, keyring, team, item)
        await audit.record(cur, actor, "create", "secret", team_id=team_id, resource_id=row["id"],
                           metadata={"name": item.name, "environment": item.environment})
    return row


async def update_secret(conn: db.Connection, actor: Actor, keyring: Keyring, team_id: uuid.UUID,
                        secret_id: uuid.UUID, update: SecretUpdate) -> dict:
    """Apply `update` (Member or above); a changed value keeps the previous one as a version."""
    changes = {k: v for k, v in (("type", update.type), ("environment", update.environment),
                                  ("description", update.description)) if v is not None}
    async with db.transaction(conn) as cur:
        role = await roles.require(cur, team_id, actor, roles.MEMBER)
        # A move takes the team's lock before the secret's, as every quota check does.
        team = await teams.lock_team(cur, team_id) if update.environment is not None else None
        current = await load_secret(cur, team_id, secret_id, for_update=True)
        roles.check_environment_write(actor, current["environment"])
        await check_admin_credential(cur, actor, team_id, current, role)
        if update.environment is not None:
            roles.check_environment_write(actor, update.environment)
        changed = {k: v for k, v in changes.items() if current[k] != v}
        if team is not None and "environment" in changed:
            await check_environments(cur, team, [changed["environment"]], leaving=[secret_id])
        if current["envelope"] is not None:  # an end-to-end team: the client sealed the value
            if "environment" in changed and update.value is None:
                raise BadRequest(E2E_MOVE)
            if update.value is not None:
                check_stored_value(update.value, await e2e.key_version_of(cur, team_id),
                                   secret_id, current["version"] + 1)
        elif update.value is not None:
            check_stored_value(update.value, None, secret_id, current["version"] + 1)
        fields = sorted(changed)
        if update.value is not None and open_value(keyring, current) != update.value:
            await store_new_value(cur, actor, keyring, current, update.value)
            fields = sorted([*fields, "value"])
        if changed:
            sets = ", ".join(f"{k} = %s" for k in changed)
            # A unique violation aborts the transaction; Conflict rolls it all back.
            async with db.unique_as_conflict(cur, SECRET_EXISTS):
                await cur.execute(f"UPDATE secrets SET {sets}, updated_at = now() WHERE id = %s",
                                  (*changed.values(), secret_id))
        if fields:
            await audit.record(cur, actor, "update", "secret", team_id=team_id,
                               resource_id=secret_id,
                               metadata={"name": current["name"], "fields": fields})
        return await load_secret(cur, team_id, secret_id)


async def delete_secret(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                        secret_id: uuid.UUID) -> None:
    """Soft-delete a secret and revoke its shares (Admin or above)."""
    async with db.transaction(conn) as cur:
        role = await roles.require(cur, team_id, actor, roles.ADMIN)
        row = await load_secret(cur, team_id, secret_id, for_update=True)
        roles.check_environment_write(actor, row["environment"])
        await check_admin_credential(cur, actor, team_id, row, role)
        await soft_delete(cur, [secret_id])
        await audit.record(cur, actor, "delete", "secret", team_id=team_id, resource_id=secret_id,
                           metadata={"name": row["name"], "environment": row["environment"]})


async def list_versions(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                        secret_id: uuid.UUID) -> tuple[int, list[dict]]:
    """The current version number and the stored earlier versions (no values), newest first."""
    current, rows = await secret_history(conn, actor, team_id, secret_id)
    return current["version"], rows


async def secret_history(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                         secret_id: uuid.UUID) -> tuple[dict, list[dict]]:
    """The secret's metadata (no value) and its stored earlier versions, newest first."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, roles.VIEWER)
        current = await load_secret(cur, team_id, secret_id)
        if actor.scope is not None and not actor.scope.allows_environment(current["environment"]):
            raise NotFound(SECRET_NOT_FOUND)
        rows = await db.fetchall(
            cur,
            "SELECT version, created_at FROM secret_versions WHERE secret_id = %s ORDER BY version DESC",
            (secret_id,),
        )
    sealed = ("key_id", "nonce", "ciphertext", "envelope")
    return {k: v for k, v in current.items() if k not in sealed}, rows


VERSION_NOT_FOUND = "Versi secret tidak ditemukan"
MAX_VERSIONS_READ = 2  # one value, or the two sides of a diff


async def read_versions(conn: db.Connection, actor: Actor, keyring: Keyring, team_id: uuid.UUID,
                        secret_id: uuid.UUID, versions: Collection[int]) -> tuple[dict, dict[int, str]]:
    """The secret's metadata (no value) and the values of `versions` (the current one or stored
    earlier ones, at most two), each audited as a `read` of the secret with its `version` in
    the metadata, in the transaction that decrypts it: nothing leaves unaudited. Viewer or
    above, as `read_secret`; 404 for a version that does not exist."""
    wanted = sorted(set(versions))
    if not wanted or len(wanted) > MAX_VERSIONS_READ or \
            any(not 1 <= v <= MAX_VERSION for v in wanted):
        raise NotFound(VERSION_NOT_FOUND)
    async with db.transaction(conn) as cur:
        role = await roles.require(cur, team_id, actor, roles.VIEWER)
        current = await load_secret(cur, team_id, secret_id)
        if actor.environments is not None and current["environment"] not in actor.environments:
            raise NotFound(SECRET_NOT_FOUND)
        await check_admin_credential(cur, actor, team_id, current, role)
        stored = {row["version"]: row for row in await db.fetchall(
            cur,
            """SELECT v.*, s.team_id FROM secret_versions v JOIN secrets s ON s.id = v.secret_id
               WHERE v.secret_id = %s AND v.version = ANY(%s::int[])""",
            (secret_id, wanted))}
        values: dict[int, str] = {}
        for version in wanted:
            if version == current["version"]:
                values[version] = open_value(keyring, current)
            elif version in stored:
                values[version] = open_value(keyring, stored[version], version=version)
            else:
                raise NotFound(VERSION_NOT_FOUND)
            await audit.record(cur, actor, "read", "secret", team_id=team_id,
                               resource_id=secret_id,
                               metadata={"name": current["name"],
                                         "environment": current["environment"],
                                         "version": version})
    sealed = ("key_id", "nonce", "ciphertext", "envelope")
    return {k: v for k, v in current.items() if k not in sealed}, values


async def rollback(conn: db.Connection, actor: Actor, keyring: Keyring, team_id: uuid.UUID,
                   secret_id: uuid.UUID, version: int) -> dict:
    """The value of `version` becomes a new current version (Member or above)."""
    if not 1 <= version <= MAX_VERSION:
        raise NotFound("Versi secret tidak ditemukan")
    async with db.transaction(conn) as cur:
        role = await roles.require(cur, team_id, actor, roles.MEMBER)
        current = await load_secret(cur, team_id, secret_id, for_update=True)
        roles.check_environment_write(actor, current["environment"])
        await check_admin_credential(cur, actor, team_id, current, role)
        if current["envelope"] is not None:
            raise BadRequest(E2E_ROLLBACK)
        old = await db.fetchone(
            cur,
            """SELECT v.*, s.team_id FROM secret_versions v JOIN secrets s ON s.id = v.secret_id
               WHERE v.secret_id = %s AND v.version = %s""",
            (secret_id, version),
        )
        if old is None:
            raise NotFound("Versi secret tidak ditemukan")
        value = open_value(keyring, old, version=version)
        new_version = await store_new_value(cur, actor, keyring, current, value)
        await audit.record(cur, actor, "rollback", "secret", team_id=team_id,
                           resource_id=secret_id,
                           metadata={"name": current["name"], "from_version": current["version"],
                                     "restored_version": version, "new_version": new_version})
        return await load_secret(cur, team_id, secret_id)


# The team's mode comes with its values (one row of NULLs for a team with none): one round trip.
_EXPORT = db.Statement("cvsm_export", f"""
SELECT t.e2e AS team_e2e, s.* FROM teams t
LEFT JOIN LATERAL (
    SELECT {COLUMNS}, key_id, nonce, ciphertext, envelope FROM secrets
    WHERE team_id = t.id AND deleted_at IS NULL AND NOT admin_credential
      AND (%(environment)s::text IS NULL OR environment = %(environment)s::text)
      AND (%(environments)s::text[] IS NULL OR environment = ANY(%(environments)s::text[]))
) s ON true
WHERE t.id = %(team_id)s
ORDER BY s.name, {order_sql('s.environment')}""")


async def export(conn: db.Connection, actor: Actor, keyring: Keyring, team_id: uuid.UUID, *,
                 environment: str | None = None, fmt: str = "dotenv") -> dict[str, str]:
    """`export_marked`'s values."""
    values, _ = await export_marked(conn, actor, keyring, team_id, environment=environment,
                                    fmt=fmt)
    return values


async def export_marked(conn: db.Connection, actor: Actor, keyring: Keyring, team_id: uuid.UUID,
                        *, environment: str | None = None, fmt: str = "dotenv"
                        ) -> tuple[dict[str, str], bool]:
    """Every live value of the team (or of one environment), audited as `export`.

    Without an environment every environment is exported; a name present in several takes its
    production, then staging, then development value. The audit entry records the environments
    whose values were actually exported and the names' count. A rotation's admin credential
    (`admin_credential`) is never exported, whoever asks. An end-to-end team exports its
    envelopes, in JSON only (400 for the text formats, which the client writes); the second
    item says whether it is one (read in the same transaction as the values).
    """
    check_export_format(fmt)
    if environment is not None:
        check_environment(environment)
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.VIEWER)
        rows = await _EXPORT.fetchall(cur, {"team_id": team_id, "environment": environment,
                                            "environments": actor.environments})
        end_to_end = bool(rows) and bool(rows[0]["team_e2e"])
        if fmt != "json" and end_to_end:
            raise BadRequest(E2E_TEXT_EXPORT)
        values: dict[str, str] = {}
        exported_from: set[str] = set()
        for row in rows:
            if row["id"] is not None and row["name"] not in values:  # first per name is the highest-precedence environment
                values[row["name"]] = open_value(keyring, row)
                exported_from.add(row["environment"])
        await audit.record(cur, actor, "export", "secret", team_id=team_id,
                           metadata={"format": fmt, "environment": environment or "all",
                                     "environments": [e for e in ENVIRONMENTS if e in exported_from],
                                     "count": len(values)})
    return values, end_to_end
