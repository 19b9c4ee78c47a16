"""Secrets: validation, listing and search, audited reads, versions, rollback, delete, export,
and what is (not) stored in the database."""

import io
import re
import uuid

import aiopg
import pytest

from conftest import Api, query, server_url
from cvsm_server import db
from cvsm_server.accounts import ratelimit
from cvsm_server.secrets import queries as secret_queries
from cvsm_server.core.config import RateLimit


def url(team_id, *parts):
    return "/".join([f"/api/v1/teams/{team_id}/secrets", *parts])


async def test_create_returns_metadata_never_the_value(client, api: Api, owner, team_id):
    resp = await client.post(url(team_id), headers=api.auth(owner["token"]), json={
        "name": "STRIPE_KEY", "value": "sk_live_abc", "environment": "production", "type": "api_key",
        "description": "payments"})
    assert resp.status == 201
    body = await resp.json()
    assert set(body) == {"secret"}
    secret = body["secret"]
    assert secret["name"] == "STRIPE_KEY" and secret["type"] == "api_key" and secret["description"] == "payments"
    assert "sk_live_abc" not in await resp.text()


async def test_type_defaults_to_credential(client, api: Api, owner, team_id):
    sid = await api.secret(owner, team_id, "PLAIN", "x")
    body = await (await client.get(url(team_id, sid), headers=api.auth(owner["token"]))).json()
    assert body["secret"]["type"] == "credential"


@pytest.mark.parametrize("body", [
    {"name": "1STARTS_WITH_DIGIT", "value": "v", "environment": "production"},
    {"name": "HAS-DASH", "value": "v", "environment": "production"},
    {"name": "A" * 256, "value": "v", "environment": "production"},
    {"name": "OK", "value": "v"},
    {"name": "OK", "value": "v", "environment": "prod"},
    {"name": "OK", "value": "v", "environment": "production", "type": "banana"},
    {"name": "OK", "value": 5, "environment": "production"},
    {"name": "OK", "value": "v" * 65537, "environment": "production"},
    {"name": "OK", "value": "é" * 32769, "environment": "production"},
    {"name": ["OK"], "value": "v", "environment": "production"},
])
async def test_invalid_secret_input_is_400(client, api: Api, owner, team_id, body):
    resp = await client.post(url(team_id), headers=api.auth(owner["token"]), json=body)
    assert resp.status == 400
    assert list(await resp.json()) == ["error"]


@pytest.mark.parametrize("value", ["", "line1\nline2\r\n\tend", "päßwörd 🔑 秘密", "x" * 65536, "é" * 32768])
async def test_values_round_trip_exactly(client, api: Api, owner, team_id, value):
    sid = await api.secret(owner, team_id, "V", value)
    body = await (await client.get(url(team_id, sid), headers=api.auth(owner["token"]))).json()
    assert body["value"] == value


async def test_duplicate_name_in_same_environment_is_409_but_other_environment_is_fine(client, api: Api, owner, team_id):
    await api.secret(owner, team_id, "DUP", "1")
    resp = await client.post(url(team_id), headers=api.auth(owner["token"]),
                             json={"name": "DUP", "value": "2", "environment": "production"})
    assert resp.status == 409
    await api.secret(owner, team_id, "DUP", "3", environment="staging")
    await api.secret(owner, team_id, "dup", "4")  # names are case-sensitive


async def test_name_of_a_deleted_secret_can_be_reused(client, api: Api, owner, team_id):
    sid = await api.secret(owner, team_id, "REUSE", "1")
    deleted = await client.delete(url(team_id, sid), headers=api.auth(owner["token"]))
    assert deleted.status == 200, await deleted.text()
    again = await api.secret(owner, team_id, "REUSE", "2")
    assert again != sid


async def test_list_filters_by_environment_and_orders_by_name_without_values(client, api: Api, owner, team_id):
    await api.secret(owner, team_id, "B", "vb")
    await api.secret(owner, team_id, "A", "va", environment="staging")
    await api.secret(owner, team_id, "A", "va2")
    resp = await client.get(url(team_id), headers=api.auth(owner["token"]))
    body = await resp.json()
    assert [(s["name"], s["environment"]) for s in body["secrets"]] == [
        ("A", "production"), ("A", "staging"), ("B", "production")]
    assert body["total"] == 3
    assert "value" not in body["secrets"][0]
    assert "va2" not in await resp.text()
    staging = await (await client.get(url(team_id), params={"environment": "staging"},
                                      headers=api.auth(owner["token"]))).json()
    assert [s["name"] for s in staging["secrets"]] == ["A"] and staging["total"] == 1
    bad = await client.get(url(team_id), params={"environment": "nope"}, headers=api.auth(owner["token"]))
    assert bad.status == 400


async def test_search_is_case_insensitive_and_treats_percent_and_underscore_literally(client, api: Api, owner, team_id):
    for name in ("DB_URL", "DBXURL", "db_password", "API_KEY"):
        await api.secret(owner, team_id, name, "v")

    async def names(search):
        body = await (await client.get(url(team_id), params={"search": search},
                                       headers=api.auth(owner["token"]))).json()
        return sorted(s["name"] for s in body["secrets"])

    assert await names("db_") == ["DB_URL", "db_password"]  # "_" is not a wildcard
    assert await names("%") == []
    assert await names("url") == ["DBXURL", "DB_URL"]


async def test_list_limit_and_offset(client, api: Api, owner, team_id):
    for name in "ABCDE":
        await api.secret(owner, team_id, name, "v")
    body = await (await client.get(url(team_id), params={"limit": "2", "offset": "1"},
                                   headers=api.auth(owner["token"]))).json()
    assert [s["name"] for s in body["secrets"]] == ["B", "C"] and body["total"] == 5
    assert (await client.get(url(team_id), params={"limit": "x"}, headers=api.auth(owner["token"]))).status == 400


async def test_each_read_writes_an_audit_entry_with_ip_and_user_agent(client, api: Api, owner, team_id, database_url):
    sid = await api.secret(owner, team_id, "AUDITED", "v")
    for _ in range(2):
        await client.get(url(team_id, sid), headers={**api.auth(owner["token"]), "User-Agent": "test-agent/1"})
    rows = await query(database_url, "SELECT * FROM audit_logs WHERE action = 'read'")
    assert len(rows) == 2
    assert rows[0]["ip_address"] == "127.0.0.1" and rows[0]["user_agent"] == "test-agent/1"
    assert rows[0]["resource_id"] == sid and rows[0]["user_email"] == owner["email"]


async def test_read_fails_closed_when_the_audit_write_fails(client, api: Api, owner, team_id, database_url):
    sid = await api.secret(owner, team_id, "FAIL_CLOSED", "the-plaintext")
    await query(database_url, """
        CREATE FUNCTION break_audit() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN RAISE EXCEPTION 'audit storage unavailable'; END $$;
        CREATE TRIGGER break_audit BEFORE INSERT ON audit_logs FOR EACH ROW EXECUTE FUNCTION break_audit();""")
    resp = await client.get(url(team_id, sid), headers=api.auth(owner["token"]))
    assert resp.status == 500
    text = await resp.text()
    assert "the-plaintext" not in text
    export = await client.get(url(team_id, "export"), params={"format": "json"}, headers=api.auth(owner["token"]))
    assert export.status == 500 and "the-plaintext" not in await export.text()


async def test_update_keeps_previous_value_as_a_version_and_rollback_restores_it(client, api: Api, owner, team_id):
    h = api.auth(owner["token"])
    sid = await api.secret(owner, team_id, "ROTATE", "v1")
    assert (await client.put(url(team_id, sid), headers=h, json={"value": "v2"})).status == 200
    assert (await client.put(url(team_id, sid), headers=h, json={"value": "v2"})).status == 200  # unchanged
    assert (await client.put(url(team_id, sid), headers=h, json={"description": "d"})).status == 200
    versions = await (await client.get(url(team_id, sid, "versions"), headers=h)).json()
    assert versions["current_version"] == 2
    assert [v["version"] for v in versions["versions"]] == [1]
    assert "v1" not in str(versions)
    resp = await client.post(url(team_id, sid, "rollback"), headers=h, json={"version": 1})
    assert resp.status == 200 and (await resp.json())["secret"]["version"] == 3
    assert (await (await client.get(url(team_id, sid), headers=h)).json())["value"] == "v1"
    assert (await client.post(url(team_id, sid, "rollback"), headers=h, json={"version": 99})).status == 404
    assert (await client.post(url(team_id, sid, "rollback"), headers=h, json={"version": "1"})).status == 400


async def test_update_cannot_rename_and_environment_move_onto_existing_name_is_409(client, api: Api, owner, team_id):
    h = api.auth(owner["token"])
    sid = await api.secret(owner, team_id, "MOVE", "p")
    await api.secret(owner, team_id, "MOVE", "s", environment="staging")
    assert (await client.put(url(team_id, sid), headers=h, json={"name": "OTHER"})).status == 400
    assert (await client.put(url(team_id, sid), headers=h, json={"environment": "staging"})).status == 409
    moved = await client.put(url(team_id, sid), headers=h, json={"environment": "development"})
    assert moved.status == 200 and (await moved.json())["secret"]["environment"] == "development"


async def test_deleted_secret_is_gone_from_every_read_path(client, api: Api, owner, team_id, database_url):
    h = api.auth(owner["token"])
    sid = await api.secret(owner, team_id, "DOOMED", "v")
    assert (await client.delete(url(team_id, sid), headers=h)).status == 200
    assert (await client.get(url(team_id, sid), headers=h)).status == 404
    assert (await client.put(url(team_id, sid), headers=h, json={"value": "x"})).status == 404
    assert (await client.delete(url(team_id, sid), headers=h)).status == 404
    assert (await (await client.get(url(team_id), headers=h)).json())["total"] == 0
    rows = await query(database_url, "SELECT deleted_at FROM secrets WHERE id = %s", (sid,))
    assert rows[0]["deleted_at"] is not None  # soft delete


async def test_export_json_and_dotenv_with_environment_precedence(client, api: Api, owner, team_id):
    h = api.auth(owner["token"])
    await api.secret(owner, team_id, "SHARED", "dev", environment="development")
    await api.secret(owner, team_id, "SHARED", "stage", environment="staging")
    await api.secret(owner, team_id, "ONLY_DEV", "d", environment="development")
    await api.secret(owner, team_id, "QUOTED", 'a "b" \\ c\nd\te\r')
    all_json = await (await client.get(url(team_id, "export"), params={"format": "json"}, headers=h)).json()
    assert all_json == {"SHARED": "stage", "ONLY_DEV": "d", "QUOTED": 'a "b" \\ c\nd\te\r'}
    dev = await (await client.get(url(team_id, "export"), params={"format": "json", "environment": "development"},
                                  headers=h)).json()
    assert dev == {"SHARED": "dev", "ONLY_DEV": "d"}
    resp = await client.get(url(team_id, "export"), headers=h)
    assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"
    # A value with a line break is double-quoted on one line (issue 24: no second variable).
    assert await resp.text() == ("ONLY_DEV='d'\n"
                                 "QUOTED=\"a \\\"b\\\" \\\\ c\\nd\te\\r\"\n"
                                 "SHARED='stage'\n")
    assert (await client.get(url(team_id, "export"), params={"format": "xml"}, headers=h)).status == 400


async def test_export_is_audited(client, api: Api, owner, team_id, database_url):
    await api.secret(owner, team_id, "E", "v")
    await client.get(url(team_id, "export"), params={"format": "json"}, headers=api.auth(owner["token"]))
    rows = await query(database_url, "SELECT metadata FROM audit_logs WHERE action = 'export'")
    assert rows[0]["metadata"]["count"] == 1 and rows[0]["metadata"]["format"] == "json"


async def test_no_plaintext_value_anywhere_in_the_database(client, api: Api, owner, team_id, database_url):
    marker = "PLAINTEXT-MARKER-7f3a9c"
    sid = await api.secret(owner, team_id, "HIDDEN", marker)
    await client.put(url(team_id, sid), headers=api.auth(owner["token"]), json={"value": marker + "-v2"})
    await client.get(url(team_id, sid), headers=api.auth(owner["token"]))
    await client.get(url(team_id, "export"), headers=api.auth(owner["token"]))
    tables = await query(database_url, """SELECT table_name FROM information_schema.tables
                                          WHERE table_schema = 'public' AND table_type = 'BASE TABLE'""")
    for t in tables:
        rows = await query(database_url, f'SELECT t::text AS row FROM "{t["table_name"]}" t')
        for row in rows:
            assert marker not in row["row"], t["table_name"]
            assert marker.encode().hex() not in row["row"], t["table_name"]


async def test_ciphertext_copied_to_another_row_does_not_decrypt(client, api: Api, owner, team_id, database_url):
    h = api.auth(owner["token"])
    source = await api.secret(owner, team_id, "SOURCE", "top-secret")
    target = await api.secret(owner, team_id, "TARGET", "boring")
    await query(database_url, """UPDATE secrets t SET nonce = s.nonce, ciphertext = s.ciphertext
                                 FROM secrets s WHERE s.id = %s AND t.id = %s""", (source, target))
    resp = await client.get(url(team_id, target), headers=h)
    assert resp.status == 500
    assert "top-secret" not in await resp.text()
    assert (await (await client.get(url(team_id, source), headers=h)).json())["value"] == "top-secret"


async def test_secret_of_another_team_is_404_through_own_team_url(client, api: Api, owner, team_id):
    other = await api.register()
    their_team = await api.team(other)
    theirs = await api.secret(other, their_team, "THEIRS", "v")
    h = api.auth(owner["token"])
    assert (await client.get(url(team_id, theirs), headers=h)).status == 404
    assert (await client.put(url(team_id, theirs), headers=h, json={"value": "x"})).status == 404
    assert (await client.delete(url(team_id, theirs), headers=h)).status == 404


async def test_oversized_body_is_rejected_before_buffering(client, api: Api, owner, team_id):
    resp = await client.post(url(team_id), headers={**api.auth(owner["token"]), "Content-Type": "application/json"},
                             data=io.BytesIO(b'{"name": "BIG", "value": "' + b"x" * (2 * 1024 * 1024) + b'"}'))
    assert resp.status == 413
    assert "error" in await resp.json()


async def test_the_audited_read_is_prepared_once_per_connection_and_runs_a_generic_plan(
        api, owner, team_id, database_url):
    secret_id = await api.secret(owner, team_id, "DB_URL", "postgres://x")
    statement = secret_queries.READ_BY_ID["charged"]
    params = {"actor_id": uuid.UUID(owner["id"]), "actor_email": owner["email"], "ip": "10.0.0.1",
              "user_agent": "test", "token_id": None, "team_id": uuid.UUID(team_id),
              "secret_id": uuid.UUID(secret_id), "environments": None, "epoch": None,
              "full_power": True,
              **ratelimit.Charge.of("api", "test", RateLimit(1000, 60)).params()}
    pool = await db.create_pool(server_url(database_url), maxsize=1)
    try:
        async with db.cursor(pool) as cur:
            for _ in range(7):
                row = await statement.fetchone(cur, params)
                assert row["name"] == "DB_URL" and row["rate_count"] >= 1
            prepared = await db.fetchall(
                cur, "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements")
            plan = await statement.explain(cur, params)
            # Gone from the connection (DISCARD ALL, a pooler's reset): prepared again.
            await cur.execute("DISCARD ALL")
            assert (await statement.fetchone(cur, params))["name"] == "DB_URL"
            again = await db.fetchall(cur, "SELECT name FROM pg_prepared_statements")
    finally:
        pool.close()
        await pool.wait_closed()
    # One PREPARE on this connection, and PostgreSQL plans it once for any parameters: the
    # generic plan ($n in its conditions), which finds the secret and the membership by index.
    [entry] = prepared
    assert entry["name"].startswith("cvsm_read_charged_")
    assert entry["generic_plans"] >= 1, (entry, plan)
    assert "= $" in plan, plan
    assert re.search(r"Index Scan using \w+ on secrets", plan), plan
    assert re.search(r"Index (Only )?Scan using team_members_pkey on team_members", plan), plan
    assert "Seq Scan on secrets" not in plan and "Seq Scan on team_members" not in plan, plan
    assert [r["name"] for r in again] != [entry["name"]] and len(again) == 1


async def test_a_warm_audited_read_creates_no_cursor(client, api: Api, owner, team_id, monkeypatch):
    """The read runs on its connection's own tuple cursor (`db.row_cursor`), made once per
    connection: a read with a cached credential creates none, and answers the same."""
    secret_id = await api.secret(owner, team_id, "DB_URL", "postgres://x")
    h = api.auth(owner["token"])
    for _ in range(2):  # the credential cached, the connection's cursor made
        assert (await client.get(url(team_id, secret_id), headers=h)).status == 200
    made = []
    real_cursor = aiopg.Connection.cursor
    monkeypatch.setattr(aiopg.Connection, "cursor",
                        lambda self, *a, **k: made.append(1) or real_cursor(self, *a, **k))
    for _ in range(5):
        resp = await client.get(url(team_id, secret_id), headers=h)
        body = await resp.json()
        assert resp.status == 200 and body["value"] == "postgres://x"
        assert body["secret"]["id"] == secret_id and body["secret"]["name"] == "DB_URL"
    assert made == []


async def test_a_closed_row_cursor_is_replaced(database_url):
    pool = await db.create_pool(server_url(database_url), maxsize=1)
    try:
        async with pool.acquire() as conn:
            cur = await db.row_cursor(conn)
            assert await db.row_cursor(conn) is cur
            cur.close()  # as aiopg does to a cursor whose statement timed out
            again = await db.row_cursor(conn)
            assert again is not cur and not again.closed
            await again.execute("SELECT 1 AS one")
            assert await again.fetchone() == (1,)
    finally:
        pool.close()
        await pool.wait_closed()
