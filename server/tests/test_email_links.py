"""Email verification and password reset: the mail arrives at a real SMTP server, the tests
follow its link, and each link works once, for its own purpose, before it expires."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from aiohttp.test_utils import TestClient

from conftest import Api, query
from smtpbox import Mailbox, link_in
from test_dashboard import csrf_of, form_csrf

from cvsm_server.core.config import Settings
from cvsm_server.accounts.email_verification import LINK_INVALID as VERIFY_INVALID
from cvsm_server.accounts.password_reset import LINK_INVALID as RESET_INVALID


@pytest.fixture
async def web(start_client: Callable[..., Any], make_settings: Callable[..., Settings],
              mailbox: Mailbox) -> TestClient:
    """Mail to `mailbox`; no app URL, so links point at the address the client asked (and the
    plain-http test client keeps its cookies)."""
    return await start_client(make_settings(smtp_url=mailbox.url, background_jobs="on",
                                            mail_poll_seconds="1", app_url=""))


def token_of(link: str) -> str:
    return parse_qs(urlsplit(link).query)["token"][0]


def local(link: str) -> str:
    parts = urlsplit(link)
    return f"{parts.path}?{parts.query}"


async def test_registering_mails_a_link_that_verifies_the_email_once(
        web: TestClient, mailbox: Mailbox, database_url: str) -> None:
    api = Api(web)
    user = await api.register("verify_me")
    message = await mailbox.receive(user["email"])
    assert message["Subject"] == "Verifikasi alamat email Anda"
    link = link_in(message, "/verify-email?token=")
    token = token_of(link)
    stored = await query(database_url, "SELECT token_hash, purpose FROM mail_tokens")
    assert [r["purpose"] for r in stored] == ["verify_email"]
    assert token.encode() not in bytes(stored[0]["token_hash"])
    # Opening the link (as a mail scanner would) uses nothing: the page's button posts.
    for _ in range(2):
        page = await web.get(local(link))
        assert page.status == 200 and f'value="{token}"' in await page.text()
        assert page.headers["Cache-Control"] == "no-store"
    me = await (await web.get("/api/v1/me", headers=api.auth(user["token"]))).json()
    assert me["email_verified"] is False
    resp = await web.post("/api/v1/auth/verify-email", json={"token": token})
    assert resp.status == 200 and await resp.json() == {"ok": True, "email_verified": True}
    # The first proof of the address ends the sessions made before it (see the squatter test).
    old = await web.get("/api/v1/me", headers=api.auth(user["token"]))
    assert old.status == 401
    login = await web.post("/api/v1/auth/login", json={"identifier": user["username"],
                                                        "password": user["password"]})
    me = await (await web.get("/api/v1/me", headers=api.auth((await login.json())["token"]))).json()
    assert me["email_verified"] is True
    again = await web.post("/api/v1/auth/verify-email", json={"token": token})
    assert again.status == 400 and (await again.json())["error"] == VERIFY_INVALID
    rows = await query(database_url, "SELECT user_email FROM audit_logs WHERE action = 'email_verified'")
    assert [r["user_email"] for r in rows] == [user["email"]]


async def test_verifying_with_the_accounts_own_session_keeps_that_session(
        web: TestClient, mailbox: Mailbox) -> None:
    api = Api(web)
    user = await api.register("verify_keep")
    other = await web.post("/api/v1/auth/login", json={"identifier": user["username"],
                                                        "password": user["password"]})
    other_jwt = (await other.json())["token"]
    token = token_of(link_in(await mailbox.receive(user["email"]), "/verify-email"))
    resp = await web.post("/api/v1/auth/verify-email", json={"token": token},
                          headers=api.auth(user["token"]))
    assert resp.status == 200
    assert (await web.get("/api/v1/me", headers=api.auth(user["token"]))).status == 200
    assert (await web.get("/api/v1/me", headers=api.auth(other_jwt))).status == 401


async def test_asking_again_replaces_the_link_and_stops_once_verified(
        web: TestClient, mailbox: Mailbox) -> None:
    api = Api(web)
    user = await api.register("verify_again")
    first = token_of(link_in(await mailbox.receive(user["email"]), "/verify-email"))
    resp = await web.post("/api/v1/auth/verify-email/request", headers=api.auth(user["token"]))
    assert resp.status == 202 and await resp.json() == {"ok": True, "sent": True}
    second = token_of(link_in(await mailbox.receive(user["email"], count=2), "/verify-email"))
    assert first != second
    resp = await web.post("/api/v1/auth/verify-email", json={"token": first})
    assert resp.status == 400  # the newest link is the one that counts
    assert (await web.post("/api/v1/auth/verify-email", json={"token": second})).status == 200
    login = await web.post("/api/v1/auth/login", json={"identifier": user["username"],
                                                        "password": user["password"]})
    resp = await web.post("/api/v1/auth/verify-email/request",
                          headers=api.auth((await login.json())["token"]))
    assert resp.status == 202 and await resp.json() == {"ok": True, "sent": False}
    assert len(mailbox.to(user["email"])) == 2


async def test_asking_for_links_needs_a_session_and_is_limited(web: TestClient) -> None:
    api = Api(web)
    user = await api.register("verify_limit")
    resp = await web.post("/api/v1/auth/verify-email/request")
    assert resp.status == 401
    token = (await api.api_token(user))["token"]
    resp = await web.post("/api/v1/auth/verify-email/request", headers=api.auth(token))
    assert resp.status == 403
    for _ in range(3):
        resp = await web.post("/api/v1/auth/verify-email/request", headers=api.auth(user["token"]))
        assert resp.status == 202
    resp = await web.post("/api/v1/auth/verify-email/request", headers=api.auth(user["token"]))
    assert resp.status == 429 and int(resp.headers["Retry-After"]) > 0


@pytest.mark.parametrize("token", ["", "short", "x" * 200, "a" * 43, "bad token with spaces!!"])
async def test_malformed_or_unknown_tokens_get_one_message(web: TestClient, token: str) -> None:
    resp = await web.post("/api/v1/auth/verify-email", json={"token": token})
    assert resp.status == 400 and (await resp.json())["error"] == VERIFY_INVALID
    resp = await web.post("/api/v1/auth/password-reset", json={"token": token, "password": "long enough 1"})
    assert resp.status == 400 and (await resp.json())["error"] == RESET_INVALID


async def test_password_reset_sets_the_password_and_logs_out_every_session(
        web: TestClient, mailbox: Mailbox, database_url: str) -> None:
    api = Api(web)
    user = await api.register("forgetful")
    await query(database_url, "UPDATE users SET email_verified = true WHERE id = %s RETURNING id",
                (user["id"],))
    other_session = (await (await web.post("/api/v1/auth/login", json={
        "identifier": user["username"], "password": user["password"]})).json())["token"]
    service_token = (await api.api_token(user))["token"]
    resp = await web.post("/api/v1/auth/password-reset/request", json={"email": user["email"].upper()})
    assert resp.status == 202 and await resp.json() == {"ok": True}
    message = await mailbox.receive(user["email"], count=2)  # after the verification mail
    assert message["Subject"] == "Atur ulang kata sandi cvsm"
    token = token_of(link_in(message, "/reset-password?token="))

    short = await web.post("/api/v1/auth/password-reset", json={"token": token, "password": "short"})
    assert short.status == 400  # refused before the link is used
    resp = await web.post("/api/v1/auth/password-reset", json={"token": token, "password": "brand new pass 2"})
    assert resp.status == 200 and await resp.json() == {"ok": True}
    for jwt in (user["token"], other_session):
        assert (await web.get("/api/v1/me", headers=api.auth(jwt))).status == 401
    # API tokens are not sessions: programs keep running (the address was proved before).
    assert (await web.get("/api/v1/teams", headers=api.auth(service_token))).status == 200
    old = await web.post("/api/v1/auth/login", json={"identifier": user["username"], "password": user["password"]})
    assert old.status == 401
    new = await web.post("/api/v1/auth/login", json={"identifier": user["username"], "password": "brand new pass 2"})
    assert new.status == 200
    me = await (await web.get("/api/v1/me", headers=api.auth((await new.json())["token"]))).json()
    assert me["email_verified"] is True
    again = await web.post("/api/v1/auth/password-reset", json={"token": token, "password": "third pass 33"})
    assert again.status == 400 and (await again.json())["error"] == RESET_INVALID
    actions = [r["action"] for r in await query(
        database_url, "SELECT action FROM audit_logs WHERE user_email = %s ORDER BY created_at",
        (user["email"],))]
    assert "password_reset_requested" in actions and "password_reset" in actions


async def test_a_reset_link_expires_after_an_hour(web: TestClient, mailbox: Mailbox,
                                                   database_url: str) -> None:
    api = Api(web)
    user = await api.register("slowpoke")
    await web.post("/api/v1/auth/password-reset/request", json={"email": user["email"]})
    message = await mailbox.receive(user["email"], subject="Atur ulang kata sandi")
    token = token_of(link_in(message, "/reset-password"))
    [row] = await query(database_url, """SELECT expires_at - created_at AS life FROM mail_tokens
                                         WHERE purpose = 'password_reset'""")
    assert row["life"].total_seconds() == 3600
    await query(database_url, "UPDATE mail_tokens SET expires_at = now() - interval '1 second' "
                              "WHERE purpose = 'password_reset' RETURNING id")
    resp = await web.post("/api/v1/auth/password-reset", json={"token": token, "password": "brand new pass 2"})
    assert resp.status == 400 and (await resp.json())["error"] == RESET_INVALID


async def test_reset_requests_answer_the_same_for_unknown_addresses(
        web: TestClient, mailbox: Mailbox, database_url: str) -> None:
    api = Api(web)
    user = await api.register("known_one")
    await mailbox.receive(user["email"])
    known = await web.post("/api/v1/auth/password-reset/request", json={"email": user["email"]})
    unknown = await web.post("/api/v1/auth/password-reset/request", json={"email": "nobody@example.com"})
    assert (known.status, await known.read()) == (unknown.status, await unknown.read())
    assert dict(known.headers).keys() == dict(unknown.headers).keys()
    await mailbox.receive(user["email"], count=2)
    assert mailbox.to("nobody@example.com") == []
    rows = await query(database_url, "SELECT email FROM mail_tokens WHERE purpose = 'password_reset'")
    assert [r["email"] for r in rows] == [user["email"]]


async def test_reset_mails_per_address_are_limited_silently(
        web: TestClient, mailbox: Mailbox, database_url: str) -> None:
    api = Api(web)
    user = await api.register("flooded")
    for _ in range(5):
        resp = await web.post("/api/v1/auth/password-reset/request", json={"email": user["email"]})
        assert resp.status == 202 and await resp.json() == {"ok": True}
    await mailbox.receive(user["email"], count=4)  # the verification mail and three links
    await outbox_drained(database_url)
    assert len(mailbox.to(user["email"])) == 4
    rows = await query(database_url, "SELECT id FROM mail_tokens WHERE purpose = 'password_reset'")
    assert len(rows) == 3


async def outbox_drained(database_url: str) -> None:
    for _ in range(500):
        if not await query(database_url, "SELECT id FROM mail_outbox"):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the outbox was not delivered")


async def test_the_dashboard_walks_forgot_reset_and_sign_in(web: TestClient, mailbox: Mailbox) -> None:
    api = Api(web)
    user = await api.register("web_forgot")
    page = await web.get("/signin")
    assert 'href="/forgot-password"' in await page.text()
    csrf = await form_csrf(web, "/forgot-password")
    resp = await web.post("/forgot-password", data={"csrf": csrf, "email": user["email"]})
    assert resp.status == 200 and "kami sudah mengirim tautan" in await resp.text()
    link = link_in(await mailbox.receive(user["email"], count=2), "/reset-password")
    page = await web.get(local(link))
    html = await page.text()
    assert page.status == 200 and page.headers["Cache-Control"] == "no-store"
    mismatch = await web.post("/reset-password", data={
        "csrf": csrf_of(html), "token": token_of(link), "password": "new password 9",
        "password_again": "other password 9"})
    assert mismatch.status == 400 and "tidak sama" in await mismatch.text()
    no_csrf = await web.post("/reset-password", data={
        "token": token_of(link), "password": "new password 9", "password_again": "new password 9"})
    assert no_csrf.status == 403
    done = await web.post("/reset-password", data={
        "csrf": csrf_of(html), "token": token_of(link), "password": "new password 9",
        "password_again": "new password 9"})
    text = await done.text()
    assert done.status == 200 and "Kata sandi sudah diganti" in text
    resp = await web.post("/signin", allow_redirects=False, data={
        "csrf": csrf_of(text), "identifier": user["username"], "password": "new password 9"})
    assert resp.status == 303 and resp.headers["Location"] == "/app/teams"


async def test_the_dashboard_verifies_and_resends(web: TestClient, mailbox: Mailbox) -> None:
    page = await web.get("/signup")
    await web.post("/signup", allow_redirects=False, data={
        "csrf": csrf_of(await page.text()), "name": "Web", "email": "webverify@example.com",
        "username": "webverify", "password": "correct horse 1"})
    account = await (await web.get("/app/account")).text()
    assert "belum terverifikasi" in account
    resp = await web.post("/app/account/verify-email", data={"csrf": csrf_of(account)})
    assert resp.status == 200 and "Tautan verifikasi sudah dikirim" in await resp.text()
    link = link_in(await mailbox.receive("webverify@example.com", count=2), "/verify-email")
    page = await web.get(local(link))
    done = await web.post("/verify-email", data={"csrf": csrf_of(await page.text()),
                                                 "token": token_of(link)})
    assert done.status == 200 and "sudah terverifikasi" in await done.text()
    account = await (await web.get("/app/account")).text()
    assert "(terverifikasi)" in account and "Kirim ulang" not in account
