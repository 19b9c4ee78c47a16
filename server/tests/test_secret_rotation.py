"""Automatic secret rotation (issue 31): policies through the API, the four steps against a real
PostgreSQL with password authentication (`pg_target.PasswordPostgres`: single user, alternating
users with an owner group), a signed webhook target applying the value to a toy service, failures
that leave the served value alone and retry, a real process killed between steps, and two app
instances that never rotate one secret twice."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from aiohttp import web
from psycopg2 import sql

from conftest import MASTER_KEY, Api, query, server_url
from cvsm_server import db
from cvsm_server.rotation import policy as secret_rotation
from cvsm_server.outbound import rotation as rotation_runner
from cvsm_server.crypto.sealing import Keyring
from cvsm_server.web.state import KEYRING, POOL
from pg_target import PasswordPostgres
from test_webhooks import add_webhook, independent_verify, wait_until

SERVER_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def target_pg() -> Any:
    cluster = PasswordPostgres().start()
    yield cluster
    cluster.stop()


@pytest.fixture
def roles_prefix() -> str:
    return "r" + uuid.uuid4().hex[:8]


@pytest.fixture
async def rot_client(start_client: Any, make_settings: Any) -> Any:
    """The app with private rotation targets allowed (the target listens on 127.0.0.1) and its
    background jobs off: each test runs the job's pass itself (`run_pass`)."""
    return await start_client(make_settings(webhook_allow_private="1"))


@pytest.fixture
def rot_api(rot_client: Any) -> Api:
    return Api(rot_client)


async def run_pass(api: Api) -> int:
    """One pass of the background job, as `RotationWorker` makes it."""
    app = api.client.server.app
    return await rotation_runner.run_due(app[POOL], app[KEYRING], allow_private=True)


async def setup_team(api: Api) -> tuple[dict, str]:
    owner = await api.register()
    return owner, await api.team(owner)


async def put_policy(api: Api, user: dict, team: str, secret: str, target: dict,
                     **extra: Any) -> Any:
    return await api.client.put(f"/api/v1/teams/{team}/secrets/{secret}/rotation",
                                headers=api.auth(user["token"]),
                                json={"interval_days": 30, "target": target, **extra})


async def rotate_now(api: Api, user: dict, team: str, secret: str) -> Any:
    return await api.client.post(f"/api/v1/teams/{team}/secrets/{secret}/rotation/rotate",
                                 headers=api.auth(user["token"]))


async def value_of(api: Api, user: dict, team: str, secret: str) -> dict:
    resp = await api.client.get(f"/api/v1/teams/{team}/secrets/{secret}",
                                headers=api.auth(user["token"]))
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def rotation_of(api: Api, user: dict, team: str, secret: str) -> dict:
    resp = await api.client.get(f"/api/v1/teams/{team}/secrets/{secret}/rotation",
                                headers=api.auth(user["token"]))
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def actions(database_url: str, secret: str) -> list[str]:
    rows = await query(database_url, "SELECT action FROM audit_logs WHERE resource_id = %s "
                                     "ORDER BY created_at, id", (secret,))
    return [r["action"] for r in rows]


def can_connect(pg: PasswordPostgres, user: str, password: str) -> bool:
    try:
        pg.connect(user, password).close()
        return True
    except psycopg2.OperationalError:
        return False


# --- policy ------------------------------------------------------------------------------------

async def test_only_admins_set_a_policy_and_viewers_cannot_rotate(rot_api: Api,
                                                                  database_url: str) -> None:
    owner, team = await setup_team(rot_api)
    member, viewer = await rot_api.register(), await rot_api.register()
    await rot_api.add_member(owner, team, member, "Member")
    await rot_api.add_member(owner, team, viewer, "Viewer")
    secret = await rot_api.secret(owner, team, "KEY", "v0")
    assert (await put_policy(rot_api, member, team, secret, {"kind": "none"})).status == 403
    resp = await put_policy(rot_api, owner, team, secret, {"kind": "none"})
    assert resp.status == 200, await resp.text()
    policy = (await resp.json())["policy"]
    assert policy["interval_days"] == 30 and policy["target"] == {"kind": "none"}
    assert policy["generator"] == {"length": 32, "classes": ["lower", "upper", "digits"]}
    assert (await rotate_now(rot_api, viewer, team, secret)).status == 403
    assert (await rotate_now(rot_api, member, team, secret)).status == 202
    off = await put_policy(rot_api, owner, team, secret, {"kind": "none"}, enabled=False)
    assert off.status == 200 and (await off.json())["policy"]["enabled"] is False
    refused = await rotate_now(rot_api, member, team, secret)
    assert refused.status == 400 and "nonaktif" in (await refused.json())["error"]
    await query(database_url, "UPDATE secret_rotation_policies SET next_rotation_at = now()")
    assert await run_pass(rot_api) == 0  # a disabled policy never runs, even when due
    seen = await rotation_of(rot_api, viewer, team, secret)  # a Viewer may look
    assert seen["policy"]["target"]["kind"] == "none"
    assert "rotation_policy_set" in await actions(database_url, secret)
    assert "rotation_requested" in await actions(database_url, secret)


@pytest.mark.parametrize("body, message", [
    ({"interval_days": 0, "target": {"kind": "none"}}, "interval_days"),
    ({"interval_days": 30, "target": {"kind": "ftp"}}, "target rotasi"),
    ({"interval_days": 30, "target": {"kind": "none"}, "generator": {"length": 8}}, "Panjang"),
    ({"interval_days": 30, "target": {"kind": "none"},
      "generator": {"classes": ["emoji"]}}, "classes"),
    ({"interval_days": 30, "target": {"kind": "postgres", "username": "x; DROP",
                                      "admin_secret_id": str(uuid.uuid4())}}, "role"),
    ({"interval_days": 30, "target": {"kind": "postgres", "username": "app",
                                      "admin_secret_id": str(uuid.uuid4())}}, "kredensial admin"),
    ({"interval_days": 30, "target": {"kind": "postgres_alternating", "usernames": ["a", "a"],
                                      "admin_secret_id": str(uuid.uuid4())}}, "usernames"),
    ({"interval_days": 30, "target": {"kind": "webhook", "url": "ftp://x"}}, "URL"),
    ({"interval_days": 30, "target": {"kind": "none", "password": "x"}}, "tidak dikenal"),
])
async def test_bad_policies_are_refused_with_a_clear_400(rot_api: Api, body: dict,
                                                         message: str) -> None:
    owner, team = await setup_team(rot_api)
    secret = await rot_api.secret(owner, team, "KEY", "v0")
    resp = await rot_api.client.put(f"/api/v1/teams/{team}/secrets/{secret}/rotation",
                                    headers=rot_api.auth(owner["token"]), json=body)
    assert resp.status == 400, await resp.text()
    assert message in (await resp.json())["error"]


async def test_the_admin_credential_must_be_a_secret_of_the_same_team(rot_api: Api) -> None:
    owner, team = await setup_team(rot_api)
    _, other_team = await setup_team(rot_api)
    other_owner = await rot_api.register()
    other_team = await rot_api.team(other_owner)
    foreign = await rot_api.secret(other_owner, other_team, "ADMIN", "postgresql://x@y/z")
    secret = await rot_api.secret(owner, team, "DB", "pw")
    for admin in (foreign, secret):
        resp = await put_policy(rot_api, owner, team, secret,
                                {"kind": "postgres", "username": "app", "admin_secret_id": admin})
        assert resp.status == 400, await resp.text()


# --- PostgreSQL single user ---------------------------------------------------------------------

async def test_single_user_rotation_changes_the_roles_password_and_serves_the_new_value(
        rot_api: Api, database_url: str, target_pg: PasswordPostgres, roles_prefix: str) -> None:
    role = roles_prefix + "_app"
    target_pg.make_role(role, "first-password")
    owner, team = await setup_team(rot_api)
    hook = await add_webhook(rot_api, owner, team, "http://127.0.0.1:9/hook",
                             ["secret.rotated", "secret.rotation_failed"])
    admin = await rot_api.secret(owner, team, "PG_ADMIN", target_pg.url())
    secret = await rot_api.secret(owner, team, "DB_PASSWORD", "first-password")
    resp = await put_policy(rot_api, owner, team, secret,
                            {"kind": "postgres", "admin_secret_id": admin, "username": role})
    assert resp.status == 200, await resp.text()
    assert (await rotate_now(rot_api, owner, team, secret)).status == 202
    assert await run_pass(rot_api) == 1

    body = await value_of(rot_api, owner, team, secret)
    new = body["value"]
    assert new != "first-password" and len(new) == 32 and body["secret"]["version"] == 2
    assert can_connect(target_pg, role, new)
    assert not can_connect(target_pg, role, "first-password")
    history = await rotation_of(rot_api, owner, team, secret)
    assert [r["step"] for r in history["rotations"]] == ["finished"]
    assert history["rotations"][0]["to_version"] == 2
    assert history["policy"]["last_rotated_at"] and history["policy"]["failures"] == 0
    assert [a for a in await actions(database_url, secret) if a != "read"][-4:] == [
        "rotation_create", "rotation_set", "rotation_tested", "rotate"]
    reads = await query(database_url, "SELECT metadata FROM audit_logs WHERE action = 'read' "
                                      "AND resource_id = %s", (admin,))
    # Read when the policy was saved (its target checked) and at the run.
    assert sorted(r["metadata"]["by"] for r in reads) == ["rotation", "rotation", "rotation_setup"]
    events = await query(database_url, "SELECT event_type, payload FROM webhook_deliveries "
                                       "WHERE webhook_id = %s", (hook["webhook"]["id"],))
    assert [e["event_type"] for e in events] == ["secret.rotated"]
    stored = json.dumps([e["payload"] for e in events]) + json.dumps(
        [r["metadata"] for r in await query(database_url, "SELECT metadata FROM audit_logs")])
    assert new not in stored and target_pg.password not in stored
    runs = await query(database_url, "SELECT ciphertext FROM secret_rotations")
    assert runs[0]["ciphertext"] is None  # the pending copy is gone once current


async def test_a_failed_test_step_puts_the_old_password_back_and_retries_later(
        rot_api: Api, database_url: str, target_pg: PasswordPostgres, roles_prefix: str) -> None:
    role = roles_prefix + "_app"
    target_pg.make_role(role, "kept-password")
    # The set step works; no connection as the role is possible, so the test step fails.
    target_pg.admin(sql.SQL("ALTER ROLE {} CONNECTION LIMIT 0").format(sql.Identifier(role)))
    owner, team = await setup_team(rot_api)
    hook = await add_webhook(rot_api, owner, team, "http://127.0.0.1:9/hook",
                             ["secret.rotated", "secret.rotation_failed"])
    admin = await rot_api.secret(owner, team, "PG_ADMIN", target_pg.url())
    secret = await rot_api.secret(owner, team, "DB_PASSWORD", "kept-password")
    await put_policy(rot_api, owner, team, secret,
                     {"kind": "postgres", "admin_secret_id": admin, "username": role})
    await rotate_now(rot_api, owner, team, secret)
    assert await run_pass(rot_api) == 0

    body = await value_of(rot_api, owner, team, secret)
    assert body["value"] == "kept-password" and body["secret"]["version"] == 1
    target_pg.admin(sql.SQL("ALTER ROLE {} CONNECTION LIMIT -1").format(sql.Identifier(role)))
    assert can_connect(target_pg, role, "kept-password")  # undone on the target
    state = await rotation_of(rot_api, owner, team, secret)
    assert state["rotations"][0]["step"] == "failed"
    assert state["policy"]["failures"] == 1 and state["policy"]["last_error"].startswith("test:")
    assert "kept-password" not in json.dumps(state)
    due = await query(database_url, "SELECT next_rotation_at - now() AS wait FROM "
                                    "secret_rotation_policies")
    assert 50 <= due[0]["wait"].total_seconds() <= 60  # backoff, not a busy loop
    assert "rotation_failed" in await actions(database_url, secret)
    events = await query(database_url, "SELECT event_type FROM webhook_deliveries WHERE "
                                       "webhook_id = %s", (hook["webhook"]["id"],))
    assert [e["event_type"] for e in events] == ["secret.rotation_failed"]
    assert await run_pass(rot_api) == 0  # not due again yet

    # The retry, once due, succeeds.
    await query(database_url, "UPDATE secret_rotation_policies SET next_rotation_at = now()")
    assert await run_pass(rot_api) == 1
    new = (await value_of(rot_api, owner, team, secret))["value"]
    assert can_connect(target_pg, role, new)
    state = await rotation_of(rot_api, owner, team, secret)
    assert state["policy"]["failures"] == 0 and state["policy"]["last_error"] is None


async def test_an_admin_credential_that_cannot_alter_the_role_fails_without_a_change(
        rot_api: Api, database_url: str, target_pg: PasswordPostgres, roles_prefix: str) -> None:
    role, weak = roles_prefix + "_app", roles_prefix + "_weak"
    target_pg.make_role(role, "stays")
    target_pg.make_role(weak, "weak-admin-pw")
    owner, team = await setup_team(rot_api)
    admin = await rot_api.secret(owner, team, "PG_ADMIN", target_pg.url(weak, "weak-admin-pw"))
    secret = await rot_api.secret(owner, team, "DB_PASSWORD", "stays")
    await put_policy(rot_api, owner, team, secret,
                     {"kind": "postgres", "admin_secret_id": admin, "username": role})
    await rotate_now(rot_api, owner, team, secret)
    assert await run_pass(rot_api) == 0
    assert (await value_of(rot_api, owner, team, secret))["value"] == "stays"
    assert can_connect(target_pg, role, "stays")
    state = await rotation_of(rot_api, owner, team, secret)
    assert state["policy"]["last_error"].startswith("set:")
    assert "weak-admin-pw" not in state["policy"]["last_error"]


# --- PostgreSQL alternating users ---------------------------------------------------------------

async def test_alternating_users_keep_old_connections_and_share_tables_through_the_group(
        rot_api: Api, target_pg: PasswordPostgres, roles_prefix: str) -> None:
    a, b, group = roles_prefix + "_a", roles_prefix + "_b", roles_prefix + "_owner"
    database = roles_prefix + "_db"
    target_pg.make_role(a, "a-initial")
    target_pg.make_role(b, "b-initial")
    target_pg.make_role(group, "unused", login=False)
    target_pg.admin(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database),
                                                                   sql.Identifier(group)))
    owner, team = await setup_team(rot_api)
    admin = await rot_api.secret(owner, team, "PG_ADMIN", target_pg.url(database=database))
    first = f"postgresql://{a}:a-initial@127.0.0.1:{target_pg.port}/{database}"
    secret = await rot_api.secret(owner, team, "DATABASE_URL", first, type="connection_string")
    resp = await put_policy(rot_api, owner, team, secret,
                            {"kind": "postgres_alternating", "admin_secret_id": admin,
                             "usernames": [a, b], "owner_group": group})
    assert resp.status == 200, await resp.text()

    async def rotate() -> str:
        await rotate_now(rot_api, owner, team, secret)
        assert await run_pass(rot_api) == 1
        return (await value_of(rot_api, owner, team, secret))["value"]

    second = await rotate()  # a was current: b gets a new password and becomes current
    assert second.startswith(f"postgresql://{b}:")
    old_conn = psycopg2.connect(first)  # opened with the old value, kept by the application
    with psycopg2.connect(second) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id int PRIMARY KEY, item text)")
        cur.execute("INSERT INTO orders VALUES (1, 'made while b was current')")
        cur.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'orders'")
        assert cur.fetchone()[0] == group
    b_conn = psycopg2.connect(second)

    third = await rotate()  # b was current: a gets a new password and becomes current
    assert third.startswith(f"postgresql://{a}:") and third != first
    with psycopg2.connect(third) as conn, conn.cursor() as cur:  # the new value works
        cur.execute("INSERT INTO orders VALUES (2, 'made by a after the switch')")
        cur.execute("ALTER TABLE orders ADD COLUMN note text")
        cur.execute("SELECT count(*) FROM orders")
        assert cur.fetchone()[0] == 2
    with b_conn.cursor() as cur:  # a connection made with the old value still works
        cur.execute("SELECT count(*) FROM orders")
        assert cur.fetchone()[0] == 2
    psycopg2.connect(second).close()  # and the old value still signs in until the next turn
    with old_conn.cursor() as cur:  # a's session from before the first rotation lives on
        cur.execute("SELECT 1")
    for conn in (old_conn, b_conn):
        conn.close()
    assert not can_connect(target_pg, a, "a-initial")


# --- webhook target --------------------------------------------------------------------------

class ToyService:
    """A service that accepts one password, and a receiver that applies rotations to it: `set`
    stages the value, `test` checks the staged value, `finish` makes it the one accepted. The
    signature is checked the way a receiver would (`independent_verify`)."""

    def __init__(self, accepted: str) -> None:
        self.accepted = accepted
        self.staged: str | None = None
        self.signing_secret = ""
        self.steps: list[str] = []
        self.fail_step: str | None = None
        self.delay = 0.0
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if not independent_verify(self.signing_secret, dict(request.headers), raw):
            return web.Response(status=401)
        body = json.loads(raw)
        self.steps.append(body["step"])
        await asyncio.sleep(self.delay)
        if body["step"] == self.fail_step:
            return web.Response(status=500)
        if body["step"] == "set":
            self.staged = body["value"]
        elif body["step"] == "test" and body["value"] != self.staged:
            return web.Response(status=409)
        elif body["step"] == "finish":
            self.accepted, self.staged = self.staged or self.accepted, None
        return web.Response(text="ok")

    async def start(self) -> ToyService:
        app = web.Application()
        app.router.add_post("/rotate", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/rotate"
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()


@pytest.fixture
async def toy() -> Any:
    service = await ToyService("toy-initial").start()
    yield service
    await service.stop()


async def webhook_secret(api: Api, toy: ToyService) -> tuple[dict, str, str]:
    owner, team = await setup_team(api)
    secret = await api.secret(owner, team, "TOY_KEY", "toy-initial")
    resp = await put_policy(api, owner, team, secret, {"kind": "webhook", "url": toy.url})
    assert resp.status == 200, await resp.text()
    toy.signing_secret = (await resp.json())["signing_secret"]
    assert toy.signing_secret.startswith("whsec_")
    again = await put_policy(api, owner, team, secret, {"kind": "webhook", "url": toy.url})
    assert "signing_secret" not in await again.json()  # shown once
    return owner, team, secret


async def test_a_webhook_target_gets_the_four_signed_steps_and_the_toy_service_follows(
        rot_api: Api, toy: ToyService) -> None:
    owner, team, secret = await webhook_secret(rot_api, toy)
    await rotate_now(rot_api, owner, team, secret)
    assert await run_pass(rot_api) == 1
    served = (await value_of(rot_api, owner, team, secret))["value"]
    assert toy.steps == ["create", "set", "test", "finish"]
    assert toy.accepted == served != "toy-initial"


async def test_a_webhook_target_failure_keeps_the_served_value(rot_api: Api,
                                                               toy: ToyService) -> None:
    owner, team, secret = await webhook_secret(rot_api, toy)
    toy.fail_step = "test"
    await rotate_now(rot_api, owner, team, secret)
    assert await run_pass(rot_api) == 0
    assert (await value_of(rot_api, owner, team, secret))["value"] == "toy-initial"
    assert toy.accepted == "toy-initial" and toy.steps == ["create", "set", "test"]
    state = await rotation_of(rot_api, owner, team, secret)
    assert state["policy"]["last_error"] == "test: test call failed: HTTP 500"


async def test_a_plain_http_webhook_target_gets_no_value_unless_private_targets_are_allowed(
        rot_api: Api, toy: ToyService) -> None:
    owner, team, secret = await webhook_secret(rot_api, toy)
    await rotate_now(rot_api, owner, team, secret)
    app = rot_api.client.server.app
    assert await rotation_runner.run_due(app[POOL], app[KEYRING], allow_private=False) == 0
    assert toy.steps == []  # not even the create call went out
    assert (await value_of(rot_api, owner, team, secret))["value"] == "toy-initial"
    state = await rotation_of(rot_api, owner, team, secret)
    assert "https://" in state["policy"]["last_error"]


# --- scale and safety ---------------------------------------------------------------------------

async def test_two_app_instances_never_rotate_one_secret_twice(
        start_client: Any, make_settings: Any, database_url: str, toy: ToyService) -> None:
    settings = make_settings(webhook_allow_private="1", background_jobs="on",
                             rotation_poll_seconds="0.2")
    first, second = await start_client(settings), await start_client(settings)
    api = Api(first)
    owner, team, secret = await webhook_secret(api, toy)
    toy.delay = 0.3  # each step takes a while: both instances see the rotation due
    await rotate_now(api, owner, team, secret)
    # And both passes run at once, besides the two background jobs.
    apps = [first.server.app, second.server.app]
    results = await asyncio.gather(*(rotation_runner.run_due(a[POOL], a[KEYRING],
                                                             allow_private=True) for a in apps))
    assert sum(results) <= 1

    async def finished() -> Any:
        rows = await query(database_url, "SELECT step FROM secret_rotations")
        return rows and all(r["step"] == "finished" for r in rows)

    await wait_until(finished, "the rotation to finish")
    await asyncio.sleep(1.0)  # give a second rotation every chance to start
    assert toy.steps == ["create", "set", "test", "finish"]
    assert (await actions(database_url, secret)).count("rotate") == 1
    assert (await value_of(api, owner, team, secret))["secret"]["version"] == 2


CRASH_SCRIPT = """
import asyncio, base64, sys
from cvsm_server import db
from cvsm_server.outbound import rotation as rotation_runner
from cvsm_server.crypto.sealing import Keyring

async def main():
    pool = await db.create_pool(sys.argv[1], maxsize=2)
    await rotation_runner.run_due(pool, Keyring(base64.b64decode(sys.argv[2])), allow_private=True)
    print("finished without exiting", flush=True)

asyncio.run(main())
"""


def run_until_killed(database_url: str, step: str) -> subprocess.CompletedProcess:
    env = {**os.environ, rotation_runner.EXIT_AFTER_ENV: step,
           "PYTHONPATH": os.pathsep.join([str(SERVER_DIR), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", CRASH_SCRIPT, server_url(database_url),
                           MASTER_KEY], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("step", ["created", "set", "tested"])
async def test_a_process_killed_between_steps_leaves_the_value_served_then_resumes(
        rot_api: Api, database_url: str, target_pg: PasswordPostgres, roles_prefix: str,
        step: str) -> None:
    role = roles_prefix + "_app"
    target_pg.make_role(role, "before-crash")
    owner, team = await setup_team(rot_api)
    admin = await rot_api.secret(owner, team, "PG_ADMIN", target_pg.url())
    secret = await rot_api.secret(owner, team, "DB_PASSWORD", "before-crash")
    await put_policy(rot_api, owner, team, secret,
                     {"kind": "postgres", "admin_secret_id": admin, "username": role})
    await rotate_now(rot_api, owner, team, secret)

    done = run_until_killed(database_url, step)
    assert done.returncode == rotation_runner.EXIT_STATUS, done.stdout + done.stderr
    runs = await query(database_url, "SELECT id, step, key_id, nonce, ciphertext, team_id, "
                                     "secret_id FROM secret_rotations")
    assert [r["step"] for r in runs] == [step]
    pending = Keyring(base64.b64decode(MASTER_KEY)).open(
        runs[0]["key_id"], runs[0]["nonce"], runs[0]["ciphertext"],
        f"cvsm:rotation:{runs[0]['team_id']}:{secret}:{runs[0]['id']}".encode()).decode()

    # Whatever step the process died after, nothing serves the pending value.
    await assert_only_current_is_served(rot_api, owner, team, secret, "before-crash", pending)
    assert can_connect(target_pg, role, pending if step != "created" else "before-crash")

    # The next pass (any process) resumes with the same pending value: nothing lost.
    assert await run_pass(rot_api) == 1
    body = await value_of(rot_api, owner, team, secret)
    assert body["value"] == pending and body["secret"]["version"] == 2
    assert can_connect(target_pg, role, pending)
    versions = await rot_api.client.get(f"/api/v1/teams/{team}/secrets/{secret}/versions",
                                        headers=rot_api.auth(owner["token"]))
    assert [v["version"] for v in (await versions.json())["versions"]] == [1]
    assert (await actions(database_url, secret)).count("rotate") == 1


async def assert_only_current_is_served(api: Api, owner: dict, team: str, secret: str,
                                        current: str, pending: str) -> None:
    auth = api.auth(owner["token"])
    base = f"/api/v1/teams/{team}"
    assert (await value_of(api, owner, team, secret))["value"] == current
    by_name = await api.client.get(f"{base}/secrets/by-name/DB_PASSWORD", headers=auth)
    assert (await by_name.json())["value"] == current
    for fmt in ("json", "dotenv", "shell"):
        export = await api.client.get(f"{base}/secrets/export?format={fmt}", headers=auth)
        text = await export.text()
        assert pending not in text and current in text
    versions = await (await api.client.get(f"{base}/secrets/{secret}/versions",
                                           headers=auth)).json()
    assert versions == {"current_version": 1, "versions": []}
    rollback = await api.client.post(f"{base}/secrets/{secret}/rollback", headers=auth,
                                     json={"version": 2})
    assert rollback.status == 404
    share = await (await api.client.post(f"{base}/secrets/{secret}/shares", headers=auth,
                                         json={})).json()
    token = share["url"].rsplit("/", 1)[1]
    viewed = await (await api.client.get(f"/api/v1/public/share/{token}")).json()
    assert viewed["value"] == current


# --- the docs' example (docs/server.md, "Rotation") ---------------------------------------------

SERVER_DOC = Path(__file__).resolve().parents[2] / "docs" / "server.md"


def readme_example() -> str:
    section = SERVER_DOC.read_text(encoding="utf-8").split("## Rotation\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


async def test_the_readme_example_rotates_a_postgres_role_as_printed(
        start_client: Any, make_settings: Any, target_pg: PasswordPostgres) -> None:
    from datetime import datetime, timedelta, timezone
    from cvsm_server.db.embedded import wheel_bin_dir

    client = await start_client(make_settings(webhook_allow_private="1", background_jobs="on",
                                              rotation_poll_seconds="1"))
    api = Api(client)
    owner, team = await setup_team(api)
    database = "readme_" + uuid.uuid4().hex[:8]
    target_pg.admin(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    env = {"PATH": f"{wheel_bin_dir()}{os.pathsep}{os.environ['PATH']}",
           "CVSM": str(client.make_url("/api/v1")), "TOKEN": owner["token"], "TEAM": team,
           "PG_ADMIN_URL": target_pg.url(database=database),
           "PG_APP_URL": f"postgresql://app@127.0.0.1:{target_pg.port}/{database}"}
    proc = await asyncio.create_subprocess_exec(
        "bash", "-euo", "pipefail", "-c", readme_example(), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()
    next_date = (datetime.now(timezone.utc) + timedelta(days=30)).date().isoformat()
    assert out.decode().splitlines() == [f"next rotation: {next_date}", "app",
                                         "first-password no longer signs in"]


async def test_a_new_master_key_reseals_the_target_secret_and_an_open_run(
        rot_api: Api, database_url: str, toy: ToyService) -> None:
    from cvsm_server.crypto import rekey as master_key_rotation
    owner, team, secret = await webhook_secret(rot_api, toy)
    await rotate_now(rot_api, owner, team, secret)
    done = run_until_killed(database_url, "created")  # leaves an open run with its pending value
    assert done.returncode == rotation_runner.EXIT_STATUS, done.stdout + done.stderr
    app = rot_api.client.server.app
    new_key = bytes(range(100, 132))
    keyring = Keyring(new_key, [base64.b64decode(MASTER_KEY)])
    result = await master_key_rotation.rotate(app[POOL], keyring)
    assert result.failed == 0 and result.left == 0
    rows = await query(database_url, "SELECT key_id FROM secret_rotation_policies UNION ALL "
                                     "SELECT key_id FROM secret_rotations")
    assert {r["key_id"] for r in rows} == {keyring.key_id}
    only_new = Keyring(new_key)  # the old key is gone: everything must open with the new one
    assert await rotation_runner.run_due(app[POOL], only_new, allow_private=True) == 1
    assert toy.steps == ["create", "set", "test", "finish"]
    from cvsm_server.secrets.queries import open_value
    row = (await query(database_url, "SELECT * FROM secrets WHERE id = %s", (secret,)))[0]
    assert row["version"] == 2 and toy.accepted == open_value(only_new, row) != "toy-initial"


# --- the dashboard ------------------------------------------------------------------------------

async def test_the_secret_page_shows_the_policy_its_failure_and_rotates_now_with_csrf(
        start_client: Any, make_settings: Any, database_url: str) -> None:
    from test_dashboard import csrf_of, sign_up
    client = await start_client(make_settings(app_url=""))
    user = await sign_up(client)
    login = await client.post("/api/v1/auth/login", json={"identifier": user["username"],
                                                          "password": user["password"]})
    api = Api(client)
    owner = {"token": (await login.json())["token"]}
    team = await api.team(owner)
    secret = await api.secret(owner, team, "SIGNING_KEY", "page-initial")
    page_url = f"/app/teams/{team}/secrets/{secret}"
    page = await (await client.get(page_url)).text()
    assert "tidak dirotasi otomatis" in page and "Rotasi sekarang" not in page

    await put_policy(api, owner, team, secret, {"kind": "none"})
    await query(database_url, "UPDATE secret_rotation_policies SET last_error = "
                              "'set: connection failed', last_failed_at = now()")
    page = await (await client.get(page_url)).text()
    assert "Setiap 30 hari" in page and "<code>none</code>" in page
    assert "Rotasi terakhir gagal" in page and "set: connection failed" in page
    action = f"{page_url}/rotate"
    refused = await client.post(action, data={"csrf": "0" * 64}, allow_redirects=False)
    assert refused.status in (400, 403)
    assert "rotation_requested" not in await actions(database_url, secret)
    resp = await client.post(action, data={"csrf": csrf_of(page)}, allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == page_url
    assert "rotation_requested" in await actions(database_url, secret)
    due = await query(database_url, "SELECT next_rotation_at <= now() AS due FROM "
                                    "secret_rotation_policies")
    assert due[0]["due"]


async def test_the_database_going_away_mid_batch_is_an_outage_not_a_traceback_per_secret(
        rot_api: Api, database_url: str, toy: ToyService, caplog: Any) -> None:
    """`run_due` lets an outage reach its job (one quiet `OutageLog` line), instead of logging a
    traceback for this secret and then for every other secret of the batch."""
    owner, team, secret = await webhook_secret(rot_api, toy)
    await rotate_now(rot_api, owner, team, secret)
    toy.delay = 0.5  # the run is inside a step when its connections are cut
    app = rot_api.client.server.app
    run = asyncio.ensure_future(rotation_runner.run_due(app[POOL], app[KEYRING],
                                                        allow_private=True))

    async def started() -> bool:
        return bool(toy.steps)

    await wait_until(started, "the first step to start")
    await query(database_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    with pytest.raises(db.OUTAGE):
        await run
    assert not [r for r in caplog.records if r.name == rotation_runner.log.name and r.exc_info]
