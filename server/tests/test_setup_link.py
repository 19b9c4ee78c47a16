"""The first administrator of a fresh install: a one-time setup link printed on the terminal
(stderr, once per start, once under `--workers`), never in the access log; the signed-in account
that confirms on it becomes admin, audited; it works once, not after its expiry, not with a
wrong token, not without the form's CSRF token, and not once anyone is admin."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest
from aiohttp.test_utils import TestClient

from cvsm_server.accounts import setup_link

from conftest import Api, query, server_url
from test_admin import operator
from test_workers import environment, serving

LINK = re.compile(r"(https?://\S+)/setup\?token=([A-Za-z0-9_-]+)")
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def printed_links(text: str) -> list[str]:
    return [token for _, token in LINK.findall(text)]


def sign_in_as(client: TestClient, user: dict) -> None:
    client.session.cookie_jar.update_cookies({"cvsm_session": user["token"]})


async def confirm(client: TestClient, user: dict, token: str,
                  usable: bool = True) -> tuple[int, str, str]:
    """Open the link signed in as `user` and press its button: (status, Location, page). A link
    that no longer works (not `usable`) says so with no button: the form is posted anyway."""
    client.session.cookie_jar.clear()
    sign_in_as(client, user)
    page = await client.get(f"/setup?token={token}")
    html = await page.text()
    if usable:
        assert page.status == 200 and "Jadikan akun ini admin" in html and user["email"] in html
    else:
        assert page.status == 400 and setup_link.SETUP_INVALID in html
        assert "Jadikan akun ini admin" not in html and 'name="token"' not in html
        html = await (await client.get("/app/account")).text()  # the session's CSRF token
    resp = await client.post("/setup", data={"csrf": CSRF.search(html).group(1), "token": token},
                             allow_redirects=False)
    return resp.status, resp.headers.get("Location", ""), await resp.text()


async def is_admin(database_url: str, user: dict) -> bool:
    [row] = await query(database_url, "SELECT is_admin FROM users WHERE id = %s", (user["id"],))
    return row["is_admin"]


async def start_printing(start_client, make_settings, capsys) -> tuple[TestClient, list[str]]:
    """An app that runs the background jobs (so it may print a link), and what it printed."""
    client = await start_client(make_settings(background_jobs="on"))
    return client, printed_links(capsys.readouterr().err)


async def test_the_setup_link_makes_the_signed_in_opener_admin_once_and_is_audited(
        database_url: str, start_client, make_settings, capsys: pytest.CaptureFixture[str]) -> None:
    client, [token] = await start_printing(start_client, make_settings, capsys)
    api = Api(client)
    first, second = await api.register("first_admin"), await api.register("too_late")

    signed_out = await client.get(f"/setup?token={token}")
    html = await signed_out.text()
    assert signed_out.status == 200 and 'href="/signin?next=%2Fsetup%3Ftoken%3D' in html
    assert "Jadikan akun ini admin" not in html  # opening the link changes nothing

    client.session.cookie_jar.clear()
    sign_in_as(client, first)
    page = await (await client.get(f"/setup?token={token}")).text()
    no_csrf = await client.post("/setup", data={"token": token}, allow_redirects=False)
    assert no_csrf.status == 403 and not await is_admin(database_url, first)
    wrong = await client.post("/setup", data={"csrf": CSRF.search(page).group(1),
                                              "token": token[:-4] + "AAAA"}, allow_redirects=False)
    assert wrong.status == 400 and setup_link.SETUP_INVALID in await wrong.text()
    assert not await is_admin(database_url, first)

    status, location, _ = await confirm(client, first, token)
    assert (status, location) == (303, "/app/admin/users")  # said by a flash message
    assert await is_admin(database_url, first)
    # The app's URL is https here, so the jar keeps the (Secure) flash cookie but sends it over
    # this plain-http test connection only when asked, as a browser on https would.
    flash = {c.key: c.value for c in client.session.cookie_jar}["cvsm_flash"]
    panel = await client.get(location, cookies={"cvsm_flash": flash})
    assert panel.status == 200 and "Akun Anda sekarang admin server ini." in await panel.text()
    rows = await query(database_url, "SELECT action, user_id, resource_id, metadata FROM audit_logs "
                                     "WHERE action = 'admin_grant'")
    assert [(str(r["user_id"]), r["resource_id"], r["metadata"]) for r in rows] == [
        (first["id"], first["id"], {"email": first["email"], "via": "setup_link"})]

    status, _, html = await confirm(client, second, token, usable=False)  # used; an admin now
    assert status == 400 and setup_link.SETUP_INVALID in html
    assert not await is_admin(database_url, second)


async def test_the_setup_link_is_refused_after_expiry_and_once_an_admin_exists(
        database_url: str, start_client, make_settings, capsys: pytest.CaptureFixture[str]) -> None:
    client, [expired] = await start_printing(start_client, make_settings, capsys)
    api = Api(client)
    user, other = await api.register("slow_opener"), await api.register("granted_elsewhere")
    await query(database_url, "UPDATE admin_setup_tokens SET expires_at = now() - interval '1 second' "
                              "RETURNING id")
    status, _, html = await confirm(client, user, expired, usable=False)
    assert status == 400 and setup_link.SETUP_INVALID in html and not await is_admin(database_url, user)

    _, [fresh] = await start_printing(start_client, make_settings, capsys)  # a restart: a new link
    assert fresh != expired
    done = await asyncio.to_thread(operator, database_url, "admin", "grant", other["email"])
    assert done.returncode == 0, done.stderr
    assert await query(database_url, "SELECT id FROM admin_setup_tokens WHERE used_at IS NULL") == []
    status, _, html = await confirm(client, user, fresh, usable=False)
    assert status == 400 and setup_link.SETUP_INVALID in html and not await is_admin(database_url, user)

    # A start of an install that has an admin prints nothing and leaves no link alive.
    _, printed = await start_printing(start_client, make_settings, capsys)
    assert printed == []
    stored = await query(database_url, "SELECT count(*) AS n FROM admin_setup_tokens WHERE used_at IS NULL")
    assert stored == [{"n": 0}]
    assert all(fresh not in str(row) for row in await query(database_url, "SELECT * FROM admin_setup_tokens"))


def test_serve_with_workers_prints_one_link_on_stderr_and_the_access_log_never_has_it(
        database_url: str, tmp_path: Path) -> None:
    environ = environment(tmp_path / "data", CVSM_DATABASE_URL=server_url(database_url),
                          CVSM_MIGRATION_DATABASE_URL=database_url)
    with serving(["--workers", "2"], environ, tmp_path / "serve.log") as server:
        [token] = printed_links(server.output())
        base = LINK.search(server.output()).group(1)
        assert base == server.url  # the address served, as share links
        with httpx.Client(base_url=server.url, timeout=30, follow_redirects=True) as http:
            user = http.post("/api/v1/auth/register", json={
                "email": "operator@example.com", "username": "the_operator",
                "password": "correct horse 1", "name": "Operator"}).json()
            http.cookies.set("cvsm_session", user["token"])
            page = http.get("/setup", params={"token": token})
            assert page.status_code == 200
            resp = http.post("/setup", data={"csrf": CSRF.search(page.text).group(1), "token": token})
            assert resp.status_code == 200 and "Akun Anda sekarang admin server ini." in resp.text
            assert http.get("/api/v1/me", headers={"Authorization": f"Bearer {user['token']}"}
                            ).json()["is_admin"] is True
        access = [line for line in server.output().splitlines() if "aiohttp.access" in line]
        assert any('"GET /setup" 200' in line for line in access)
        assert any('"POST /setup" 303' in line for line in access)
    output = server.output()
    assert output.count(token) == 1  # the printed line, and nowhere else
    assert "no administrator yet" in output and output.count("/setup?token=") == 1
