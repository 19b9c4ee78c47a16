"""The dashboard over real HTTP (cookies, CSRF, CSP, audit) and in a real browser (Debian's
Chromium through Playwright; skipped outside CI without it, failing under CI=true)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyotp
import pytest
from aiohttp.test_utils import TestClient

from cvsm_server.config import Settings

from conftest import query
from test_docs_page import CHROMIUM, CHROMIUM_ARGS, require_chromium

CSRF_RE = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(app_url="http://127.0.0.1")  # plain http: the test client keeps the cookie


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
    tampered = await client.post("/signin/2fa", data={"csrf": csrf, "pending": pending[:-1] + "0", "code": "1"})
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


async def test_the_dashboard_works_in_chromium(client: TestClient, tmp_path: Path) -> None:
    """Sign up, create a team and secrets in two environments, reveal one, sign out."""
    require_chromium()
    from playwright.async_api import async_playwright

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
            await page.screenshot(path=str(tmp_path / "secrets.png"))
            await page.get_by_role("link", name="Akun").click()
            await page.get_by_role("button", name="Siapkan verifikasi dua langkah").click()
            qr = page.get_by_role("img", name="Kode QR untuk aplikasi autentikator")
            await qr.wait_for()
            assert await qr.evaluate("img => img.naturalWidth") > 0  # drawn, and allowed by the CSP
            await page.get_by_role("button", name="Keluar", exact=True).click()
            await page.wait_for_url(f"{base}/signin")
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
