"""The dashboard over real HTTP (cookies, CSRF, CSP, audit) and in a real browser (Debian's
Chromium through Playwright; skipped outside CI without it, failing under CI=true)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any

import cvsm
import pyotp
import pytest
from aiohttp.test_utils import TestClient

from cvsm_server.secrets import service as secrets
from cvsm_server.secrets import queries as secret_queries
from cvsm_server.teams import service as teams
from cvsm_server.core.config import Settings

from conftest import query
from test_docs_page import CHROMIUM, CHROMIUM_ARGS, require_chromium

CSRF_RE = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(app_url="")  # unset: links use the address asked, plain http keeps the cookie


def csrf_of(html: str) -> str:
    match = CSRF_RE.search(html)
    assert match, "the page has no CSRF field"
    return match.group(1)


async def sign_up(client: TestClient, name: str | None = None) -> dict[str, str]:
    username = name or f"web_{uuid.uuid4().hex[:10]}"
    page = await client.get("/signup")
    assert page.status == 200
    form = {"csrf": csrf_of(await page.text()), "name": "Web User", "email": f"{username}@example.com",
            "username": username, "password": "correct horse 1"}
    resp = await client.post("/signup", data=form, allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == "/app/teams", await resp.text()
    return {"username": username, "email": form["email"], "password": form["password"]}


async def form_csrf(client: TestClient, path: str) -> str:
    page = await client.get(path)
    assert page.status == 200, await page.text()
    return csrf_of(await page.text())


async def test_signed_out_visitors_land_on_the_sign_in_page(client: TestClient) -> None:
    resp = await client.get("/", allow_redirects=False)
    assert (resp.status, resp.headers["Location"]) == (303, "/signin")
    resp = await client.get("/app/teams", allow_redirects=False)
    assert (resp.status, resp.headers["Location"]) == (303, "/signin")
    page = await client.get("/signin")
    html = await page.text()
    assert page.status == 200 and "<h1>Masuk</h1>" in html
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "form-action 'self'" in csp
    assert "<script>" not in html and "style=" not in html
    assert page.headers["X-Frame-Options"] == "DENY"
    assert "HttpOnly" in page.headers["Set-Cookie"] and "cvsm_pre=" in page.headers["Set-Cookie"]


async def test_the_session_cookie_is_http_only_lax_and_secure_on_https(
        make_settings: Callable[..., Settings], start_client: Callable[..., Any]) -> None:
    client = await start_client(make_settings(app_url="https://cvsm.test"))
    page = await client.get("/signup")
    csrf = csrf_of(await page.text())
    pre = page.cookies["cvsm_pre"]
    assert pre["secure"] and pre["httponly"]
    # The client speaks plain http, so it would not send a Secure cookie back by itself.
    resp = await client.post("/signup", allow_redirects=False, cookies={"cvsm_pre": pre.value}, data={
        "csrf": csrf, "name": "S", "email": "secure@example.com", "username": "secure_user",
        "password": "correct horse 1"})
    assert resp.status == 303, await resp.text()
    cookie = next(v for v in resp.headers.getall("Set-Cookie") if v.startswith("cvsm_session="))
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" in cookie


async def test_forms_without_the_csrf_token_change_nothing(client: TestClient, database_url: str) -> None:
    await client.get("/signup")
    resp = await client.post("/signup", data={"csrf": "0" * 64, "name": "X", "email": "x@example.com",
                                              "username": "csrf_victim", "password": "correct horse 1"})
    assert resp.status == 403
    assert await query(database_url, "SELECT 1 FROM users WHERE username = 'csrf_victim'") == []
    await sign_up(client)
    resp = await client.post("/app/teams", data={"csrf": "f" * 64, "name": "T", "slug": "csrf-team"})
    assert resp.status == 403 and "Formulir kedaluwarsa" in await resp.text()
    assert await query(database_url, "SELECT 1 FROM teams WHERE slug = 'csrf-team'") == []


async def test_secrets_are_listed_without_values_and_revealed_only_by_a_post_that_is_audited(
        client: TestClient, database_url: str) -> None:
    await sign_up(client)
    csrf = await form_csrf(client, "/app/teams")
    resp = await client.post("/app/teams", data={"csrf": csrf, "name": "Web", "slug": "web-team"},
                             allow_redirects=False)
    assert resp.headers["Location"] == "/app/teams/web-team/secrets"
    for environment, value in (("production", "prod-value-123"), ("staging", "staging-value-456")):
        resp = await client.post("/app/teams/web-team/secrets", allow_redirects=False, data={
            "csrf": csrf, "name": "DATABASE_URL", "value": value, "environment": environment,
            "type": "connection_string", "description": ""})
        assert resp.status == 303, await resp.text()
    page = await client.get("/app/teams/web-team/secrets?environment=staging")
    html = await page.text()
    assert "DATABASE_URL" in html and "staging-value-456" not in html and "prod-value-123" not in html
    secret_id = re.search(r'/app/teams/web-team/secrets/([0-9a-f-]{36})/reveal', html).group(1)  # type: ignore[union-attr]
    revealed = await client.post(f"/app/teams/web-team/secrets/{secret_id}/reveal", data={"csrf": csrf})
    body = await revealed.text()
    assert revealed.status == 200 and "staging-value-456" in body and "prod-value-123" not in body
    assert revealed.headers["Cache-Control"] == "no-store"
    reads = await query(database_url, "SELECT action FROM audit_logs WHERE resource_id = %s", (secret_id,))
    assert [r["action"] for r in reads].count("read") == 1
    bad = await client.post("/app/teams/web-team/secrets", data={
        "csrf": csrf, "name": "9BAD", "value": "typed-value-789", "environment": "production", "type": "other"})
    text = await bad.text()
    assert bad.status == 400 and "typed-value-789" not in text  # the typed value is not echoed back


async def test_a_starter_team_is_told_in_the_form_why_a_second_environment_is_refused(
        start_client: Callable[..., Any], make_settings: Callable[..., Settings],
        database_url: str) -> None:
    client = await start_client(make_settings(app_url="", default_plan="starter"))
    await sign_up(client)
    csrf = await form_csrf(client, "/app/teams")
    await client.post("/app/teams", data={"csrf": csrf, "name": "Web", "slug": "web-team"},
                      allow_redirects=False)
    for environment, status in (("production", 303), ("staging", 403)):
        resp = await client.post("/app/teams/web-team/secrets", allow_redirects=False, data={
            "csrf": csrf, "name": "DATABASE_URL", "value": "typed-value-789",
            "environment": environment, "type": "other", "description": ""})
        assert resp.status == status
    text = await resp.text()
    refusal = escape(teams.quota_message(secret_queries.ENVIRONMENT_QUOTA.format(limit=1, active="production"),
                                         "web-team", "starter"))  # and what lifts it on this server
    assert refusal in text
    assert "typed-value-789" not in text  # the form asks for the value again
    resp = await client.post("/app/teams/web-team/import", data={
        "csrf": csrf, "environment": "development", "content": "A_ONE=1\n"})
    assert resp.status == 403 and refusal in await resp.text()
    rows = await query(database_url, "SELECT environment FROM secrets")
    assert [r["environment"] for r in rows] == ["production"]


async def test_sign_out_runs_logout_all_so_the_old_cookie_fails(client: TestClient) -> None:
    await sign_up(client)
    cookie = client.session.cookie_jar.filter_cookies(client.make_url("/"))["cvsm_session"].value
    csrf = await form_csrf(client, "/app/teams")
    resp = await client.post("/signout", data={"csrf": csrf}, allow_redirects=False)
    assert (resp.status, resp.headers["Location"]) == (303, "/signin")
    # The cookie from before still names the session: it no longer opens anything, and the
    # same JWT is refused by the API too.
    resp = await client.get("/app/teams", cookies={"cvsm_session": cookie}, allow_redirects=False)
    assert resp.headers["Location"] == "/signin"
    resp = await client.get("/api/v1/me", headers={"Authorization": f"Bearer {cookie}"})
    assert resp.status == 401


async def test_two_factor_sign_in_asks_for_the_code_after_the_password(client: TestClient, api: Any) -> None:
    user = await api.register("two_step")
    setup = await client.post("/api/v1/me/2fa/setup", headers=api.auth(user["token"]))
    secret = (await setup.json())["secret"]
    resp = await client.post("/api/v1/me/2fa/enable", headers=api.auth(user["token"]),
                             json={"code": pyotp.TOTP(secret).now()})
    assert resp.status == 200
    csrf = await form_csrf(client, "/signin")
    step = await client.post("/signin", data={"csrf": csrf, "identifier": "two_step", "password": user["password"]})
    html = await step.text()
    assert step.status == 200 and 'action="/signin/2fa"' in html and user["password"] not in html
    pending = re.search(r'name="pending" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]
    wrong = await client.post("/signin/2fa", data={"csrf": csrf, "pending": pending, "code": "000000"})
    assert wrong.status == 401
    # The last hex digit of the signature, changed (a fixed "0" would leave one pending in 16 intact).
    flipped = pending[:-1] + ("1" if pending[-1] == "0" else "0")
    tampered = await client.post("/signin/2fa", data={"csrf": csrf, "pending": flipped, "code": "1"})
    assert tampered.status == 401 and "kedaluwarsa" in await tampered.text()
    code = pyotp.TOTP(secret).at(time.time() + 30)  # the enabling code's step is spent: the next one
    ok = await client.post("/signin/2fa", data={"csrf": csrf, "pending": pending, "code": code},
                           allow_redirects=False)
    assert (ok.status, ok.headers["Location"]) == (303, "/app/teams"), await ok.text()


async def test_a_token_is_shown_once_and_works_within_its_scope(client: TestClient, database_url: str) -> None:
    await sign_up(client)
    csrf = await form_csrf(client, "/app/teams")
    await client.post("/app/teams", data={"csrf": csrf, "name": "Scoped", "slug": "scoped-team"})
    for environment in ("production", "staging"):
        await client.post("/app/teams/scoped-team/secrets", data={
            "csrf": csrf, "name": "KEY", "value": f"{environment}-key-value", "environment": environment,
            "type": "api_key"})
    resp = await client.post("/app/tokens", data=[("csrf", csrf), ("name", "deploy"), ("team", "scoped-team"),
                                                  ("environments", "production"), ("read_only", "on")])
    html = await resp.text()
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    token = re.search(r"(cvsm_[0-9a-f]{64})", html).group(1)  # type: ignore[union-attr]
    listing = await (await client.get("/app/tokens")).text()
    assert token not in listing and token[:12] in listing and "hanya baca" in listing
    auth = {"Authorization": f"Bearer {token}"}
    read = await client.get("/api/v1/teams/scoped-team/secrets/by-name/KEY", headers=auth)
    assert (await read.json())["value"] == "production-key-value"
    staging = await client.get("/api/v1/teams/scoped-team/secrets/by-name/KEY?environment=staging", headers=auth)
    assert staging.status == 404
    token_id = re.search(r'/app/tokens/([0-9a-f-]{36})/revoke', listing).group(1)  # type: ignore[union-attr]
    resp = await client.post(f"/app/tokens/{token_id}/revoke", data={"csrf": csrf}, allow_redirects=False)
    assert resp.status == 303
    assert (await client.get("/api/v1/teams/scoped-team/secrets/by-name/KEY", headers=auth)).status == 401


async def test_the_audit_page_shows_the_team_log_newest_first(client: TestClient) -> None:
    await sign_up(client)
    csrf = await form_csrf(client, "/app/teams")
    await client.post("/app/teams", data={"csrf": csrf, "name": "Logged", "slug": "logged-team"})
    await client.post("/app/teams/logged-team/secrets", data={
        "csrf": csrf, "name": "AUDITED", "value": "audited-value-1", "environment": "production", "type": "other"})
    page = await client.get("/app/teams/logged-team/audit?page=oops")
    html = await page.text()
    assert page.status == 200 and "Halaman 1 dari 1" in html
    assert html.index(">create<") < html.index(">team_create<") and "audited-value-1" not in html


async def test_two_factor_setup_draws_the_qr_code_on_the_server(client: TestClient) -> None:
    await sign_up(client)
    csrf = await form_csrf(client, "/app/account")
    page = await client.post("/app/account/2fa/setup", data={"csrf": csrf})
    html = await page.text()
    assert page.status == 200 and page.headers["Cache-Control"] == "no-store"
    assert 'src="data:image/svg+xml' in html
    secret = re.search(r"<code data-secret-value>([A-Z2-7]+)</code>", html).group(1)  # type: ignore[union-attr]
    wrong = await client.post("/app/account/2fa/enable", data={"csrf": csrf, "code": "12345"})
    assert wrong.status == 400
    resp = await client.post("/app/account/2fa/enable", data={"csrf": csrf, "code": pyotp.TOTP(secret).now()},
                             allow_redirects=False)
    assert resp.status == 303
    assert "Aktif:" in await (await client.get("/app/account")).text()


async def test_versions_rollback_and_shares_of_one_secret(client: TestClient) -> None:
    await sign_up(client)
    csrf = await form_csrf(client, "/app/teams")
    await client.post("/app/teams", data={"csrf": csrf, "name": "Hist", "slug": "hist-team"})
    await client.post("/app/teams/hist-team/secrets", data={
        "csrf": csrf, "name": "ROTATED", "value": "first-value-1", "environment": "production", "type": "other"})
    html = await (await client.get("/app/teams/hist-team/secrets")).text()
    secret_id = re.search(r'/app/teams/hist-team/secrets/([0-9a-f-]{36})"', html).group(1)  # type: ignore[union-attr]
    api_jwt = client.session.cookie_jar.filter_cookies(client.make_url("/"))["cvsm_session"].value
    auth = {"Authorization": f"Bearer {api_jwt}"}
    resp = await client.post(f"/app/teams/hist-team/secrets/{secret_id}", allow_redirects=False, data={
        "csrf": csrf, "value": "second-value-2", "type": "password", "description": "rotated once"})
    assert resp.status == 303
    kept = await client.post(f"/app/teams/hist-team/secrets/{secret_id}", allow_redirects=False, data={
        "csrf": csrf, "value": "", "type": "password", "description": "rotated once, noted"})
    assert kept.status == 303  # an empty value field keeps the value
    page = await (await client.get(f"/app/teams/hist-team/secrets/{secret_id}")).text()
    assert "Versi sekarang: 2" in page and "first-value-1" not in page and "second-value-2" not in page
    assert "rotated once, noted" in page and "jenis password" in page
    resp = await client.post(f"/app/teams/hist-team/secrets/{secret_id}/rollback", data={"csrf": csrf, "version": "1"},
                             allow_redirects=False)
    assert resp.status == 303
    read = await client.get(f"/api/v1/teams/hist-team/secrets/{secret_id}", headers=auth)
    assert (await read.json())["value"] == "first-value-1"
    shared = await client.post(f"/app/teams/hist-team/secrets/{secret_id}/shares",
                               data={"csrf": csrf, "max_views": "1", "ttl_hours": "2"})
    body = await shared.text()
    assert shared.status == 200 and shared.headers["Cache-Control"] == "no-store"
    token = re.search(r"/share/(shr_[A-Za-z0-9_-]+)", body).group(1)  # type: ignore[union-attr]
    view = await client.get(f"/api/v1/public/share/{token}")
    assert (await view.json())["value"] == "first-value-1"
    again = await (await client.get(f"/app/teams/hist-team/secrets/{secret_id}")).text()
    assert token not in again and "1 / 1" in again


async def test_dotenv_import_and_export(client: TestClient, database_url: str) -> None:
    await sign_up(client)
    csrf = await form_csrf(client, "/app/teams")
    await client.post("/app/teams", data={"csrf": csrf, "name": "Env", "slug": "env-team"})
    resp = await client.post("/app/teams/env-team/import", data={
        "csrf": csrf, "environment": "staging", "content": "A_ONE=1\nB_TWO='two words'\n9BAD=x\n"})
    html = await resp.text()
    assert resp.status == 200 and "2 dibuat, 1 gagal" in html and "baris 3" in html
    export = await client.post("/app/teams/env-team/export", data={"csrf": csrf, "environment": "staging"})
    assert export.headers["Content-Disposition"] == 'attachment; filename="staging.env"'
    assert await export.text() == "A_ONE='1'\nB_TWO='two words'\n"
    rows = await query(database_url, "SELECT metadata FROM audit_logs WHERE action = 'export' ORDER BY created_at DESC LIMIT 1")
    assert rows[0]["metadata"]["environments"] == ["staging"]


async def test_the_export_download_offers_the_shell_format(client: TestClient, database_url: str) -> None:
    await sign_up(client)
    csrf = await form_csrf(client, "/app/teams")
    await client.post("/app/teams", data={"csrf": csrf, "name": "Sh", "slug": "sh-team"})
    await client.post("/app/teams/sh-team/import", data={
        "csrf": csrf, "environment": "staging", "content": 'KEY="a\\nLD_PRELOAD=x"\nQ="it\'s"\n'})
    page = await (await client.get("/app/teams/sh-team/secrets?environment=staging")).text()
    assert "<title>Sh: secret · cvsm</title>" in page
    assert '<option value="dotenv">' in page and '<option value="shell">' in page
    export = await client.post("/app/teams/sh-team/export",
                               data={"csrf": csrf, "environment": "staging", "format": "dotenv"})
    assert await export.text() == "KEY=\"a\\nLD_PRELOAD=x\"\nQ=\"it's\"\n"
    export = await client.post("/app/teams/sh-team/export",
                               data={"csrf": csrf, "environment": "staging", "format": "shell"})
    assert export.headers["Content-Disposition"] == 'attachment; filename="staging.sh"'
    assert export.headers["Cache-Control"] == "no-store"
    assert await export.text() == "export KEY=$'a\\nLD_PRELOAD=x'\nexport Q=$'it\\x27s'\n"
    rows = await query(database_url, "SELECT metadata FROM audit_logs WHERE action = 'export' ORDER BY created_at")
    assert [r["metadata"]["format"] for r in rows] == ["dotenv", "shell"]
    refused = await client.post("/app/teams/sh-team/export",
                                data={"csrf": csrf, "environment": "staging", "format": "yaml"})
    assert refused.status == 400 and "Format ekspor harus dotenv, shell, atau json" in await refused.text()
    assert len(await query(database_url, "SELECT 1 FROM audit_logs WHERE action = 'export'")) == 2


async def test_members_are_added_changed_and_removed(client: TestClient, api: Any) -> None:
    other = await api.register("teammate")
    await sign_up(client)
    csrf = await form_csrf(client, "/app/teams")
    await client.post("/app/teams", data={"csrf": csrf, "name": "Crew", "slug": "crew-team"})
    resp = await client.post("/app/teams/crew-team/members", data={"csrf": csrf, "identifier": "teammate", "role": "Viewer"},
                             allow_redirects=False)
    assert resp.status == 303
    missing = await client.post("/app/teams/crew-team/members", data={"csrf": csrf, "identifier": "nobody_here", "role": "Member"})
    assert missing.status == 404
    page = await (await client.get("/app/teams/crew-team/members")).text()
    assert "teammate" in page
    resp = await client.post(f"/app/teams/crew-team/members/{other['id']}", data={"csrf": csrf, "role": "Member", "action": "role"},
                             allow_redirects=False)
    assert resp.status == 303
    members = await client.get("/api/v1/teams/crew-team/members", headers=api.auth(other["token"]))
    assert {m["username"]: m["role"] for m in (await members.json())["members"]}["teammate"] == "Member"
    await client.post(f"/app/teams/crew-team/members/{other['id']}", data={"csrf": csrf, "action": "remove", "role": ""})
    assert (await client.get("/api/v1/teams/crew-team/members", headers=api.auth(other["token"]))).status in (403, 404)


async def shoot(page: Any, tmp_path: Path, name: str) -> None:
    """A screenshot; with CVSM_SCREENSHOTS_DIR set (docs/screenshots), the README's copies."""
    directory = Path(os.environ.get("CVSM_SCREENSHOTS_DIR") or tmp_path)
    await page.screenshot(path=str(directory / f"dashboard-{name}.png"))
    assert (directory / f"dashboard-{name}.png").stat().st_size > 10_000


async def test_the_dashboard_works_in_chromium(client: TestClient, tmp_path: Path) -> None:
    """The issue's walk: sign up, a team with secrets in two environments, reveal one, import a
    .env, a share opened in a second context, a token read by the Python SDK, two-factor on and
    a sign-in with it, sign out (the old cookie then fails)."""
    require_chromium()
    from playwright.async_api import async_playwright, expect

    base = str(client.make_url("/")).rstrip("/")
    problems: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            await page.goto(f"{base}/")
            await page.get_by_role("link", name="Daftar").click()
            await page.get_by_label("Nama", exact=True).fill("Browser User")
            await page.get_by_label("Email").fill("browser@example.com")
            await page.get_by_label("Username").fill("browser_user")
            await page.get_by_label("Kata sandi").fill("correct horse 1")
            await page.get_by_role("button", name="Buat akun").click()
            await page.wait_for_url(f"{base}/app/teams")
            await page.get_by_label("Nama tim").fill("Browser Team")
            await page.get_by_label("Slug").fill("browser-team")
            await page.get_by_role("button", name="Buat tim").click()
            await page.wait_for_url(f"{base}/app/teams/browser-team/secrets")
            for environment, value in (("production", "prod-in-browser"), ("staging", "staging-in-browser")):
                await page.get_by_label("Nama", exact=True).fill("API_KEY")
                await page.get_by_label("Nilai", exact=True).fill(value)
                await page.get_by_label("Environment", exact=True).select_option(environment)
                await page.get_by_role("button", name="Simpan").click()
                await page.wait_for_url(f"{base}/app/teams/browser-team/secrets?environment={environment}")
            assert "staging-in-browser" not in await page.content()
            await page.get_by_role("button", name="Tampilkan nilai API_KEY").click()
            await page.wait_for_selector("[data-secret-value]")
            assert await page.locator("[data-secret-value]").inner_text() == "staging-in-browser"
            assert "prod-in-browser" not in await page.content()
            assert "staging-in-browser" not in page.url
            await shoot(page, tmp_path, "secrets")

            # Import a .env by pasting it.
            await page.get_by_label("Tempel isi .env").fill("FROM_DOTENV='pasted value'\n")
            await page.get_by_role("button", name="Impor").click()
            await page.get_by_text("1 dibuat, 0 gagal").wait_for()

            # A share link, opened by someone else (a second browser context).
            await page.get_by_role("link", name="API_KEY").click()
            await page.get_by_role("button", name="Buat tautan").click()
            share_url = (await page.locator("[data-secret-value]").inner_text()).strip()
            assert share_url.startswith(f"{base}/share/shr_")
            stranger = await browser.new_context()
            try:
                shared = await stranger.new_page()
                await shared.goto(share_url)
                await shared.get_by_role("button", name="Tampilkan secret").click()
                await expect(shared.locator("#secret-value")).to_have_text("staging-in-browser")
            finally:
                await stranger.close()

            # A read-only token for production, used by the Python SDK.
            await page.get_by_role("link", name="Token API").click()
            await page.get_by_label("Nama", exact=True).fill("browser deploy")
            await page.get_by_label("Tim", exact=True).select_option("browser-team")
            await page.get_by_label("production").check()
            await page.get_by_label("Hanya baca").check()
            await page.get_by_role("button", name="Buat token").click()
            token = (await page.locator("[data-secret-value]").inner_text()).strip()
            await page.locator("[data-secret-value]").evaluate("node => { node.textContent = 'cvsm_…' }")
            await shoot(page, tmp_path, "tokens")
            async with cvsm.AsyncClient(token=token, base_url=f"{base}/api/v1", team="browser-team") as sdk:
                assert await sdk.get("API_KEY") == "prod-in-browser"

            # Two-factor on, with a code computed by pyotp; then sign in again with it.
            await page.get_by_role("link", name="Akun").click()
            await page.get_by_role("button", name="Siapkan verifikasi dua langkah").click()
            qr = page.get_by_role("img", name="Kode QR untuk aplikasi autentikator")
            await qr.wait_for()
            assert await qr.evaluate("img => img.naturalWidth") > 0  # drawn, and allowed by the CSP
            secret = (await page.locator("code[data-secret-value]").inner_text()).strip()
            await page.get_by_label("Kode enam digit").fill(pyotp.TOTP(secret).now())
            await page.get_by_role("button", name="Aktifkan").click()
            await page.get_by_text("Aktif:").wait_for()
            old_cookie = next(c["value"] for c in await page.context.cookies() if c["name"] == "cvsm_session")
            await page.get_by_role("button", name="Keluar", exact=True).click()
            await page.wait_for_url(f"{base}/signin")
            await page.get_by_label("Email atau username").fill("browser_user")
            await page.get_by_label("Kata sandi").fill("correct horse 1")
            await page.get_by_role("button", name="Masuk").click()
            await page.get_by_label("Kode dari aplikasi autentikator").fill(pyotp.TOTP(secret).at(time.time() + 30))
            await page.get_by_role("button", name="Verifikasi").click()
            await page.wait_for_url(f"{base}/app/teams")

            # Sign out: the cookie of the session before no longer opens anything.
            await page.get_by_role("button", name="Keluar", exact=True).click()
            await page.wait_for_url(f"{base}/signin")
            await page.context.add_cookies([{"name": "cvsm_session", "value": old_cookie, "url": base}])
            await page.goto(f"{base}/app/teams")
            assert page.url == f"{base}/signin"
        finally:
            await browser.close()
    assert problems == []


async def test_api_paths_without_the_prefix_stay_404_for_misconfigured_clients(client: TestClient) -> None:
    """An SDK whose base URL lacks /api/v1 asks /teams/...: that must stay a JSON 404 (rule R9
    of the conformance protocol), so the dashboard's pages live under /app/."""
    for path in ("/teams", f"/teams/{uuid.uuid4()}/secrets", "/teams/acme/secrets/by-name/X",
                 "/teams/acme/secrets/export"):
        resp = await client.get(path, headers={"Accept": "application/json"}, allow_redirects=False)
        assert resp.status == 404 and (await resp.json())["error"], path


@pytest.fixture(scope="session")
def axe_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """axe-core (Deque's accessibility engine) from npm, into a temporary folder."""
    npm = shutil.which("npm")
    if npm is None:
        if os.environ.get("CI") == "true":
            pytest.fail("npm is missing under CI=true: the accessibility check loads axe-core from npm")
        pytest.skip("npm is absent: the accessibility check loads axe-core from npm")
    folder = tmp_path_factory.mktemp("axe")
    subprocess.run([npm, "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(folder), "axe-core@4"],
                   check=True, timeout=300, capture_output=True)
    return folder / "node_modules" / "axe-core" / "axe.min.js"


async def test_the_main_pages_pass_axe_core(client: TestClient, axe_script: Path) -> None:
    """No serious or critical accessibility violation on the main pages (WCAG 2 A and AA rules)."""
    require_chromium()
    from playwright.async_api import async_playwright

    base = str(client.make_url("/")).rstrip("/")
    found: dict[str, list[str]] = {}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            # The pages' CSP allows only their own scripts; the checker is let in for the test.
            context = await browser.new_context(bypass_csp=True)
            page = await context.new_page()

            async def check(name: str) -> None:
                await page.add_script_tag(path=str(axe_script))
                result = await page.evaluate(
                    "() => axe.run(document, {runOnly: ['wcag2a', 'wcag2aa']})")
                serious = [f"{v['id']}: {v['help']}" for v in result["violations"]
                           if v["impact"] in ("serious", "critical")]
                if serious:
                    found[name] = serious

            await page.goto(f"{base}/signin")
            await check("signin")
            await page.goto(f"{base}/signup")
            await check("signup")
            await page.get_by_label("Nama", exact=True).fill("Axe User")
            await page.get_by_label("Email").fill("axe@example.com")
            await page.get_by_label("Username").fill("axe_user")
            await page.get_by_label("Kata sandi").fill("correct horse 1")
            await page.get_by_role("button", name="Buat akun").click()
            await page.wait_for_url(f"{base}/app/teams")
            await check("teams")
            await page.get_by_label("Nama tim").fill("Axe Team")
            await page.get_by_label("Slug").fill("axe-team")
            await page.get_by_role("button", name="Buat tim").click()
            await page.wait_for_url(f"{base}/app/teams/axe-team/secrets")
            await page.get_by_label("Nama", exact=True).fill("CHECKED")
            await page.get_by_label("Nilai", exact=True).fill("checked-value")
            await page.get_by_role("button", name="Simpan").click()
            await page.wait_for_url(f"{base}/app/teams/axe-team/secrets?environment=production")
            await check("secrets")
            for path in ("/app/tokens", "/app/account", "/app/teams/axe-team/members", "/app/teams/axe-team/audit"):
                await page.goto(f"{base}{path}")
                await check(path)
        finally:
            await browser.close()
    assert found == {}
