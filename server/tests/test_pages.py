"""The share-link page that share URLs point at: static, token-free, and it consumes no view."""

from urllib.parse import urlsplit

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
    assert "textContent = share.value" in body and "innerHTML" not in body
    style = await client.get("/static/share.css")
    assert style.status == 200
    assert_security_headers(style)


async def test_missing_static_file_is_a_json_404_with_headers(client):
    resp = await client.get("/static/nope.js")
    assert resp.status == 404
    assert "error" in await resp.json()
    assert_security_headers(resp)
