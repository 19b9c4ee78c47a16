"""Automatic secret rotation: a secret's policy (every N days, a generator, a target) and "rotate
now"; the two-phase run the background job makes of it is `outbound.rotation` (it calls out over
HTTP), described here.

(Not to be confused with `crypto.rekey`, which re-seals stored values under a new master key.)

A run follows AWS Secrets Manager's four steps, each recorded in `secret_rotations` and audited
before the next begins:

1. `created`: a new value is generated and kept sealed as the run's pending value (AAD
   `crypto.rotation_aad`). It is never written to `secrets` or `secret_versions`, so no read,
   export, version list, rollback, share or SDK can serve it.
2. `set`: the target applies it (`rotation.targets`), with the admin credential read (and
   audited as a `read`) from the secret the policy refers to.
3. `tested`: a connection with the pending value worked.
4. `finished`: in one transaction, the pending value becomes the secret's next version, the
   `rotate` audit entry is written (webhook event `secret.rotated`), the run is closed and the
   policy's next date set.

A failed step leaves the served value as it was: the target is put back where it can be
(`rotation.targets`' undo), the run is closed as `failed`, the failure is recorded (`rotation_failed`
audit entry, webhook event `secret.rotation_failed`, `last_error` shown on the secret's page)
and the policy retried with exponential backoff (`retry_delay`). A process that dies mid-run
leaves its run open: the next pass, on any process, resumes it from its last recorded step with
the same pending value (set and test are idempotent), so nothing is lost or half-applied.

Runs happen in the background jobs (`outbound.rotation.RotationWorker`) of whichever process holds the secret's
PostgreSQL advisory lock (`pg_try_advisory_lock`, a session lock held for the whole run): with
`--workers N` or several machines, a secret is rotated by one process at a time.

Test-only: `CVSM_TEST_ROTATION_EXIT_AFTER=<step>` (created, set or tested) makes the process
exit at once after recording that step, so a test can kill a real process between steps. It is
read from the environment of the process running the job and has no other use.
"""

from __future__ import annotations

import secrets as random
import string
import uuid
from typing import Any

from psycopg2.extras import Json

from ..core.actor import Actor
from ..core.errors import BadRequest, Forbidden, NotFound
from ..core.i18n import N_, Text
from ..core.timeutil import iso
from ..crypto.sealing import Keyring, rotation_target_aad
from ..audit import log as audit
from ..secrets import queries as secret_queries
from ..teams import roles
from ..webhooks import service as webhooks
from .. import db
from . import targets as rotation_targets, postgres as pg_target

CHANNEL = "cvsm_rotations"
OPEN_STEPS = ("created", "set", "tested")
CLASSES = {"lower": string.ascii_lowercase, "upper": string.ascii_uppercase,
           "digits": string.digits, "symbols": "!#%*+,-.:=?@^_~"}
DEFAULT_GENERATOR = {"length": 32, "classes": ["lower", "upper", "digits"]}
MIN_LENGTH, MAX_LENGTH = 16, 128
MAX_INTERVAL_DAYS = 3650
HISTORY = 20

POLICY_NOT_FOUND = "Secret ini belum memiliki kebijakan rotasi"
POLICY_DISABLED = "Kebijakan rotasi secret ini nonaktif; Admin perlu mengaktifkannya dulu"
BAD_INTERVAL = f"Kolom 'interval_days' harus bilangan bulat 1 sampai {MAX_INTERVAL_DAYS}"
BAD_LENGTH = f"Panjang nilai harus bilangan bulat {MIN_LENGTH} sampai {MAX_LENGTH}"
BAD_CLASSES = "Kolom 'classes' harus berisi satu atau lebih dari: " + ", ".join(CLASSES)
ADMIN_SECRET_MISSING = "Secret kredensial admin tidak ditemukan di tim ini"
ADMIN_IS_SELF = "Kredensial admin harus secret lain, bukan secret yang dirotasi"
ADMIN_OUT_OF_SCOPE = ("Token ini tidak berlaku untuk environment secret kredensial admin "
                      "tersebut")
TARGET_REFUSED = N_("Target rotasi tidak dapat disiapkan: {reason}")


# --- the policy -------------------------------------------------------------------------------

def check_generator(generator: Any) -> dict:
    if generator is None:
        return dict(DEFAULT_GENERATOR)
    if not isinstance(generator, dict) or set(generator) - {"length", "classes"}:
        raise BadRequest("Kolom 'generator' harus berupa objek {length, classes}")
    length = generator.get("length", DEFAULT_GENERATOR["length"])
    if type(length) is not int or not MIN_LENGTH <= length <= MAX_LENGTH:
        raise BadRequest(BAD_LENGTH)
    classes = generator.get("classes", DEFAULT_GENERATOR["classes"])
    if (not isinstance(classes, list) or not classes
            or any(not isinstance(c, str) or c not in CLASSES for c in classes)):
        raise BadRequest(BAD_CLASSES)
    return {"length": length, "classes": [c for c in CLASSES if c in classes]}


def generate(generator: dict) -> str:
    """A random value: `length` characters with at least one of each class."""
    classes = [CLASSES[c] for c in generator["classes"]]
    alphabet = "".join(classes)
    while True:
        value = "".join(random.choice(alphabet) for _ in range(generator["length"]))
        if all(any(ch in chars for ch in value) for chars in classes):
            return value


def check_interval(days: Any) -> int:
    if type(days) is not int or not 1 <= days <= MAX_INTERVAL_DAYS:
        raise BadRequest(BAD_INTERVAL)
    return days


def policy_json(row: dict) -> dict:
    return {
        "secret_id": str(row["secret_id"]),
        "interval_days": row["interval_days"],
        "enabled": row["enabled"],
        "generator": row["generator"],
        "target": {"kind": row["target_kind"], **row["target"]},
        "next_rotation_at": iso(row["next_rotation_at"]),
        "last_rotated_at": iso(row["last_rotated_at"]),
        "failures": row["failures"],
        "last_error": row["last_error"],
        "last_failed_at": iso(row["last_failed_at"]),
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


def run_json(row: dict) -> dict:
    return {"id": str(row["id"]), "step": row["step"], "from_version": row["from_version"],
            "to_version": row["to_version"], "target_user": row["target_user"],
            "error": row["error"], "started_at": iso(row["started_at"]),
            "finished_at": iso(row["finished_at"])}


POLICY_COLUMNS = """secret_id, team_id, interval_days, enabled, generator, target_kind, target,
    id, next_rotation_at, last_rotated_at, failures, last_error, last_failed_at, created_at,
    updated_at"""
RUN_COLUMNS = """id, secret_id, team_id, from_version, to_version, step, target_user, error,
    started_at, updated_at, finished_at"""


async def _secret_for(cur: db.Cursor, actor: Actor, team_id: uuid.UUID, secret_id: uuid.UUID,
                      minimum: str, *, reading: bool = False, for_update: bool = False) -> dict:
    await roles.require(cur, team_id, actor, minimum, reading=reading)
    row = await secret_queries.load_secret(cur, team_id, secret_id, for_update=for_update)
    if actor.scope is not None and not actor.scope.allows_environment(row["environment"]):
        raise NotFound(secret_queries.SECRET_NOT_FOUND)
    return row


E2E_REFUSED = ("Tim end-to-end tidak mendukung rotasi otomatis: server harus mengetahui nilai baru "
               "untuk menerapkannya, padahal server tim ini tidak dapat membaca nilai. Rotasi "
               "nilai di sumbernya lalu simpan nilai baru dari klien")


async def set_policy(conn: db.Connection, actor: Actor, keyring: Keyring, team_id: uuid.UUID,
                     secret_id: uuid.UUID, *, interval_days: Any, target: Any,
                     generator: Any = None, enabled: Any = True,
                     allow_private: bool = False) -> tuple[dict, str | None]:
    """Create or replace a secret's rotation policy (Admin or above), audited as
    `rotation_policy_set`. Returns the policy and, when a webhook target is new, its signing
    secret (shown once).

    Every secret the policy names must be within the caller's reach (a scoped token's
    environments); the admin credential becomes one (`secrets.admin_credential`). The target
    is checked as each run would use it: a webhook URL by the webhooks' rules, a PostgreSQL
    target reached with the admin credential (read and audited), its roles checked and an
    owner group set up (`pg_target.prepare`); 400 with the reason otherwise."""
    days = check_interval(interval_days)
    gen = check_generator(generator)
    if not isinstance(enabled, bool):
        raise BadRequest("Kolom 'enabled' harus true atau false")
    if not isinstance(target, dict):
        raise BadRequest("Kolom 'target' harus berupa objek")
    kind = target.get("kind")
    settings = rotation_targets.check(kind, target)
    admin_id = rotation_targets.admin_secret_id(kind, settings)
    async with db.transaction(conn) as cur:  # who may, and an audited read of the credential
        secret, admin = await _check_policy_secrets(cur, actor, team_id, secret_id, admin_id)
        admin_value = await read_admin(cur, keyring, actor, {"team_id": team_id,
                                                               "secret_id": secret_id},
                                        admin_id, None, by="rotation_setup") if admin else None
    if kind == "webhook":
        rotation_targets.check_webhook(settings["url"], allow_private)
        await webhooks.resolve_target(settings["url"], allow_private=allow_private)
    elif admin_value is not None:
        step = rotation_targets.Step(
            kind=kind, settings=settings, rotation_id=uuid.uuid4(),
            secret={"id": str(secret_id), "name": secret["name"],
                    "environment": secret["environment"]},
            pending="", current="", admin=admin_value, allow_private=allow_private,
            server_fingerprint=await fingerprint(conn))
        try:
            await pg_target.prepare(step)
        except rotation_targets.TargetError as exc:
            raise BadRequest(Text(TARGET_REFUSED, reason=step.scrub(str(exc)))) from None
    async with db.transaction(conn) as cur:
        secret, admin = await _check_policy_secrets(cur, actor, team_id, secret_id, admin_id,
                                                    for_update=True)
        old = await db.fetchone(
            cur, f"SELECT {POLICY_COLUMNS}, key_id FROM secret_rotation_policies "
                 "WHERE secret_id = %s", (secret_id,))
        policy_id = old["id"] if old else uuid.uuid4()
        signing = None
        sealed = None
        if kind == "webhook" and (old is None or old["key_id"] is None):
            signing = "whsec_" + random.token_urlsafe(32)
            sealed = keyring.seal(signing.encode(), rotation_target_aad(policy_id))
        keep_key = kind == "webhook" and signing is None
        row = await db.fetchone(
            cur,
            f"""INSERT INTO secret_rotation_policies
                    (secret_id, team_id, interval_days, enabled, generator, target_kind, target,
                     id, key_id, nonce, ciphertext, next_rotation_at, created_by, set_by,
                     set_by_token)
                VALUES (%(secret_id)s, %(team_id)s, %(days)s, %(enabled)s, %(generator)s,
                        %(kind)s, %(target)s, %(id)s, %(key_id)s, %(nonce)s, %(ciphertext)s,
                        now() + make_interval(days => %(days)s), %(user)s, %(user)s,
                        %(token)s)
                ON CONFLICT (secret_id) DO UPDATE SET
                    interval_days = EXCLUDED.interval_days, enabled = EXCLUDED.enabled,
                    generator = EXCLUDED.generator, target_kind = EXCLUDED.target_kind,
                    target = EXCLUDED.target, set_by = EXCLUDED.set_by,
                    set_by_token = EXCLUDED.set_by_token,
                    key_id = CASE WHEN %(keep_key)s THEN secret_rotation_policies.key_id
                                  ELSE EXCLUDED.key_id END,
                    nonce = CASE WHEN %(keep_key)s THEN secret_rotation_policies.nonce
                                 ELSE EXCLUDED.nonce END,
                    ciphertext = CASE WHEN %(keep_key)s THEN secret_rotation_policies.ciphertext
                                      ELSE EXCLUDED.ciphertext END,
                    next_rotation_at = coalesce(secret_rotation_policies.last_rotated_at,
                                                secret_rotation_policies.created_at)
                                       + make_interval(days => EXCLUDED.interval_days),
                    failures = 0, last_error = NULL, updated_at = now()
                RETURNING {POLICY_COLUMNS}""",
            {"secret_id": secret_id, "team_id": team_id, "days": days, "enabled": enabled,
             "generator": Json(gen), "kind": kind, "target": Json(settings), "id": policy_id,
             "key_id": sealed.key_id if sealed else None,
             "nonce": sealed.nonce if sealed else None,
             "ciphertext": sealed.ciphertext if sealed else None,
             "user": actor.user_id, "token": actor.token_id, "keep_key": keep_key})
        await _mark_admin_credentials(cur, [admin_id, _admin_of(old)])
        await audit.record(cur, actor, "rotation_policy_set", "secret", team_id=team_id,
                           resource_id=secret_id,
                           metadata={"name": secret["name"], "environment": secret["environment"],
                                     "interval_days": days, "target": kind,
                                     "enabled": enabled,
                                     **({"admin_secret_id": str(admin_id)} if admin_id else {})})
        await cur.execute(f"NOTIFY {CHANNEL}")
    return row, signing


def _admin_of(policy: dict | None) -> uuid.UUID | None:
    if policy is None:
        return None
    return rotation_targets.admin_secret_id(policy["target_kind"], policy["target"])


async def _check_policy_secrets(cur: db.Cursor, actor: Actor, team_id: uuid.UUID,
                                secret_id: uuid.UUID, admin_id: uuid.UUID | None, *,
                                for_update: bool = False) -> tuple[dict, dict | None]:
    """The rotated secret and the admin credential's secret, each within the actor's reach: an
    Admin of the team, through a credential that may write, in the environments of both."""
    secret = await _secret_for(cur, actor, team_id, secret_id, roles.ADMIN, for_update=for_update)
    if secret["envelope"] is not None:
        raise BadRequest(E2E_REFUSED)
    roles.check_environment_write(actor, secret["environment"])
    if admin_id is None:
        return secret, None
    if admin_id == secret_id:
        raise BadRequest(ADMIN_IS_SELF)
    admin = await db.fetchone(
        cur, """SELECT id, name, environment, envelope FROM secrets WHERE id = %s
                AND team_id = %s AND deleted_at IS NULL""", (admin_id, team_id))
    if admin is None or admin["envelope"] is not None:
        raise BadRequest(ADMIN_SECRET_MISSING)
    if actor.scope is not None and not actor.scope.allows_environment(admin["environment"]):
        raise Forbidden(ADMIN_OUT_OF_SCOPE)
    return secret, admin


async def _mark_admin_credentials(cur: db.Cursor, ids: list[uuid.UUID | None]) -> None:
    """Each secret among `ids` is an admin credential exactly while a policy names it."""
    wanted = sorted({str(i) for i in ids if i is not None})
    if wanted:
        await cur.execute(
            """UPDATE secrets s SET admin_credential = EXISTS (
                   SELECT 1 FROM secret_rotation_policies p
                   WHERE p.target ->> 'admin_secret_id' = s.id::text
                     AND p.target ? 'admin_secret_id')
               WHERE s.id = ANY(%s::uuid[])""", (wanted,))


async def fingerprint(conn: db.Connection | db.Pool) -> str:
    """The server's own database cluster, as `rotation_targets` compares a target with it."""
    async with db.cursor(conn) as cur:
        row = await db.fetchone(cur, f"SELECT ({rotation_targets.FINGERPRINT_SQL}) AS print")
    return row["print"]


async def get_policy(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                     secret_id: uuid.UUID) -> tuple[dict | None, list[dict]]:
    """A secret's policy (None when it has none) and its latest runs, newest first (Viewer)."""
    async with db.cursor(conn) as cur:
        await _secret_for(cur, actor, team_id, secret_id, roles.VIEWER)
        policy = await db.fetchone(
            cur, f"SELECT {POLICY_COLUMNS} FROM secret_rotation_policies WHERE secret_id = %s",
            (secret_id,))
        runs = await db.fetchall(
            cur, f"""SELECT {RUN_COLUMNS} FROM secret_rotations WHERE secret_id = %s
                     ORDER BY started_at DESC, id LIMIT %s""", (secret_id, HISTORY))
    return policy, runs


_TEAM_POLICY_COLUMNS = ", ".join("p." + c.strip() for c in POLICY_COLUMNS.split(","))


async def list_policies(conn: db.Connection, actor: Actor, team_id: uuid.UUID) -> list[dict]:
    """The team's rotation policies, each with its secret's `name` and `environment`, by name
    then environment (Admin or above: the targets are an Admin's business). A scoped token sees
    those of its environments only."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN, reading=True)
        rows = await db.fetchall(
            cur, f"""SELECT {_TEAM_POLICY_COLUMNS}, s.name, s.environment
                     FROM secret_rotation_policies p JOIN secrets s ON s.id = p.secret_id
                     WHERE p.team_id = %s AND s.deleted_at IS NULL
                     ORDER BY s.name, s.environment""", (team_id,))
    return [r for r in rows
            if actor.scope is None or actor.scope.allows_environment(r["environment"])]


async def rotatable_secrets(conn: db.Connection, actor: Actor,
                            team_id: uuid.UUID) -> list[dict]:
    """The team's secrets a policy may name (to rotate, or as a PostgreSQL target's admin
    credential): `id`, `name`, `environment` of every live secret the server can read (none in
    an end-to-end team), by name then environment (Admin or above)."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN, reading=True)
        rows = await db.fetchall(
            cur, """SELECT id, name, environment FROM secrets
                    WHERE team_id = %s AND deleted_at IS NULL AND envelope IS NULL
                    ORDER BY name, environment LIMIT 1000""", (team_id,))
    return [r for r in rows
            if actor.scope is None or actor.scope.allows_environment(r["environment"])]


async def delete_policy(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                        secret_id: uuid.UUID) -> None:
    """Remove a secret's policy (Admin or above); its history stays."""
    async with db.transaction(conn) as cur:
        secret = await _secret_for(cur, actor, team_id, secret_id, roles.ADMIN, for_update=True)
        roles.check_environment_write(actor, secret["environment"])
        gone = await db.fetchone(
            cur, """DELETE FROM secret_rotation_policies WHERE secret_id = %s
                    RETURNING target_kind, target""", (secret_id,))
        if gone is None:
            raise NotFound(POLICY_NOT_FOUND)
        await _mark_admin_credentials(cur, [_admin_of(gone)])
        await audit.record(cur, actor, "rotation_policy_delete", "secret", team_id=team_id,
                           resource_id=secret_id,
                           metadata={"name": secret["name"], "environment": secret["environment"]})


async def rotate_now(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                     secret_id: uuid.UUID) -> dict:
    """Make the policy due now (Member or above; a Viewer cannot cause a rotation), audited
    as `rotation_requested`; the background job starts it within a moment. A disabled policy
    is refused (400): an Admin enables it first."""
    async with db.transaction(conn) as cur:
        secret = await _secret_for(cur, actor, team_id, secret_id, roles.MEMBER)
        roles.check_environment_write(actor, secret["environment"])
        row = await db.fetchone(
            cur, f"""UPDATE secret_rotation_policies SET next_rotation_at = now(),
                            updated_at = now()
                     WHERE secret_id = %s RETURNING {POLICY_COLUMNS}""", (secret_id,))
        if row is None:
            raise NotFound(POLICY_NOT_FOUND)
        if not row["enabled"]:
            raise BadRequest(POLICY_DISABLED)
        await audit.record(cur, actor, "rotation_requested", "secret", team_id=team_id,
                           resource_id=secret_id,
                           metadata={"name": secret["name"], "environment": secret["environment"]})
        await cur.execute(f"NOTIFY {CHANNEL}")
    return row


# --- the run ----------------------------------------------------------------------------------


async def read_admin(cur: db.Cursor, keyring: Keyring, actor: Actor, policy: dict,
                      admin_id: uuid.UUID, run: dict | None, *, by: str = "rotation") -> str:
    """The admin credential's value, read with its `read` audit entry (same transaction)."""
    row = await db.fetchone(
        cur, """SELECT id, team_id, name, environment, version, key_id, nonce, ciphertext
                FROM secrets WHERE id = %s AND team_id = %s AND deleted_at IS NULL""",
        (admin_id, policy["team_id"]))
    if row is None:
        raise rotation_targets.TargetError("the admin credential secret is gone")
    await audit.record(cur, actor, "read", "secret", team_id=policy["team_id"],
                       resource_id=admin_id,
                       metadata={"name": row["name"], "environment": row["environment"],
                                 "by": by, "rotated_secret_id": str(policy["secret_id"]),
                                 "rotation_id": str(run["id"]) if run else None})
    return secret_queries.open_value(keyring, row)
