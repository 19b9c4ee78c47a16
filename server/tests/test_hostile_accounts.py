"""The account surface against an attacker (issue 24): guessing while limited, pre-registered
accounts, mail bombing, stale and locked credentials. Each test drives the real server over HTTP
(the dashboard with its real CSRF tokens) and failed on 0.3's code.

The rule under test: while a client address is at its failed-credential limit, or an account is
in its progressive delay, a credential is **not checked**: the right one is refused like a wrong
one (429 with Retry-After), so the limit is no oracle, and nothing more is stored."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Any

import pyotp
import pytest
from aiohttp.test_utils import TestClient

from conftest import Api, query
from smtpbox import Mailbox, link_in
from test_dashboard import csrf_of, form_csrf, sign_up
from test_email_links import token_of

from cvsm_server.mail import messages as mail
from cvsm_server.accounts import ratelimit
from cvsm_server.core.config import Settings


def web_settings(make_settings: Callable[..., Settings], **overrides: str) -> Settings:
    # app_url unset: links use the address asked and the plain-http client keeps its cookies.
    return make_settings(app_url="", **overrides)


async def signin_post(client: TestClient, identifier: str, password: str,
                      headers: dict[str, str] | None = None) -> Any:
    csrf = await form_csrf(client, "/signin")
    return await client.post("/signin", data={"csrf": csrf, "identifier": identifier,
                                              "password": password},
                             headers=headers or {}, allow_redirects=False)


def retry_after(resp: Any) -> int:
    value = resp.headers.get("Retry-After", "")
    assert value.isdigit() and int(value) >= 1, dict(resp.headers)
    return int(value)


async def counters(database_url: str, prefix: str) -> int:
    rows = await query(database_url, "SELECT coalesce(sum(count), 0) AS n FROM rate_limit_counters"
                                     " WHERE key LIKE %s", (prefix + "%",))
    return int(rows[0]["n"])


# 1. Password guessing through /signin ---------------------------------------------------------

async def test_signin_refuses_the_right_password_while_the_address_is_limited(
        make_settings: Callable[..., Settings], start_client: Callable[..., Any],
        database_url: str) -> None:
    client = await start_client(web_settings(make_settings, ratelimit_failed_auth="3/3600"))
    user = await Api(client).register("guessed")
    for _ in range(3):
        resp = await signin_post(client, user["username"], "wrong password")
        assert resp.status == 401
    stored = await counters(database_url, "failed_auth:")
    right = await signin_post(client, user["username"], user["password"])
    assert right.status == 429 and "cvsm_session" not in right.cookies
    retry_after(right)
    assert "Terlalu banyak" in await right.text()
    assert await counters(database_url, "failed_auth:") == stored  # nothing more stored
    assert (await client.get("/app/teams", allow_redirects=False)).status == 303


async def test_an_account_slows_down_after_failures_from_any_address(
        make_settings: Callable[..., Settings], start_client: Callable[..., Any]) -> None:
    """Per account, beside the per-address limit: failures spread over many addresses still
    make the account's next check wait (progressive delay), and the wait is said."""
    client = await start_client(web_settings(make_settings, trusted_proxies="127.0.0.1"))
    api = Api(client)
    user = await api.register("spread")
    free = ratelimit.ACCOUNT_FREE_FAILURES
    for i in range(free + 3):
        resp = await client.post("/api/v1/auth/login", json={
            "identifier": user["email"].upper(), "password": f"guess {i}"},
            headers={"X-Forwarded-For": f"198.51.100.{i + 1}"})
        assert resp.status in (401, 429)
    resp = await signin_post(client, user["email"], user["password"],
                             headers={"X-Forwarded-For": "203.0.113.77"})
    assert resp.status == 429 and "cvsm_session" not in resp.cookies
    assert 1 <= retry_after(resp) <= ratelimit.ACCOUNT_MAX_DELAY
    # Another account is not slowed by this one.
    other = await api.register("unrelated")
    ok = await client.post("/api/v1/auth/login", json={"identifier": other["username"],
                                                        "password": other["password"]},
                           headers={"X-Forwarded-For": "203.0.113.78"})
    assert ok.status == 200


async def test_a_right_password_clears_the_accounts_failures(
        make_settings: Callable[..., Settings], start_client: Callable[..., Any],
        database_url: str) -> None:
    client = await start_client(web_settings(make_settings))
    user = await Api(client).register("forgets_sometimes")
    for _ in range(ratelimit.ACCOUNT_FREE_FAILURES):
        resp = await client.post("/api/v1/auth/login", json={"identifier": user["username"],
                                                              "password": "nope nope"})
        assert resp.status == 401
    rows = await query(database_url, "SELECT failures, blocked_until FROM auth_throttle")
    assert [(r["failures"], r["blocked_until"]) for r in rows] == [(ratelimit.ACCOUNT_FREE_FAILURES, None)]
    ok = await client.post("/api/v1/auth/login", json={"identifier": user["username"],
                                                        "password": user["password"]})
    assert ok.status == 200
    assert await query(database_url, "SELECT key FROM auth_throttle") == []
    # The identifier is never stored, not even the one that failed.
    raw = await query(database_url, "SELECT key FROM auth_throttle")
    assert all(user["username"] not in r["key"] for r in raw)


# 2. The 2FA step ------------------------------------------------------------------------------

async def two_factor_user(client: TestClient) -> tuple[dict, pyotp.TOTP]:
    api = Api(client)
    user = await api.register()
    setup = await client.post("/api/v1/me/2fa/setup", headers=api.auth(user["token"]))
    totp = pyotp.TOTP((await setup.json())["secret"])
    enabled = await client.post("/api/v1/me/2fa/enable", headers=api.auth(user["token"]),
                                json={"code": totp.now()})
    assert enabled.status == 200
    return user, totp


async def test_the_code_step_refuses_a_valid_code_while_limited(
        make_settings: Callable[..., Settings], start_client: Callable[..., Any]) -> None:
    client = await start_client(web_settings(make_settings, ratelimit_failed_auth="3/3600"))
    user, totp = await two_factor_user(client)
    step = await signin_post(client, user["username"], user["password"])
    html = await step.text()
    assert step.status == 200 and 'action="/signin/2fa"' in html
    assert step.headers["Cache-Control"] == "no-store"  # the page holds the pending token
    pending = re.search(r'name="pending" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]
    csrf = csrf_of(html)
    for _ in range(3):
        wrong = await client.post("/signin/2fa", data={"csrf": csrf, "pending": pending,
                                                       "code": "000000"})
        assert wrong.status == 401
        text = await wrong.text()
        assert "Kode autentikasi salah" in text  # not "wrong password": the password was right
        assert wrong.headers["Cache-Control"] == "no-store"
    code = totp.at(time.time() + 30)  # a valid code the enabling did not spend
    right = await client.post("/signin/2fa", data={"csrf": csrf, "pending": pending, "code": code},
                              allow_redirects=False)
    assert right.status == 429 and "cvsm_session" not in right.cookies
    retry_after(right)


# 3. (session planting: test_oauth.py, in Chromium and over HTTP)

# 4. Per-address limits on the dashboard's account forms ---------------------------------------

async def test_dashboard_account_forms_count_under_the_auth_limit(
        make_settings: Callable[..., Settings], start_client: Callable[..., Any]) -> None:
    client = await start_client(web_settings(make_settings, ratelimit_auth="3/3600"))
    csrf = await form_csrf(client, "/signup")
    statuses = []
    for i in range(4):
        resp = await client.post("/signup", data={
            "csrf": csrf, "name": "Spam", "email": f"spam{i}@example.com", "username": f"spam_{i}",
            "password": "correct horse 1"}, allow_redirects=False)
        statuses.append(resp.status)
        client.session.cookie_jar.clear_domain("127.0.0.1")
        csrf = await form_csrf(client, "/signup")
    assert statuses == [303, 303, 303, 429]
    for path, data in (("/forgot-password", {"email": "someone@example.com"}),
                       ("/reset-password", {"token": "A" * 43, "password": "new password 1",
                                            "password_again": "new password 1"}),
                       ("/signin", {"identifier": "x", "password": "y"})):
        page_path = "/reset-password?token=" + "A" * 43 if path == "/reset-password" else path
        csrf = await form_csrf(client, page_path)
        resp = await client.post(path, data={"csrf": csrf, **data}, allow_redirects=False)
        assert resp.status == 429, (path, await resp.text())
        retry_after(resp)
    # The API's /auth routes share the same per-address budget.
    resp = await client.post("/api/v1/auth/login", json={"identifier": "x", "password": "y"})
    assert resp.status == 429


async def test_reset_links_are_credentials_behind_the_throttle(
        make_settings: Callable[..., Settings], start_client: Callable[..., Any],
        database_url: str) -> None:
    client = await start_client(web_settings(make_settings, ratelimit_failed_auth="3/3600"))
    for i in range(3):
        resp = await client.post("/api/v1/auth/password-reset",
                                 json={"token": f"{i}" * 43, "password": "new password 1"})
        assert resp.status == 400
    stored = await counters(database_url, "failed_auth:")
    resp = await client.post("/api/v1/auth/password-reset",
                             json={"token": "Z" * 43, "password": "new password 1"})
    assert resp.status == 429
    retry_after(resp)
    assert await counters(database_url, "failed_auth:") == stored


# 5. Mail bombing ------------------------------------------------------------------------------

@pytest.fixture
async def mail_web(start_client: Callable[..., Any], make_settings: Callable[..., Settings],
                   mailbox: Mailbox) -> TestClient:
    return await start_client(make_settings(smtp_url=mailbox.url, background_jobs="on",
                                            mail_poll_seconds="1", app_url="",
                                            trusted_proxies="127.0.0.1"))


async def test_newsletter_confirmations_to_one_address_are_limited_whoever_asks(
        mail_web: TestClient, mailbox: Mailbox, database_url: str) -> None:
    victim = "victim@example.net"
    for i in range(20):
        resp = await mail_web.post("/api/v1/public/newsletter", json={"email": victim},
                                   headers={"X-Forwarded-For": f"192.0.2.{i % 4 + 1}"})
        assert resp.status == 202  # the sender is told nothing
    counted = await query(database_url, "SELECT count FROM rate_limit_counters WHERE key = %s",
                          (f"mail_to:{victim}",))
    assert counted[0]["count"] == 20  # one count for every ask, across the four addresses
    await mailbox.receive(victim, count=mail.PER_RECIPIENT.limit)
    await asyncio.sleep(1.5)  # a sender poll later: nothing more arrives
    assert len(mailbox.to(victim)) == mail.PER_RECIPIENT.limit
    queued = await query(database_url, "SELECT count(*) AS n FROM mail_outbox")
    assert queued[0]["n"] == 0


async def test_invite_revoke_loops_cannot_flood_an_address(
        mail_web: TestClient, mailbox: Mailbox, database_url: str) -> None:
    api = Api(mail_web)
    owner = await api.register()
    team = await api.team(owner)
    target = "flooded@example.net"
    for _ in range(10):
        made = await mail_web.post(f"/api/v1/teams/{team}/invites", headers=api.auth(owner["token"]),
                                   json={"email": target, "role": "Viewer"})
        assert made.status == 201
        invite = (await made.json())["invite"]["id"]
        gone = await mail_web.delete(f"/api/v1/teams/{team}/invites/{invite}",
                                     headers=api.auth(owner["token"]))
        assert gone.status == 200
    await mailbox.receive(target, count=mail.PER_RECIPIENT.limit)
    rows = await query(database_url, "SELECT count(*) AS n FROM mail_outbox WHERE recipient = %s",
                       (target,))
    assert rows[0]["n"] == 0  # everything queued was delivered ...
    assert len(mailbox.to(target)) == mail.PER_RECIPIENT.limit  # ... and no more was queued


# 8. Pre-hijacked accounts ---------------------------------------------------------------------

async def test_a_squatters_token_dies_when_the_owner_resets_the_password(
        mail_web: TestClient, mailbox: Mailbox) -> None:
    api = Api(mail_web)
    squatter = await api.register("squatter", email="owner@example.net")
    planted = (await api.api_token(squatter))["token"]
    assert (await mail_web.get("/api/v1/teams", headers=api.auth(planted))).status == 200
    await mail_web.post("/api/v1/auth/password-reset/request", json={"email": "owner@example.net"})
    message = await mailbox.receive("owner@example.net", subject="Atur ulang")
    assert "token API" in message.get_body(("plain",)).get_content()  # the mail says so
    link = link_in(message, "/reset-password?token=")
    done = await mail_web.post("/api/v1/auth/password-reset",
                               json={"token": token_of(link), "password": "the owners own 1"})
    assert done.status == 200
    assert (await mail_web.get("/api/v1/teams", headers=api.auth(planted))).status == 401
    assert (await mail_web.get("/api/v1/me", headers=api.auth(squatter["token"]))).status == 401


async def test_a_squatters_token_dies_when_the_owner_verifies_the_address(
        mail_web: TestClient, mailbox: Mailbox, database_url: str) -> None:
    api = Api(mail_web)
    squatter = await api.register("squatter2", email="owner2@example.net")
    planted = (await api.api_token(squatter))["token"]
    message = await mailbox.receive("owner2@example.net", subject="Verifikasi")
    assert "token API" in message.get_body(("plain",)).get_content()
    verify_token = token_of(link_in(message, "/verify-email?token="))
    assert (await mail_web.post("/api/v1/auth/verify-email", json={"token": verify_token})).status == 200
    assert (await mail_web.get("/api/v1/teams", headers=api.auth(planted))).status == 401
    rows = await query(database_url, "SELECT metadata FROM audit_logs WHERE action = 'email_verified'")
    assert rows[0]["metadata"]["tokens_revoked"] == 1


async def test_verifying_in_the_signed_in_browser_keeps_it_signed_in(
        mail_web: TestClient, mailbox: Mailbox) -> None:
    account = await sign_up(mail_web)
    message = await mailbox.receive(account["email"], subject="Verifikasi")
    link = link_in(message, "/verify-email?token=")
    local = link[link.index("/verify-email"):]
    csrf = await form_csrf(mail_web, local)
    done = await mail_web.post("/verify-email", data={"csrf": csrf, "token": token_of(link)})
    assert done.status == 200 and "terverifikasi" in await done.text()
    assert (await mail_web.get("/app/teams", allow_redirects=False)).status == 200


# 9. Stale credentials -------------------------------------------------------------------------

async def test_a_user_deleted_in_the_database_gets_401_at_once(
        client: TestClient, api: Api, database_url: str) -> None:
    user = await api.register()
    assert (await client.get("/api/v1/me", headers=api.auth(user["token"]))).status == 200  # cached
    await query(database_url, "DELETE FROM users WHERE id = %s RETURNING id", (user["id"],))
    resp = await client.get("/api/v1/me", headers=api.auth(user["token"]))
    assert resp.status == 401 and "error" in await resp.json()


# 10. The API's login while limited ------------------------------------------------------------

async def test_api_login_refuses_the_right_password_while_limited(
        make_settings: Callable[..., Settings], start_client: Callable[..., Any]) -> None:
    client = await start_client(make_settings(ratelimit_failed_auth="2/3600"))
    api = Api(client)
    user = await api.register()
    two_factor, _totp = await two_factor_user(client)
    for _ in range(2):
        resp = await client.post("/api/v1/auth/login", json={"identifier": user["username"],
                                                              "password": "wrong wrong"})
        assert resp.status == 401
    for who in (user, two_factor):
        resp = await client.post("/api/v1/auth/login", json={"identifier": who["username"],
                                                              "password": who["password"]})
        assert resp.status == 429, await resp.text()  # not 200, not 2fa_required
        retry_after(resp)


# 11. A locked allowlisted token ---------------------------------------------------------------

async def test_a_locked_token_answers_401_from_a_disallowed_address_too(
        make_settings: Callable[..., Settings], start_client: Callable[..., Any]) -> None:
    client = await start_client(make_settings(trusted_proxies="127.0.0.1"))
    api = Api(client)
    token = (await api.api_token(await api.register(), allowed_ips=["10.0.0.1"]))["token"]
    ok = await client.get("/api/v1/me", headers={**api.auth(token), "X-Forwarded-For": "10.0.0.1"})
    assert ok.status == 200  # now in this process's cache
    got = [(await client.get("/api/v1/me", headers={**api.auth(token),
                                                    "X-Forwarded-For": "192.0.2.50"})).status
           for _ in range(7)]
    assert got == [403] * 5 + [401, 401]
