"""The admin API: only signed-in admins; users (search, grant, disable: credentials fail at once
and come back when enabled), teams and plans with their quotas, the numbers; each change audited."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from cvsm_server.instance import admin
from cvsm_server.teams.service import PLANS

from conftest import JWT_SECRET, MASTER_KEY, Api, query, server_url
from test_cli import CONSOLE_SCRIPT, LOG_RECORD


@pytest.fixture
def settings(make_settings: Any) -> Any:
    return make_settings(default_plan="starter")  # the shipped default, which plans start from


async def make_admin(database_url: str, user: dict) -> None:
    await query(database_url, "UPDATE users SET is_admin = true WHERE id = %s RETURNING id", (user["id"],))


async def test_only_signed_in_admins_get_in(client: TestClient, api: Api, database_url: str) -> None:
    user = await api.register("plain_user")
    boss = await api.register("boss_user")
    await make_admin(database_url, boss)
    token = (await api.api_token(boss))["token"]
    for path in ("/api/v1/admin/users", "/api/v1/admin/teams", "/api/v1/admin/stats"):
        assert (await client.get(path)).status == 401
        assert (await client.get(path, headers=api.auth(user["token"]))).status == 403
        assert (await client.get(path, headers=api.auth(token))).status == 403  # never an API token
        assert (await client.get(path, headers=api.auth(boss["token"]))).status == 200
    resp = await client.patch(f"/api/v1/admin/users/{user['id']}", headers=api.auth(boss["token"]),
                              data=b"{not json", )
    assert resp.status == 400 and "error" in await resp.json()


async def test_users_are_searched_paged_and_disabled_at_once(client: TestClient, api: Api,
                                                             database_url: str) -> None:
    boss = await api.register("boss_two")
    await make_admin(database_url, boss)
    target = await api.register("target_person")
    await api.register("someone_else")
    token = (await api.api_token(target))["token"]
    assert (await client.get("/api/v1/teams", headers=api.auth(token))).status == 200  # now cached
    resp = await client.get("/api/v1/admin/users?q=target_&limit=1", headers=api.auth(boss["token"]))
    body = await resp.json()
    assert body["total"] == 1 and [u["username"] for u in body["users"]] == ["target_person"]
    assert body["users"][0]["disabled"] is False
    resp = await client.get("/api/v1/admin/users?q=%25", headers=api.auth(boss["token"]))
    assert (await resp.json())["total"] == 0  # % is searched for literally

    resp = await client.patch(f"/api/v1/admin/users/{target['id']}", headers=api.auth(boss["token"]),
                              json={"disabled": True})
    assert resp.status == 200 and (await resp.json())["user"]["disabled"] is True
    assert (await client.get("/api/v1/me", headers=api.auth(target["token"]))).status == 401
    assert (await client.get("/api/v1/teams", headers=api.auth(token))).status == 401
    login = await client.post("/api/v1/auth/login", json={"identifier": "target_person",
                                                          "password": target["password"]})
    assert login.status == 401

    resp = await client.patch(f"/api/v1/admin/users/{target['id']}", headers=api.auth(boss["token"]),
                              json={"disabled": False})
    assert (await resp.json())["user"]["disabled"] is False
    assert (await client.get("/api/v1/me", headers=api.auth(target["token"]))).status == 200
    assert (await client.get("/api/v1/teams", headers=api.auth(token))).status == 200
    actions = [r["action"] for r in await query(
        database_url, "SELECT action FROM audit_logs WHERE action LIKE 'user_%%' ORDER BY created_at")]
    assert actions == ["user_disable", "user_enable"]


async def test_admins_grant_and_revoke_but_not_their_own(client: TestClient, api: Api,
                                                         database_url: str) -> None:
    boss = await api.register("boss_three")
    await make_admin(database_url, boss)
    other = await api.register("next_admin")
    resp = await client.patch(f"/api/v1/admin/users/{other['id']}", headers=api.auth(boss["token"]),
                              json={"is_admin": True})
    assert (await resp.json())["user"]["is_admin"] is True
    assert (await client.get("/api/v1/admin/stats", headers=api.auth(other["token"]))).status == 200
    me = await (await client.get("/api/v1/me", headers=api.auth(other["token"]))).json()
    assert me["is_admin"] is True
    for change in ({"is_admin": False}, {"disabled": True}):
        resp = await client.patch(f"/api/v1/admin/users/{boss['id']}", headers=api.auth(boss["token"]),
                                  json=change)
        assert resp.status == 400
    resp = await client.patch(f"/api/v1/admin/users/{boss['id']}", headers=api.auth(boss["token"]), json={})
    assert resp.status == 400
    resp = await client.patch("/api/v1/admin/users/00000000-0000-4000-8000-000000000000",
                              headers=api.auth(boss["token"]), json={"is_admin": True})
    assert resp.status == 404


async def test_plans_set_quotas_that_are_enforced(client: TestClient, api: Api, database_url: str) -> None:
    boss = await api.register("boss_four")
    await make_admin(database_url, boss)
    owner = await api.register("team_owner")
    team_id = await api.team(owner, "planned-team")
    resp = await client.get("/api/v1/admin/teams?q=planned", headers=api.auth(boss["token"]))
    [team] = (await resp.json())["teams"]
    assert (team["plan"], team["max_secrets"], team["max_members"]) == ("starter", 50, 5)

    resp = await client.patch(f"/api/v1/admin/teams/{team_id}", headers=api.auth(boss["token"]),
                              json={"plan": "professional"})
    team = (await resp.json())["team"]
    assert (team["plan"], team["max_secrets"], team["max_members"]) == ("professional", 500, 25)
    resp = await client.patch(f"/api/v1/admin/teams/{team_id}", headers=api.auth(boss["token"]),
                              json={"plan": "enterprise", "max_secrets": 1, "max_members": None})
    team = (await resp.json())["team"]
    assert (team["plan"], team["max_secrets"], team["max_members"]) == ("enterprise", 1, None)
    await api.secret(owner, team_id, "ONE", "v")
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets", headers=api.auth(owner["token"]),
                             json={"name": "TWO", "value": "v", "environment": "production"})
    assert resp.status == 403  # the quota the admin set holds
    for bad in ({"plan": "gold"}, {"plan": "starter", "max_secrets": -1},
                {"plan": "starter", "max_members": "5"}, {"plan": "starter", "max_secrets": True}):
        resp = await client.patch(f"/api/v1/admin/teams/{team_id}", headers=api.auth(boss["token"]), json=bad)
        assert resp.status == 400, bad
    [row] = await query(database_url, "SELECT count(*) AS n FROM audit_logs WHERE action = 'team_plan_change'")
    assert row["n"] == 2


async def test_stats_count_the_instance(client: TestClient, api: Api, database_url: str) -> None:
    boss = await api.register("boss_five")
    await make_admin(database_url, boss)
    team_id = await api.team(boss, "stats-team")
    await api.secret(boss, team_id, "A", "v")
    numbers = await (await client.get("/api/v1/admin/stats", headers=api.auth(boss["token"]))).json()
    assert numbers["users"] == 1 and numbers["admins"] == 1 and numbers["teams"] == 1
    assert numbers["secrets"] == 1 and numbers["teams_by_plan"] == {"starter": 1, "professional": 0,
                                                                    "enterprise": 0}
    assert numbers["audit_entries_24h"] >= 2


async def test_the_default_plan_is_the_operators(start_client: Any, make_settings: Any) -> None:
    client = await start_client(make_settings(default_plan="professional"))
    api = Api(client)
    owner = await api.register("pro_owner")
    team_id = await api.team(owner)
    team = (await (await client.get(f"/api/v1/teams/{team_id}", headers=api.auth(owner["token"]))).json())["team"]
    assert (team["plan"], team["max_secrets"], team["max_members"]) == ("professional", 500, 25)


def operator(database_url: str, *args: str) -> subprocess.CompletedProcess:
    """The real console script against the test database (as the app connects, and the owner
    for migrations), no other CVSM_ setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
    env.update({"CVSM_DATABASE_URL": server_url(database_url),
                "CVSM_MIGRATION_DATABASE_URL": database_url, "CVSM_MASTER_KEY": MASTER_KEY,
                "CVSM_JWT_SECRET": JWT_SECRET})
    return subprocess.run([str(CONSOLE_SCRIPT), *args], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)


async def test_the_operator_grants_admin_and_sets_plans_from_the_command_line(
        client: TestClient, api: Api, database_url: str) -> None:
    user = await api.register("cli_admin")
    team_id = await api.team(user, "cli-team")
    done = await asyncio.to_thread(operator, database_url, "admin", "grant", user["email"].upper())
    assert done.returncode == 0 and done.stdout.strip() == f"{user['email']}: admin granted", done.stderr
    assert (await client.get("/api/v1/admin/stats", headers=api.auth(user["token"]))).status == 200
    done = await asyncio.to_thread(operator, database_url, "team", "set-plan", "cli-team", "professional",
                                   "--max-members", "unlimited")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("cli-team: plan professional (max_secrets 500, max_members unlimited, "
                                    "max_environments unlimited)")
    team = (await (await client.get(f"/api/v1/teams/{team_id}", headers=api.auth(user["token"]))).json())["team"]
    assert (team["plan"], team["max_secrets"], team["max_members"]) == ("professional", 500, None)
    done = await asyncio.to_thread(operator, database_url, "admin", "revoke", user["email"])
    assert done.returncode == 0 and done.stdout.strip().endswith("admin revoked")
    rows = await query(database_url, """SELECT action, user_id, user_agent FROM audit_logs
                                        WHERE action IN ('admin_grant', 'admin_revoke', 'team_plan_change')
                                        ORDER BY created_at""")
    assert [(r["action"], r["user_id"], r["user_agent"]) for r in rows] == [
        ("admin_grant", None, "cvsm-server"), ("team_plan_change", None, "cvsm-server"),
        ("admin_revoke", None, "cvsm-server")]


async def test_operator_commands_fail_in_one_line(database_url: str) -> None:
    for args, code in ((("admin", "grant", "nobody@example.com"), 1),
                       (("team", "set-plan", "no-such-team", "starter"), 1),
                       (("team", "set-plan", "x", "gold"), 2),
                       (("team", "set-plan", "x", "starter", "--max-secrets", "-3"), 2)):
        done = await asyncio.to_thread(operator, database_url, *args)
        assert done.returncode == code, (args, done.stderr)
        lines = [line for line in done.stderr.splitlines()
                 if line.strip() and not LOG_RECORD.match(line)]
        assert "Traceback" not in done.stderr, done.stderr
        if code == 1:  # the operator's mistake, said once
            assert lines == [lines[0]] and lines[0].startswith("cvsm-server: ") and "tidak ditemukan" in lines[0]
        else:  # argparse's usage and its one error line
            assert lines[-1].startswith("cvsm-server team set-plan: error: ")


SERVER_DOC = Path(__file__).resolve().parents[2] / "docs" / "server.md"


def docs_plan_table() -> dict[str, dict[str, int | None]]:
    """The plan table of docs/server.md's "Administration" section, as `teams.PLANS` writes it."""
    text = SERVER_DOC.read_text()
    header = "| Plan | Members | Secrets | Audit retention | Active environments |"
    lines = text[text.index(header):].splitlines()[2:]
    plans = {}
    for line in lines:
        if not line.startswith("|"):
            break
        name, members, secrets, retention, environments = (c.strip() for c in line.strip("|").split("|"))

        def number(cell: str) -> int | None:
            return None if cell in ("unlimited", "all three") else int(cell.removesuffix(" days"))

        plans[name.split("`")[1]] = {"max_members": number(members), "max_secrets": number(secrets),
                                     "audit_retention_days": number(retention),
                                     "max_environments": number(environments)}
    return plans


def test_the_docs_plan_table_is_the_codes_and_plan_changes_apply_it() -> None:
    assert docs_plan_table() == PLANS
    assert admin.PLAN_FORM_DEFAULTS == {name: (plan["max_secrets"], plan["max_members"])
                                        for name, plan in PLANS.items()}


async def test_set_plan_without_quotas_gives_the_plan_tables_numbers(
        client: TestClient, api: Api, database_url: str) -> None:
    user = await api.register("plan_table")
    await api.team(user, "table-team")
    for plan in PLANS:
        done = await asyncio.to_thread(operator, database_url, "team", "set-plan", "table-team", plan)
        assert done.returncode == 0, done.stderr
        limits = {k: "unlimited" if PLANS[plan][k] is None else str(PLANS[plan][k])
                  for k in ("max_secrets", "max_members", "max_environments")}
        assert done.stdout.strip() == (f"table-team: plan {plan} (max_secrets {limits['max_secrets']}, "
                                       f"max_members {limits['max_members']}, "
                                       f"max_environments {limits['max_environments']})")
