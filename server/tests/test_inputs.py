"""Text PostgreSQL cannot store (NUL) or UTF-8 cannot encode (lone surrogates) is a 400 on every
endpoint that takes free text, never a 500; a secret value may hold NUL (it is stored encrypted)."""

import pytest

from conftest import Api


@pytest.mark.parametrize("bad", ["a\u0000b", "\ud800", "x\udfffy"])
async def test_unstorable_text_is_400_everywhere(client, api: Api, owner, team_id, bad):
    h = api.auth(owner["token"])
    sid = await api.secret(owner, team_id, "TARGET", "v")
    secrets = f"/api/v1/teams/{team_id}/secrets"
    attempts = {
        "create description": lambda: client.post(secrets, headers=h, json={
            "name": "A", "value": "v", "environment": "production", "description": bad}),
        "update description": lambda: client.put(f"{secrets}/{sid}", headers=h, json={"description": bad}),
        "login identifier": lambda: client.post("/api/v1/auth/login", json={"identifier": bad, "password": "x"}),
        "login password": lambda: client.post("/api/v1/auth/login", json={"identifier": "owner_user", "password": bad}),
        "team name": lambda: client.post("/api/v1/teams", headers=h, json={"name": bad, "slug": "abc-def"}),
        "token name": lambda: client.post("/api/v1/tokens", headers=h, json={"name": bad}),
        "allowed_ips": lambda: client.post("/api/v1/tokens", headers=h, json={"name": "n", "allowed_ips": [bad]}),
        "register email": lambda: client.post("/api/v1/auth/register", json={
            "email": f"x{bad}@a.co", "username": "zzz", "password": "password1", "name": "n"}),
        "register name": lambda: client.post("/api/v1/auth/register", json={
            "email": "y@a.co", "username": "yyy", "password": "password1", "name": bad}),
        "member identifier": lambda: client.post(f"/api/v1/teams/{team_id}/members", headers=h,
                                         json={"identifier": bad, "role": "Viewer"}),
    }
    if "\x00" in bad:  # a surrogate cannot travel in a URL at all
        attempts["search"] = lambda: client.get(secrets, headers=h, params={"search": bad})
    else:  # NUL is fine in .env content: values are stored encrypted
        attempts["dotenv content"] = lambda: client.post(f"{secrets}/bulk/import-dotenv", headers=h,
                                                         json={"content": f"A={bad}", "environment": "staging"})
    for what, request in attempts.items():
        resp = await request()
        assert resp.status == 400, what
        assert list(await resp.json()) == ["error"], what


async def test_secret_value_may_hold_nul_but_not_a_lone_surrogate(client, api: Api, owner, team_id):
    sid = await api.secret(owner, team_id, "NUL_INSIDE", "a\u0000b")
    body = await (await client.get(f"/api/v1/teams/{team_id}/secrets/{sid}", headers=api.auth(owner["token"]))).json()
    assert body["value"] == "a\u0000b"
    imported = await client.post(f"/api/v1/teams/{team_id}/secrets/bulk/import-dotenv",
                                 headers=api.auth(owner["token"]),
                                 json={"content": "FROM_FILE=\"x\u0000y\"\n", "environment": "staging"})
    assert imported.status == 200 and (await imported.json())["summary"]["ok"] == 1
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets", headers=api.auth(owner["token"]),
                             json={"name": "SURR", "value": "\ud800", "environment": "production"})
    assert resp.status == 400


async def test_an_integer_field_takes_a_number_with_a_zero_fraction(client, api: Api, owner,
                                                                    team_id, database_url):
    """JSON has one number type and JSON Schema's "integer" takes 24.0: so does the server
    (the OpenAPI document says integer); a real fraction is still refused."""
    from test_admin import make_admin
    h = api.auth(owner["token"])
    sid = await api.secret(owner, team_id, "SHARED", "v")
    shares = f"/api/v1/teams/{team_id}/secrets/{sid}/shares"
    resp = await client.post(shares, headers=h, json={"ttl_hours": 24.0, "max_views": 2.0})
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["share"]["max_views"] == 2
    resp = await client.post(shares, headers=h, json={"ttl_hours": 24.5})
    assert resp.status == 400
    await make_admin(database_url, owner)
    resp = await client.patch(f"/api/v1/admin/teams/{team_id}", headers=h,
                              json={"plan": "enterprise", "max_members": 30.0})
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["team"]["max_members"] == 30
    resp = await client.patch(f"/api/v1/admin/teams/{team_id}", headers=h,
                              json={"plan": "enterprise", "max_members": 30.5})
    assert resp.status == 400


async def test_an_optional_field_sent_as_null_is_left_out(client, api: Api, owner, team_id):
    """What the OpenAPI document says of every optional body field (`type: [..., "null"]`)."""
    resp = await client.post("/api/v1/auth/register", json={
        "email": "nulls@example.com", "username": "nulls", "password": "password99",
        "name": "Nulls", "newsletter_opt_in": None})
    assert resp.status == 201
    h = api.auth(owner["token"])
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets", headers=h, json={
        "name": "NULLS", "value": "v", "environment": "staging", "type": None,
        "description": None})
    assert resp.status == 201
    secret = (await resp.json())["secret"]
    assert (secret["type"], secret["description"]) == ("credential", "")
