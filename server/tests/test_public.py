"""Public endpoints and the headers every response carries."""

from conftest import Api

SECURITY = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Strict-Transport-Security": "max-age=63072000; includeSubDomains",
}


def assert_security_headers(resp) -> None:
    for name, value in SECURITY.items():
        assert resp.headers.get(name) == value, name
    policy = resp.headers["Permissions-Policy"]
    for feature in ("camera", "microphone", "geolocation", "payment", "usb"):
        assert f"{feature}=()" in policy
    assert "Server" not in resp.headers
    assert "X-Powered-By" not in resp.headers


async def test_health_reports_ok_and_version(client):
    resp = await client.get("/api/v1/health")
    assert resp.status == 200
    assert await resp.json() == {"status": "ok", "version": "0.4.0"}
    assert_security_headers(resp)


async def test_stats_counts_teams_and_live_secrets(client, api: Api, owner, team_id):
    secret_id = await api.secret(owner, team_id, "A", "1")
    await api.secret(owner, team_id, "B", "2")
    await client.delete(f"/api/v1/teams/{team_id}/secrets/{secret_id}", headers=api.auth(owner["token"]))
    resp = await client.get("/api/v1/public/stats")
    assert await resp.json() == {"teams": 1, "secrets": 1}


async def test_error_responses_carry_security_headers_and_json_body(client):
    for resp in (await client.get("/api/v1/me"), await client.get("/nowhere"),
                 await client.post("/api/v1/auth/login", data=b"{not json")):
        assert resp.status in (400, 401, 404)
        assert list((await resp.json()).keys()) == ["error"]
        assert_security_headers(resp)


async def test_wrong_method_is_405_json(client):
    resp = await client.put("/api/v1/health")
    assert resp.status == 405
    assert "error" in await resp.json()
    assert_security_headers(resp)
