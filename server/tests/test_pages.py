"""The share-link page that share URLs point at: static, token-free, and it consumes no view."""

import contextlib
import logging
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from cvsm_server.web.accesslog import RedactingAccessLogger
from cvsm_server.runtime.app import create_app

from conftest import Api
from test_public import assert_security_headers


async def create_share(client, api: Api, owner, team_id, value="page-secret"):
    sid = await api.secret(owner, team_id, "PAGE", value)
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets/{sid}/shares", headers=api.auth(owner["token"]),
                             json={"max_views": 1, "ttl_hours": 1})
    assert resp.status == 201
    return (await resp.json())["url"]


async def test_share_url_opens_a_page_that_consumes_no_view(client, api: Api, owner, team_id):
    url = await create_share(client, api, owner, team_id)
    assert url.startswith("https://cvsm.test/share/shr_")
    path = urlsplit(url).path
    token = path.rsplit("/", 1)[1]
    for _ in range(3):  # e.g. a chat app previewing the link
        page = await client.get(path)
        assert page.status == 200
        assert page.content_type == "text/html"
        html = await page.text()
        assert token not in html and "page-secret" not in html
        assert '<script src="/static/share.js">' in html
        assert_security_headers(page)
        assert page.headers["Cache-Control"] == "no-store"
        csp = page.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    view = await client.get(f"/api/v1/public/share/{token}")
    assert view.status == 200 and (await view.json())["value"] == "page-secret"


async def test_page_script_reveals_through_the_public_api_as_text(client):
    script = await client.get("/static/share.js")
    assert script.status == 200
    assert_security_headers(script)
    body = await script.text()
    assert '"/api/v1/public/share/"' in body
    assert "textContent = value" in body and "innerHTML" not in body
    style = await client.get("/static/share.css")
    assert style.status == 200
    assert_security_headers(style)


async def test_missing_static_file_is_a_json_404_with_headers(client):
    resp = await client.get("/static/nope.js")
    assert resp.status == 404
    assert "error" in await resp.json()
    assert_security_headers(resp)


@contextlib.asynccontextmanager
async def serving_like_the_cli(settings):
    """The app on a real socket with the access logger `cvsm-server serve` uses."""
    runner = web.AppRunner(create_app(settings), access_log_class=RedactingAccessLogger)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def test_access_log_never_holds_a_share_token(make_settings, caplog):
    async with serving_like_the_cli(make_settings()) as base:
        async with aiohttp.ClientSession() as session:
            token = "shr_" + "A" * 43
            with caplog.at_level(logging.INFO, logger="aiohttp.access"):
                async with session.get(f"{base}/share/{token}") as resp:
                    assert resp.status == 200
                async with session.get(f"{base}/api/v1/public/share/{token}") as resp:
                    assert resp.status == 404
    lines = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    assert len(lines) == 2
    assert all(token not in line and "shr_[redacted]" in line for line in lines)
    assert '"GET /share/shr_[redacted]" 200' in lines[0]
