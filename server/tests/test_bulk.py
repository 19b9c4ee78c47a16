"""Bulk create, `.env` import, bulk delete and bulk move-env on the real server and database."""

from __future__ import annotations

import json
from typing import Any

from conftest import Api, query


async def enterprise(database_url: str, team_id: str) -> None:
    """No quota for this team (the plan admin form does not exist in the API)."""
    await query(database_url, "UPDATE teams SET plan = 'enterprise', max_secrets = NULL, "
                              "max_members = NULL WHERE id = %s", (team_id,))


async def live_secrets(database_url: str, team_id: str) -> list[dict]:
    return await query(database_url, "SELECT id::text, name, environment FROM secrets "
                                     "WHERE team_id = %s AND deleted_at IS NULL ORDER BY name, environment",
                       (team_id,))


async def audit_entries(database_url: str, team_id: str, action: str) -> list[dict]:
    return await query(database_url, "SELECT * FROM audit_logs WHERE team_id = %s AND action = %s",
                       (team_id, action))


async def read_value(client, api: Api, user: dict, team_id: str, secret_id: str) -> str:
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/{secret_id}", headers=api.auth(user["token"]))
    assert resp.status == 200, await resp.text()
    return (await resp.json())["value"]


async def post_bulk(client, api: Api, user: dict, team_id: str, body: Any):
    return await client.post(f"/api/v1/teams/{team_id}/secrets/bulk", headers=api.auth(user["token"]),
                             json=body)


async def import_dotenv(client, api: Api, user: dict, team_id: str, content: str,
                        environment: str = "production"):
    return await client.post(f"/api/v1/teams/{team_id}/secrets/bulk/import-dotenv",
                             headers=api.auth(user["token"]),
                             json={"content": content, "environment": environment})


def item(name: str, value: str = "v", environment: str = "production", **extra: Any) -> dict:
    return {"name": name, "value": value, "environment": environment, **extra}


# --- bulk create ------------------------------------------------------------------------------

async def test_bulk_create_inserts_each_valid_item_and_reports_each_failure_alone(
        client, api: Api, owner, team_id, database_url):
    await api.secret(owner, team_id, "EXISTING", "old")
    items = [
        item("DB_URL", "postgres://x", type="connection_string", description="main db"),
        "not an object",
        item("1BAD"),
        item("BIG", "x" * 65537),
        item("WRONG_ENV", environment="qa"),
        item("EXISTING"),
        item("DB_URL"),
        item("NO_ENV", environment=None),
        item("BAD_TYPE", type="nope"),
        item("EMPTY_OK", ""),
        item("MAX_OK", "é" * 32768),
        item("DB_URL", environment="staging"),
        item("NUL_DESC", description="a\x00b"),
    ]
    resp = await post_bulk(client, api, owner, team_id, {"items": items})
    assert resp.status == 200
    body = await resp.json()
    results = body["results"]
    assert [r["index"] for r in results] == list(range(len(items)))
    assert [r["ok"] for r in results] == [True, False, False, False, False, False, False, False,
                                          False, True, True, True, False]
    assert body["summary"] == {"total": 13, "ok": 4, "failed": 9}
    for r in results:
        assert set(r) == ({"index", "id", "name", "ok"} if r["ok"] else {"index", "name", "ok", "error"})
    assert results[1]["name"] is None and "objek" in results[1]["error"]
    assert results[2]["name"] == "1BAD" and "Nama secret" in results[2]["error"]
    assert "65536" in results[3]["error"]
    assert "Environment" in results[4]["error"]
    assert "sudah ada" in results[5]["error"] and "sudah ada" in results[6]["error"]
    assert "wajib" in results[7]["error"]
    assert "Tipe" in results[8]["error"]
    assert "tidak valid" in results[12]["error"]

    stored = await live_secrets(database_url, team_id)
    assert [(s["name"], s["environment"]) for s in stored] == [
        ("DB_URL", "production"), ("DB_URL", "staging"), ("EMPTY_OK", "production"),
        ("EXISTING", "production"), ("MAX_OK", "production")]
    assert await read_value(client, api, owner, team_id, results[0]["id"]) == "postgres://x"
    assert await read_value(client, api, owner, team_id, results[10]["id"]) == "é" * 32768
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/{results[0]['id']}",
                            headers=api.auth(owner["token"]))
    secret = (await resp.json())["secret"]
    assert (secret["type"], secret["description"]) == ("connection_string", "main db")


async def test_bulk_create_audits_counts_only_never_values(client, api: Api, owner, team_id,
                                                          database_url):
    await post_bulk(client, api, owner, team_id,
                    {"items": [item("A", "very-secret-value"), item("1X", "other-secret")]})
    [entry] = await audit_entries(database_url, team_id, "bulk_create")
    assert entry["metadata"] == {"total": 2, "ok": 1, "failed": 1}
    assert entry["user_email"] == owner["email"]
    assert "secret-value" not in json.dumps(entry, default=str)
    assert "other-secret" not in json.dumps(entry, default=str)


async def test_bulk_create_accepts_exactly_500_items_and_rejects_501(client, api: Api, owner,
                                                                    team_id, database_url):
    await enterprise(database_url, team_id)
    resp = await post_bulk(client, api, owner, team_id,
                           {"items": [item(f"S{i}") for i in range(501)]})
    assert resp.status == 400
    assert "500" in (await resp.json())["error"]
    assert await live_secrets(database_url, team_id) == []
    resp = await post_bulk(client, api, owner, team_id,
                           {"items": [item(f"S{i}", f"value-{i}") for i in range(500)]})
    assert resp.status == 200
    assert (await resp.json())["summary"] == {"total": 500, "ok": 500, "failed": 0}
    assert len(await live_secrets(database_url, team_id)) == 500


async def test_bulk_create_rejects_a_malformed_body_as_a_whole(client, api: Api, owner, team_id,
                                                              database_url):
    url = f"/api/v1/teams/{team_id}/secrets/bulk"
    for data in (b"{not json", b"[]", b'{"items": {"name": "A"}}', b'{"items": "A"}', b"{}"):
        resp = await client.post(url, data=data, headers={**api.auth(owner["token"]),
                                                          "Content-Type": "application/json"})
        assert resp.status == 400, data
        assert list(await resp.json()) == ["error"]
    assert await live_secrets(database_url, team_id) == []


async def test_bulk_create_with_no_items_is_an_empty_result(client, api: Api, owner, team_id):
    resp = await post_bulk(client, api, owner, team_id, {"items": []})
    assert await resp.json() == {"results": [], "summary": {"total": 0, "ok": 0, "failed": 0}}


async def test_bulk_create_needs_member_role_and_hides_other_teams(client, api: Api, owner, team_id,
                                                                  database_url):
    viewer = await api.register("viewer_user")
    await api.add_member(owner, team_id, viewer, "Viewer")
    resp = await post_bulk(client, api, viewer, team_id, {"items": [item("A")]})
    assert resp.status == 403
    stranger = await api.register("stranger")
    resp = await post_bulk(client, api, stranger, team_id, {"items": [item("A")]})
    assert resp.status == 404
    member = await api.register("member_user")
    await api.add_member(owner, team_id, member, "Member")
    resp = await post_bulk(client, api, member, team_id, {"items": [item("A")]})
    assert resp.status == 200
    assert [s["name"] for s in await live_secrets(database_url, team_id)] == ["A"]


async def test_bulk_routes_do_not_fall_through_to_single_secret_routes(client, api: Api, owner, team_id):
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/bulk", headers=api.auth(owner["token"]))
    assert resp.status in (404, 405)
    resp = await client.delete(f"/api/v1/teams/{team_id}/secrets/bulk", json={"ids": []},
                               headers=api.auth(owner["token"]))
    assert resp.status == 200
    assert await resp.json() == {"deleted": 0}


# --- .env import ------------------------------------------------------------------------------

DOTENV = (
    "\ufeff# app settings\r\n"
    "\r\n"
    "export DATABASE_URL=postgres://u:p@db/app?ssl=require\r\n"
    "API_KEY='sk_live_$NOT_EXPANDED'\r\n"
    'GREETING="Halo\\nDunia\\t\\"!\\""   # inline comment\r\n'
    "HASH_IN_VALUE=abc#def # trailing comment\r\n"
    'OPEN="never closed\r\n'
    "1BAD=x\r\n"
    "API_KEY=duplicate\r\n"
    "not a key value line\r\n"
    "EMPTY=\r\n"
    "CMD=$(whoami)\r\n"
)


async def test_import_dotenv_creates_each_parsed_line_and_reports_bad_lines(
        client, api: Api, owner, team_id, database_url):
    resp = await import_dotenv(client, api, owner, team_id, DOTENV, "staging")
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["parsed"] == 9
    assert body["summary"] == {"total": 10, "ok": 6, "failed": 4}
    by_name = {r["name"]: r for r in body["results"] if r["ok"]}
    assert set(by_name) == {"DATABASE_URL", "API_KEY", "GREETING", "HASH_IN_VALUE", "EMPTY", "CMD"}
    failed = [(r["line"], r["name"]) for r in body["results"] if not r["ok"]]
    assert failed == [(7, "OPEN"), (8, "1BAD"), (9, "API_KEY"), (10, None)]
    assert [r["index"] for r in body["results"]] == list(range(10))

    expected = {
        "DATABASE_URL": "postgres://u:p@db/app?ssl=require",
        "API_KEY": "sk_live_$NOT_EXPANDED",
        "GREETING": 'Halo\nDunia\t"!"',
        "HASH_IN_VALUE": "abc#def",
        "EMPTY": "",
        "CMD": "$(whoami)",
    }
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/export",
                            params={"format": "json", "environment": "staging"},
                            headers=api.auth(owner["token"]))
    assert await resp.json() == expected
    for name, result in by_name.items():
        assert await read_value(client, api, owner, team_id, result["id"]) == expected[name]
    assert {s["environment"] for s in await live_secrets(database_url, team_id)} == {"staging"}


async def test_import_dotenv_reports_existing_names_as_item_errors(client, api: Api, owner, team_id):
    await api.secret(owner, team_id, "A", "kept")
    resp = await import_dotenv(client, api, owner, team_id, "A=new\nB=2\n")
    body = await resp.json()
    assert [(r["name"], r["ok"]) for r in body["results"]] == [("A", False), ("B", True)]
    assert "sudah ada" in body["results"][0]["error"]


async def test_import_dotenv_audits_counts_only(client, api: Api, owner, team_id, database_url):
    await import_dotenv(client, api, owner, team_id, "A=topsecret1\nB='topsecret2\n")
    [entry] = await audit_entries(database_url, team_id, "import")
    assert entry["metadata"] == {"format": "dotenv", "environment": "production", "parsed": 2,
                                 "total": 2, "ok": 1, "failed": 1}
    assert "topsecret" not in json.dumps(entry, default=str)


async def test_import_dotenv_content_limit_is_200_kb(client, api: Api, owner, team_id, database_url):
    line = "# " + "x" * 1021 + "\n"  # 1,024 bytes
    at_limit = line * 199 + "A=" + "v" * 1021 + "\n"
    assert len(at_limit.encode()) == 204800
    resp = await import_dotenv(client, api, owner, team_id, at_limit)
    assert resp.status == 200
    assert (await resp.json())["parsed"] == 1
    resp = await import_dotenv(client, api, owner, team_id, at_limit + "B=1")
    assert resp.status == 413
    assert "200 KB" in (await resp.json())["error"]
    assert [s["name"] for s in await live_secrets(database_url, team_id)] == ["A"]


async def test_import_dotenv_rejects_more_than_500_items(client, api: Api, owner, team_id, database_url):
    await enterprise(database_url, team_id)
    resp = await import_dotenv(client, api, owner, team_id, "".join(f"K{i}=v\n" for i in range(501)))
    assert resp.status == 400
    assert await live_secrets(database_url, team_id) == []
    resp = await import_dotenv(client, api, owner, team_id, "".join(f"K{i}=v\n" for i in range(500)))
    assert (await resp.json())["summary"]["ok"] == 500


async def test_import_dotenv_rejects_bad_requests_as_a_whole(client, api: Api, owner, team_id):
    url = f"/api/v1/teams/{team_id}/secrets/bulk/import-dotenv"
    for body in ({"content": "A=1"}, {"content": "A=1", "environment": "qa"},
                 {"content": 5, "environment": "production"}, {"environment": "production"}):
        resp = await client.post(url, json=body, headers=api.auth(owner["token"]))
        assert resp.status == 400, body
    viewer = await api.register("viewer_user")
    await api.add_member(owner, team_id, viewer, "Viewer")
    resp = await import_dotenv(client, api, viewer, team_id, "A=1")
    assert resp.status == 403


# --- bulk delete ------------------------------------------------------------------------------

async def other_team_secret(client, api: Api) -> tuple[dict, str, str]:
    other = await api.register("other_owner")
    other_team = await api.team(other, "other-team")
    secret_id = await api.secret(other, other_team, "FOREIGN", "theirs")
    return other, other_team, secret_id


async def test_bulk_delete_soft_deletes_own_ids_and_skips_foreign_and_malformed_ids(
        client, api: Api, owner, team_id, database_url):
    a = await api.secret(owner, team_id, "A", "1")
    b = await api.secret(owner, team_id, "B", "2")
    keep = await api.secret(owner, team_id, "KEEP", "3")
    other, other_team, foreign = await other_team_secret(client, api)
    resp = await client.delete(
        f"/api/v1/teams/{team_id}/secrets/bulk", headers=api.auth(owner["token"]),
        json={"ids": [a, foreign, "not-a-uuid", "00000000-0000-0000-0000-000000000000", b, a]})
    assert resp.status == 200
    assert await resp.json() == {"deleted": 2}
    assert [s["id"] for s in await live_secrets(database_url, team_id)] == [keep]
    assert await read_value(client, api, other, other_team, foreign) == "theirs"
    [entry] = await audit_entries(database_url, team_id, "bulk_delete")
    assert entry["metadata"] == {"requested": 6, "deleted": 2}
    assert await audit_entries(database_url, other_team, "bulk_delete") == []


async def test_bulk_delete_needs_admin(client, api: Api, owner, team_id, database_url):
    a = await api.secret(owner, team_id, "A", "1")
    member = await api.register("member_user")
    await api.add_member(owner, team_id, member, "Member")
    resp = await client.delete(f"/api/v1/teams/{team_id}/secrets/bulk",
                               headers=api.auth(member["token"]), json={"ids": [a]})
    assert resp.status == 403
    admin = await api.register("admin_user")
    await api.add_member(owner, team_id, admin, "Admin")
    resp = await client.delete(f"/api/v1/teams/{team_id}/secrets/bulk",
                               headers=api.auth(admin["token"]), json={"ids": [a]})
    assert await resp.json() == {"deleted": 1}


async def test_bulk_delete_rejects_a_malformed_body(client, api: Api, owner, team_id, database_url):
    a = await api.secret(owner, team_id, "A", "1")
    url = f"/api/v1/teams/{team_id}/secrets/bulk"
    for body in ({}, {"ids": a}, {"ids": [a, 5]}, {"ids": [a] * 501}):
        resp = await client.delete(url, headers=api.auth(owner["token"]), json=body)
        assert resp.status == 400, body
    assert len(await live_secrets(database_url, team_id)) == 1


# --- bulk move-env ----------------------------------------------------------------------------

async def test_bulk_move_env_moves_items_and_reports_name_clashes_and_foreign_ids(
        client, api: Api, owner, team_id, database_url):
    a = await api.secret(owner, team_id, "A", "1", "development")
    clash = await api.secret(owner, team_id, "CLASH", "dev", "development")
    await api.secret(owner, team_id, "CLASH", "staging value", "staging")
    already = await api.secret(owner, team_id, "ALREADY", "s", "staging")
    other, other_team, foreign = await other_team_secret(client, api)
    ids = [a, clash, foreign, "nope", already]
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets/bulk/move-env",
                             headers=api.auth(owner["token"]),
                             json={"ids": ids, "environment": "staging"})
    assert resp.status == 200
    body = await resp.json()
    assert body["summary"] == {"total": 5, "ok": 2, "failed": 3}
    results = body["results"]
    assert [(r["index"], r["id"], r["name"], r["ok"]) for r in results] == [
        (0, a, "A", True), (1, clash, "CLASH", False), (2, foreign, None, False),
        (3, "nope", None, False), (4, already, "ALREADY", True)]
    assert "sudah ada" in results[1]["error"]
    assert results[2]["error"] == results[3]["error"] == "Secret tidak ditemukan"

    stored = {(s["name"], s["environment"]) for s in await live_secrets(database_url, team_id)}
    assert stored == {("A", "staging"), ("CLASH", "development"), ("CLASH", "staging"),
                      ("ALREADY", "staging")}
    assert await read_value(client, api, owner, team_id, a) == "1"
    resp = await client.get(f"/api/v1/teams/{other_team}/secrets/{foreign}", headers=api.auth(other["token"]))
    assert (await resp.json())["secret"]["environment"] == "production"
    [entry] = await audit_entries(database_url, team_id, "move_env")
    assert entry["metadata"] == {"environment": "staging", "total": 5, "ok": 2, "failed": 3}


async def test_bulk_move_env_two_items_with_one_name_move_only_the_first(client, api: Api, owner,
                                                                       team_id, database_url):
    dev = await api.secret(owner, team_id, "A", "dev", "development")
    stg = await api.secret(owner, team_id, "A", "stg", "staging")
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets/bulk/move-env",
                             headers=api.auth(owner["token"]),
                             json={"ids": [dev, stg], "environment": "production"})
    assert [r["ok"] for r in (await resp.json())["results"]] == [True, False]
    assert {(s["id"], s["environment"]) for s in await live_secrets(database_url, team_id)} == {
        (dev, "production"), (stg, "staging")}


async def test_bulk_move_env_needs_member_and_a_valid_target(client, api: Api, owner, team_id,
                                                            database_url):
    a = await api.secret(owner, team_id, "A", "1")
    url = f"/api/v1/teams/{team_id}/secrets/bulk/move-env"
    for body in ({"ids": [a]}, {"ids": [a], "environment": "qa"}, {"environment": "staging"},
                 {"ids": [a] * 501, "environment": "staging"}):
        resp = await client.post(url, headers=api.auth(owner["token"]), json=body)
        assert resp.status == 400, body
    viewer = await api.register("viewer_user")
    await api.add_member(owner, team_id, viewer, "Viewer")
    resp = await client.post(url, headers=api.auth(viewer["token"]),
                             json={"ids": [a], "environment": "staging"})
    assert resp.status == 403
    assert (await live_secrets(database_url, team_id))[0]["environment"] == "production"
