"""The audit log: listing, immutability enforced by the database, retention purge, actor nulling."""

import psycopg2
import pytest

from cvsm_server.audit import log as audit, chain as audit_chain
from cvsm_server import db
from cvsm_server.web.state import CHECKPOINT_SIGNER
from conftest import Api, query


async def test_audit_lists_newest_first_with_defaults_and_total(client, api: Api, owner, team_id):
    h = api.auth(owner["token"])
    sid = await api.secret(owner, team_id, "A", "v")
    for _ in range(3):
        await client.get(f"/api/v1/teams/{team_id}/secrets/{sid}", headers={**h, "User-Agent": "ua/1"})
    body = await (await client.get(f"/api/v1/teams/{team_id}/audit", headers=h)).json()
    assert body["total"] == 5  # team_create, create, 3 reads
    assert [e["action"] for e in body["logs"]] == ["read", "read", "read", "create", "team_create"]
    entry = body["logs"][0]
    assert {"action", "resource", "user_email", "ip_address", "created_at", "id", "resource_id",
            "user_agent", "metadata"} <= set(entry)
    assert entry["user_email"] == owner["email"] and entry["resource"] == "secret"
    assert entry["user_agent"] == "ua/1" and entry["ip_address"] == "127.0.0.1"


async def test_audit_limit_offset_and_bounds(client, api: Api, owner, team_id):
    h = api.auth(owner["token"])
    for i in range(4):
        await api.secret(owner, team_id, f"S{i}", "v")
    page = await (await client.get(f"/api/v1/teams/{team_id}/audit", params={"limit": 2, "offset": 1},
                                   headers=h)).json()
    assert len(page["logs"]) == 2 and page["total"] == 5
    assert [e["metadata"]["name"] for e in page["logs"]] == ["S2", "S1"]
    capped = await (await client.get(f"/api/v1/teams/{team_id}/audit", params={"limit": 100000}, headers=h)).json()
    assert capped["limit"] == 200
    for bad in ({"limit": "0"}, {"limit": "ten"}, {"offset": "-1"}):
        assert (await client.get(f"/api/v1/teams/{team_id}/audit", params=bad, headers=h)).status == 400


async def test_audit_never_contains_values(client, api: Api, owner, team_id, database_url):
    sid = await api.secret(owner, team_id, "K", "very-secret-value")
    h = api.auth(owner["token"])
    await client.put(f"/api/v1/teams/{team_id}/secrets/{sid}", headers=h, json={"value": "next-secret-value"})
    await client.get(f"/api/v1/teams/{team_id}/secrets/{sid}", headers=h)
    rows = await query(database_url, "SELECT a::text AS row FROM audit_logs a")
    assert rows and all("secret-value" not in r["row"] for r in rows)


async def test_database_refuses_update_and_delete_of_audit_rows(client, api: Api, owner, team_id, database_url):
    await api.secret(owner, team_id, "A", "v")
    for sql in ("UPDATE audit_logs SET action = 'tampered'",
                "UPDATE audit_logs SET ip_address = '10.9.9.9'",
                "DELETE FROM audit_logs",
                "TRUNCATE audit_logs"):
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            await query(database_url, sql)
    assert len(await query(database_url, "SELECT id FROM audit_logs")) == 2


async def test_retention_purge_removes_only_expired_prefixes_of_each_chain(client, database_url):
    """Per team chain, the purge removes the longest run of entries from the start that are all
    past the plan's retention (30 days Starter, 90 Professional, none Enterprise), and leaves a
    signed `purge` checkpoint at the new start."""
    teams = {}
    for plan in ("starter", "starter2", "professional", "enterprise"):
        rows = await query(database_url, "INSERT INTO teams (slug, name, plan) VALUES (%s, %s, %s) "
                           "RETURNING id", (f"t-{plan}", plan, plan.rstrip("2")))
        teams[plan] = rows[0]["id"]
    insert = """INSERT INTO audit_logs (team_id, action, resource, created_at)
                VALUES (%s, 'old', 'test', now() - make_interval(days => %s))"""
    ages = {"starter": (40, 31, 29), "starter2": (29, 31), "professional": (91, 31),
            "enterprise": (4000,)}
    for plan, days in ages.items():
        for age in days:
            await query(database_url, insert, (teams[plan], age))
    signer = client.app[CHECKPOINT_SIGNER]
    pool = await db.create_pool(database_url, maxsize=1)
    try:
        removed = await audit.purge_expired(pool, signer)
        assert removed == 3
        async with db.cursor(pool) as cur:
            for team in teams.values():
                verdict = await audit_chain.verify_chain(cur, signer, team)
                assert verdict.ok, verdict.first_broken
    finally:
        pool.close()
        await pool.wait_closed()
    left = {r["team_id"]: r["seqs"] for r in await query(
        database_url, "SELECT team_id, array_agg(seq ORDER BY seq) AS seqs FROM audit_chain_entries "
                      "GROUP BY team_id")}
    assert left == {teams["starter"]: [3], teams["starter2"]: [1, 2],
                    teams["professional"]: [2], teams["enterprise"]: [1]}
    marks = await query(database_url, "SELECT team_id, seq, kind FROM audit_checkpoints")
    assert sorted((m["team_id"], m["seq"], m["kind"]) for m in marks) == sorted(
        [(teams["starter"], 2, "purge"), (teams["professional"], 1, "purge")])


async def test_deleting_a_user_keeps_their_audit_entries_with_actor_null(client, api: Api, database_url):
    user = await api.register()
    team = await api.team(user)
    await api.secret(user, team, "A", "v")
    await query(database_url, "DELETE FROM users WHERE id = %s", (user["id"],))
    rows = await query(database_url, "SELECT user_id, action FROM audit_logs WHERE team_id = %s", (team,))
    assert {r["action"] for r in rows} == {"team_create", "create"}
    assert all(r["user_id"] is None for r in rows)
