"""Rotation against hostile or careless input (issue 36, items 2 and 4-7; issue 39, item 4): a
broken admin URL fails its run once with a backoff and never delays another team; a policy runs
with its author's authority, checked when it is saved and at each run; a target never reaches
the server's own database or roles the admin may not hand out; an admin credential is its own
kind; a rotation webhook's URL is checked when the policy is saved; an owner group is made and
proved when the policy is saved.

Each test runs the app from its factory against the real embedded PostgreSQL, with a second
PostgreSQL (`pg_target.PasswordPostgres`) as the rotation target."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from aiohttp import web
from psycopg2 import sql

from conftest import Api, query
from pg_target import SUPERUSER, PasswordPostgres
from test_secret_rotation import (actions, can_connect, put_policy, rotate_now, rotation_of,
                                  run_pass, setup_team, value_of)

BROKEN_URLS = ("postgresql://u:pw@[oops/db", "{target}?port=abc")


@pytest.fixture(scope="module")
def target_pg() -> Any:
    cluster = PasswordPostgres().start()
    yield cluster
    cluster.stop()


@pytest.fixture
def prefix() -> str:
    return "h" + uuid.uuid4().hex[:8]


@pytest.fixture
async def rot_api(start_client: Any, make_settings: Any) -> Api:
    """Private targets allowed (the target listens on 127.0.0.1), background jobs off."""
    return Api(await start_client(make_settings(webhook_allow_private="1")))


async def set_value(api: Api, user: dict, team: str, secret: str, value: str) -> None:
    resp = await api.client.put(f"/api/v1/teams/{team}/secrets/{secret}",
                                headers=api.auth(user["token"]), json={"value": value})
    assert resp.status == 200, await resp.text()


async def policies(database_url: str, secret_ids: list[str]) -> list[dict]:
    return await query(database_url,
                       """SELECT failures, last_error, next_rotation_at - now() AS wait
                          FROM secret_rotation_policies WHERE secret_id = ANY(%s::uuid[])""",
                       (secret_ids,))


async def admin_reads(database_url: str, admin_ids: list[str]) -> int:
    rows = await query(database_url, "SELECT count(*) AS n FROM audit_logs WHERE action = 'read' "
                                     "AND resource_id = ANY(%s::text[])", (admin_ids,))
    return rows[0]["n"]


async def broken_team(api: Api, target_pg: PasswordPostgres, role: str, count: int = 20
                      ) -> tuple[dict, str, list[str], list[str]]:
    """A team with `count` PostgreSQL policies saved with a working admin credential that then
    becomes a malformed URL (half `[oops`, half `?port=abc`), each made due."""
    owner, team = await setup_team(api)
    admins = [await api.secret(owner, team, f"PG_ADMIN_{i}", target_pg.url()) for i in range(2)]
    broken = []
    for i in range(count):
        secret = await api.secret(owner, team, f"DB_{i}", "pw-0")
        resp = await put_policy(api, owner, team, secret, {"kind": "postgres", "username": role,
                                                           "admin_secret_id": admins[i % 2]})
        assert resp.status == 200, await resp.text()
        broken.append(secret)
    for admin, url in zip(admins, BROKEN_URLS):
        await set_value(api, owner, team, admin, url.format(target=target_pg.url()))
    for secret in broken:
        assert (await rotate_now(api, owner, team, secret)).status == 202
    return owner, team, broken, admins


# --- 36.2: every failure recorded, a backoff, teams take turns -----------------------------------

async def test_broken_admin_urls_fail_each_run_once_with_a_backoff_and_a_safe_error(
        rot_api: Api, database_url: str, target_pg: PasswordPostgres, prefix: str) -> None:
    target_pg.make_role(prefix + "_app", "pw-0")
    _, _, broken, admins = await broken_team(rot_api, target_pg, prefix + "_app")
    for _ in range(12):  # PER_TEAM of the team's policies per pass
        await run_pass(rot_api)
    rows = await policies(database_url, broken)
    assert [r["failures"] for r in rows] == [1] * 20
    assert all(50 <= r["wait"].total_seconds() <= 60 for r in rows)  # a backoff, not a spin
    errors = {r["last_error"] for r in rows}
    assert errors == {"set: the admin credential is not a valid postgresql:// URL",
                      "set: the admin credential's port is not a number"}, errors
    reads = await admin_reads(database_url, admins)
    assert await run_pass(rot_api) == 0
    assert [r["failures"] for r in await policies(database_url, broken)] == [1] * 20
    assert await admin_reads(database_url, admins) == reads  # no audited read per retry loop
    assert reads == 20 * 3  # one when each policy was saved, two in its one run


async def test_one_teams_many_due_policies_never_keep_another_team_waiting(
        rot_api: Api, database_url: str, target_pg: PasswordPostgres, prefix: str) -> None:
    target_pg.make_role(prefix + "_app", "pw-0")
    _, _, broken, _ = await broken_team(rot_api, target_pg, prefix + "_app")
    other, other_team = await setup_team(rot_api)
    good = await rot_api.secret(other, other_team, "SIGNING_KEY", "key-0")
    assert (await put_policy(rot_api, other, other_team, good, {"kind": "none"})).status == 200
    await rotate_now(rot_api, other, other_team, good)
    # The broken team's policies are all due earlier than the other team's.
    await query(database_url, "UPDATE secret_rotation_policies SET next_rotation_at = "
                              "now() - interval '1 hour' WHERE secret_id = ANY(%s::uuid[])",
                (broken,))
    assert await run_pass(rot_api) == 1  # the first pass already gives the other team its turn
    assert (await value_of(rot_api, other, other_team, good))["secret"]["version"] == 2


async def test_the_background_job_rotates_a_good_policy_promptly_beside_twenty_broken_ones(
        start_client: Any, make_settings: Any, database_url: str, target_pg: PasswordPostgres,
        prefix: str) -> None:
    client = await start_client(make_settings(webhook_allow_private="1", background_jobs="on",
                                              rotation_poll_seconds="0.2"))
    api = Api(client)
    target_pg.make_role(prefix + "_app", "pw-0")
    _, _, broken, _ = await broken_team(api, target_pg, prefix + "_app")
    other, other_team = await setup_team(api)
    good = await api.secret(other, other_team, "SIGNING_KEY", "key-0")
    await put_policy(api, other, other_team, good, {"kind": "none"})
    started = time.monotonic()
    await rotate_now(api, other, other_team, good)
    while (await value_of(api, other, other_team, good))["secret"]["version"] != 2:
        assert time.monotonic() - started < 5, "the other team's rotation waited"
        await asyncio.sleep(0.1)
    while any(r["failures"] == 0 for r in await policies(database_url, broken)):
        assert time.monotonic() - started < 30
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)  # a spinning job would fail them again and again meanwhile
    assert [r["failures"] for r in await policies(database_url, broken)] == [1] * 20


# --- 36.4: every secret a policy names within the caller's reach, at set-up and at each run -----

async def test_a_development_token_cannot_name_a_production_admin_credential(
        rot_api: Api, target_pg: PasswordPostgres, prefix: str) -> None:
    target_pg.make_role(prefix + "_app", "pw-0")
    owner, team = await setup_team(rot_api)
    prod_admin = await rot_api.secret(owner, team, "PG_ADMIN", target_pg.url())
    dev_admin = await rot_api.secret(owner, team, "PG_ADMIN", target_pg.url(),
                                     environment="development")
    dev_secret = await rot_api.secret(owner, team, "DB_PASSWORD", "pw-0",
                                      environment="development")
    token = (await rot_api.api_token(owner, team_id=team, environments=["development"]))["token"]
    as_token = {"token": token}
    target = {"kind": "postgres", "username": prefix + "_app"}
    resp = await put_policy(rot_api, as_token, team, dev_secret,
                            {**target, "admin_secret_id": prod_admin})
    assert resp.status == 403, await resp.text()
    assert "environment" in (await resp.json())["error"]
    # Nothing was read: the production credential's only reads are none.
    resp = await put_policy(rot_api, as_token, team, dev_secret,
                            {**target, "admin_secret_id": dev_admin})
    assert resp.status == 200, await resp.text()
    read_only = (await rot_api.api_token(owner, team_id=team, read_only=True))["token"]
    resp = await put_policy(rot_api, {"token": read_only}, team, dev_secret,
                            {**target, "admin_secret_id": dev_admin})
    assert resp.status == 403


async def test_a_policy_whose_token_or_author_lost_its_reach_fails_its_run_without_a_read(
        rot_api: Api, database_url: str, target_pg: PasswordPostgres, prefix: str) -> None:
    role = prefix + "_app"
    target_pg.make_role(role, "pw-0")
    owner, team = await setup_team(rot_api)
    admin_user = await rot_api.register()
    await rot_api.add_member(owner, team, admin_user, "Admin")
    admin = await rot_api.secret(owner, team, "PG_ADMIN", target_pg.url(),
                                 environment="development")
    by_token = await rot_api.secret(owner, team, "DB_A", "pw-0", environment="development")
    by_admin = await rot_api.secret(owner, team, "DB_B", "pw-0", environment="development")
    created = await rot_api.api_token(admin_user, team_id=team, environments=["development"])
    target = {"kind": "postgres", "username": role, "admin_secret_id": admin}
    assert (await put_policy(rot_api, {"token": created["token"]}, team, by_token,
                             target)).status == 200
    assert (await put_policy(rot_api, admin_user, team, by_admin, target)).status == 200

    # The admin credential moves to production: the token no longer reaches it.
    resp = await rot_api.client.put(f"/api/v1/teams/{team}/secrets/{admin}",
                                    headers=rot_api.auth(owner["token"]),
                                    json={"environment": "production"})
    assert resp.status == 200, await resp.text()
    reads = await admin_reads(database_url, [admin])
    for secret in (by_token, by_admin):
        await rotate_now(rot_api, owner, team, secret)
    await run_pass(rot_api)
    state = await rotation_of(rot_api, owner, team, by_token)
    assert state["policy"]["failures"] == 1
    assert state["policy"]["last_error"].startswith("create: the API token that set the policy")
    assert (await value_of(rot_api, owner, team, by_token))["secret"]["version"] == 1
    assert (await value_of(rot_api, owner, team, by_admin))["secret"]["version"] == 2

    # The Admin who saved the other policy becomes a Member: its policy stops too.
    resp = await rot_api.client.patch(f"/api/v1/teams/{team}/members/{admin_user['id']}",
                                      headers=rot_api.auth(owner["token"]),
                                      json={"role": "Member"})
    assert resp.status == 200, await resp.text()
    await rotate_now(rot_api, owner, team, by_admin)
    await run_pass(rot_api)
    state = await rotation_of(rot_api, owner, team, by_admin)
    assert state["policy"]["last_error"].startswith("create: the account that set the policy")
    assert (await value_of(rot_api, owner, team, by_admin))["secret"]["version"] == 2
    assert await admin_reads(database_url, [admin]) == reads + 2  # the one run that was allowed
    assert can_connect(target_pg, role, (await value_of(rot_api, owner, team,
                                                        by_admin))["value"])


# --- 36.5: never the server's own database, never roles beyond the admin's ------------------------

async def test_a_target_is_never_the_servers_own_database_even_with_private_targets_allowed(
        rot_api: Api, database_url: str, target_pg: PasswordPostgres, prefix: str) -> None:
    target_pg.make_role(prefix + "_app", "pw-0")
    own = await query(database_url, "SELECT rolpassword FROM pg_authid WHERE rolname = "
                                    "'cvsm_app'")
    owner, team = await setup_team(rot_api)
    admin = await rot_api.secret(owner, team, "PG_ADMIN", database_url)
    secret = await rot_api.secret(owner, team, "DB_PASSWORD", "pw-0")
    for username in ("cvsm_app", prefix + "_app"):
        resp = await put_policy(rot_api, owner, team, secret, {
            "kind": "postgres", "username": username, "admin_secret_id": admin})
        assert resp.status == 400, await resp.text()
        assert "own database" in (await resp.json())["error"]

    # Saved against another database, then pointed at the server's own one: the run stops.
    await set_value(rot_api, owner, team, admin, target_pg.url())
    assert (await put_policy(rot_api, owner, team, secret, {
        "kind": "postgres", "username": prefix + "_app", "admin_secret_id": admin})).status == 200
    await set_value(rot_api, owner, team, admin, database_url)
    await rotate_now(rot_api, owner, team, secret)
    assert await run_pass(rot_api) == 0
    state = await rotation_of(rot_api, owner, team, secret)
    assert "own database" in state["policy"]["last_error"]
    assert await query(database_url, "SELECT rolpassword FROM pg_authid WHERE rolname = "
                                     "'cvsm_app'") == own


@pytest.mark.parametrize("setting", ["superuser", "pg_role", "login_group", "powerful_group"])
async def test_roles_beyond_what_a_rotation_may_manage_are_refused_when_the_policy_is_saved(
        rot_api: Api, target_pg: PasswordPostgres, prefix: str, setting: str) -> None:
    a, b = prefix + "_a", prefix + "_b"
    target_pg.make_role(a, "a-0")
    target_pg.make_role(b, "b-0")
    target_pg.make_role(prefix + "_login", "x")
    target_pg.admin(sql.SQL("CREATE ROLE {} NOLOGIN CREATEROLE").format(
        sql.Identifier(prefix + "_power")))
    target_pg.admin(sql.SQL("CREATE ROLE {} NOLOGIN IN ROLE {}").format(
        sql.Identifier(prefix + "_sneaky"), sql.Identifier(prefix + "_power")))
    owner, team = await setup_team(rot_api)
    admin = await rot_api.secret(owner, team, "PG_ADMIN", target_pg.url())
    secret = await rot_api.secret(owner, team, "DATABASE_URL", "x")
    target = {
        "superuser": {"kind": "postgres", "username": SUPERUSER},
        "pg_role": {"kind": "postgres_alternating", "usernames": [a, b],
                    "owner_group": "pg_read_server_files"},
        "login_group": {"kind": "postgres_alternating", "usernames": [a, b],
                        "owner_group": prefix + "_login"},
        "powerful_group": {"kind": "postgres_alternating", "usernames": [a, b],
                           "owner_group": prefix + "_sneaky"},
    }[setting]
    resp = await put_policy(rot_api, owner, team, secret, {**target, "admin_secret_id": admin})
    assert resp.status == 400, await resp.text()
    error = (await resp.json())["error"]
    assert error.startswith("Target rotasi tidak dapat disiapkan")
    assert target_pg.password not in error and "127.0.0.1" not in error
    with target_pg.connect(SUPERUSER, target_pg.password) as conn, conn.cursor() as cur:
        cur.execute("""SELECT count(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member
                       WHERE r.rolname IN (%s, %s)""", (a, b))
        assert cur.fetchone()[0] == 0  # nothing was granted


async def test_errors_members_see_name_no_host_socket_or_user(
        rot_api: Api, target_pg: PasswordPostgres, prefix: str) -> None:
    role = prefix + "_app"
    target_pg.make_role(role, "pw-0")
    owner, team = await setup_team(rot_api)
    viewer = await rot_api.register()
    await rot_api.add_member(owner, team, viewer, "Viewer")
    admin = await rot_api.secret(owner, team, "PG_ADMIN", target_pg.url())
    secret = await rot_api.secret(owner, team, "DB_PASSWORD", "pw-0")
    await put_policy(rot_api, owner, team, secret,
                     {"kind": "postgres", "username": role, "admin_secret_id": admin})
    await set_value(rot_api, owner, team, admin, target_pg.url(password="wrong-admin-pw"))
    await rotate_now(rot_api, owner, team, secret)
    await run_pass(rot_api)
    seen = json.dumps(await rotation_of(rot_api, viewer, team, secret))
    assert "password authentication failed" in seen
    for leak in ("127.0.0.1", str(target_pg.port), SUPERUSER, "wrong-admin-pw", "/tmp"):
        assert leak not in seen, leak


# --- 36.6: an admin credential is its own kind ---------------------------------------------------

async def test_an_admin_credential_is_read_by_admins_only_and_never_exported_or_shared(
        rot_api: Api, database_url: str, target_pg: PasswordPostgres, prefix: str) -> None:
    target_pg.make_role(prefix + "_app", "pw-0")
    owner, team = await setup_team(rot_api)
    member, viewer = await rot_api.register(), await rot_api.register()
    await rot_api.add_member(owner, team, member, "Member")
    await rot_api.add_member(owner, team, viewer, "Viewer")
    admin_url = target_pg.url()
    admin = await rot_api.secret(owner, team, "PG_ADMIN", admin_url)
    secret = await rot_api.secret(owner, team, "DB_PASSWORD", "pw-0")
    base = f"/api/v1/teams/{team}"

    async def get(user: dict, path: str) -> Any:
        return await rot_api.client.get(base + path, headers=rot_api.auth(user["token"]))

    assert (await get(viewer, f"/secrets/{admin}")).status == 200  # ordinary until named
    assert (await put_policy(rot_api, owner, team, secret, {
        "kind": "postgres", "username": prefix + "_app", "admin_secret_id": admin})).status == 200
    prod_reader = {"token": (await rot_api.api_token(owner, team_id=team, read_only=True,
                                                     environments=["production"]))["token"]}
    full_token = {"token": (await rot_api.api_token(owner))["token"]}  # the Owner's, unscoped
    for user in (viewer, member, prod_reader, full_token):
        for path in (f"/secrets/{admin}", "/secrets/by-name/PG_ADMIN?environment=production"):
            resp = await get(user, path)
            assert resp.status in (403, 404), (path, resp.status)
            assert admin_url not in await resp.text()
        resp = await get(user, f"/secrets/{admin}")
        assert resp.status == 403 and "kredensial admin" in (await resp.json())["error"]
    resp = await get(owner, f"/secrets/{admin}")
    assert resp.status == 200 and (await resp.json())["value"] == admin_url  # signed in
    for user in (owner, viewer, prod_reader):
        for fmt in ("json", "dotenv", "shell"):
            resp = await get(user, f"/secrets/export?format={fmt}")
            assert resp.status == 200, await resp.text()
            text = await resp.text()
            assert admin_url not in text and "PG_ADMIN" not in text and "pw-0" in text
    share = await rot_api.client.post(f"{base}/secrets/{admin}/shares", json={},
                                      headers=rot_api.auth(owner["token"]))
    assert share.status == 403
    update = await rot_api.client.put(f"{base}/secrets/{admin}", json={"value": "postgresql://x"},
                                      headers=rot_api.auth(member["token"]))
    assert update.status == 403
    # The same audit: an Admin's read is a `read` entry (beside the one the policy's set-up made).
    entries = await query(database_url, "SELECT metadata ->> 'by' AS by FROM audit_logs "
                                        "WHERE action = 'read' AND resource_id = %s "
                                        "AND user_id = %s ORDER BY created_at",
                          (admin, owner["id"]))
    assert [e["by"] for e in entries] == ["rotation_setup", None]

    # No longer named by a policy: an ordinary secret again.
    resp = await rot_api.client.delete(f"{base}/secrets/{secret}/rotation",
                                       headers=rot_api.auth(owner["token"]))
    assert resp.status == 200
    assert (await get(viewer, f"/secrets/{admin}")).status == 200


# --- 36.7: a rotation webhook's URL is checked when the policy is saved ---------------------------

@pytest.mark.parametrize("url, message", [
    ("https://127.0.0.1:8443/rotate", "tidak diizinkan"),
    ("https://10.1.2.3/rotate", "tidak diizinkan"),
    ("http://203.0.113.7/rotate", "https://"),
])
async def test_a_rotation_webhook_with_a_private_or_plain_url_is_refused_at_put(
        start_client: Any, make_settings: Any, url: str, message: str) -> None:
    api = Api(await start_client(make_settings()))
    owner, team = await setup_team(api)
    secret = await api.secret(owner, team, "TOY_KEY", "toy-0")
    resp = await put_policy(api, owner, team, secret, {"kind": "webhook", "url": url})
    assert resp.status == 400, await resp.text()
    assert message in (await resp.json())["error"]
    resp = await api.client.get(f"/api/v1/teams/{team}/secrets/{secret}/rotation",
                                headers=api.auth(owner["token"]))
    assert (await resp.json())["policy"] is None


# --- 39.4: the owner group is made when the policy is saved, and proved by each test step ---------

async def test_the_owner_group_is_made_at_save_and_tables_made_before_the_switch_stay_usable(
        rot_api: Api, database_url: str, target_pg: PasswordPostgres, prefix: str) -> None:
    a, b, group, database = prefix + "_a", prefix + "_b", prefix + "_owners", prefix + "_db"
    target_pg.make_role(a, "a-initial")
    target_pg.make_role(b, "b-initial")
    target_pg.admin(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    admin_url = target_pg.url(database=database)
    with psycopg2.connect(admin_url) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("GRANT USAGE, CREATE ON SCHEMA public TO {}, {}").format(
            sql.Identifier(a), sql.Identifier(b)))
    first = f"postgresql://{a}:a-initial@127.0.0.1:{target_pg.port}/{database}"
    with psycopg2.connect(first) as conn, conn.cursor() as cur:  # before the policy
        cur.execute("CREATE TABLE t_early (id int)")
    session_a = psycopg2.connect(first)  # an application's session, open across the set-up
    session_a.autocommit = True

    owner, team = await setup_team(rot_api)
    admin = await rot_api.secret(owner, team, "PG_ADMIN", admin_url)
    secret = await rot_api.secret(owner, team, "DATABASE_URL", first)
    resp = await put_policy(rot_api, owner, team, secret, {
        "kind": "postgres_alternating", "admin_secret_id": admin, "usernames": [a, b],
        "owner_group": group})
    assert resp.status == 200, await resp.text()
    with psycopg2.connect(admin_url) as conn, conn.cursor() as cur:  # made, not at first `set`
        cur.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", (group,))
        assert cur.fetchone() == (False,)
        cur.execute("""SELECT r.rolname FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member
                       WHERE m.roleid = (SELECT oid FROM pg_roles WHERE rolname = %s)
                       ORDER BY 1""", (group,))
        assert [r[0] for r in cur.fetchall()] == [a, b]
        cur.execute("""SELECT r.rolname, s.setconfig FROM pg_db_role_setting s
                       JOIN pg_roles r ON r.oid = s.setrole ORDER BY 1""")
        assert [(n, c) for n, c in cur.fetchall() if n in (a, b)] == [
            (a, [f"role={group}"]), (b, [f"role={group}"])]
    with session_a.cursor() as cur:  # after the set-up, in a session that still acts as `a`
        cur.execute("CREATE TABLE t_pre (id int)")
        cur.execute("SELECT tableowner FROM pg_tables WHERE tablename = 't_pre'")
        assert cur.fetchone() == (a,)

    await rotate_now(rot_api, owner, team, secret)
    assert await run_pass(rot_api) == 1  # its test step made a table as `a` and used it as `b`
    second = (await value_of(rot_api, owner, team, secret))["value"]
    assert second.startswith(f"postgresql://{b}:")
    with psycopg2.connect(second) as conn, conn.cursor() as cur:
        for table in ("t_early", "t_pre"):
            cur.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(sql.Identifier(table)))
            cur.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
            assert cur.fetchone() == (1,)
        cur.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'cvsm_rotation_probe%'")
        assert cur.fetchone() == (0,)  # the probe left nothing behind
    session_a.close()
    assert "rotation_tested" in await actions(database_url, secret)


# --- 39.7: docs/webhooks.md's rotation receiver, against a real rotation -------------------------

WEBHOOKS_DOC = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"


def documented_receiver() -> Any:
    section = WEBHOOKS_DOC.read_text(encoding="utf-8").split(
        "## Rotation targets: the webhook a rotation calls", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(code, str(WEBHOOKS_DOC), "exec"), namespace)  # noqa: S102 - our own docs
    return namespace["verified_rotation"]


async def test_the_documented_rotation_receiver_verifies_a_real_rotation(rot_api: Api) -> None:
    verified_rotation = documented_receiver()
    seen: list[tuple[str, dict]] = []
    signing = {"secret": ""}
    staged: dict = {}

    async def handle(request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = verified_rotation(signing["secret"], dict(request.headers), raw)
        except ValueError:
            return web.Response(status=401)
        seen.append((body["step"], body))
        if body["step"] == "set":
            staged[body["rotation_id"]] = body["value"]
        elif body["step"] == "test" and staged.get(body["rotation_id"]) != body["value"]:
            return web.Response(status=409)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/rotate", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/rotate"
        owner, team = await setup_team(rot_api)
        secret = await rot_api.secret(owner, team, "PAYMENTS_KEY", "key-0")
        resp = await put_policy(rot_api, owner, team, secret, {"kind": "webhook", "url": url})
        assert resp.status == 200, await resp.text()
        # A wrong key is refused by the receiver: the run fails and the value stays.
        signing["secret"] = "whsec_wrong"
        await rotate_now(rot_api, owner, team, secret)
        assert await run_pass(rot_api) == 0 and seen == []
        signing["secret"] = (await resp.json())["signing_secret"]
        await rotate_now(rot_api, owner, team, secret)
        assert await run_pass(rot_api) == 1
    finally:
        await runner.cleanup()
    assert [step for step, _ in seen] == ["create", "set", "test", "finish"]
    served = (await value_of(rot_api, owner, team, secret))["value"]
    bodies = [body for _, body in seen]
    assert {b["rotation_id"] for b in bodies} == {bodies[0]["rotation_id"]}
    assert bodies[1]["value"] == bodies[2]["value"] == served
    assert "value" not in bodies[0] and "value" not in bodies[3]
    assert bodies[0]["secret"] == {"id": secret, "name": "PAYMENTS_KEY",
                                   "environment": "production"}
