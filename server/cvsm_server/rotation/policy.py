"""Automatic secret rotation: a secret's policy (every N days, a generator, a target), "rotate
now", and the two-phase run the background job makes of it.

(Not to be confused with `rotation.py`, which re-seals stored values under a new master key.)

A run follows AWS Secrets Manager's four steps, each recorded in `secret_rotations` and audited
before the next begins:

1. `created`: a new value is generated and kept sealed as the run's pending value (AAD
   `crypto.rotation_aad`). It is never written to `secrets` or `secret_versions`, so no read,
   export, version list, rollback, share or SDK can serve it.
2. `set`: the target applies it (`rotation_targets`), with the admin credential read (and
   audited as a `read`) from the secret the policy refers to.
3. `tested`: a connection with the pending value worked.
4. `finished`: in one transaction, the pending value becomes the secret's next version, the
   `rotate` audit entry is written (webhook event `secret.rotated`), the run is closed and the
   policy's next date set.

A failed step leaves the served value as it was: the target is put back where it can be
(`rotation_targets.undo`), the run is closed as `failed`, the failure is recorded (`rotation_failed`
audit entry, webhook event `secret.rotation_failed`, `last_error` shown on the secret's page)
and the policy retried with exponential backoff (`retry_delay`). A process that dies mid-run
leaves its run open: the next pass, on any process, resumes it from its last recorded step with
the same pending value (set and test are idempotent), so nothing is lost or half-applied.

Runs happen in the background jobs (`RotationWorker`) of whichever process holds the secret's
PostgreSQL advisory lock (`pg_try_advisory_lock`, a session lock held for the whole run): with
`--workers N` or several machines, a secret is rotated by one process at a time.

Test-only: `CVSM_TEST_ROTATION_EXIT_AFTER=<step>` (created, set or tested) makes the process
exit at once after recording that step, so a test can kill a real process between steps. It is
read from the environment of the process running the job and has no other use.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets as random
import string
import uuid
from datetime import timedelta
from typing import Any

from psycopg2.extras import Json

from ..audit import log as audit
from .. import db
from ..db import queues
from ..teams import roles
from . import targets as rotation_targets
from ..secrets import service as secrets
from ..webhooks import service as webhooks
from ..core.actor import Actor
from ..crypto.sealing import DecryptionError, Keyring, rotation_aad, rotation_target_aad
from ..core.errors import BadRequest, Forbidden, NotFound
from ..core.timeutil import iso

log = logging.getLogger("cvsm.secret_rotation")

CHANNEL = "cvsm_rotations"
EXIT_AFTER_ENV = "CVSM_TEST_ROTATION_EXIT_AFTER"  # test-only, see the module's docstring
EXIT_STATUS = 75
OPEN_STEPS = ("created", "set", "tested")
CLASSES = {"lower": string.ascii_lowercase, "upper": string.ascii_uppercase,
           "digits": string.digits, "symbols": "!#%*+,-.:=?@^_~"}
DEFAULT_GENERATOR = {"length": 32, "classes": ["lower", "upper", "digits"]}
MIN_LENGTH, MAX_LENGTH = 16, 128
MAX_INTERVAL_DAYS = 3650
RETRY_BASE_SECONDS = 60
RETRY_MAX_SECONDS = 6 * 3600
HISTORY = 20
BATCH = 20
PER_TEAM = 2  # at most this many of one team's policies in a pass (the rest wait their turn)
CONCURRENCY = 4  # teams whose runs go on at once in a pass
LOCK_NAMESPACE = "cvsm-secret-rotation:"

POLICY_NOT_FOUND = "Secret ini belum memiliki kebijakan rotasi"
POLICY_DISABLED = "Kebijakan rotasi secret ini nonaktif; Admin perlu mengaktifkannya dulu"
BAD_INTERVAL = f"Kolom 'interval_days' harus bilangan bulat 1 sampai {MAX_INTERVAL_DAYS}"
BAD_LENGTH = f"Panjang nilai harus bilangan bulat {MIN_LENGTH} sampai {MAX_LENGTH}"
BAD_CLASSES = "Kolom 'classes' harus berisi satu atau lebih dari: " + ", ".join(CLASSES)
ADMIN_SECRET_MISSING = "Secret kredensial admin tidak ditemukan di tim ini"
ADMIN_IS_SELF = "Kredensial admin harus secret lain, bukan secret yang dirotasi"
ADMIN_OUT_OF_SCOPE = ("Token ini tidak berlaku untuk environment secret kredensial admin "
                      "tersebut")
TARGET_REFUSED = "Target rotasi tidak dapat disiapkan: {reason}"


def retry_delay(failures: int) -> float:
    """Seconds until the next try after `failures` failed runs in a row."""
    return min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** max(0, failures - 1))


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


_POLICY_COLUMNS = """secret_id, team_id, interval_days, enabled, generator, target_kind, target,
    id, next_rotation_at, last_rotated_at, failures, last_error, last_failed_at, created_at,
    updated_at"""
_RUN_COLUMNS = """id, secret_id, team_id, from_version, to_version, step, target_user, error,
    started_at, updated_at, finished_at"""


async def _secret_for(cur: db.Cursor, actor: Actor, team_id: uuid.UUID, secret_id: uuid.UUID,
                      minimum: str, *, reading: bool = False, for_update: bool = False) -> dict:
    await roles.require(cur, team_id, actor, minimum, reading=reading)
    row = await secrets.load_secret(cur, team_id, secret_id, for_update=for_update)
    if actor.scope is not None and not actor.scope.allows_environment(row["environment"]):
        raise NotFound(secrets.SECRET_NOT_FOUND)
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
    owner group set up (`rotation_targets.prepare`); 400 with the reason otherwise."""
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
        admin_value = await _read_admin(cur, keyring, actor, {"team_id": team_id,
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
            await rotation_targets.prepare(step)
        except rotation_targets.TargetError as exc:
            raise BadRequest(TARGET_REFUSED.format(reason=step.scrub(str(exc)))) from None
    async with db.transaction(conn) as cur:
        secret, admin = await _check_policy_secrets(cur, actor, team_id, secret_id, admin_id,
                                                    for_update=True)
        old = await db.fetchone(
            cur, f"SELECT {_POLICY_COLUMNS}, key_id FROM secret_rotation_policies "
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
                RETURNING {_POLICY_COLUMNS}""",
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
            cur, f"SELECT {_POLICY_COLUMNS} FROM secret_rotation_policies WHERE secret_id = %s",
            (secret_id,))
        runs = await db.fetchall(
            cur, f"""SELECT {_RUN_COLUMNS} FROM secret_rotations WHERE secret_id = %s
                     ORDER BY started_at DESC, id LIMIT %s""", (secret_id, HISTORY))
    return policy, runs


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
                     WHERE secret_id = %s RETURNING {_POLICY_COLUMNS}""", (secret_id,))
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

def _exit_hook(step: str) -> None:
    if os.environ.get(EXIT_AFTER_ENV) == step:  # test-only: die between two steps
        logging.shutdown()
        os._exit(EXIT_STATUS)


def lock_key(secret_id: uuid.UUID) -> str:
    return LOCK_NAMESPACE + str(secret_id)


# Due policies (or open runs), fairly: at most PER_TEAM of each team, the teams' first turns
# before anyone's second, so one team's many (or broken) policies never keep another's waiting.
_DUE = f"""
SELECT secret_id, team_id FROM (
    SELECT p.secret_id, p.team_id, p.next_rotation_at,
           row_number() OVER (PARTITION BY p.team_id ORDER BY p.next_rotation_at, p.secret_id)
               AS turn
    FROM secret_rotation_policies p
    JOIN secrets s ON s.id = p.secret_id AND s.deleted_at IS NULL
    WHERE (p.enabled AND p.next_rotation_at <= now())
       OR EXISTS (SELECT 1 FROM secret_rotations r
                  WHERE r.secret_id = p.secret_id AND r.step IN {OPEN_STEPS})
) due
WHERE turn <= %s
ORDER BY turn, next_rotation_at, secret_id LIMIT %s
"""


async def run_due(pool: db.Pool, keyring: Keyring, *, allow_private: bool = False) -> int:
    """Rotate every secret that is due (or has a run left open); returns how many runs
    finished here. Secrets another process holds are skipped. Teams take turns (`_DUE`) and
    their runs go on side by side (CONCURRENCY teams at once, each team's in order), so a slow
    or broken target of one team delays no other team's rotation."""
    async with db.cursor(pool) as cur:
        due = await db.fetchall(cur, _DUE, (PER_TEAM, BATCH))
    if not due:
        return 0
    server = await fingerprint(pool)
    by_team: dict[uuid.UUID, list[uuid.UUID]] = {}
    for row in due:
        by_team.setdefault(row["team_id"], []).append(row["secret_id"])
    gate = asyncio.Semaphore(CONCURRENCY)

    async def team_turn(secret_ids: list[uuid.UUID]) -> int:
        done = 0
        async with gate:
            for secret_id in secret_ids:
                try:
                    done += await rotate_secret(pool, keyring, secret_id,
                                                allow_private=allow_private, server=server)
                except db.OUTAGE:
                    raise  # the database is away: the job notes it once (`db.OutageLog`)
                except Exception:  # noqa: BLE001 - one secret's trouble never stops the others
                    log.exception("rotation of secret %s failed unexpectedly", secret_id)
        return done

    results = await asyncio.gather(*(team_turn(ids) for ids in by_team.values()),
                                   return_exceptions=True)
    for result in results:  # an outage reaches the job once, after every team's turn ended
        if isinstance(result, BaseException):
            raise result
    return sum(results)


async def rotate_secret(pool: db.Pool, keyring: Keyring, secret_id: uuid.UUID, *,
                        allow_private: bool = False, server: str | None = None) -> int:
    """One run for `secret_id` if this process gets its lock and it is still due (or open):
    1 when it finished, 0 otherwise."""
    async with pool.acquire() as conn:
        async with db.cursor(conn) as cur:
            got = await db.fetchone(
                cur, "SELECT pg_try_advisory_lock(hashtextextended(%s, 0)) AS ok",
                (lock_key(secret_id),))
        if not got["ok"]:
            return 0
        try:
            if server is None:
                server = await fingerprint(conn)
            return await _run_locked(conn, keyring, secret_id, allow_private, server)
        finally:
            async with db.cursor(conn) as cur:
                await cur.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))",
                                  (lock_key(secret_id),))


async def _load(cur: db.Cursor, secret_id: uuid.UUID) -> tuple[dict | None, dict | None]:
    policy = await db.fetchone(
        cur, f"""SELECT {_POLICY_COLUMNS}, key_id, nonce, ciphertext, set_by, set_by_token,
                        next_rotation_at <= now() AS due
                 FROM secret_rotation_policies WHERE secret_id = %s""", (secret_id,))
    run = await db.fetchone(
        cur, f"""SELECT {_RUN_COLUMNS}, key_id, nonce, ciphertext FROM secret_rotations
                 WHERE secret_id = %s AND step IN {OPEN_STEPS}""", (secret_id,))
    return policy, run


async def _run_locked(conn: db.Connection, keyring: Keyring, secret_id: uuid.UUID,
                      allow_private: bool, server: str) -> int:
    """One run. Whatever goes wrong in it (a target's refusal, a value that does not parse,
    an authority lost, a bug) ends it as a recorded failure with its backoff (`_fail`): a
    broken policy is retried minutes later, never at once in a loop. Only the server's own
    database going away (`db.OUTAGE`) leaves the run open, for the next pass to resume."""
    system = Actor.system()
    async with db.cursor(conn) as cur:
        policy, run = await _load(cur, secret_id)
    if policy is None or (run is None and not (policy["enabled"] and policy["due"])):
        return 0  # done meanwhile by another process, or no longer wanted
    step = None
    try:
        if run is None:
            run = await _create(conn, keyring, system, policy)
            if run is None:
                return 0
            _exit_hook("created")
        step = await _step_context(conn, keyring, system, policy, run, allow_private, server)
        if run["step"] == "created":
            await rotation_targets.create(step)
            await rotation_targets.set_value(step)
            run = await _advance(conn, system, policy, run, "set")
            _exit_hook("set")
        if run["step"] == "set":
            await rotation_targets.test_value(step)
            run = await _advance(conn, system, policy, run, "tested")
            _exit_hook("tested")
        await _finish(conn, keyring, system, policy, run, step)
    except db.OUTAGE:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure of a run is recorded, never a spin
        if not isinstance(exc, (rotation_targets.TargetError, DecryptionError, NotFound)):
            log.exception("rotation of secret %s failed unexpectedly; recorded as a failure",
                          secret_id)
        await _fail(conn, system, policy, run, step, exc)
        return 0
    try:
        await rotation_targets.finish(step)
    except rotation_targets.TargetError as exc:  # the value is current already: only noted
        log.warning("rotation %s finished; the target's finish call failed (%s)", run["id"],
                    step.scrub(str(exc)))
    return 1


class AuthorityLost(rotation_targets.TargetError):
    """The account or token that set the policy may no longer do what the policy does."""


async def _check_authority(cur: db.Cursor, policy: dict, environments: list[str]) -> None:
    """The policy runs with the authority of whoever saved it: that account must still be an
    Admin or Owner of the team and, when it came through an API token, the token must be live,
    its own, able to write, and reach every environment the policy's secrets are in."""
    row = await db.fetchone(
        cur, """SELECT (SELECT role FROM team_members WHERE team_id = %(team)s
                                                       AND user_id = %(user)s) AS role,
                       t.id AS token_id, t.user_id AS token_user, t.team_id AS token_team,
                       t.environments, t.read_only,
                       t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())
                           AS token_live
                FROM (SELECT 1) one LEFT JOIN api_tokens t ON t.id = %(token)s""",
        {"team": policy["team_id"], "user": policy["set_by"], "token": policy["set_by_token"]})
    if policy["set_by"] is None or row["role"] not in (roles.ADMIN, roles.OWNER):
        raise AuthorityLost("the account that set the policy is no longer an Admin of the team; "
                            "an Admin must save the policy again")
    if policy["set_by_token"] is None:
        return
    if (row["token_id"] is None or not row["token_live"] or row["token_user"] != policy["set_by"]
            or row["read_only"]
            or (row["token_team"] is not None and row["token_team"] != policy["team_id"])
            or (row["environments"] is not None
                and any(e not in row["environments"] for e in environments))):
        raise AuthorityLost("the API token that set the policy is revoked or no longer reaches "
                            "every secret the policy names; an Admin must save the policy again")


async def _create(conn: db.Connection, keyring: Keyring, system: Actor,
                  policy: dict) -> dict | None:
    """Step 1: the pending value, sealed in its run; audited as `rotation_create`."""
    async with db.transaction(conn) as cur:
        secret = await db.fetchone(
            cur, """SELECT id, team_id, name, environment, version, key_id, nonce, ciphertext
                    FROM secrets WHERE id = %s AND deleted_at IS NULL FOR UPDATE""",
            (policy["secret_id"],))
        if secret is None:
            return None
        current = secrets.open_value(keyring, secret)
        admin = None
        await _authorise(cur, policy, secret)
        if (admin_id := rotation_targets.admin_secret_id(policy["target_kind"],
                                                         policy["target"])):
            admin = await _read_admin(cur, keyring, system, policy, admin_id, None)
        user = rotation_targets.next_user(policy["target_kind"], policy["target"], current)
        value = rotation_targets.stored_value(policy["target_kind"], policy["target"],
                                              generate(policy["generator"]), user, admin)
        run_id = uuid.uuid4()
        sealed = keyring.seal(value.encode(), rotation_aad(secret["team_id"], secret["id"], run_id))
        run = await db.fetchone(
            cur, f"""INSERT INTO secret_rotations (id, secret_id, team_id, from_version,
                                                  target_user, key_id, nonce, ciphertext)
                     VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
                     RETURNING {_RUN_COLUMNS}, key_id, nonce, ciphertext""",
            (run_id, secret["id"], secret["team_id"], secret["version"], user, sealed.key_id,
             sealed.nonce, sealed.ciphertext))
        await _record(cur, system, "rotation_create", policy, secret, run)
    return run


async def _authorise(cur: db.Cursor, policy: dict, secret: dict) -> None:
    environments = [secret["environment"]]
    if (admin_id := rotation_targets.admin_secret_id(policy["target_kind"], policy["target"])):
        admin = await db.fetchone(cur, "SELECT environment FROM secrets WHERE id = %s",
                                  (admin_id,))
        if admin is not None:
            environments.append(admin["environment"])
    await _check_authority(cur, policy, environments)


async def _read_admin(cur: db.Cursor, keyring: Keyring, actor: Actor, policy: dict,
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
    return secrets.open_value(keyring, row)


async def _step_context(conn: db.Connection, keyring: Keyring, system: Actor, policy: dict,
                        run: dict, allow_private: bool, server: str) -> rotation_targets.Step:
    async with db.transaction(conn) as cur:
        secret = await db.fetchone(
            cur, """SELECT id, team_id, name, environment, version, key_id, nonce, ciphertext
                    FROM secrets WHERE id = %s AND deleted_at IS NULL""", (policy["secret_id"],))
        if secret is None:
            raise NotFound(secrets.SECRET_NOT_FOUND)
        if run["step"] == "created":  # before the target changes (after, the run completes)
            await _authorise(cur, policy, secret)
        admin = None
        if (admin_id := rotation_targets.admin_secret_id(policy["target_kind"],
                                                         policy["target"])):
            admin = await _read_admin(cur, keyring, system, policy, admin_id, run)
    pending = keyring.open(run["key_id"], run["nonce"], run["ciphertext"],
                           rotation_aad(run["team_id"], run["secret_id"], run["id"])).decode()
    signing = None
    if policy["key_id"] is not None:
        signing = keyring.open(policy["key_id"], policy["nonce"], policy["ciphertext"],
                               rotation_target_aad(policy["id"])).decode()
    return rotation_targets.Step(
        kind=policy["target_kind"], settings=policy["target"], rotation_id=run["id"],
        secret={"id": str(secret["id"]), "name": secret["name"],
                "environment": secret["environment"]},
        pending=pending, current=secrets.open_value(keyring, secret),
        target_user=run["target_user"], admin=admin, signing_secret=signing,
        allow_private=allow_private, server_fingerprint=server)


async def _record(cur: db.Cursor, system: Actor, action: str, policy: dict, secret: dict,
                  run: dict, **extra: Any) -> None:
    await audit.record(cur, system, action, "secret", team_id=policy["team_id"],
                       resource_id=policy["secret_id"],
                       metadata={"name": secret["name"], "environment": secret["environment"],
                                 "rotation_id": str(run["id"]) if run["id"] else None,
                                 "target": policy["target_kind"],
                                 "from_version": run["from_version"], **extra})


async def _advance(conn: db.Connection, system: Actor, policy: dict, run: dict,
                   step: str) -> dict:
    """Steps 2 and 3: record that `step` is done, audited as `rotation_<step>`."""
    async with db.transaction(conn) as cur:
        row = await db.fetchone(
            cur, f"""UPDATE secret_rotations SET step = %s, updated_at = now() WHERE id = %s
                     RETURNING {_RUN_COLUMNS}, key_id, nonce, ciphertext""", (step, run["id"]))
        secret = await db.fetchone(cur, "SELECT name, environment FROM secrets WHERE id = %s",
                                   (policy["secret_id"],))
        await _record(cur, system, f"rotation_{step}", policy, secret, row)
    return row


async def _finish(conn: db.Connection, keyring: Keyring, system: Actor, policy: dict, run: dict,
                  step: rotation_targets.Step) -> None:
    """Step 4, one transaction: the pending value becomes the current version, the `rotate`
    entry (event `secret.rotated`) is written, the run closes and the policy moves on."""
    async with db.transaction(conn) as cur:
        current = await db.fetchone(
            cur, """SELECT id, team_id, name, environment, version, key_id, nonce, ciphertext
                    FROM secrets WHERE id = %s AND deleted_at IS NULL FOR UPDATE""",
            (policy["secret_id"],))
        if current is None:
            raise NotFound(secrets.SECRET_NOT_FOUND)
        version = await secrets.store_new_value(cur, system, keyring, current, step.pending)
        closed = await db.fetchone(
            cur, f"""UPDATE secret_rotations SET step = 'finished', to_version = %s,
                            key_id = NULL, nonce = NULL, ciphertext = NULL, updated_at = now(),
                            finished_at = now()
                     WHERE id = %s RETURNING {_RUN_COLUMNS}""", (version, run["id"]))
        await cur.execute(
            """UPDATE secret_rotation_policies SET last_rotated_at = now(), failures = 0,
                      last_error = NULL,
                      next_rotation_at = now() + make_interval(days => interval_days)
               WHERE secret_id = %s""", (policy["secret_id"],))
        await _record(cur, system, "rotate", policy, current, closed, to_version=version,
                      **({"user": run["target_user"]} if run["target_user"] else {}))
    log.info("secret %s rotated to version %d (rotation %s)", policy["secret_id"], version,
             run["id"])


def _said(exc: BaseException) -> str:
    """What a failure's record says (members see it): the targets' own short reasons, else only
    the kind of error (its text could hold anything; the server log has the traceback)."""
    if isinstance(exc, DecryptionError):
        return "a stored value does not decrypt"
    if isinstance(exc, (rotation_targets.TargetError, NotFound)):
        return str(exc)
    return f"unexpected error ({type(exc).__name__}); the server log has the details"


async def _fail(conn: db.Connection, system: Actor, policy: dict, run: dict | None,
                step: rotation_targets.Step | None, exc: Exception) -> None:
    """Put the target back where it can be, close the run as failed, record it and schedule
    the retry. The served value was never touched."""
    failed_step = {None: "create", "created": "set", "set": "test",
                   "tested": "finish"}[run["step"] if run else None]
    error = f"{failed_step}: {_said(exc)}"
    if step is not None:
        error = step.scrub(error)
        if run is not None and run["step"] in ("created", "set"):  # the target may hold it
            try:
                await rotation_targets.undo(step)
            except Exception as undo_exc:  # noqa: BLE001 - noted with the failure
                if _said(undo_exc) not in error:
                    error = step.scrub(f"{error}; undo: {_said(undo_exc)}")
    error = error[:500]
    async with db.transaction(conn) as cur:
        closed = {"id": None, "from_version": None}
        if run is not None:
            closed = await db.fetchone(
                cur, f"""UPDATE secret_rotations SET step = 'failed', error = %s, key_id = NULL,
                                nonce = NULL, ciphertext = NULL, updated_at = now(),
                                finished_at = now()
                         WHERE id = %s RETURNING {_RUN_COLUMNS}""", (error, run["id"]))
        row = await db.fetchone(
            cur, """UPDATE secret_rotation_policies SET failures = failures + 1,
                           last_error = %s, last_failed_at = now(), updated_at = now()
                    WHERE secret_id = %s RETURNING failures""", (error, policy["secret_id"]))
        if row is not None:
            await cur.execute(
                """UPDATE secret_rotation_policies SET next_rotation_at = now() + %s
                   WHERE secret_id = %s""",
                (timedelta(seconds=retry_delay(row["failures"])), policy["secret_id"]))
        secret = await db.fetchone(cur, "SELECT name, environment FROM secrets WHERE id = %s",
                                   (policy["secret_id"],))
        await _record(cur, system, "rotation_failed", policy, secret or {"name": None,
                                                                          "environment": None},
                      closed, step=failed_step, error=error)
    log.warning("rotation %s of secret %s failed at %s; will retry", closed["id"],
                policy["secret_id"], failed_step)


class RotationWorker(queues.QueueWorker):
    """The background job that runs due rotations (see `queues.QueueWorker` for when it
    wakes: `NOTIFY cvsm_rotations` from "rotate now" or a new policy, the next due policy, or
    the poll interval)."""

    channel = CHANNEL
    name = "rotations"
    next_due_sql = """SELECT extract(epoch FROM min(p.next_rotation_at) - now()) AS seconds
                      FROM secret_rotation_policies p
                      JOIN secrets s ON s.id = p.secret_id AND s.deleted_at IS NULL
                      WHERE p.enabled"""

    def __init__(self, pool: db.Pool, keyring: Keyring, *, allow_private: bool = False,
                 poll_seconds: float = 60.0) -> None:
        super().__init__(pool, poll_seconds=poll_seconds)
        self.keyring = keyring
        self.allow_private = allow_private

    async def deliver_due(self) -> int:
        return await run_due(self.pool, self.keyring, allow_private=self.allow_private)
