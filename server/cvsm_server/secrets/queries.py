"""A secret's storage, shared by the service, bulk operations, shares and rotation: sealing and
opening values, quotas, the insert, load and new-value writes, soft delete, and the audited
read's statements (the read and its audit entry in one round trip, prepared once per
connection)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Mapping

from ..core.actor import Actor
from ..core.errors import BadRequest, Conflict, NotFound
from ..core.i18n import N_, Text
from ..crypto.sealing import DecryptionError, Keyring, secret_aad
from ..accounts import credentials, ratelimit
from ..audit import log as audit
from ..teams import service as teams
from .inputs import E2E_ID_ONLY, E2E_ID_REQUIRED, ENVIRONMENTS, SecretInput, check_stored_value
from .. import db

log = logging.getLogger("cvsm.secrets")

SECRET_NOT_FOUND = "Secret tidak ditemukan"
SECRET_EXISTS = "Secret dengan nama ini sudah ada di environment tersebut"
# A client-chosen id (an end-to-end team's) that any secret has: the same answer wherever it is.
SECRET_ID_TAKEN = "Id secret sudah dipakai; buat id acak baru lalu segel ulang nilainya"
SECRET_QUOTA = "Kuota secret tim untuk paket ini sudah penuh"
ENVIRONMENT_QUOTA = N_("Paket tim ini hanya mengizinkan {limit} environment aktif (berisi secret); "
                        "yang aktif sekarang: {active}. Pindahkan atau hapus secret di sana "
                        "dulu, atau naikkan paket tim")
COLUMNS = ("id, team_id, name, type, environment, description, version, created_at, updated_at, "
           "e2e")


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
            Text(ENVIRONMENT_QUOTA, limit=limit, active=", ".join(active) or "-"), team)


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
                ON CONFLICT (id) DO NOTHING RETURNING {COLUMNS}""",
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
        f"""SELECT {COLUMNS}, key_id, nonce, ciphertext, envelope, admin_credential
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


_SECRET_COLUMNS = ", ".join("s." + c.strip() for c in COLUMNS.split(","))
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


READ_BY_ID = _statements("read", _BY_ID)
READ_BY_NAME = _statements("read_by_name", _BY_NAME)
