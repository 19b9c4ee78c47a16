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

import logging
import re
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ..audit import log as audit
from ..accounts import credentials
from .. import db
from ..e2e import service as e2e
from ..core import ratelimit
from ..teams import roles, service as teams
from ..core.actor import Actor
from ..crypto.sealing import DecryptionError, Keyring, secret_aad
from ..core.errors import BadRequest, Conflict, Forbidden, NotFound
from ..core.inputs import check_text
from ..core.timeutil import iso

log = logging.getLogger("cvsm.secrets")

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}\Z")
TYPES = ("credential", "api_key", "certificate", "connection_string", "password", "token", "other")
ENVIRONMENTS = ("production", "staging", "development")
EXPORT_FORMATS = ("dotenv", "shell", "json")  # .env file (`dotenv`), `shell_export`, JSON object
MAX_VALUE_BYTES = 65536
MAX_DESCRIPTION = 1000
MAX_VERSION = 2**31 - 1

SECRET_NOT_FOUND = "Secret tidak ditemukan"
SECRET_EXISTS = "Secret dengan nama ini sudah ada di environment tersebut"
# A client-chosen id (an end-to-end team's) that any secret has: the same answer wherever it is.
SECRET_ID_TAKEN = "Id secret sudah dipakai; buat id acak baru lalu segel ulang nilainya"
SECRET_QUOTA = "Kuota secret tim untuk paket ini sudah penuh"
ENVIRONMENT_QUOTA = ("Paket tim ini hanya mengizinkan {limit} environment aktif (berisi secret); "
                     "yang aktif sekarang: {active}. Pindahkan atau hapus secret di sana dulu, "
                     "atau naikkan paket tim")
INVALID_NAME = ("Nama secret harus diawali huruf atau garis bawah, lalu huruf, angka, atau garis "
                "bawah (maksimal 255 karakter)")
INVALID_ENVIRONMENT = "Environment harus salah satu dari production, staging, development"
INVALID_EXPORT_FORMAT = "Format ekspor harus dotenv, shell, atau json"
E2E_TEXT_EXPORT = ("Tim end-to-end: server tidak dapat membuka nilai, jadi ekspor .env dan shell "
                   "dibuat di klien; minta format=json (amplop terenkripsi per nama) lalu buka "
                   "di klien")
E2E_IMPORT = ("Tim end-to-end: server tidak dapat membaca nilai, jadi impor .env dilakukan di "
              "klien (segel setiap nilai, lalu kirim lewat bulk create)")
E2E_ROLLBACK = ("Tim end-to-end: rollback dilakukan di klien (baca versi lama, segel ulang untuk "
                "versi berikutnya, lalu simpan sebagai nilai baru)")
E2E_MOVE = ("Tim end-to-end: nilai terikat pada environment-nya, jadi pindah environment "
            "memerlukan nilai baru yang disegel untuk environment tujuan")
E2E_ID_REQUIRED = ("Tim end-to-end: kolom 'id' (UUID pilihan klien, dipakai saat menyegel) "
                   "wajib diisi")
E2E_ID_ONLY = "Kolom 'id' hanya untuk tim end-to-end"
VALUE_TOO_LARGE = f"Nilai secret maksimal {MAX_VALUE_BYTES} byte"
ADMIN_CREDENTIAL = ("Secret ini kredensial admin sebuah kebijakan rotasi: hanya Admin atau Owner "
                    "yang masuk (bukan lewat token API) dapat membaca atau mengubahnya, dan ia "
                    "tidak pernah ikut ekspor atau tautan berbagi")

_COLUMNS = ("id, team_id, name, type, environment, description, version, created_at, updated_at, "
            "e2e")
_ENV_ORDER = "array_position(ARRAY['production','staging','development'], environment)"


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

def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise BadRequest(INVALID_NAME)
    return name


def check_environment(environment: object) -> str:
    if environment not in ENVIRONMENTS:
        raise BadRequest(INVALID_ENVIRONMENT)
    return environment  # type: ignore[return-value]


def check_export_format(fmt: object) -> str:
    if fmt not in EXPORT_FORMATS:
        raise BadRequest(INVALID_EXPORT_FORMAT)
    return fmt  # type: ignore[return-value]


def check_type(kind: object) -> str:
    if kind not in TYPES:
        raise BadRequest("Tipe secret harus salah satu dari " + ", ".join(TYPES))
    return kind  # type: ignore[return-value]


def check_value(value: object) -> str:
    """A value as written: at most 65,536 bytes in UTF-8, or (for an end-to-end team, checked
    when the team is known: `check_stored_value`) an envelope of a value that size."""
    if not isinstance(value, str):
        raise BadRequest("Kolom 'value' harus berupa teks")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadRequest("Kolom 'value' berisi karakter yang tidak valid") from None
    limit = e2e.MAX_ENVELOPE_LENGTH if e2e.looks_sealed(value) else MAX_VALUE_BYTES
    if size > limit:
        raise BadRequest(VALUE_TOO_LARGE)
    return value


def check_stored_value(value: str, key_version: int | None, secret_id: uuid.UUID,
                       version: int) -> str:
    """`value` as the team stores it: a plain team's value within 65,536 bytes, or an envelope
    sealed for `version` of `secret_id` under the end-to-end team's `key_version` (400, 409)."""
    if key_version is None:
        if len(value.encode("utf-8")) > MAX_VALUE_BYTES:
            raise BadRequest(VALUE_TOO_LARGE)
        return value
    return e2e.check_envelope(value, key_version=key_version, secret_id=secret_id,
                              version=version)


def check_description(description: object) -> str:
    if not isinstance(description, str):
        raise BadRequest("Kolom 'description' harus berupa teks")
    check_text("description", description)
    if len(description) > MAX_DESCRIPTION:
        raise BadRequest(f"Deskripsi maksimal {MAX_DESCRIPTION} karakter")
    return description


@dataclass(frozen=True, slots=True)
class SecretInput:
    """A new secret, valid by construction: `SecretInput.checked(...)` applies every rule."""

    name: str
    value: str
    environment: str
    type: str = "credential"
    description: str = ""
    id: uuid.UUID | None = None  # chosen by the client, for an end-to-end team only

    def __repr__(self) -> str:  # never the value
        return f"SecretInput(name={self.name!r}, environment={self.environment!r})"

    @classmethod
    def checked(cls, *, name: object, value: object, environment: object,
                type: object = "credential", description: object = "",
                id: object = None) -> SecretInput:
        return cls(name=check_name(name), value=check_value(value),
                   environment=check_environment(environment), type=check_type(type),
                   description=check_description(description), id=check_id(id))


def check_id(value: object) -> uuid.UUID | None:
    """A client-chosen id (a UUID in its 36-character form), or None when not given."""
    if value is None:
        return None
    try:
        parsed = uuid.UUID(value) if isinstance(value, str) and len(value) == 36 else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise BadRequest("Kolom 'id' harus UUID")
    return parsed


@dataclass(frozen=True, slots=True)
class SecretUpdate:
    """The fields a PUT may change; None leaves a field as it is."""

    value: str | None = None
    type: str | None = None
    environment: str | None = None
    description: str | None = None

    def __repr__(self) -> str:  # never the value
        return f"SecretUpdate(value={'<set>' if self.value is not None else None}, " \
               f"type={self.type!r}, environment={self.environment!r})"

    @classmethod
    def checked(cls, *, value: object = None, type: object = None, environment: object = None,
                description: object = None) -> SecretUpdate:
        return cls(
            value=None if value is None else check_value(value),
            type=None if type is None else check_type(type),
            environment=None if environment is None else check_environment(environment),
            description=None if description is None else check_description(description),
        )


# --- storage helpers used here and by bulk and shares ----------------------------------------

def seal_value(keyring: Keyring, team_id: uuid.UUID, secret_id: uuid.UUID, version: int,
               value: str):
    return keyring.seal(value.encode("utf-8"), secret_aad(team_id, secret_id, version))


def open_value(keyring: Keyring, row: Mapping, *, version: int | None = None) -> str:
    """The value of a secret row (or a version row, with `version`) as it leaves the server:
    decrypted, or for an end-to-end team the envelope as stored (the server cannot open it).
    Logs which row did not decrypt."""
    if row.get("envelope") is not None:
        return row["envelope"]
    v = row["version"] if version is None else version
    secret_id = row.get("secret_id", row["id"])
    try:
        return keyring.open(row["key_id"], row["nonce"], row["ciphertext"],
                            secret_aad(row["team_id"], secret_id, v)).decode("utf-8")
    except DecryptionError:
        log.error("secret %s does not decrypt with the configured master key", secret_id)
        raise


async def check_quota(cur: db.Cursor, team_id: uuid.UUID, adding: int,
                      environments: Collection[str] = ()) -> dict:
    """Lock the team and refuse when `adding` more live secrets would pass `max_secrets`, or
    when putting them into `environments` would pass the plan's active environments. Returns
    the team's row."""
    team = await teams.lock_team(cur, team_id)
    if team["max_secrets"] is not None:
        row = await db.fetchone(
            cur, "SELECT count(*) AS n FROM secrets WHERE team_id = %s AND deleted_at IS NULL",
            (team_id,))
        if row["n"] + adding > team["max_secrets"]:
            raise teams.quota_refused(SECRET_QUOTA, team)
    await check_environments(cur, team, environments)
    return team


async def check_environments(cur: db.Cursor, team: Mapping, environments: Collection[str], *,
                             leaving: Collection[uuid.UUID] = ()) -> None:
    """Refuse a write that would open an environment when the team already holds live secrets
    in as many environments as its plan allows (`teams.max_environments`). An environment is
    active while it holds a live secret; the secrets in `leaving` (being moved by this write)
    do not count where they are now. A team over its limit (after a downgrade) keeps writing in
    the environments it has. The caller holds the team's lock (`teams.lock_team`)."""
    limit = teams.max_environments(team["plan"])
    if limit is None or not environments:
        return
    rows = await db.fetchall(
        cur,
        """SELECT DISTINCT environment FROM secrets
           WHERE team_id = %s AND deleted_at IS NULL AND id <> ALL(%s::uuid[])""",
        (team["id"], [str(i) for i in leaving]))
    active = sorted((r["environment"] for r in rows), key=ENVIRONMENTS.index)
    opening = set(environments) - set(active)
    if opening and len(active) + len(opening) > limit:
        raise teams.quota_refused(
            ENVIRONMENT_QUOTA.format(limit=limit, active=", ".join(active) or "-"), team)


async def insert_secret(cur: db.Cursor, actor: Actor, keyring: Keyring, team: Mapping,
                        item: SecretInput) -> dict:
    """Insert one live secret (version 1) of `team` (its row) under a savepoint. Raises Conflict
    on a duplicate name and leaves the transaction usable (bulk items go on). An end-to-end
    team's item carries the id it was sealed for and its envelope (`check_stored_value`)."""
    key_version = team["key_version"]
    if key_version is None and item.id is not None:
        raise BadRequest(E2E_ID_ONLY)
    if key_version is not None and item.id is None:
        raise BadRequest(E2E_ID_REQUIRED)
    secret_id = item.id or uuid.uuid4()
    value = check_stored_value(item.value, key_version, secret_id, 1)
    if key_version is None:
        sealed = seal_value(keyring, team["id"], secret_id, 1, value)
        stored = (sealed.key_id, sealed.nonce, sealed.ciphertext, None)
    else:
        stored = (None, None, None, value)
    async with db.unique_as_conflict(cur, SECRET_EXISTS, savepoint="insert_secret"):
        # An id taken (in this team or any other), or retired (it named a secret or a team
        # since deleted: `retired_ids`, migration 0019), inserts nothing, whatever the name:
        # its own 409, so the name's says nothing about the id, nor the id's about where it is.
        row = await db.fetchone(
            cur,
            f"""INSERT INTO secrets (id, team_id, name, type, environment, description, version,
                                     key_id, nonce, ciphertext, envelope, created_by)
                SELECT %s, %s, %s, %s, %s, %s, 1, %s, %s, %s, %s, %s
                WHERE %s::uuid IS NULL
                   OR NOT EXISTS (SELECT 1 FROM retired_ids WHERE id = %s::uuid)
                ON CONFLICT (id) DO NOTHING RETURNING {_COLUMNS}""",
            (secret_id, team["id"], item.name, item.type, item.environment, item.description,
             *stored, actor.user_id, item.id, item.id),
        )
    if row is None:
        raise Conflict(SECRET_ID_TAKEN)
    return row


async def load_secret(cur: db.Cursor, team_id: uuid.UUID, secret_id: uuid.UUID, *,
                      for_update: bool = False) -> dict:
    row = await db.fetchone(
        cur,
        f"""SELECT {_COLUMNS}, key_id, nonce, ciphertext, envelope, admin_credential
            FROM secrets WHERE id = %s AND team_id = %s AND deleted_at IS NULL
            {"FOR UPDATE" if for_update else ""}""",
        (secret_id, team_id),
    )
    if row is None:
        raise NotFound(SECRET_NOT_FOUND)
    return row


async def store_new_value(cur: db.Cursor, actor: Actor, keyring: Keyring, current: dict,
                          value: str) -> int:
    """Keep the current value as a version record and make `value` the next version. For an
    end-to-end secret `value` is the envelope of that version, checked by the caller
    (`check_stored_value`)."""
    await cur.execute(
        """INSERT INTO secret_versions (secret_id, version, key_id, nonce, ciphertext, envelope,
                                        created_by)
           VALUES (%s, %s, %s, %s, %s, %s, %s)""",
        (current["id"], current["version"], current["key_id"], current["nonce"],
         current["ciphertext"], current.get("envelope"), actor.user_id),
    )
    version = current["version"] + 1
    if current.get("envelope") is not None:
        stored = (None, None, None, value)
    else:
        sealed = seal_value(keyring, current["team_id"], current["id"], version, value)
        stored = (sealed.key_id, sealed.nonce, sealed.ciphertext, None)
    await cur.execute(
        """UPDATE secrets SET version = %s, key_id = %s, nonce = %s, ciphertext = %s,
                              envelope = %s, updated_at = now() WHERE id = %s""",
        (version, *stored, current["id"]),
    )
    return version


async def soft_delete(cur: db.Cursor, secret_ids: list[uuid.UUID]) -> None:
    """Mark secrets deleted and revoke their share links."""
    ids = [str(i) for i in secret_ids]
    await cur.execute(
        "UPDATE secrets SET deleted_at = now() WHERE id = ANY(%s::uuid[]) AND deleted_at IS NULL",
        (ids,),
    )
    await cur.execute(
        """UPDATE secret_shares SET revoked_at = now()
           WHERE secret_id = ANY(%s::uuid[]) AND revoked_at IS NULL""",
        (ids,),
    )


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
            f"""SELECT {_COLUMNS}, count(*) OVER () AS total FROM secrets WHERE {clause}
                ORDER BY name, {_ENV_ORDER} LIMIT %s OFFSET %s""",
            (*args, limit, offset),
        )
        if rows or not offset:
            total = rows[0]["total"] if rows else 0
        else:  # a page past the end still reports the total
            total = (await db.fetchone(cur, f"SELECT count(*) AS n FROM secrets WHERE {clause}",
                                       tuple(args)))["n"]
    return rows, total


_SECRET_COLUMNS = ", ".join("s." + c.strip() for c in _COLUMNS.split(","))
# One statement: the membership check, the row and its `read` audit entry (and, when the caller
# is charged, the rate-limit count: a lease of `rate_step` units, `ratelimit.Leases`). A
# statement is atomic, so the row comes back only if the entry was written (fail-closed), in one
# round trip. Each form is prepared once per connection (`db.Statement`).
# A rotation's admin credential (`admin_credential`) is read by Admins and Owners only, signed in
# (`full_power`): never through an API token, which is what applications and exports hold.
_READ = f"""
SELECT s.* FROM (
    SELECT {_SECRET_COLUMNS}, s.key_id, s.nonce, s.ciphertext, s.envelope
    FROM secrets s JOIN team_members m ON m.team_id = s.team_id AND m.user_id = %(actor_id)s
    WHERE {{match}} AND s.team_id = %(team_id)s AND s.deleted_at IS NULL
      AND (%(environments)s::text[] IS NULL OR s.environment = ANY(%(environments)s::text[]))
      AND (NOT s.admin_credential OR (%(full_power)s AND m.role IN ('Admin', 'Owner')))
) AS s
"""
_BY_ID = "s.id = %(secret_id)s"
_BY_NAME = "s.name = %(name)s AND s.environment = %(environment)s"
# The `read` audit entry for the rows of `s` (audit's one INSERT).
_ENTRY = f"""entry AS (
    {audit.INSERT_ENTRY}
    SELECT s.team_id, %(actor_id)s, %(actor_email)s, 'read', 'secret', s.id::text, %(ip)s,
           %(user_agent)s, jsonb_build_object('name', s.name, 'environment', s.environment)
                           || {audit.VIA_TOKEN}
    FROM s
    RETURNING id
)"""
_READ_AUDITED = """
WITH s AS ({_READ}), {_ENTRY}
SELECT s.* FROM s WHERE EXISTS (SELECT 1 FROM entry)
"""
_READ_AUDITED_CHARGED = """
WITH hit AS ({ratelimit.LEASE_CTE}), epoch AS (SELECT {credentials.EPOCH_SQL} AS epoch), s AS (
    {_READ} WHERE (SELECT count FROM hit) - %(rate_step)s < %(rate_limit)s
                AND (%(epoch)s::bigint IS NULL OR (SELECT epoch FROM epoch) = %(epoch)s)
), {_ENTRY}
SELECT hit.count AS rate_count, hit.remaining AS rate_remaining, epoch.epoch AS current_epoch,
       s.*
FROM hit CROSS JOIN epoch LEFT JOIN s ON EXISTS (SELECT 1 FROM entry)
"""
_READ_AUDITED_CONFIRMING = """
WITH epoch AS (SELECT {credentials.EPOCH_SQL} AS epoch), s AS (
    {_READ} WHERE (SELECT epoch FROM epoch) = %(epoch)s
), {_ENTRY}
SELECT epoch.epoch AS current_epoch, s.*
FROM epoch LEFT JOIN s ON EXISTS (SELECT 1 FROM entry)
"""


def _statements(key: str, match: str) -> dict[str, db.Statement]:
    """The three forms of the audited read for one way of naming the secret, each prepared once
    per connection."""
    parts = {"_READ": _READ.format(match=match), "_ENTRY": _ENTRY, "ratelimit": ratelimit,
             "credentials": credentials}
    return {"plain": db.Statement(f"cvsm_{key}", _READ_AUDITED.format(**parts)),
            "charged": db.Statement(f"cvsm_{key}_charged", _READ_AUDITED_CHARGED.format(**parts)),
            "confirming": db.Statement(f"cvsm_{key}_confirming",
                                       _READ_AUDITED_CONFIRMING.format(**parts))}


_READ_BY_ID = _statements("read", _BY_ID)
_READ_BY_NAME = _statements("read_by_name", _BY_NAME)


async def read_secret(conn: db.Connection, actor: Actor, keyring: Keyring, team_id: uuid.UUID,
                      secret_id: uuid.UUID, *, charge: ratelimit.Charge | None = None
                      ) -> tuple[dict, str]:
    """One secret and its value; the `read` audit entry commits with it or nothing leaves.

    With `charge`, the caller's rate-limit count happens in the same statement, and a cached
    credential (`actor.epoch`) is confirmed there too: one round trip for the whole read. A
    moved epoch raises `credentials.StaleCredential` before anything is read or audited."""
    return await _read(conn, actor, keyring, team_id, _READ_BY_ID, {"secret_id": secret_id},
                       charge)


async def read_secret_by_name(conn: db.Connection, actor: Actor, keyring: Keyring,
                              team_id: uuid.UUID, name: str, environment: str = "production", *,
                              charge: ratelimit.Charge | None = None) -> tuple[dict, str]:
    """`read_secret` for the live secret called exactly `name` in `environment`."""
    environment = check_environment(environment)
    if not NAME_RE.match(name):
        raise NotFound(SECRET_NOT_FOUND)  # no secret can have that name
    return await _read(conn, actor, keyring, team_id, _READ_BY_NAME,
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
    SELECT {_COLUMNS}, key_id, nonce, ciphertext, envelope FROM secrets
    WHERE team_id = t.id AND deleted_at IS NULL AND NOT admin_credential
      AND (%(environment)s::text IS NULL OR environment = %(environment)s::text)
      AND (%(environments)s::text[] IS NULL OR environment = ANY(%(environments)s::text[]))
) s ON true
WHERE t.id = %(team_id)s
ORDER BY s.name, array_position(ARRAY['production','staging','development'], s.environment)""")


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
