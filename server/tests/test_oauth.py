"""Sign-in through an identity provider, end to end over HTTP against a real OpenID provider
(`oidc_provider.py`: authlib's server on a local port) and its test double of GitHub: start ->
the provider's consent (automatic) -> the app's callback, which sets the session cookie of the
browser that started the flow (no token in any URL) and works on /me, and every failure on the
way ending on the sign-in page with the one generic message."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pyotp
import pytest
from aiohttp.test_utils import TestClient

from cvsm_server.accounts import oauth
from cvsm_server.accounts import oauth_providers
from cvsm_server.runtime.app import create_app
from cvsm_server.core.config import Settings
from cvsm_server.web.state import OAUTH

from conftest import Api, query
from oidc_provider import OpenIDProvider
from test_docs_page import CHROMIUM, CHROMIUM_ARGS, require_chromium

CSRF_RE = re.compile(r'name="csrf" value="([0-9a-f]{64})"')
ERROR = "/signin?oauth=failed"


@pytest.fixture
def op() -> Any:
    provider = OpenIDProvider().start()
    yield provider
    provider.stop()


def oauth_settings(make_settings: Callable[..., Settings], op: OpenIDProvider) -> Settings:
    # app_url unset: links use the address asked (the test server's), so the provider can
    # redirect back to it and the cookies are plain-http ones.
    return make_settings(app_url="", oauth_acme_client_id=op.client.client_id,
                         oauth_acme_client_secret=op.client.client_secret,
                         oauth_acme_issuer=op.issuer,
                         oauth_github_client_id=op.client.client_id,
                         oauth_github_client_secret=op.client.client_secret)


@pytest.fixture
async def client(aiohttp_client: Any, make_settings: Callable[..., Settings],
                 op: OpenIDProvider) -> TestClient:
    settings = oauth_settings(make_settings, op)
    app = create_app(settings)
    # GitHub cannot be reached from the tests: the preset talks to the provider's double of it.
    app[OAUTH] = oauth_providers.Providers(settings.oauth_providers, github=oauth_providers.GitHubEndpoints(
        authorize=f"{op.issuer}/login/oauth/authorize",
        token=f"{op.issuer}/login/oauth/access_token", api=f"{op.issuer}/api"))
    return await aiohttp_client(app)


@pytest.fixture
async def browser_http() -> AsyncIterator[aiohttp.ClientSession]:
    """The browser's side at the provider (its own cookies)."""
    async with aiohttp.ClientSession() as session:
        yield session


async def at_provider(http: aiohttp.ClientSession, authorize_url: str) -> str:
    """The provider's answer to the authorization request: the callback URL it redirects to."""
    async with http.get(authorize_url, allow_redirects=False) as resp:
        assert resp.status == 302, await resp.text()
        return resp.headers["Location"]


async def start(client: TestClient, idp: str = "acme") -> str:
    resp = await client.get(f"/api/v1/auth/{idp}/start", allow_redirects=False)
    assert resp.status == 302, await resp.text()
    return resp.headers["Location"]


async def back_at_app(client: TestClient, callback_url: str) -> str:
    """Follow the provider's redirect to the app's callback; the app's redirect, path onwards."""
    parts = urlsplit(callback_url)
    assert (parts.scheme, parts.hostname, parts.port) == ("http", "127.0.0.1", client.port)
    resp = await client.get(f"{parts.path}?{parts.query}", allow_redirects=False)
    assert resp.status == 302 and resp.headers["Cache-Control"] == "no-store"
    location = urlsplit(resp.headers["Location"])
    assert (location.hostname, location.port) == ("127.0.0.1", client.port)
    return location.path + (f"?{location.query}" if location.query else "") + \
        (f"#{location.fragment}" if location.fragment else "")


async def sign_in(client: TestClient, http: aiohttp.ClientSession, idp: str = "acme") -> str:
    """The whole flow; returns where the app sent the browser in the end."""
    return await back_at_app(client, await at_provider(http, await start(client, idp)))


def token_of(client: TestClient, location: str) -> str:
    """The session the callback opened for this browser: its cookie, never the URL."""
    assert location == "/app/teams", location
    cookie = client.session.cookie_jar.filter_cookies(client.make_url("/")).get("cvsm_session")
    assert cookie is not None, "the callback set no session cookie"
    return cookie.value


async def me(client: TestClient, token: str) -> dict:
    resp = await client.get("/api/v1/me", headers=Api.auth(token))
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def failures(database_url: str) -> list[str]:
    rows = await query(database_url, "SELECT metadata FROM audit_logs WHERE action = 'oauth_failed' "
                                     "ORDER BY created_at")
    return [row["metadata"]["reason"] for row in rows]


async def test_start_redirects_to_the_provider_with_state_pkce_and_nonce(client: TestClient,
                                                                         op: OpenIDProvider,
                                                                         database_url: str) -> None:
    location = urlsplit(await start(client))
    assert f"{location.scheme}://{location.netloc}{location.path}" == f"{op.issuer}/authorize"
    params = {k: v[0] for k, v in parse_qs(location.query).items()}
    assert params["response_type"] == "code" and params["client_id"] == op.client.client_id
    assert params["redirect_uri"] == f"http://127.0.0.1:{client.port}/api/v1/auth/acme/callback"
    assert params["code_challenge_method"] == "S256" and len(params["code_challenge"]) == 43
    assert set(params["scope"].split()) == {"openid", "email", "profile"}
    assert len(params["state"]) >= 32 and len(params["nonce"]) >= 32
    flows = await query(database_url, "SELECT state_hash, nonce, expires_at - created_at AS life "
                                      "FROM oauth_flows")
    assert len(flows) == 1 and flows[0]["nonce"] == params["nonce"]
    assert bytes(flows[0]["state_hash"]) != params["state"].encode()  # only its HMAC is stored
    assert flows[0]["life"].total_seconds() == 600


async def test_first_sign_in_creates_an_account_without_a_password_and_subscribes_it(
        client: TestClient, browser_http: aiohttp.ClientSession, database_url: str) -> None:
    token = token_of(client, await sign_in(client, browser_http))
    profile = await me(client, token)
    assert profile["email"] == "person@example.org" and profile["email_verified"] is True
    assert profile["username"] == "person" and profile["name"] == "Person Example"
    stored = await query(database_url, "SELECT password_hash, newsletter_opt_in FROM users")
    assert stored == [{"password_hash": None, "newsletter_opt_in": True}]
    for password in ("", "correct horse 1"):
        login = await client.post("/api/v1/auth/login", json={"identifier": "person@example.org",
                                                              "password": password})
        assert login.status == 401
    news = await query(database_url, "SELECT email, status, source, confirmed_at IS NOT NULL AS c "
                                     "FROM newsletter_subscriptions")
    assert news == [{"email": "person@example.org", "status": "confirmed", "source": "oauth", "c": True}]
    audit = await query(database_url, "SELECT action, metadata FROM audit_logs WHERE action LIKE 'oauth%'")
    assert [(a["action"], a["metadata"]["created"]) for a in audit] == [("oauth_login", True)]
    assert token not in str(audit)


async def test_a_second_sign_in_reuses_the_account(client: TestClient, browser_http: aiohttp.ClientSession,
                                                   database_url: str, op: OpenIDProvider) -> None:
    first = await me(client, token_of(client, await sign_in(client, browser_http)))
    op.user.email = "renamed@example.org"  # the identity (sub) counts, not the address
    second = await me(client, token_of(client, await sign_in(client, browser_http)))
    assert first["user_id"] == second["user_id"]
    assert (await query(database_url, "SELECT count(*) AS n FROM users"))[0]["n"] == 1
    assert (await query(database_url, "SELECT count(*) AS n FROM user_identities"))[0]["n"] == 1


async def test_a_verified_email_links_the_existing_local_account(
        client: TestClient, browser_http: aiohttp.ClientSession, database_url: str) -> None:
    local = await Api(client).register("local_person", email="Person@Example.org")
    await query(database_url, "UPDATE users SET email_verified = true WHERE id = %s RETURNING id",
                (local["id"],))  # the owner proved the address by mail before
    profile = await me(client, token_of(client, await sign_in(client, browser_http)))
    assert profile["user_id"] == local["id"] and profile["email_verified"] is True
    identities = await query(database_url, "SELECT provider, subject, user_id::text AS u FROM user_identities")
    assert identities == [{"provider": "acme", "subject": "op-user-1", "u": local["id"]}]
    # The password still works: linking took nothing away.
    login = await client.post("/api/v1/auth/login", json={"identifier": "local_person",
                                                          "password": local["password"]})
    assert login.status == 200
    actions = [r["action"] for r in await query(
        database_url, "SELECT action FROM audit_logs WHERE action LIKE 'oauth%' ORDER BY created_at")]
    assert actions == ["oauth_link", "oauth_login"]


async def test_a_local_account_whose_email_is_unverified_is_not_linked(
        client: TestClient, browser_http: aiohttp.ClientSession, database_url: str) -> None:
    # Pre-hijacking: someone registered the address first, with a password of their own.
    await Api(client).register("squatter", email="person@example.org")
    assert await sign_in(client, browser_http) == ERROR
    assert await query(database_url, "SELECT * FROM user_identities") == []
    assert await failures(database_url) == ["local_email_unverified"]


async def test_a_disabled_account_cannot_sign_in_through_the_provider(
        client: TestClient, browser_http: aiohttp.ClientSession, database_url: str) -> None:
    assert token_of(client, await sign_in(client, browser_http))  # the first sign-in makes the account
    await query(database_url, "UPDATE users SET disabled_at = now() RETURNING id")
    assert await sign_in(client, browser_http) == ERROR
    assert await failures(database_url) == ["account_disabled"]


async def test_an_unverified_email_fails_and_links_or_creates_nothing(
        client: TestClient, browser_http: aiohttp.ClientSession, database_url: str,
        op: OpenIDProvider) -> None:
    local = await Api(client).register("local_person", email="person@example.org")
    op.user.email_verified = False
    assert await sign_in(client, browser_http) == ERROR
    assert await query(database_url, "SELECT * FROM user_identities") == []
    users = await query(database_url, "SELECT id::text AS id, email_verified FROM users")
    assert users == [{"id": local["id"], "email_verified": False}]
    op.user.email = "nobody-here@example.org"  # and no account is made for an unknown address
    assert await sign_in(client, browser_http) == ERROR
    assert len(await query(database_url, "SELECT id FROM users")) == 1
    assert await failures(database_url) == ["email_unverified", "email_unverified"]


async def test_a_forged_state_fails_before_any_exchange(client: TestClient, op: OpenIDProvider,
                                                       browser_http: aiohttp.ClientSession,
                                                       database_url: str) -> None:
    real = urlsplit(await at_provider(browser_http, await start(client)))
    code = parse_qs(real.query)["code"][0]
    forged = f"{real.scheme}://{real.netloc}{real.path}?code={code}&state={'A' * 43}"
    assert await back_at_app(client, forged) == ERROR
    no_state = f"{real.scheme}://{real.netloc}{real.path}?code={code}"
    assert await back_at_app(client, no_state) == ERROR
    assert op.token_requests == 0
    assert await failures(database_url) == ["state_unknown", "state_malformed"]


async def test_a_callback_in_another_browser_fails(client: TestClient, aiohttp_client: Any,
                                                   browser_http: aiohttp.ClientSession,
                                                   op: OpenIDProvider, database_url: str) -> None:
    callback = await at_provider(browser_http, await start(client))
    other = await aiohttp_client(client.server)  # same app, a browser without the flow's cookie
    parts = urlsplit(callback)
    resp = await other.get(f"{parts.path}?{parts.query}", allow_redirects=False)
    assert resp.headers["Location"].endswith(ERROR)
    assert op.token_requests == 0
    assert await failures(database_url) == ["state_not_bound_to_browser"]


async def test_a_replayed_state_or_code_fails(client: TestClient, browser_http: aiohttp.ClientSession,
                                              op: OpenIDProvider, database_url: str) -> None:
    callback = await at_provider(browser_http, await start(client))
    token_of(client, await back_at_app(client, callback))
    assert op.token_requests == 1
    # The same callback again: its state was used up.
    assert await back_at_app(client, callback) == ERROR
    assert op.token_requests == 1
    # The old code with a new, valid state: the app tries it and the provider refuses it.
    fresh = urlsplit(await start(client))
    state = parse_qs(fresh.query)["state"][0]
    code = parse_qs(urlsplit(callback).query)["code"][0]
    parts = urlsplit(callback)
    assert await back_at_app(client, f"http://{parts.netloc}{parts.path}?code={code}&state={state}") == ERROR
    assert op.token_requests == 2
    assert await failures(database_url) == ["state_unknown", "token_exchange_refused"]


async def test_an_id_token_with_another_nonce_fails(client: TestClient, browser_http: aiohttp.ClientSession,
                                                    op: OpenIDProvider, database_url: str) -> None:
    op.id_token_nonce = "a-nonce-this-app-never-sent"
    assert await sign_in(client, browser_http) == ERROR
    assert await query(database_url, "SELECT id FROM users") == []
    assert await failures(database_url) == ["id_token_claims"]


async def test_an_id_token_signed_with_another_key_fails(client: TestClient,
                                                         browser_http: aiohttp.ClientSession,
                                                         op: OpenIDProvider, database_url: str) -> None:
    op.signing_key = op.other_key()  # same key id, not the key the JWKS publishes
    assert await sign_in(client, browser_http) == ERROR
    assert await query(database_url, "SELECT id FROM users") == []
    assert await failures(database_url) == ["id_token_signature"]
    op.signing_key = None  # the provider's own key again: the same flow works
    token_of(client, await sign_in(client, browser_http))


async def test_the_provider_refusing_consent_fails(client: TestClient, browser_http: aiohttp.ClientSession,
                                                   op: OpenIDProvider, database_url: str) -> None:
    op.deny = True
    callback = await at_provider(browser_http, await start(client))
    assert "error=access_denied" in callback
    assert await back_at_app(client, callback) == ERROR
    assert op.token_requests == 0
    assert await failures(database_url) == ["provider_error"]


async def test_an_unreachable_provider_fails_generically(client: TestClient, op: OpenIDProvider,
                                                         database_url: str) -> None:
    op.stop()
    resp = await client.get("/api/v1/auth/acme/start", allow_redirects=False)
    assert resp.status == 302 and resp.headers["Location"].endswith(ERROR)
    assert await failures(database_url) == ["network"]


async def test_an_expired_flow_fails(client: TestClient, browser_http: aiohttp.ClientSession,
                                     op: OpenIDProvider, database_url: str) -> None:
    callback = await at_provider(browser_http, await start(client))
    await query(database_url, "UPDATE oauth_flows SET expires_at = now() - interval '1 second'")
    assert await back_at_app(client, callback) == ERROR
    assert op.token_requests == 0
    assert await failures(database_url) == ["flow_expired"]


async def test_a_discovery_document_for_another_issuer_is_refused(
        client: TestClient, op: OpenIDProvider, database_url: str) -> None:
    op.discovery_overrides = {"issuer": "http://127.0.0.1:1/elsewhere"}
    resp = await client.get("/api/v1/auth/acme/start", allow_redirects=False)
    assert resp.status == 302 and resp.headers["Location"].endswith(ERROR)
    assert await query(database_url, "SELECT * FROM oauth_flows") == []
    assert await failures(database_url) == ["discovery_issuer_mismatch"]


async def test_an_unknown_provider_is_a_404(client: TestClient) -> None:
    for path in ("/api/v1/auth/nope/start", "/api/v1/auth/nope/callback?code=x&state=y",
                 "/api/v1/auth/ACME/start"):
        resp = await client.get(path, allow_redirects=False)
        assert resp.status == 404, path
        assert (await resp.json())["error"] == "Penyedia identitas tidak dikenal"


async def test_two_factor_users_get_the_code_step_not_a_token(client: TestClient,
                                                              browser_http: aiohttp.ClientSession,
                                                              database_url: str) -> None:
    token = token_of(client, await sign_in(client, browser_http))
    setup = await client.post("/api/v1/me/2fa/setup", headers=Api.auth(token))
    secret = (await setup.json())["secret"]
    enabled = await client.post("/api/v1/me/2fa/enable", headers=Api.auth(token),
                                json={"code": pyotp.TOTP(secret).now()})
    assert enabled.status == 200
    sessions_before = (await query(database_url, "SELECT count(*) AS n FROM sessions"))[0]["n"]
    location = await sign_in(client, browser_http)
    assert location == "/signin/oauth-2fa"  # no token anywhere in it
    assert (await query(database_url, "SELECT count(*) AS n FROM sessions"))[0]["n"] == sessions_before
    page = await client.get(location)
    html = await page.text()
    assert page.status == 200 and 'action="/signin/2fa"' in html
    csrf = CSRF_RE.search(html).group(1)  # type: ignore[union-attr]
    pending = re.search(r'name="pending" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]
    wrong = await client.post("/signin/2fa", data={"csrf": csrf, "pending": pending, "code": "000000"})
    assert wrong.status == 401
    code = pyotp.TOTP(secret).at(time.time() + 30)  # the enabling code's step is spent
    ok = await client.post("/signin/2fa", data={"csrf": csrf, "pending": pending, "code": code},
                           allow_redirects=False)
    assert (ok.status, ok.headers["Location"]) == (303, "/app/teams"), await ok.text()
    assert (await client.get("/app/teams", allow_redirects=False)).status == 200
    # Without the pending cookie the code page sends people back to the password sign-in.
    client.session.cookie_jar.clear()
    assert (await client.get("/signin/oauth-2fa")).status == 401


async def test_the_callback_signs_in_the_browser_that_started_the_flow(
        client: TestClient, browser_http: aiohttp.ClientSession) -> None:
    callback = await at_provider(browser_http, await start(client))
    parts = urlsplit(callback)
    resp = await client.get(f"{parts.path}?{parts.query}", allow_redirects=False)
    assert resp.status == 302 and resp.headers["Location"].endswith("/app/teams")
    assert "#" not in resp.headers["Location"] and "token" not in resp.headers["Location"]
    session = resp.cookies["cvsm_session"]
    assert session["httponly"] and session["path"] == "/" and session["samesite"] == "Lax"
    teams = await client.get("/app/teams", allow_redirects=False)
    assert teams.status == 200 and "person@example.org" in await teams.text()
    # The 0.3 line's hand-off page, which turned a token from a link into a session, is gone.
    assert (await client.get("/auth/oauth-callback")).status == 404
    assert (await client.post("/auth/oauth-callback", data={"token": session.value})).status in (404, 405)


async def test_a_failed_sign_in_lands_on_the_sign_in_page_with_one_message(
        client: TestClient) -> None:
    page = await client.get(ERROR)
    assert page.status == 200 and "Masuk melalui penyedia identitas gagal" in await page.text()


async def test_the_sign_in_page_has_one_button_per_provider(client: TestClient) -> None:
    for path in ("/signin", "/signup"):
        html = await (await client.get(path)).text()
        assert 'href="/api/v1/auth/acme/start">Masuk dengan Acme</a>' in html
        assert 'href="/api/v1/auth/github/start">Masuk dengan GitHub</a>' in html


async def link_from_account_page(client: TestClient, http: aiohttp.ClientSession) -> str:
    page = await client.get("/app/account")
    html = await page.text()
    assert "Hubungkan Acme" in html
    csrf = CSRF_RE.search(html).group(1)  # type: ignore[union-attr]
    forged = await client.post("/app/account/oauth/acme/link", data={"csrf": "0" * 64})
    assert forged.status == 403
    onward = await client.post("/app/account/oauth/acme/link", data={"csrf": csrf})
    html = await onward.text()
    assert onward.status == 200 and "Lanjutkan ke Acme" in html
    authorize = re.search(r'href="([^"]+)" data-oauth-redirect', html).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
    return await back_at_app(client, await at_provider(http, authorize))


async def dashboard_sign_up(client: TestClient, username: str) -> None:
    page = await client.get("/signup")
    csrf = CSRF_RE.search(await page.text()).group(1)  # type: ignore[union-attr]
    resp = await client.post("/signup", allow_redirects=False, data={
        "csrf": csrf, "name": "Local", "email": f"{username}@example.com", "username": username,
        "password": "correct horse 1"})
    assert resp.status == 303


async def test_linking_from_the_account_page(client: TestClient, aiohttp_client: Any,
                                             browser_http: aiohttp.ClientSession, database_url: str) -> None:
    await dashboard_sign_up(client, "linker")  # another address than the provider's
    assert await link_from_account_page(client, browser_http) == "/app/account?oauth=linked"
    html = await (await client.get("/app/account?oauth=linked")).text()
    assert "berhasil dihubungkan" in html and "Acme (person@example.org)" in html
    linked = await query(database_url, "SELECT u.username FROM user_identities i JOIN users u ON u.id = i.user_id")
    assert linked == [{"username": "linker"}]
    # Signing in through the provider now opens that account.
    other_browser = await aiohttp_client(client.server)
    profile = await me(other_browser, token_of(other_browser, await sign_in(other_browser, browser_http)))
    assert profile["username"] == "linker"
    # The identity belongs to `linker`: another account cannot take it.
    third = await aiohttp_client(client.server)
    await dashboard_sign_up(third, "someone_else")
    assert await link_from_account_page(third, browser_http) == "/app/account?oauth=failed"
    assert "gagal" in await (await third.get("/app/account?oauth=failed")).text()
    assert await query(database_url, "SELECT u.username FROM user_identities i JOIN users u ON u.id = i.user_id") == linked
    assert await failures(database_url) == ["identity_belongs_to_another_user"]


async def test_github_counts_only_a_verified_email(client: TestClient, browser_http: aiohttp.ClientSession,
                                                   op: OpenIDProvider, database_url: str) -> None:
    authorize = urlsplit(await start(client, "github"))
    assert authorize.path == "/login/oauth/authorize"
    params = parse_qs(authorize.query)
    assert params["code_challenge_method"] == ["S256"] and "nonce" not in params
    # Unverified primary address: nothing is created.
    op.user.github_emails = [{"email": "gh@example.org", "primary": True, "verified": False}]
    assert await sign_in(client, browser_http, "github") == ERROR
    assert await query(database_url, "SELECT id FROM users") == []
    # A verified primary address: the account is made with it.
    op.user.github_emails = [{"email": "old@example.org", "primary": False, "verified": False},
                             {"email": "gh@example.org", "primary": True, "verified": True}]
    profile = await me(client, token_of(client, await sign_in(client, browser_http, "github")))
    assert profile["email"] == "gh@example.org" and profile["email_verified"] is True
    identity = await query(database_url, "SELECT provider, subject FROM user_identities")
    assert identity == [{"provider": "github", "subject": "4242"}]
    assert await failures(database_url) == ["email_unverified"]


async def test_nothing_secret_reaches_the_log(client: TestClient, browser_http: aiohttp.ClientSession,
                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    callback = await at_provider(browser_http, await start(client))
    token = token_of(client, await back_at_app(client, callback))
    code = parse_qs(urlsplit(callback).query)["code"][0]
    state = parse_qs(urlsplit(callback).query)["state"][0]
    for secret in (token, code, state):
        assert secret not in caplog.text


async def test_signing_in_with_a_provider_in_chromium(client: TestClient) -> None:
    """Click the provider's button on the sign-in page, consent (automatic) at the provider, and
    land signed in on /app/teams (the callback set the session cookie itself)."""
    require_chromium()
    from playwright.async_api import async_playwright, expect

    base = str(client.make_url("/")).rstrip("/")
    problems: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await (await browser.new_context()).new_page()
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            await page.goto(f"{base}/signin")
            await page.get_by_role("link", name="Masuk dengan Acme").click()
            await page.wait_for_url(f"{base}/app/teams")
            await expect(page.get_by_text("person@example.org")).to_be_visible()
            # Session planting: an attacker's own JWT in a link never becomes this browser's
            # session, whether it is signed in (it stays itself) or not (it stays signed out).
            attacker = await Api(client).register("planter")
            planted = f"{base}/auth/oauth-callback#token={attacker['token']}"
            victim = await page.context.new_page()  # same cookies; its 404 is expected
            await victim.goto(planted)
            await victim.goto(f"{base}/app/teams")
            await expect(victim.get_by_text("person@example.org")).to_be_visible()
            await expect(victim.get_by_text("planter@example.com")).to_have_count(0)
            fresh = await (await browser.new_context()).new_page()
            await fresh.goto(planted)
            await fresh.goto(f"{base}/app/teams")
            await fresh.wait_for_url(f"{base}/signin")
            # A failure lands on the sign-in page with the generic message.
            await fresh.goto(f"{base}/signin?oauth=failed")
            await expect(fresh.get_by_role("alert")).to_contain_text("gagal")
        finally:
            await browser.close()
    assert problems == []


def test_usernames_derived_from_an_email_are_valid() -> None:
    from cvsm_server.accounts.users import validate_username
    for email, expected in (("person@example.org", "person"), ("a@x.io", "a__"),
                            ("admin@x.io", "admin_1"), ("j.doe+tag@x.io", "j_doe_tag"),
                            (f"{'x' * 60}@x.io", "x" * 40), (f"é{uuid.uuid4().hex}@x.io", None)):
        base = oauth.username_base(email)
        assert validate_username(base) == base
        if expected:
            assert base == expected
