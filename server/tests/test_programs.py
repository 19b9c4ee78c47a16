"""Programs' access (contract, "Beyond 0.3.0"): team slugs in paths, the read by name, and
scoped API tokens whose scope no route can widen."""

from __future__ import annotations

import pytest

from conftest import Api, query


def auth(token: str) -> dict[str, str]:
    return Api.auth(token)


async def test_every_team_path_takes_the_slug_as_well_as_the_id(client, api: Api, owner, team_id):
    h = auth(owner["token"])
    created = await client.post("/api/v1/teams/acme/secrets", headers=h,
                                json={"name": "DB_URL", "value": "pg://x", "environment": "production"})
    assert created.status == 201
    secret_id = (await created.json())["secret"]["id"]
    for ref in ("acme", team_id):
        assert (await client.get(f"/api/v1/teams/{ref}", headers=h)).status == 200
        read = await client.get(f"/api/v1/teams/{ref}/secrets/{secret_id}", headers=h)
        assert (await read.json())["value"] == "pg://x"
        assert (await client.get(f"/api/v1/teams/{ref}/members", headers=h)).status == 200
        export = await client.get(f"/api/v1/teams/{ref}/secrets/export?format=json", headers=h)
        assert await export.json() == {"DB_URL": "pg://x"}


async def test_a_slug_that_is_not_the_callers_is_a_404_like_an_unknown_one(client, api: Api, owner, team_id):
    stranger = await api.register("stranger")
    for slug in ("acme", "no-such-team", "BAD SLUG", "a"):
        resp = await client.get(f"/api/v1/teams/{slug}/secrets", headers=auth(stranger["token"]))
        assert resp.status == 404


@pytest.mark.parametrize("slug", ["12345678-1234-1234-1234-123456789abc", "12345678123456781234567812345678"])
async def test_a_slug_shaped_like_an_id_is_refused(client, api: Api, owner, slug):
    resp = await client.post("/api/v1/teams", headers=auth(owner["token"]), json={"name": "X", "slug": slug})
    assert resp.status == 400


async def test_read_by_name_is_exact_audited_and_defaults_to_production(client, api: Api, owner, team_id,
                                                                        database_url):
    h = auth(owner["token"])
    await api.secret(owner, team_id, "API_KEY", "prod-value")
    await api.secret(owner, team_id, "API_KEY", "stage-value", environment="staging")
    url = "/api/v1/teams/acme/secrets/by-name"
    body = await (await client.get(f"{url}/API_KEY", headers=h)).json()
    assert body["value"] == "prod-value" and body["secret"]["environment"] == "production"
    body = await (await client.get(f"{url}/API_KEY?environment=staging", headers=h)).json()
    assert body["value"] == "stage-value"
    for path in ("api_key", "MISSING", "1BAD", "API_KEY?environment=development"):
        assert (await client.get(f"{url}/{path}", headers=h)).status == 404, path
    assert (await client.get(f"{url}/API_KEY?environment=prod", headers=h)).status == 400
    reads = await query(database_url, "SELECT metadata FROM audit_logs WHERE action = 'read' ORDER BY created_at")
    assert [r["metadata"]["environment"] for r in reads] == ["production", "staging"]


async def test_read_by_name_counts_its_rate_limit_in_its_statement(make_settings, start_client):
    client = await start_client(make_settings(ratelimit_api="3/60"))
    api = Api(client)
    owner = await api.register("limited")
    team = await api.team(owner, "lim")  # 1
    await api.secret(owner, team, "A", "1")  # 2
    url = f"/api/v1/teams/{team}/secrets/by-name/A"
    assert (await client.get(url, headers=auth(owner["token"]))).status == 200  # 3
    resp = await client.get(url, headers=auth(owner["token"]))
    assert resp.status == 429 and int(resp.headers["Retry-After"]) >= 1


@pytest.fixture
async def two_teams(client, api: Api, owner, team_id):
    other = await api.team(owner, "other-team")
    prod = await api.secret(owner, team_id, "DB_URL", "prod")
    stage = await api.secret(owner, team_id, "DB_URL", "stage", environment="staging")
    await api.secret(owner, other, "ELSEWHERE", "x")
    return {"acme": team_id, "other": other, "prod": prod, "stage": stage}


async def test_a_token_bound_to_a_team_sees_no_other_team(client, api: Api, owner, two_teams):
    created = await api.api_token(owner, team_id="acme")
    assert created["api_token"]["team_id"] == two_teams["acme"]
    h = auth(created["token"])
    teams = await (await client.get("/api/v1/teams", headers=h)).json()
    assert [t["slug"] for t in teams["teams"]] == ["acme"]
    other = two_teams["other"]
    for path in (f"/api/v1/teams/{other}", f"/api/v1/teams/{other}/secrets",
                 f"/api/v1/teams/{other}/secrets/export", "/api/v1/teams/other-team/secrets/by-name/ELSEWHERE"):
        assert (await client.get(path, headers=h)).status == 404, path
    assert (await client.get("/api/v1/teams/acme/secrets", headers=h)).status == 200


async def test_a_token_limited_to_environments_is_filtered_on_reads_and_refused_on_writes(
        client, api: Api, owner, two_teams):
    created = await api.api_token(owner, environments=["staging"])
    assert created["api_token"]["environments"] == ["staging"] and created["api_token"]["read_only"] is False
    h = auth(created["token"])
    base = "/api/v1/teams/acme/secrets"
    listing = await (await client.get(base, headers=h)).json()
    assert [(s["name"], s["environment"]) for s in listing["secrets"]] == [("DB_URL", "staging")]
    assert listing["total"] == 1
    assert await (await client.get(f"{base}/export?format=json", headers=h)).json() == {"DB_URL": "stage"}
    assert await (await client.get(f"{base}/export?format=json&environment=production",
                                   headers=h)).json() == {}
    assert (await client.get(f"{base}/{two_teams['prod']}", headers=h)).status == 404
    assert (await client.get(f"{base}/by-name/DB_URL", headers=h)).status == 404
    assert (await client.get(f"{base}/{two_teams['prod']}/versions", headers=h)).status == 404
    assert (await client.get(f"{base}/by-name/DB_URL?environment=staging", headers=h)).status == 200
    prod, stage = two_teams["prod"], two_teams["stage"]
    writes = [
        ("POST", base, {"name": "NEW", "value": "v", "environment": "production"}),
        ("PUT", f"{base}/{prod}", {"value": "changed"}),
        ("PUT", f"{base}/{stage}", {"environment": "production"}),
        ("DELETE", f"{base}/{prod}", None),
        ("POST", f"{base}/{prod}/rollback", {"version": 1}),
        ("POST", f"{base}/{prod}/shares", {}),
        ("POST", f"{base}/bulk", {"items": [{"name": "B", "value": "v", "environment": "production"}]}),
        ("POST", f"{base}/bulk/import-dotenv", {"content": "C=1\n", "environment": "production"}),
        ("POST", f"{base}/bulk/move-env", {"ids": [stage], "environment": "production"}),
        ("DELETE", f"{base}/bulk", {"ids": [prod, stage]}),
    ]
    for method, path, body in writes:
        resp = await client.request(method, path, headers=h, json=body)
        assert resp.status == 403, (method, path, resp.status)
    ok = await client.post(base, headers=h, json={"name": "NEW", "value": "v", "environment": "staging"})
    assert ok.status == 201
    listing = await (await client.get(base, headers=auth(owner["token"]))).json()
    assert sorted((s["name"], s["environment"]) for s in listing["secrets"]) == [
        ("DB_URL", "production"), ("DB_URL", "staging"), ("NEW", "staging")]


async def test_a_read_only_token_reads_and_every_write_is_a_403(client, api: Api, owner, two_teams):
    h = auth((await api.api_token(owner, read_only=True))["token"])
    base = "/api/v1/teams/acme/secrets"
    prod = two_teams["prod"]
    assert (await client.get(f"{base}/{prod}", headers=h)).status == 200
    assert (await client.get(f"{base}/export", headers=h)).status == 200
    assert (await client.get("/api/v1/teams/acme/audit", headers=h)).status == 200
    member = await api.register("member_m")
    writes = [
        ("POST", base, {"name": "NEW", "value": "v", "environment": "production"}),
        ("PUT", f"{base}/{prod}", {"value": "changed"}),
        ("DELETE", f"{base}/{prod}", None),
        ("POST", f"{base}/{prod}/rollback", {"version": 1}),
        ("POST", f"{base}/{prod}/shares", {}),
        ("POST", f"{base}/bulk", {"items": []}),
        ("POST", f"{base}/bulk/import-dotenv", {"content": "", "environment": "staging"}),
        ("POST", f"{base}/bulk/move-env", {"ids": [prod], "environment": "staging"}),
        ("DELETE", f"{base}/bulk", {"ids": [prod]}),
        ("POST", "/api/v1/teams/acme/members", {"identifier": "member_m", "role": "Viewer"}),
        ("DELETE", f"/api/v1/teams/acme/members/{owner['id']}", None),
        ("POST", "/api/v1/teams", {"name": "New", "slug": "new-team"}),
        ("DELETE", "/api/v1/teams/acme", None),
    ]
    for method, path, body in writes:
        resp = await client.request(method, path, headers=h, json=body)
        assert resp.status == 403, (method, path, resp.status)
    assert member  # the member was never added
    members = await (await client.get("/api/v1/teams/acme/members", headers=auth(owner["token"]))).json()
    assert [m["username"] for m in members["members"]] == ["owner_user"]


async def test_scope_cannot_be_widened_through_tokens_or_teams(client, api: Api, owner, team_id):
    h = auth((await api.api_token(owner, team_id="acme", environments=["staging"]))["token"])
    assert (await client.post("/api/v1/tokens", headers=h, json={"name": "wider"})).status == 403
    assert (await client.post("/api/v1/teams", headers=h, json={"name": "N", "slug": "mine-now"})).status == 403


async def test_scoped_token_creation_rules(client, api: Api, owner, team_id):
    h = auth(owner["token"])
    stranger = await api.register("stranger_s")
    foreign = await api.team(stranger, "foreign")
    for body in ({"team_id": foreign}, {"team_id": "foreign"}, {"team_id": "nope-nope"}):
        resp = await client.post("/api/v1/tokens", headers=h, json={"name": "x", **body})
        assert resp.status == 404, body
    for body in ({"environments": []}, {"environments": ["prod"]}, {"environments": "staging"},
                 {"read_only": "yes"}):
        resp = await client.post("/api/v1/tokens", headers=h, json={"name": "x", **body})
        assert resp.status == 400, body
    listed = await (await client.get("/api/v1/tokens", headers=h)).json()
    assert listed["tokens"] == []
    full = await api.api_token(owner)
    assert (full["api_token"]["team_id"], full["api_token"]["environments"],
            full["api_token"]["read_only"]) == (None, None, False)


async def test_a_team_bound_token_dies_with_its_team(client, api: Api, owner, team_id):
    token = (await api.api_token(owner, team_id=team_id))["token"]
    assert (await client.get("/api/v1/me", headers=auth(token))).status == 200
    assert (await client.delete(f"/api/v1/teams/{team_id}", headers=auth(owner["token"]))).status == 200
    assert (await client.get("/api/v1/me", headers=auth(token))).status == 401
