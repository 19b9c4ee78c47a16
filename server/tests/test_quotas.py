"""Plans and quotas: `max_secrets` on create, bulk create, import and rollback; `max_members` on
member add; Starter's one active environment on every write that puts a secret somewhere;
concurrent requests at the limit never pass it; new teams get the plan's defaults."""

from __future__ import annotations

import asyncio
import re
import shlex

import pytest

from conftest import Api, query
from test_admin import operator
from cvsm_server.secrets import service as secrets
from cvsm_server.secrets import queries as secret_queries
from cvsm_server.teams import service as teams

# The refusals of the `acme` team (the `team_id` fixture) on Starter: the quota, then what lifts it.
SECRET_QUOTA = teams.quota_message(secret_queries.SECRET_QUOTA, "acme", "starter")
MEMBER_QUOTA = teams.quota_message(teams.MEMBER_QUOTA, "acme", "starter", "max_members")


@pytest.fixture
def settings(make_settings):
    return make_settings(default_plan="starter")  # the shipped default, whose limits these test


async def set_quota(database_url: str, team_id: str, *, max_secrets=None, max_members=None,
                    plan: str = "starter") -> None:
    await query(database_url, "UPDATE teams SET plan = %s, max_secrets = %s, max_members = %s "
                              "WHERE id = %s", (plan, max_secrets, max_members, team_id))


async def live_count(database_url: str, team_id: str) -> int:
    [row] = await query(database_url, "SELECT count(*) AS n FROM secrets WHERE team_id = %s "
                                      "AND deleted_at IS NULL", (team_id,))
    return row["n"]


async def fill(client, api: Api, user: dict, team_id: str, count: int, prefix: str = "S") -> None:
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets/bulk", headers=api.auth(user["token"]),
                             json={"items": [{"name": f"{prefix}{i}", "value": "v",
                                              "environment": "production"} for i in range(count)]})
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["summary"]["ok"] == count


async def create(client, api: Api, user: dict, team_id: str, name: str):
    return await client.post(f"/api/v1/teams/{team_id}/secrets", headers=api.auth(user["token"]),
                             json={"name": name, "value": "v", "environment": "production"})


async def warm_pool(client, api: Api, user: dict, team_id: str) -> None:
    """Open the pool's connections first, so concurrent requests really overlap in the database."""
    responses = await asyncio.gather(*(client.get(f"/api/v1/teams/{team_id}/secrets",
                                                  headers=api.auth(user["token"])) for _ in range(25)))
    assert {r.status for r in responses} == {200}


# --- plans ------------------------------------------------------------------------------------

def test_plan_table_is_the_spec_table():
    assert teams.PLANS == {
        "starter": {"max_secrets": 50, "max_members": 5, "audit_retention_days": 30,
                    "max_environments": 1},
        "professional": {"max_secrets": 500, "max_members": 25, "audit_retention_days": 90,
                         "max_environments": None},
        "enterprise": {"max_secrets": None, "max_members": None, "audit_retention_days": None,
                       "max_environments": None},
    }


async def test_new_team_gets_starter_plan_with_50_secrets_and_5_members(client, api: Api, owner,
                                                                        team_id, database_url):
    resp = await client.get(f"/api/v1/teams/{team_id}", headers=api.auth(owner["token"]))
    team = (await resp.json())["team"]
    assert (team["plan"], team["max_secrets"], team["max_members"]) == ("starter", 50, 5)
    assert team["max_environments"] == 1
    [row] = await query(database_url, "SELECT plan, max_secrets, max_members FROM teams")
    assert row == {"plan": "starter", "max_secrets": 50, "max_members": 5}


# --- secrets ----------------------------------------------------------------------------------

async def test_create_at_the_starter_limit_is_403_with_quota_message(client, api: Api, owner, team_id,
                                                                     database_url):
    await fill(client, api, owner, team_id, 49)
    assert (await create(client, api, owner, team_id, "FIFTIETH")).status == 201
    resp = await create(client, api, owner, team_id, "FIFTY_FIRST")
    assert resp.status == 403
    assert await resp.json() == {"error": SECRET_QUOTA}
    assert await live_count(database_url, team_id) == 50


async def test_deleted_secrets_do_not_count_against_the_quota(client, api: Api, owner, team_id,
                                                             database_url):
    await set_quota(database_url, team_id, max_secrets=2, max_members=5)
    first = await api.secret(owner, team_id, "A", "1")
    await api.secret(owner, team_id, "B", "2")
    assert (await create(client, api, owner, team_id, "C")).status == 403
    await client.delete(f"/api/v1/teams/{team_id}/secrets/{first}", headers=api.auth(owner["token"]))
    assert (await create(client, api, owner, team_id, "C")).status == 201


async def test_quota_is_per_team(client, api: Api, owner, team_id, database_url):
    await set_quota(database_url, team_id, max_secrets=1, max_members=5)
    await api.secret(owner, team_id, "A", "1")
    other = await api.team(owner, "second-team")
    assert (await create(client, api, owner, other, "A")).status == 201
    assert (await create(client, api, owner, team_id, "B")).status == 403


async def test_20_concurrent_creates_one_below_the_limit_create_exactly_one(client, api: Api, owner,
                                                                           team_id, database_url):
    await fill(client, api, owner, team_id, 49)
    await warm_pool(client, api, owner, team_id)
    responses = await asyncio.gather(*(create(client, api, owner, team_id, f"RACE_{i}")
                                       for i in range(20)))
    assert sorted(r.status for r in responses) == [201] + [403] * 19
    assert await live_count(database_url, team_id) == 50


async def test_bulk_create_that_would_pass_the_quota_inserts_nothing(client, api: Api, owner, team_id,
                                                                     database_url):
    await fill(client, api, owner, team_id, 45)
    items = [{"name": f"NEW{i}", "value": "v", "environment": "production"} for i in range(6)]
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets/bulk", headers=api.auth(owner["token"]),
                             json={"items": items})
    assert resp.status == 403
    assert await resp.json() == {"error": SECRET_QUOTA}
    assert await live_count(database_url, team_id) == 45
    assert await query(database_url, "SELECT id FROM audit_logs WHERE action = 'bulk_create' "
                                     "AND metadata->>'total' = '6'") == []
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets/bulk", headers=api.auth(owner["token"]),
                             json={"items": items[:5]})
    assert resp.status == 200
    assert await live_count(database_url, team_id) == 50


async def test_bulk_quota_counts_every_item_in_the_request_including_invalid_ones(
        client, api: Api, owner, team_id, database_url):
    await fill(client, api, owner, team_id, 48)
    items = [{"name": "OK1", "value": "v", "environment": "production"},
             {"name": "OK2", "value": "v", "environment": "production"},
             {"name": "1INVALID", "value": "v", "environment": "production"}]
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets/bulk", headers=api.auth(owner["token"]),
                             json={"items": items})
    assert resp.status == 403
    assert await live_count(database_url, team_id) == 48


async def test_import_that_would_pass_the_quota_inserts_nothing(client, api: Api, owner, team_id,
                                                                database_url):
    await fill(client, api, owner, team_id, 48)
    url = f"/api/v1/teams/{team_id}/secrets/bulk/import-dotenv"
    resp = await client.post(url, headers=api.auth(owner["token"]),
                             json={"content": "# header\nA=1\nB=2\nC=3\n", "environment": "production"})
    assert resp.status == 403
    assert await resp.json() == {"error": SECRET_QUOTA}
    assert await live_count(database_url, team_id) == 48
    resp = await client.post(url, headers=api.auth(owner["token"]),
                             json={"content": "# header\nA=1\nB=2\n", "environment": "production"})
    assert resp.status == 200
    assert await live_count(database_url, team_id) == 50


async def test_concurrent_bulk_creates_at_the_limit_never_pass_it(client, api: Api, owner, team_id,
                                                                 database_url):
    await fill(client, api, owner, team_id, 40)
    await warm_pool(client, api, owner, team_id)

    async def bulk(n: int):
        items = [{"name": f"B{n}_{i}", "value": "v", "environment": "production"} for i in range(4)]
        return await client.post(f"/api/v1/teams/{team_id}/secrets/bulk",
                                 headers=api.auth(owner["token"]), json={"items": items})

    responses = await asyncio.gather(*(bulk(n) for n in range(6)))
    assert sorted(r.status for r in responses) == [200, 200, 403, 403, 403, 403]
    assert await live_count(database_url, team_id) == 48


async def test_rollback_at_the_limit_restores_a_value_without_adding_a_secret(
        client, api: Api, owner, team_id, database_url):
    await set_quota(database_url, team_id, max_secrets=1, max_members=5)
    secret_id = await api.secret(owner, team_id, "A", "first")
    base = f"/api/v1/teams/{team_id}/secrets/{secret_id}"
    await client.put(base, headers=api.auth(owner["token"]), json={"value": "second"})
    assert (await create(client, api, owner, team_id, "B")).status == 403
    resp = await client.post(f"{base}/rollback", headers=api.auth(owner["token"]), json={"version": 1})
    assert resp.status == 200
    resp = await client.get(base, headers=api.auth(owner["token"]))
    assert (await resp.json())["value"] == "first"
    assert await live_count(database_url, team_id) == 1


async def test_enterprise_team_without_quota_is_unlimited(client, api: Api, owner, team_id, database_url):
    await set_quota(database_url, team_id, plan="enterprise")
    await fill(client, api, owner, team_id, 60)
    assert (await create(client, api, owner, team_id, "MORE")).status == 201
    assert await live_count(database_url, team_id) == 61


# --- members ----------------------------------------------------------------------------------

async def add(client, api: Api, owner: dict, team_id: str, user: dict, role: str = "Member"):
    return await client.post(f"/api/v1/teams/{team_id}/members", headers=api.auth(owner["token"]),
                             json={"identifier": user["username"], "role": role})


async def member_count(database_url: str, team_id: str) -> int:
    [row] = await query(database_url, "SELECT count(*) AS n FROM team_members WHERE team_id = %s",
                        (team_id,))
    return row["n"]


async def test_member_add_past_max_members_is_403_with_quota_message(client, api: Api, owner, team_id,
                                                                     database_url):
    users = [await api.register(f"member_{i}") for i in range(5)]
    for user in users[:4]:
        assert (await add(client, api, owner, team_id, user)).status == 201
    resp = await add(client, api, owner, team_id, users[4])
    assert resp.status == 403
    assert await resp.json() == {"error": MEMBER_QUOTA}
    assert await member_count(database_url, team_id) == 5


async def test_concurrent_member_adds_at_the_limit_add_exactly_one(client, api: Api, owner, team_id,
                                                                   database_url):
    await set_quota(database_url, team_id, max_secrets=50, max_members=2)
    users = [await api.register(f"member_{i}") for i in range(4)]
    await warm_pool(client, api, owner, team_id)
    responses = await asyncio.gather(*(add(client, api, owner, team_id, u) for u in users))
    assert sorted(r.status for r in responses) == [201, 403, 403, 403]
    assert await member_count(database_url, team_id) == 2


# --- environments: Starter has one active environment (one that holds a live secret) ---------

def environment_quota(limit: int, active: str) -> dict:
    return {"error": teams.quota_message(secret_queries.ENVIRONMENT_QUOTA.format(limit=limit, active=active),
                                         "acme", "starter")}


async def live_environments(database_url: str, team_id: str) -> dict[str, int]:
    rows = await query(database_url, "SELECT environment, count(*) AS n FROM secrets WHERE team_id = %s "
                                     "AND deleted_at IS NULL GROUP BY environment", (team_id,))
    return {row["environment"]: row["n"] for row in rows}


async def create_in(client, api: Api, user: dict, team_id: str, name: str, environment: str):
    return await client.post(f"/api/v1/teams/{team_id}/secrets", headers=api.auth(user["token"]),
                             json={"name": name, "value": "v", "environment": environment})


async def test_a_starter_team_holds_secrets_in_one_environment_at_a_time(client, api: Api, owner,
                                                                         team_id, database_url):
    # Any environment may be the first; a second is refused and nothing is stored.
    first = await api.secret(owner, team_id, "A", "1", environment="staging")
    resp = await create_in(client, api, owner, team_id, "B", "production")
    assert resp.status == 403
    assert await resp.json() == environment_quota(1, "staging")
    assert await live_environments(database_url, team_id) == {"staging": 1}
    assert (await create_in(client, api, owner, team_id, "B", "staging")).status == 201
    # An environment whose secrets are all deleted is no longer active.
    await client.delete(f"/api/v1/teams/{team_id}/secrets/{first}", headers=api.auth(owner["token"]))
    assert (await create_in(client, api, owner, team_id, "C", "production")).status == 403
    bulk = f"/api/v1/teams/{team_id}/secrets/bulk"
    [b_id] = [s["id"] for s in (await (await client.get(
        f"/api/v1/teams/{team_id}/secrets", headers=api.auth(owner["token"]))).json())["secrets"]]
    resp = await client.request("DELETE", bulk, headers=api.auth(owner["token"]), json={"ids": [b_id]})
    assert resp.status == 200
    assert (await create_in(client, api, owner, team_id, "C", "production")).status == 201
    assert await live_environments(database_url, team_id) == {"production": 1}


async def test_bulk_create_and_import_that_would_open_a_second_environment_insert_nothing(
        client, api: Api, owner, team_id, database_url):
    bulk = f"/api/v1/teams/{team_id}/secrets/bulk"
    items = [{"name": "A", "value": "1", "environment": "production"},
             {"name": "B", "value": "2", "environment": "development"}]
    resp = await client.post(bulk, headers=api.auth(owner["token"]), json={"items": items})
    assert resp.status == 403
    assert await resp.json() == environment_quota(1, "-")
    assert await live_environments(database_url, team_id) == {}
    # Items that fail on their own open nothing: only valid ones count.
    items[1] = {"name": "B", "value": "2", "environment": "nowhere"}
    resp = await client.post(bulk, headers=api.auth(owner["token"]), json={"items": items})
    assert resp.status == 200 and (await resp.json())["summary"] == {"total": 2, "ok": 1, "failed": 1}
    resp = await client.post(f"{bulk}/import-dotenv", headers=api.auth(owner["token"]),
                             json={"content": "C=3\nD=4\n", "environment": "staging"})
    assert resp.status == 403
    assert await resp.json() == environment_quota(1, "production")
    resp = await client.post(f"{bulk}/import-dotenv", headers=api.auth(owner["token"]),
                             json={"content": "C=3\nD=4\n", "environment": "production"})
    assert resp.status == 200
    assert await live_environments(database_url, team_id) == {"production": 3}


async def test_moving_secrets_may_change_the_active_environment_but_never_add_one(
        client, api: Api, owner, team_id, database_url):
    a = await api.secret(owner, team_id, "A", "1")
    b = await api.secret(owner, team_id, "B", "2")
    move = f"/api/v1/teams/{team_id}/secrets/bulk/move-env"
    resp = await client.put(f"/api/v1/teams/{team_id}/secrets/{a}", headers=api.auth(owner["token"]),
                            json={"environment": "staging", "description": "moved"})
    assert resp.status == 403
    assert await resp.json() == environment_quota(1, "production")
    resp = await client.post(move, headers=api.auth(owner["token"]),
                             json={"ids": [a], "environment": "staging"})
    assert resp.status == 403
    assert await live_environments(database_url, team_id) == {"production": 2}
    [row] = await query(database_url, "SELECT description FROM secrets WHERE id = %s", (a,))
    assert row["description"] == ""  # the refused update changed nothing
    # Moving every secret of the one active environment leaves one active environment.
    resp = await client.post(move, headers=api.auth(owner["token"]),
                             json={"ids": [a, b], "environment": "staging"})
    assert resp.status == 200 and (await resp.json())["summary"]["ok"] == 2
    assert await live_environments(database_url, team_id) == {"staging": 2}
    resp = await client.put(f"/api/v1/teams/{team_id}/secrets/{a}", headers=api.auth(owner["token"]),
                            json={"environment": "development"})
    assert resp.status == 403
    resp = await client.delete(f"/api/v1/teams/{team_id}/secrets/{b}", headers=api.auth(owner["token"]))
    assert resp.status == 200
    resp = await client.put(f"/api/v1/teams/{team_id}/secrets/{a}", headers=api.auth(owner["token"]),
                            json={"environment": "development"})
    assert resp.status == 200
    assert await live_environments(database_url, team_id) == {"development": 1}


async def test_a_downgraded_team_keeps_its_environments_and_opens_no_new_one(client, api: Api, owner,
                                                                             team_id, database_url):
    await set_quota(database_url, team_id, max_secrets=500, max_members=25, plan="professional")
    for n, environment in enumerate(("production", "staging", "development")):
        await api.secret(owner, team_id, f"S{n}", "v", environment=environment)
    resp = await client.get(f"/api/v1/teams/{team_id}", headers=api.auth(owner["token"]))
    assert (await resp.json())["team"]["max_environments"] is None
    await client.request("DELETE", f"/api/v1/teams/{team_id}/secrets/bulk",
                         headers=api.auth(owner["token"]),
                         json={"ids": [s["id"] for s in (await (await client.get(
                             f"/api/v1/teams/{team_id}/secrets?environment=development",
                             headers=api.auth(owner["token"]))).json())["secrets"]]})
    await set_quota(database_url, team_id, max_secrets=50, max_members=5, plan="starter")
    # Nothing is lost; writes go on in the environments it has; no new one opens.
    assert (await create_in(client, api, owner, team_id, "P2", "production")).status == 201
    assert (await create_in(client, api, owner, team_id, "S2", "staging")).status == 201
    resp = await create_in(client, api, owner, team_id, "D2", "development")
    assert resp.status == 403
    assert await resp.json() == environment_quota(1, "production, staging")
    assert await live_environments(database_url, team_id) == {"production": 2, "staging": 2}


async def test_concurrent_creates_in_two_environments_of_an_empty_team_open_exactly_one(
        client, api: Api, owner, team_id, database_url):
    await warm_pool(client, api, owner, team_id)
    responses = await asyncio.gather(*(create_in(client, api, owner, team_id, f"N{i}", environment)
                                       for i, environment in enumerate(["production", "staging"] * 5)))
    statuses = [r.status for r in responses]
    assert set(statuses) == {201, 403}
    assert len(await live_environments(database_url, team_id)) == 1


# --- what lifts a quota on this server ----------------------------------------------------------

async def test_a_quota_refusal_says_who_lifts_it_and_its_operator_command_does(
        client, api: Api, owner, team_id, database_url):
    await set_quota(database_url, team_id, max_secrets=1, max_members=5)
    await api.secret(owner, team_id, "A", "1")
    resp = await create(client, api, owner, team_id, "B")
    message = (await resp.json())["error"]
    assert resp.status == 403 and message.startswith(secret_queries.SECRET_QUOTA + ". ")
    assert "panel admin (/app/admin/teams)" in message
    [command] = re.findall(r"`(cvsm-server [^`]*)`", message)
    assert command == "cvsm-server team set-plan acme professional"
    done = await asyncio.to_thread(operator, database_url, *shlex.split(command)[1:])
    assert done.returncode == 0, done.stderr
    assert (await create(client, api, owner, team_id, "B")).status == 201  # lifted, as it said

    await set_quota(database_url, team_id, max_secrets=2, max_members=1, plan="enterprise")
    resp = await create(client, api, owner, team_id, "C")
    assert (await resp.json())["error"].endswith(
        "`cvsm-server team set-plan acme enterprise --max-secrets N`")  # no plan above: the number
    resp = await add(client, api, owner, team_id, await api.register("one_more"))
    assert (await resp.json())["error"] == teams.quota_message(teams.MEMBER_QUOTA, "acme", "enterprise",
                                                               "max_members")
    assert (await resp.json())["error"].endswith("--max-members N`")
