"""CORS from CVSM_CORS_ORIGINS, and the production wildcard warning."""

import logging

from cvsm_server.runtime.app import create_app


async def test_allowed_origin_gets_cors_headers_and_others_do_not(make_settings, start_client):
    client = await start_client(make_settings(cors_origins="https://app.example.com, https://other.example"))
    ok = await client.get("/api/v1/health", headers={"Origin": "https://app.example.com"})
    assert ok.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert ok.headers["Vary"] == "Origin"
    # what a browser's script may read: Retry-After, the request id, the export's e2e mark
    assert {h.strip() for h in ok.headers["Access-Control-Expose-Headers"].split(",")} == {
        "Retry-After", "X-Request-Id", "Cvsm-E2E"}
    evil = await client.get("/api/v1/health", headers={"Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in evil.headers


async def test_preflight_is_answered_before_authentication(make_settings, start_client):
    client = await start_client(make_settings(cors_origins="https://app.example.com"))
    resp = await client.options("/api/v1/teams", headers={
        "Origin": "https://app.example.com", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert resp.status == 204
    assert "POST" in resp.headers["Access-Control-Allow-Methods"]
    assert "Authorization" in resp.headers["Access-Control-Allow-Headers"]
    assert resp.headers["X-Frame-Options"] == "DENY"


async def test_errors_carry_cors_headers_for_allowed_origins(make_settings, start_client):
    client = await start_client(make_settings(cors_origins="https://app.example.com"))
    resp = await client.get("/api/v1/me", headers={"Origin": "https://app.example.com"})
    assert resp.status == 401
    assert resp.headers["Access-Control-Allow-Origin"] == "https://app.example.com"


def test_wildcard_origin_in_production_logs_a_warning(make_settings, caplog):
    with caplog.at_level(logging.WARNING, logger="cvsm.app"):
        create_app(make_settings(cors_origins="*", env="production"))
    assert any("CVSM_CORS_ORIGINS" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cvsm.app"):
        create_app(make_settings(cors_origins="*", env="development"))
    assert not caplog.records
