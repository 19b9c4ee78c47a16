"""The audit log: listing, immutability enforced by the database, retention purge, actor nulling."""

import psycopg2
import pytest

from cvsm_server import audit, db
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


async def test_retention_purge_removes_only_entries_past_their_plan_retention(client, api: Api, owner, team_id,
                                                                              database_url):
    other = await api.register()
    pro_team = await api.team(other)
    await query(database_url, "UPDATE teams SET plan = 'professional' WHERE id = %s", (pro_team,))
    ent_team = await api.team(other)
    await query(database_url, "UPDATE teams SET plan = 'enterprise' WHERE id = %s", (ent_team,))
    insert = """INSERT INTO audit_logs (team_id, action, resource, created_at)
                VALUES (%s, 'old', 'test', now() - make_interval(days => %s))"""
    for team, days in ((team_id, 31), (team_id, 29), (pro_team, 31), (pro_team, 91), (ent_team, 4000)):
        await query(database_url, insert, (team, days))
    pool = await db.create_pool(database_url, maxsize=1)
    try:
        removed = await audit.purge_expired(pool)
    finally:
        pool.close()
        await pool.wait_closed()
    assert removed == 2
    left = await query(database_url, "SELECT team_id, created_at FROM audit_logs WHERE action = 'old'")
    assert len(left) == 3


async def test_deleting_a_user_keeps_their_audit_entries_with_actor_null(client, api: Api, database_url):
    user = await api.register()
    team = await api.team(user)
    await api.secret(user, team, "A", "v")
    await query(database_url, "DELETE FROM users WHERE id = %s", (user["id"],))
    rows = await query(database_url, "SELECT user_id, action FROM audit_logs WHERE team_id = %s", (team,))
    assert {r["action"] for r in rows} == {"team_create", "create"}
    assert all(r["user_id"] is None for r in rows)
