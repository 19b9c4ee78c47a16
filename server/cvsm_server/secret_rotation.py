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

import logging
import os
import secrets as random
import string
import uuid
from datetime import timedelta
from typing import Any

from psycopg2.extras import Json

from . import audit, db, queues, roles, rotation_targets, secrets
from .actor import Actor
from .crypto import DecryptionError, Keyring, rotation_aad, rotation_target_aad
from .errors import BadRequest, NotFound
from .timeutil import iso

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
LOCK_NAMESPACE = "cvsm-secret-rotation:"

POLICY_NOT_FOUND = "Secret ini belum memiliki kebijakan rotasi"
POLICY_DISABLED = "Kebijakan rotasi secret ini nonaktif; Admin perlu mengaktifkannya dulu"
BAD_INTERVAL = f"Kolom 'interval_days' harus bilangan bulat 1 sampai {MAX_INTERVAL_DAYS}"
BAD_LENGTH = f"Panjang nilai harus bilangan bulat {MIN_LENGTH} sampai {MAX_LENGTH}"
BAD_CLASSES = "Kolom 'classes' harus berisi satu atau lebih dari: " + ", ".join(CLASSES)
ADMIN_SECRET_MISSING = "Secret kredensial admin tidak ditemukan di tim ini"
ADMIN_IS_SELF = "Kredensial admin harus secret lain, bukan secret yang dirotasi"


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
                     generator: Any = None, enabled: Any = True) -> tuple[dict, str | None]:
    """Create or replace a secret's rotation policy (Admin or above), audited as
    `rotation_policy_set`. Returns the policy and, when a webhook target is new, its signing
    secret (shown once)."""
    days = check_interval(interval_days)
    gen = check_generator(generator)
    if not isinstance(enabled, bool):
        raise BadRequest("Kolom 'enabled' harus true atau false")
    if not isinstance(target, dict):
        raise BadRequest("Kolom 'target' harus berupa objek")
    kind = target.get("kind")
    settings = rotation_targets.check(kind, target)
    async with db.transaction(conn) as cur:
        secret = await _secret_for(cur, actor, team_id, secret_id, roles.ADMIN, for_update=True)
        if secret["envelope"] is not None:
            raise BadRequest(E2E_REFUSED)
        roles.check_environment_write(actor, secret["environment"])
        admin_id = rotation_targets.admin_secret_id(kind, settings)
        if admin_id is not None:
            if admin_id == secret_id:
                raise BadRequest(ADMIN_IS_SELF)
            found = await db.fetchone(
                cur, """SELECT 1 FROM secrets WHERE id = %s AND team_id = %s
                        AND deleted_at IS NULL""", (admin_id, team_id))
            if found is None:
                raise BadRequest(ADMIN_SECRET_MISSING)
        old = await db.fetchone(
            cur, f"SELECT {_POLICY_COLUMNS}, key_id FROM secret_rotation_policies "
                 "WHERE secret_id = %s", (secret_id,))
        policy_id = old["id"] if old else uuid.uuid4()
        signing = None
        sealed = None
        if kind == "webhook" and (old is None or old["key_id"] is None):
            signing = "whsec_" + random.token_urlsafe(32)
            sealed = keyring.seal(signing.encode(), rotation_target_aad(policy_id))
        elif kind != "webhook":
            sealed = None
        keep_key = kind == "webhook" and signing is None
        row = await db.fetchone(
            cur,
            f"""INSERT INTO secret_rotation_policies
                    (secret_id, team_id, interval_days, enabled, generator, target_kind, target,
                     id, key_id, nonce, ciphertext, next_rotation_at, created_by)
                VALUES (%(secret_id)s, %(team_id)s, %(days)s, %(enabled)s, %(generator)s,
                        %(kind)s, %(target)s, %(id)s, %(key_id)s, %(nonce)s, %(ciphertext)s,
                        now() + make_interval(days => %(days)s), %(user)s)
                ON CONFLICT (secret_id) DO UPDATE SET
                    interval_days = EXCLUDED.interval_days, enabled = EXCLUDED.enabled,
                    generator = EXCLUDED.generator, target_kind = EXCLUDED.target_kind,
                    target = EXCLUDED.target,
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
             "user": actor.user_id, "keep_key": keep_key})
        await audit.record(cur, actor, "rotation_policy_set", "secret", team_id=team_id,
                           resource_id=secret_id,
                           metadata={"name": secret["name"], "environment": secret["environment"],
                                     "interval_days": days, "target": kind,
                                     "enabled": enabled})
        await cur.execute(f"NOTIFY {CHANNEL}")
    return row, signing


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
        await cur.execute("DELETE FROM secret_rotation_policies WHERE secret_id = %s",
                          (secret_id,))
        if cur.rowcount == 0:
            raise NotFound(POLICY_NOT_FOUND)
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


_DUE = f"""
SELECT p.secret_id FROM secret_rotation_policies p
JOIN secrets s ON s.id = p.secret_id AND s.deleted_at IS NULL
WHERE (p.enabled AND p.next_rotation_at <= now())
   OR EXISTS (SELECT 1 FROM secret_rotations r
              WHERE r.secret_id = p.secret_id AND r.step IN {OPEN_STEPS})
ORDER BY p.next_rotation_at LIMIT %s
"""


async def run_due(pool: db.Pool, keyring: Keyring, *, allow_private: bool = False) -> int:
    """Rotate every secret that is due (or has a run left open); returns how many runs
    finished here. Secrets another process holds are skipped."""
    async with db.cursor(pool) as cur:
        due = [r["secret_id"] for r in await db.fetchall(cur, _DUE, (BATCH,))]
    done = 0
    for secret_id in due:
        try:
            done += await rotate_secret(pool, keyring, secret_id, allow_private=allow_private)
        except db.OUTAGE:
            raise  # the database is away: the job notes it once (`db.OutageLog`) and retries
        except Exception:  # noqa: BLE001 - one secret's trouble never stops the others
            log.exception("rotation of secret %s failed unexpectedly", secret_id)
    return done


async def rotate_secret(pool: db.Pool, keyring: Keyring, secret_id: uuid.UUID, *,
                        allow_private: bool = False) -> int:
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
            return await _run_locked(conn, keyring, secret_id, allow_private)
        finally:
            async with db.cursor(conn) as cur:
                await cur.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))",
                                  (lock_key(secret_id),))


async def _load(cur: db.Cursor, secret_id: uuid.UUID) -> tuple[dict | None, dict | None]:
    policy = await db.fetchone(
        cur, f"""SELECT {_POLICY_COLUMNS}, key_id, nonce, ciphertext,
                        next_rotation_at <= now() AS due
                 FROM secret_rotation_policies WHERE secret_id = %s""", (secret_id,))
    run = await db.fetchone(
        cur, f"""SELECT {_RUN_COLUMNS}, key_id, nonce, ciphertext FROM secret_rotations
                 WHERE secret_id = %s AND step IN {OPEN_STEPS}""", (secret_id,))
    return policy, run


async def _run_locked(conn: db.Connection, keyring: Keyring, secret_id: uuid.UUID,
                      allow_private: bool) -> int:
    system = Actor.system()
    async with db.cursor(conn) as cur:
        policy, run = await _load(cur, secret_id)
    if policy is None or (run is None and not (policy["enabled"] and policy["due"])):
        return 0  # done meanwhile by another process, or no longer wanted
    if run is None:
        try:
            run = await _create(conn, keyring, system, policy)
        except (rotation_targets.TargetError, DecryptionError) as exc:
            await _fail(conn, system, policy, None, None, exc)
            return 0
        if run is None:
            return 0
        _exit_hook("created")
    step = None
    try:
        step = await _step_context(conn, keyring, system, policy, run, allow_private)
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
    except (rotation_targets.TargetError, DecryptionError, NotFound) as exc:
        await _fail(conn, system, policy, run, step, exc)
        return 0
    try:
        await rotation_targets.finish(step)
    except rotation_targets.TargetError as exc:  # the value is current already: only noted
        log.warning("rotation %s finished; the target's finish call failed (%s)", run["id"],
                    step.scrub(str(exc)))
    return 1


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


async def _read_admin(cur: db.Cursor, keyring: Keyring, system: Actor, policy: dict,
                      admin_id: uuid.UUID, run: dict | None) -> str:
    """The admin credential's value, read with its `read` audit entry (same transaction)."""
    row = await db.fetchone(
        cur, """SELECT id, team_id, name, environment, version, key_id, nonce, ciphertext
                FROM secrets WHERE id = %s AND team_id = %s AND deleted_at IS NULL""",
        (admin_id, policy["team_id"]))
    if row is None:
        raise rotation_targets.TargetError("the admin credential secret is gone")
    await audit.record(cur, system, "read", "secret", team_id=policy["team_id"],
                       resource_id=admin_id,
                       metadata={"name": row["name"], "environment": row["environment"],
                                 "by": "rotation", "rotated_secret_id": str(policy["secret_id"]),
                                 "rotation_id": str(run["id"]) if run else None})
    return secrets.open_value(keyring, row)


async def _step_context(conn: db.Connection, keyring: Keyring, system: Actor, policy: dict,
                        run: dict, allow_private: bool) -> rotation_targets.Step:
    async with db.transaction(conn) as cur:
        secret = await db.fetchone(
            cur, """SELECT id, team_id, name, environment, version, key_id, nonce, ciphertext
                    FROM secrets WHERE id = %s AND deleted_at IS NULL""", (policy["secret_id"],))
        if secret is None:
            raise NotFound(secrets.SECRET_NOT_FOUND)
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
        allow_private=allow_private)


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


async def _fail(conn: db.Connection, system: Actor, policy: dict, run: dict | None,
                step: rotation_targets.Step | None, exc: Exception) -> None:
    """Put the target back where it can be, close the run as failed, record it and schedule
    the retry. The served value was never touched."""
    failed_step = {None: "create", "created": "set", "set": "test",
                   "tested": "finish"}[run["step"] if run else None]
    error = f"{failed_step}: {exc}" if not isinstance(exc, DecryptionError) \
        else f"{failed_step}: a stored value does not decrypt"
    if step is not None:
        error = step.scrub(error)
        if run is not None and run["step"] in ("created", "set"):  # the target may hold it
            try:
                await rotation_targets.undo(step)
            except rotation_targets.TargetError as undo_exc:
                error = step.scrub(f"{error}; undo: {undo_exc}")
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
