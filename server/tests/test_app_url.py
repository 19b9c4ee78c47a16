"""Share links point at the server that made them: with `CVSM_APP_URL` unset, at the address
`cvsm-server serve` listens on (not a fixed localhost:8080); set, at that value."""

from __future__ import annotations

import json
import urllib.request
import uuid
from typing import Any

import pytest

from cvsm_server.runtime.serve import listen_url
from cvsm_server.core.config import Settings
from conftest import Api
from serving import served


def call(method: str, url: str, body: dict | None = None, token: str | None = None) -> Any:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())


def make_share(base: str) -> str:
    api = f"{base}/api/v1"
    name = f"u_{uuid.uuid4().hex[:10]}"
    token = call("POST", f"{api}/auth/register", {"email": f"{name}@example.com", "username": name,
                                                  "password": "correct horse 1", "name": "U"})["token"]
    team = call("POST", f"{api}/teams", {"name": "T", "slug": name.replace("_", "-")}, token)["team"]["id"]
    secret = call("POST", f"{api}/teams/{team}/secrets",
                  {"name": "K", "value": "v", "environment": "production"}, token)["secret"]["id"]
    return call("POST", f"{api}/teams/{team}/secrets/{secret}/shares", {}, token)["url"]


def test_unset_app_url_gives_share_links_on_the_address_served(database_url, tmp_path):
    with served(database_url, tmp_path, CVSM_APP_URL="") as server:
        port = int(server.url.rsplit(":", 1)[1])
        assert server.url == f"http://127.0.0.1:{port}"
        url = make_share(server.url)
        assert url.startswith(f"http://127.0.0.1:{port}/share/shr_"), url
        assert server.share_base == server.url
        # the link opens the share page on this very server
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.status == 200


def test_a_set_app_url_is_kept(database_url, tmp_path):
    with served(database_url, tmp_path, CVSM_APP_URL="https://secrets.example.com/") as server:
        assert make_share(server.url).startswith("https://secrets.example.com/share/shr_")
        assert server.share_base == "https://secrets.example.com"


@pytest.mark.parametrize(("host", "url"), [
    ("127.0.0.1", "http://127.0.0.1:18300"),
    ("localhost", "http://localhost:18300"),
    ("0.0.0.0", "http://localhost:18300"),
    ("::", "http://localhost:18300"),
    ("::1", "http://[::1]:18300"),
    ("cvsm.internal", "http://cvsm.internal:18300"),
])
def test_listen_url(host, url):
    assert listen_url(host, 18300) == url


def test_app_url_is_optional():
    assert Settings.from_env({}).app_url is None
    assert Settings.from_env({"CVSM_APP_URL": "https://x.test/"}).app_url == "https://x.test"


async def test_without_the_cli_share_links_use_the_request_origin(make_settings, start_client):
    client = await start_client(make_settings(app_url=""))
    api = Api(client)
    user = await api.register()
    team = await api.team(user)
    secret = await api.secret(user, team, "K", "v")
    resp = await client.post(f"/api/v1/teams/{team}/secrets/{secret}/shares", headers=api.auth(user["token"]))
    url = (await resp.json())["url"]
    assert url.startswith(f"http://{client.host}:{client.port}/share/shr_"), url
