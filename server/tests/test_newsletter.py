"""The newsletter: double opt-in through the mail a real SMTP server (aiosmtpd) receives, the
opt-in at register (no mail), the unsubscribe link in every mail, single-use tokens, and the
subscription limit (5 per 10 s per IP) at its exact edge."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from aiohttp.test_utils import TestClient

from conftest import Api, query
from smtpbox import html_of, link_in

from cvsm_server.core.config import Settings
from cvsm_server.mail.newsletter import TOKEN_INVALID

CSRF_RE = re.compile(r'name="csrf" value="([0-9a-f]{64})"')
GENERIC = {"error": TOKEN_INVALID}
HTML = {"Accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"}


def token_of(link: str) -> str:
    return parse_qs(urlsplit(link).query)["token"][0]


def local(link: str) -> str:
    parts = urlsplit(link)
    return f"{parts.path}?{parts.query}"


def csrf_of(html: str) -> str:
    match = CSRF_RE.search(html)
    assert match, "the page has no CSRF field"
    return match.group(1)


async def subscribe(client: TestClient, email: str) -> Any:
    return await client.post("/api/v1/public/newsletter", json={"email": email})


async def status_of(database_url: str, email: str) -> str | None:
    rows = await query(database_url, "SELECT status FROM newsletter_subscriptions "
                                     "WHERE lower(email) = lower(%s)", (email,))
    return rows[0]["status"] if rows else None


async def outbox_count(database_url: str) -> int:
    """Newsletter mail waiting (registering also queues a verification mail, not counted)."""
    return (await query(database_url, "SELECT count(*) AS n FROM mail_outbox "
                                      "WHERE purpose LIKE 'newsletter%%'"))[0]["n"]


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    """The newsletter limit off, as the other kinds are in the tests (one test turns it on)."""
    return make_settings(ratelimit_newsletter="off")


@pytest.fixture
async def web_client(start_client: Callable[..., Any], make_settings: Callable[..., Settings],
                     mailbox: Any) -> TestClient:
    """Mail to `mailbox`; no app URL (links use the address asked; plain http keeps cookies)."""
    return await start_client(make_settings(app_url="", smtp_url=mailbox.url, background_jobs="on",
                                            mail_poll_seconds="1"))


async def test_double_opt_in_through_the_mail_and_the_confirm_page(
        web_client: TestClient, mailbox: Any, database_url: str) -> None:
    client = web_client
    page = await client.get("/newsletter")
    assert page.status == 200 and "Berlangganan" in await page.text()
    resp = await client.post("/newsletter", data={"csrf": csrf_of(await page.text()),
                                                  "email": "Reader@Example.com"})
    assert resp.status == 200 and "Periksa kotak masuk" in await resp.text()
    assert await status_of(database_url, "reader@example.com") == "pending"

    message = await mailbox.receive("reader@example.com")
    confirm = link_in(message, "/newsletter/confirm")
    leave = link_in(message, "/api/v1/public/newsletter/unsubscribe")
    assert confirm.startswith(str(client.make_url("/newsletter/confirm?token=")))
    assert token_of(confirm) != token_of(leave)
    assert leave in html_of(message)
    # Opening the link changes nothing (a mail scanner may fetch it); the button posts.
    page = await client.get(local(confirm))
    html = await page.text()
    assert page.status == 200 and page.headers["Cache-Control"] == "no-store"
    assert await status_of(database_url, "reader@example.com") == "pending"
    resp = await client.post("/newsletter/confirm", data={"csrf": csrf_of(html), "token": token_of(confirm)})
    assert resp.status == 200 and "sudah dikonfirmasi" in await resp.text()
    assert await status_of(database_url, "reader@example.com") == "confirmed"
    # Single use: the page again, and the API, answer the generic error.
    resp = await client.post("/newsletter/confirm", data={"csrf": csrf_of(html), "token": token_of(confirm)})
    assert resp.status == 400 and TOKEN_INVALID in await resp.text()
    resp = await client.post("/api/v1/public/newsletter/confirm", json={"token": token_of(confirm)})
    assert (resp.status, await resp.json()) == (400, GENERIC)


async def test_confirm_through_the_api_and_a_confirmed_address_gets_no_second_mail(
        client: TestClient, database_url: str) -> None:
    resp = await subscribe(client, "api-reader@example.com")
    assert (resp.status, await resp.json()) == (202, {"ok": True})
    [row] = await query(database_url, "SELECT count(*) AS n FROM mail_tokens WHERE purpose = 'newsletter_confirm'")
    assert row["n"] == 1 and await outbox_count(database_url) == 1
    # A second request while pending sends a new link; the first one stops working.
    await subscribe(client, "api-reader@example.com")
    assert await outbox_count(database_url) == 2
    live = await query(database_url, "SELECT count(*) AS n FROM mail_tokens "
                                     "WHERE purpose = 'newsletter_confirm' AND used_at IS NULL")
    assert live[0]["n"] == 1
    await query(database_url, "UPDATE newsletter_subscriptions SET status = 'confirmed' RETURNING id")
    resp = await subscribe(client, "API-READER@example.com")
    assert (resp.status, await resp.json()) == (202, {"ok": True})
    assert await outbox_count(database_url) == 2  # nothing more was sent


async def test_bad_input_is_400(client: TestClient) -> None:
    for email in ("nope", "a@b", "", "x" * 250 + "@example.com"):
        resp = await subscribe(client, email)
        assert resp.status == 400
    assert (await client.post("/api/v1/public/newsletter", json={"email": 3})).status == 400
    assert (await client.post("/api/v1/public/newsletter", data="{")).status == 400
    for token in ("short", "x" * 43, "not/a token!" * 3):
        resp = await client.post("/api/v1/public/newsletter/confirm", json={"token": token})
        assert (resp.status, await resp.json()) == (400, GENERIC)
        resp = await client.get("/api/v1/public/newsletter/unsubscribe", params={"token": token})
        assert (resp.status, await resp.json()) == (400, GENERIC)
    resp = await client.get("/api/v1/public/newsletter/unsubscribe")
    assert (resp.status, await resp.json()) == (400, GENERIC)


async def test_opt_in_at_register_is_confirmed_at_once_without_mail(
        client: TestClient, database_url: str) -> None:
    resp = await client.post("/api/v1/auth/register", json={
        "email": "OptIn@example.com", "username": "opt_in", "password": "correct horse 1",
        "name": "Opt In", "newsletter_opt_in": True})
    assert resp.status == 201
    [row] = await query(database_url, "SELECT status, source, confirmed_at FROM newsletter_subscriptions")
    assert (row["status"], row["source"]) == ("confirmed", "register") and row["confirmed_at"]
    assert await outbox_count(database_url) == 0
    [user] = await query(database_url, "SELECT newsletter_opt_in FROM users WHERE username = 'opt_in'")
    assert user["newsletter_opt_in"] is True
    assert (await subscribe(client, "optin@example.com")).status == 202
    assert await outbox_count(database_url) == 0
    # Without the opt-in nothing is subscribed.
    await Api(client).register("no_opt_in")
    assert len(await query(database_url, "SELECT id FROM newsletter_subscriptions")) == 1


async def test_unsubscribe_through_the_link_as_a_page_or_json(
        mail_client: TestClient, mailbox: Any, database_url: str) -> None:
    client = mail_client
    assert (await subscribe(client, "leaver@example.com")).status == 202
    message = await mailbox.receive("leaver@example.com")
    confirm, leave = link_in(message, "/newsletter/confirm"), link_in(message, "/unsubscribe")
    assert leave.startswith("https://cvsm.test/api/v1/public/newsletter/unsubscribe?token=")
    resp = await client.post("/api/v1/public/newsletter/confirm", json={"token": token_of(confirm)})
    assert (resp.status, await resp.json()) == (200, {"ok": True})
    [user_row] = await query(database_url, "SELECT count(*) AS n FROM users")  # no account needed
    assert user_row["n"] == 0

    resp = await client.get(local(leave), headers=HTML)
    assert resp.status == 200 and resp.content_type == "text/html"
    assert "berhenti berlangganan" in await resp.text()
    assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
    assert await status_of(database_url, "leaver@example.com") == "unsubscribed"
    resp = await client.get(local(leave), headers=HTML)  # used
    assert resp.status == 400 and resp.content_type == "text/html"
    assert TOKEN_INVALID in await resp.text()
    resp = await client.get(local(leave))
    assert (resp.status, await resp.json()) == (400, GENERIC)

    # Subscribing again sends a new mail with a new link; JSON for a client that is no browser.
    assert (await subscribe(client, "leaver@example.com")).status == 202
    message = await mailbox.receive("leaver@example.com", count=2)
    confirm, leave = link_in(message, "/newsletter/confirm"), link_in(message, "/unsubscribe")
    resp = await client.get(local(leave))
    assert (resp.status, await resp.json()) == (200, {"ok": True})
    # Unsubscribing ended the confirmation link of the same mail.
    resp = await client.post("/api/v1/public/newsletter/confirm", json={"token": token_of(confirm)})
    assert (resp.status, await resp.json()) == (400, GENERIC)
    assert await status_of(database_url, "leaver@example.com") == "unsubscribed"


async def _start_of_a_window(period: int) -> None:
    """Wait until the rate-limit window (fixed, `period` seconds) has most of its time left, so
    that six requests in a row cannot straddle two windows."""
    left = period - time.time() % period
    if left < period / 2:
        await asyncio.sleep(left + 0.05)


async def test_subscribing_is_limited_to_5_per_10_seconds_per_ip_apart_from_public(
        start_client: Callable[..., Any], make_settings: Callable[..., Settings]) -> None:
    client = await start_client(make_settings(ratelimit_newsletter="5/10", ratelimit_public="2/3600",
                                              app_url=""))
    await _start_of_a_window(10)
    for n in range(5):
        resp = await subscribe(client, f"limit{n}@example.com")
        assert resp.status == 202, n
    resp = await subscribe(client, "limit5@example.com")
    assert resp.status == 429
    assert 1 <= int(resp.headers["Retry-After"]) <= 10
    # The dashboard's form counts against the same limit.
    page = await client.get("/newsletter")
    resp = await client.post("/newsletter", data={"csrf": csrf_of(await page.text()),
                                                  "email": "form@example.com"})
    assert resp.status == 429 and "Retry-After" in resp.headers
    # None of it was charged to the `public` limit (2 per hour here).
    assert [(await client.get("/api/v1/public/stats")).status for _ in range(3)] == [200, 200, 429]
