"""The rotation runner: the background job that makes the two-phase run of each due policy
(`rotation.policy` holds the policies and "rotate now"), calling the targets (`rotation.targets`;
a webhook target over HTTP through `outbound.webhooks`). It lives in `outbound` with the other
code that calls out over HTTP: no domain package imports it; the jobs registry starts it.

How a run goes, what a crash between steps leaves and how a failure is retried: see
`rotation.policy`'s docstring."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from ..core.actor import Actor
from ..core.errors import NotFound
from ..crypto.sealing import DecryptionError, Keyring, rotation_aad, rotation_target_aad
from ..rotation.policy import (CHANNEL, OPEN_STEPS, POLICY_COLUMNS, RUN_COLUMNS, fingerprint,
                               generate, read_admin)
from ..rotation.postgres import pg_set, pg_test, pg_undo, blocking
from ..rotation.targets import Step, TargetError
from ..audit import log as audit
from ..db import queues
from ..rotation import targets as rotation_targets
from ..secrets import queries as secret_queries
from ..teams import roles
from ..webhooks import service as webhooks
from .. import db
from . import webhooks as webhook_sender

log = logging.getLogger("cvsm.secret_rotation")


EXIT_AFTER_ENV = "CVSM_TEST_ROTATION_EXIT_AFTER"  # test-only, see the module's docstring
EXIT_STATUS = 75
RETRY_BASE_SECONDS = 60
RETRY_MAX_SECONDS = 6 * 3600
BATCH = 20
PER_TEAM = 2  # at most this many of one team's policies in a pass (the rest wait their turn)
CONCURRENCY = 4  # teams whose runs go on at once in a pass
LOCK_NAMESPACE = "cvsm-secret-rotation:"


def retry_delay(failures: int) -> float:
    """Seconds until the next try after `failures` failed runs in a row."""
    return min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** max(0, failures - 1))


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
        cur, f"""SELECT {POLICY_COLUMNS}, key_id, nonce, ciphertext, set_by, set_by_token,
                        next_rotation_at <= now() AS due
                 FROM secret_rotation_policies WHERE secret_id = %s""", (secret_id,))
    run = await db.fetchone(
        cur, f"""SELECT {RUN_COLUMNS}, key_id, nonce, ciphertext FROM secret_rotations
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
            await create(step)
            await set_value(step)
            run = await _advance(conn, system, policy, run, "set")
            _exit_hook("set")
        if run["step"] == "set":
            await test_value(step)
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
        await finish(step)
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
        current = secret_queries.open_value(keyring, secret)
        admin = None
        await _authorise(cur, policy, secret)
        if (admin_id := rotation_targets.admin_secret_id(policy["target_kind"],
                                                         policy["target"])):
            admin = await read_admin(cur, keyring, system, policy, admin_id, None)
        user = rotation_targets.next_user(policy["target_kind"], policy["target"], current)
        value = rotation_targets.stored_value(policy["target_kind"], policy["target"],
                                              generate(policy["generator"]), user, admin)
        run_id = uuid.uuid4()
        sealed = keyring.seal(value.encode(), rotation_aad(secret["team_id"], secret["id"], run_id))
        run = await db.fetchone(
            cur, f"""INSERT INTO secret_rotations (id, secret_id, team_id, from_version,
                                                  target_user, key_id, nonce, ciphertext)
                     VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
                     RETURNING {RUN_COLUMNS}, key_id, nonce, ciphertext""",
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


async def _step_context(conn: db.Connection, keyring: Keyring, system: Actor, policy: dict,
                        run: dict, allow_private: bool, server: str) -> rotation_targets.Step:
    async with db.transaction(conn) as cur:
        secret = await db.fetchone(
            cur, """SELECT id, team_id, name, environment, version, key_id, nonce, ciphertext
                    FROM secrets WHERE id = %s AND deleted_at IS NULL""", (policy["secret_id"],))
        if secret is None:
            raise NotFound(secret_queries.SECRET_NOT_FOUND)
        if run["step"] == "created":  # before the target changes (after, the run completes)
            await _authorise(cur, policy, secret)
        admin = None
        if (admin_id := rotation_targets.admin_secret_id(policy["target_kind"],
                                                         policy["target"])):
            admin = await read_admin(cur, keyring, system, policy, admin_id, run)
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
        pending=pending, current=secret_queries.open_value(keyring, secret),
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
                     RETURNING {RUN_COLUMNS}, key_id, nonce, ciphertext""", (step, run["id"]))
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
            raise NotFound(secret_queries.SECRET_NOT_FOUND)
        version = await secret_queries.store_new_value(cur, system, keyring, current, step.pending)
        closed = await db.fetchone(
            cur, f"""UPDATE secret_rotations SET step = 'finished', to_version = %s,
                            key_id = NULL, nonce = NULL, ciphertext = NULL, updated_at = now(),
                            finished_at = now()
                     WHERE id = %s RETURNING {RUN_COLUMNS}""", (version, run["id"]))
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
                await undo(step)
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
                         WHERE id = %s RETURNING {RUN_COLUMNS}""", (error, run["id"]))
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


async def _call(step: Step, name: str, *, with_value: bool) -> None:
    # The set step carries the new value: over plain HTTP it would cross the network readable
    # (signed, not encrypted). Only where private targets are allowed (closed networks, tests)
    # may a rotation webhook be http://.
    if not step.allow_private and urlsplit(step.settings["url"]).scheme != "https":
        raise TargetError(f"{name} call refused: a rotation webhook must be https://")
    body: dict[str, Any] = {"step": name, "rotation_id": str(step.rotation_id),
                            "secret": step.secret}
    if with_value:
        body["value"] = step.pending
    raw = json.dumps(body, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", "User-Agent": webhook_sender.USER_AGENT,
               "Cvsm-Rotation-Step": name,
               "Cvsm-Signature": webhooks.signature(step.signing_secret or "", int(time.time()),
                                                    raw)}
    outcome = await webhook_sender.post(step.settings["url"], raw, headers,
                                        allow_private=step.allow_private)
    if not outcome.ok:
        raise TargetError(f"{name} call failed: {outcome.error}")


async def create(step: Step) -> None:
    if step.kind == "webhook":
        await _call(step, "create", with_value=False)


async def set_value(step: Step) -> None:
    if step.kind == "webhook":
        await _call(step, "set", with_value=True)
    elif step.kind.startswith("postgres"):
        await blocking(pg_set, step)


async def test_value(step: Step) -> None:
    if step.kind == "webhook":
        await _call(step, "test", with_value=True)
    elif step.kind.startswith("postgres"):
        await blocking(pg_test, step)


async def finish(step: Step) -> None:
    if step.kind == "webhook":
        await _call(step, "finish", with_value=False)


async def undo(step: Step) -> None:
    if step.kind.startswith("postgres"):
        await blocking(pg_undo, step)
