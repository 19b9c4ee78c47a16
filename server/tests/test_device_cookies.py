"""Device cookies for the per-account wait (issue 42, OWASP "Slow down online guessing attacks
with device cookies"): after repeated wrong passwords an account waits (429), but the browser
its owner signed in with before holds a signed cookie for that account and is checked as usual;
a guesser without one, with a forged cookie, another account's or one from before a password
reset or "sign out everywhere", stays slowed. Each test drives the real server over HTTP (the
dashboard with its real CSRF tokens) and fails on the code before device cookies."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import pyotp
from aiohttp.test_utils import TestClient

from conftest import Api, query
from smtpbox import Mailbox, link_in
from test_dashboard import form_csrf
from test_email_links import token_of

from cvsm_server.accounts import devices, ratelimit
from cvsm_server.core.config import Settings
from cvsm_server.crypto.sealing import Keyring
from cvsm_server.web.state import KEYRING

GUESSES = ratelimit.ACCOUNT_FREE_FAILURES + 2


def web_settings(make_settings: Callable[..., Settings], **overrides: str) -> Settings:
    # app_url unset: the plain-http client keeps (and sends back) its cookies.
    return make_settings(app_url="", trusted_proxies="127.0.0.1", **overrides)


async def signin_post(client: TestClient, identifier: str, password: str) -> Any:
    csrf = await form_csrf(client, "/signin")
    return await client.post("/signin", data={"csrf": csrf, "identifier": identifier,
                                              "password": password}, allow_redirects=False)


async def browser_with(start_client: Callable[..., Any], settings: Settings,
                       device: str | None = None) -> TestClient:
    """A fresh browser (its own cookie jar), holding `device` as its device cookie."""
    browser = await start_client(settings)
    if device is not None:
        browser.session.cookie_jar.update_cookies({devices.COOKIE: device})
    return browser


async def lock_out(client: TestClient, identifier: str, database_url: str) -> None:
    """A guesser's wrong passwords from many addresses: the account is then in its wait, made
    the longest (15 minutes) as if the guessing had gone on, so it outlasts the test."""
    for i in range(GUESSES):
        resp = await client.post("/api/v1/auth/login", json={
            "identifier": identifier, "password": f"guess number {i}"},
            headers={"X-Forwarded-For": f"198.51.100.{i + 1}"})
        assert resp.status in (401, 429)
    await query(database_url, "UPDATE auth_throttle SET blocked_until = now()"
                              " + make_interval(secs => %s) WHERE key LIKE 'login:%%'",
                (ratelimit.ACCOUNT_MAX_DELAY,))
    resp = await client.post("/api/v1/auth/login", json={"identifier": identifier,
                                                        "password": "guess again"})
    assert resp.status == 429


async def test_the_owners_browser_passes_the_wait_a_guesser_stays_slowed(
        make_settings: Callable[..., Settings], start_client: Callable[..., Any],
        database_url: str) -> None:
    settings = web_settings(make_settings)
    owners_browser = await start_client(settings)
    api = Api(owners_browser)
    owner = await api.register("locked_owner")
    other = await api.register("somebody_else")

    # A complete sign-in sets the device cookie: HttpOnly, SameSite=Lax, about a year.
    resp = await signin_post(owners_browser, owner["username"], owner["password"])
    assert resp.status == 303 and "cvsm_session" in resp.cookies
    cookie = resp.cookies[devices.COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "Lax" and not cookie["secure"]
    assert int(cookie["max-age"]) == devices.LIFETIME
    device = cookie.value
    assert owner["password"] not in device and devices.read(
        Keyring(bytes(32)), device) is None  # signed with the server's key, not any key

    guesser = await start_client(settings)
    await lock_out(guesser, owner["username"], database_url)
    right = await signin_post(guesser, owner["username"], owner["password"])
    assert right.status == 429 and "cvsm_session" not in right.cookies

    # The owner's browser (its cookie, a new session) is checked as usual and signs in; the
    # account stays in its wait for everyone else.
    browser = await browser_with(start_client, settings, device)
    ok = await signin_post(browser, owner["username"], owner["password"])
    assert ok.status == 303 and "cvsm_session" in ok.cookies
    assert ok.cookies[devices.COOKIE].value != device  # a fresh cookie each sign-in
    assert (await browser.get("/app/teams", allow_redirects=False)).status == 200
    assert (await signin_post(guesser, owner["username"], owner["password"])).status == 429
    # The cookie works with the email too; a wrong password from it is a plain 401.
    browser = await browser_with(start_client, settings, device)
    assert (await signin_post(browser, owner["email"].upper(), "not it at all")).status == 401
    # The API's login honours the cookie when it is sent (it sets none).
    resp = await guesser.post("/api/v1/auth/login",
                              headers={"Cookie": f"{devices.COOKIE}={device}"},
                              json={"identifier": owner["username"], "password": owner["password"]})
    assert resp.status == 200 and devices.COOKIE not in resp.cookies

    # Another account's cookie does not open this account's wait.
    others = await signin_post(await start_client(settings), other["username"], other["password"])
    stranger = await browser_with(start_client, settings, others.cookies[devices.COOKIE].value)
    assert (await signin_post(stranger, owner["username"], owner["password"])).status == 429
    # Nor a forged one: this account's id with a made-up signature, a changed generation, or
    # one signed with another key.
    parts = device.split(".")
    forged = [
        ".".join(parts[:-1] + ["A" * 43]),
        ".".join(parts[:2] + ["7"] + parts[3:]),
        devices.mint(Keyring(b"\x07" * 32), uuid.UUID(owner["id"]), 0),
        "v1." + uuid.UUID(owner["id"]).hex,
    ]
    for value in forged:
        browser = await browser_with(start_client, settings, value)
        refused = await signin_post(browser, owner["username"], owner["password"])
        assert refused.status == 429, value
    # Nor one over a year old, though signed by this server.
    old = devices.mint(keyring_of(owners_browser), uuid.UUID(owner["id"]), 0,
                       issued_at=int(time.time()) - devices.LIFETIME - 5)
    browser = await browser_with(start_client, settings, old)
    assert (await signin_post(browser, owner["username"], owner["password"])).status == 429
    rows = await query(database_url, "SELECT key FROM auth_throttle")
    assert all(owner["username"] not in r["key"] and device not in r["key"] for r in rows)


async def test_a_cookie_that_fails_too_often_is_no_longer_trusted(
        make_settings: Callable[..., Settings], start_client: Callable[..., Any],
        database_url: str) -> None:
    settings = web_settings(make_settings)
    first = await start_client(settings)
    owner = await Api(first).register("stolen_cookie")
    device = (await signin_post(first, owner["username"], owner["password"])).cookies[
        devices.COOKIE].value
    guesser = await start_client(settings)
    await lock_out(guesser, owner["username"], database_url)
    browser = await browser_with(start_client, settings, device)
    for i in range(devices.MAX_FAILURES):
        assert (await signin_post(browser, owner["username"], f"wrong {i}")).status == 401
    # Its failures used up: the cookie's browser waits like any other.
    refused = await signin_post(browser, owner["username"], owner["password"])
    assert refused.status == 429 and "cvsm_session" not in refused.cookies


async def test_sign_out_everywhere_invalidates_every_device_cookie(
        make_settings: Callable[..., Settings], start_client: Callable[..., Any],
        database_url: str) -> None:
    settings = web_settings(make_settings)
    first = await start_client(settings)
    owner = await Api(first).register("signs_out_all")
    device = (await signin_post(first, owner["username"], owner["password"])).cookies[
        devices.COOKIE].value
    resp = await first.post("/api/v1/me/logout-all", headers=Api.auth(owner["token"]))
    assert resp.status == 200
    guesser = await start_client(settings)
    await lock_out(guesser, owner["username"], database_url)
    browser = await browser_with(start_client, settings, device)
    assert (await signin_post(browser, owner["username"], owner["password"])).status == 429


async def test_a_password_reset_invalidates_every_device_cookie(
        mail_client: TestClient, mailbox: Mailbox, database_url: str) -> None:
    api = Api(mail_client)
    owner = await api.register("resets_password")
    login = {"identifier": owner["username"], "password": owner["password"]}
    resp = await mail_client.post("/api/v1/auth/login", json=login)
    assert resp.status == 200
    # The cookie the dashboard gives this account (generation 0), as a browser sends it back.
    device = devices.mint(keyring_of(mail_client), uuid.UUID(owner["id"]), 0)
    await lock_out(mail_client, owner["username"], database_url)
    with_cookie = {"Cookie": f"{devices.COOKIE}={device}"}
    assert (await mail_client.post("/api/v1/auth/login", json=login,
                                   headers=with_cookie)).status == 200
    await lock_out(mail_client, owner["username"], database_url)
    resp = await mail_client.post("/api/v1/auth/password-reset/request",
                                  json={"email": owner["email"]})
    assert resp.status == 202
    message = await mailbox.receive(owner["email"], count=2)  # after the verification mail
    token = token_of(link_in(message, "/reset-password?token="))
    resp = await mail_client.post("/api/v1/auth/password-reset",
                                  json={"token": token, "password": "brand new pass 2"})
    assert resp.status == 200
    new_login = {"identifier": owner["username"], "password": "brand new pass 2"}
    assert (await mail_client.post("/api/v1/auth/login", json=new_login,
                                   headers=with_cookie)).status == 429


def keyring_of(client: TestClient) -> Keyring:
    return client.app[KEYRING]


async def test_with_two_factor_the_cookie_comes_after_the_code_and_passes_both_waits(
        make_settings: Callable[..., Settings], start_client: Callable[..., Any],
        database_url: str) -> None:
    settings = web_settings(make_settings)
    first = await start_client(settings)
    api = Api(first)
    owner = await api.register("two_steps")
    setup = await first.post("/api/v1/me/2fa/setup", headers=api.auth(owner["token"]))
    totp = pyotp.TOTP((await setup.json())["secret"])
    resp = await first.post("/api/v1/me/2fa/enable", headers=api.auth(owner["token"]),
                            json={"code": totp.now()})
    assert resp.status == 200

    async def sign_in_with_code(browser: TestClient) -> Any:
        step = await signin_post(browser, owner["username"], owner["password"])
        assert step.status == 200 and devices.COOKIE not in step.cookies  # not yet
        pending = re.search(r'name="pending" value="([^"]+)"', await step.text()).group(1)
        csrf = await form_csrf(browser, "/signin")
        await query(database_url, "UPDATE users SET totp_last_step = 0")  # a fresh code again
        return await browser.post("/signin/2fa", allow_redirects=False, data={
            "csrf": csrf, "pending": pending, "code": totp.now()})

    done = await sign_in_with_code(first)
    assert done.status == 303 and "cvsm_session" in done.cookies
    device = done.cookies[devices.COOKIE].value
    # Both the password's and the code's waits are on: the cookie's browser passes both.
    await lock_out(await start_client(settings), owner["username"], database_url)
    await query(database_url, """INSERT INTO auth_throttle (key, failures, blocked_until,
                                 last_failed_at) VALUES (%s, 9, now() + interval '15 minutes',
                                 now())""", (f"2fa:{owner['id']}",))
    browser = await browser_with(start_client, settings, device)
    again = await sign_in_with_code(browser)
    assert again.status == 303 and "cvsm_session" in again.cookies
