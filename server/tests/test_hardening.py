"""Regressions from hostile testing: each answered 500 (or worse) before."""

from __future__ import annotations

import logging

import psycopg2
import pytest

from conftest import Api, admin_execute, query, server_url
from cvsm_server import db
from cvsm_server.core.config import ConfigError

# Deep enough to exhaust Python's JSON parser, small enough for every body limit (4 KiB).
DEEP = b"[" * 1_500 + b"]" * 1_500
DEEP_OBJECT = b'{"":' * 500 + b"[" * 600 + b"]" * 600 + b"}" * 500


@pytest.mark.parametrize("path, authed", [
    ("/api/v1/auth/register", False), ("/api/v1/auth/login", False), ("/api/v1/teams", True),
    ("/api/v1/tokens", True), ("/api/v1/me/2fa/enable", True),
])
@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT], ids=["array", "object"])
async def test_json_nested_deep_enough_to_exhaust_the_parser_is_a_400(client, api: Api, path, authed,
                                                                      body, caplog):
    headers = {"Content-Type": "application/json"}
    if authed:
        headers.update(api.auth((await api.register())["token"]))
    with caplog.at_level(logging.DEBUG):
        resp = await client.post(path, data=body, headers=headers)
    assert resp.status == 400
    assert list(await resp.json()) == ["error"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_deep_json_in_a_secret_body_is_a_400(client, api: Api, owner, team_id):
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets", data=DEEP,
                             headers={**api.auth(owner["token"]), "Content-Type": "application/json"})
    assert resp.status == 400


@pytest.mark.parametrize("path", ["secrets", "audit"])
@pytest.mark.parametrize("param", ["offset=99999999999999999999", "limit=99999999999999999999",
                                   "offset=-99999999999999999999", "offset=1e3", "offset=١٢"])
async def test_numbers_beyond_64_bits_or_not_decimal_are_a_400(client, api: Api, owner, team_id,
                                                               path, param):
    resp = await client.get(f"/api/v1/teams/{team_id}/{path}?{param}", headers=api.auth(owner["token"]))
    assert resp.status == 400, await resp.text()


async def test_rollback_to_a_version_beyond_32_bits_is_a_4xx(client, api: Api, owner, team_id):
    secret_id = await api.secret(owner, team_id, "A", "1")
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets/{secret_id}/rollback",
                             json={"version": 2**40}, headers=api.auth(owner["token"]))
    assert resp.status == 400


@pytest.mark.parametrize("when", ["9999-12-31T23:59:59-05:00", "9999-12-31T23:59:59.999999-00:01",
                                  "0001-01-01T00:30:00+01:00"])
async def test_token_expiry_python_cannot_read_back_is_a_400(client, api: Api, owner, when):
    resp = await client.post("/api/v1/tokens", json={"name": "ci", "expires_at": when},
                             headers=api.auth(owner["token"]))
    assert resp.status == 400
    listed = await client.get("/api/v1/tokens", headers=api.auth(owner["token"]))
    assert listed.status == 200 and (await listed.json())["tokens"] == []


async def test_share_head_consumes_no_view_and_writes_no_audit_entry(client, api: Api, owner, team_id,
                                                                    database_url):
    secret_id = await api.secret(owner, team_id, "A", "shared value")
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets/{secret_id}/shares",
                             json={"max_views": 1}, headers=api.auth(owner["token"]))
    token = (await resp.json())["url"].rsplit("/", 1)[1]
    for _ in range(3):
        head = await client.head(f"/api/v1/public/share/{token}")
        assert head.status == 200
    assert (await client.head("/api/v1/public/share/shr_unknown")).status == 404
    views = await query(database_url, "SELECT count(*) AS n FROM audit_logs WHERE action = 'share_view'")
    assert views[0]["n"] == 0
    got = await client.get(f"/api/v1/public/share/{token}")
    assert (await got.json())["value"] == "shared value"
    assert (await client.head(f"/api/v1/public/share/{token}")).status == 410


async def test_audit_guard_lets_no_one_null_the_actor_of_a_live_team_or_user(client, api: Api, owner,
                                                                             team_id, database_url):
    await api.secret(owner, team_id, "A", "1")
    for column in ("team_id", "user_id"):
        with pytest.raises(psycopg2.Error, match="immutable"):
            await query(database_url, f"UPDATE audit_logs SET {column} = NULL WHERE {column} IS NOT NULL")
    rows = await query(database_url, "SELECT count(*) AS n FROM audit_logs WHERE team_id IS NULL "
                                     "OR user_id IS NULL")
    assert rows[0]["n"] == 0
    # deleting the team is the one way its entries lose the reference
    resp = await client.delete(f"/api/v1/teams/{team_id}", headers=api.auth(owner["token"]))
    assert resp.status == 200
    kept = await query(database_url, "SELECT team_id FROM audit_logs WHERE action = 'create'")
    assert kept == [{"team_id": None}]


@pytest.mark.parametrize("sql", [
    "SET session_replication_role = replica",
    "ALTER TABLE audit_logs DISABLE TRIGGER audit_logs_immutable",
    "UPDATE audit_logs SET action = 'tampered'",
    "TRUNCATE audit_logs",
    "DROP TRIGGER audit_logs_immutable ON audit_logs",
    "ALTER TABLE audit_logs DISABLE TRIGGER audit_logs_immutable_update",
    "DROP TRIGGER audit_logs_immutable_update ON audit_logs",
    "CREATE TABLE sneaky (id int)",
])
async def test_the_servers_role_cannot_switch_the_audit_guard_off(client, api: Api, owner, team_id,
                                                                  database_url, sql):
    await api.secret(owner, team_id, "A", "1")
    with pytest.raises(psycopg2.Error) as failure:
        await query(server_url(database_url), sql)
    assert isinstance(failure.value, psycopg2.errors.InsufficientPrivilege) or "immutable" in str(failure.value)


async def test_the_server_serves_as_its_own_role_not_the_owner(client, database_url):
    rows = await query(database_url, "SELECT usename FROM pg_stat_activity WHERE datname = current_database() "
                                     "AND usename <> current_user")
    assert {r["usename"] for r in rows} == {"cvsm_app"}


async def test_start_up_as_a_superuser_is_refused_unless_allowed(make_settings, start_client, database_url):
    with pytest.raises(ConfigError, match="CVSM_ALLOW_SUPERUSER"):
        async with db.open(make_settings(database_url=database_url)):
            pass
    client = await start_client(make_settings(database_url=database_url, allow_superuser="1"))
    assert (await client.get("/api/v1/health")).status == 200


async def test_a_database_outage_is_a_503_with_retry_after(client, api: Api, owner, team_id, database_url,
                                                           postgres, caplog):
    name = psycopg2.extensions.parse_dsn(database_url)["dbname"]
    admin_execute(postgres, f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
    admin_execute(postgres, f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
    try:
        with caplog.at_level(logging.INFO):
            for path in (f"/api/v1/teams/{team_id}/secrets", "/api/v1/me", "/api/v1/health",
                         "/api/v1/public/stats"):
                resp = await client.get(path, headers=api.auth(owner["token"]))
                assert resp.status == 503, path
                assert int(resp.headers["Retry-After"]) >= 1
                assert list(await resp.json()) == ["error"]
        assert not [r for r in caplog.records if r.exc_info]
    finally:
        admin_execute(postgres, f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
    assert (await client.get(f"/api/v1/teams/{team_id}/secrets",
                             headers=api.auth(owner["token"]))).status == 200


async def test_failed_credentials_per_ip_stop_growing_storage(make_settings, start_client, database_url):
    client = await start_client(make_settings(ratelimit_failed_auth="3/60"))
    statuses = []
    for i in range(6):  # six different prefixes: no prefix lock is involved
        token = f"cvsm_{i:08x}" + "0" * 56
        statuses.append((await client.get("/api/v1/me", headers=Api.auth(token))).status)
    assert statuses == [401, 401, 401, 429, 429, 429]
    rows = await query(database_url, "SELECT count(*) AS n FROM token_prefix_failures")
    assert rows[0]["n"] == 3
    # failed logins from the same address are counted in the same limit
    resp = await client.post("/api/v1/auth/login", json={"identifier": "nobody", "password": "wrong pass"})
    assert resp.status == 429 and int(resp.headers["Retry-After"]) >= 1
    failed = await query(database_url, "SELECT count(*) AS n FROM audit_logs WHERE action = 'login_failed'")
    assert failed[0]["n"] == 0


async def test_export_without_environment_records_what_was_exported(client, api: Api, owner, team_id,
                                                                    database_url):
    await api.secret(owner, team_id, "A", "1", environment="staging")
    await api.secret(owner, team_id, "B", "2", environment="development")
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/export?format=json",
                            headers=api.auth(owner["token"]))
    assert await resp.json() == {"A": "1", "B": "2"}
    [entry] = await query(database_url, "SELECT metadata FROM audit_logs WHERE action = 'export'")
    assert entry["metadata"]["environment"] == "all"
    assert entry["metadata"]["environments"] == ["staging", "development"]
    assert entry["metadata"]["count"] == 2


@pytest.mark.parametrize("incoming, kept", [("req-123.abc:9", True), ("x" * 129, False),
                                            ("bad id with spaces", False), ("", False)])
async def test_every_answer_carries_a_request_id(client, api: Api, incoming, kept):
    headers = {"X-Request-Id": incoming} if incoming else {}
    for resp in (await client.get("/api/v1/health", headers=headers),
                 await client.get("/api/v1/me", headers=headers),
                 await client.get("/api/v1/nowhere", headers=headers),
                 await client.options("/api/v1/me", headers={**headers, "Origin": "https://x.test",
                                                             "Access-Control-Request-Method": "GET"})):
        request_id = resp.headers["X-Request-Id"]
        if kept:
            assert request_id == incoming
        else:
            assert request_id != incoming and 8 <= len(request_id) <= 128


async def test_request_id_is_in_the_access_log_and_the_error_log(client, api: Api, owner, team_id,
                                                                 database_url, postgres, caplog):
    with caplog.at_level(logging.INFO):
        await client.get("/api/v1/health", headers={"X-Request-Id": "trace-access-1"})
    assert any("trace-access-1" in r.getMessage() for r in caplog.records if r.name == "aiohttp.access")
    name = psycopg2.extensions.parse_dsn(database_url)["dbname"]
    admin_execute(postgres, f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
    admin_execute(postgres, f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
    try:
        with caplog.at_level(logging.INFO):
            await client.get("/api/v1/me", headers={**api.auth(owner["token"]), "X-Request-Id": "trace-err-2"})
    finally:
        admin_execute(postgres, f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
    assert any("trace-err-2" in r.getMessage() for r in caplog.records if r.name == "cvsm.errors")
