"""A team's rotation and webhook pages (issue 42, item 5; Admin and above), driven as a browser
would (real CSRF tokens, post/redirect/get) against the app from its factory: a rotation policy
set, changed, run now and deleted; a webhook created with its signing secret shown once, tested
(its delivery listed) and deleted; bad input answered on the page with its message; members
below Admin get no link and a 403 page."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from cvsm_server.core.config import Settings

from conftest import Api, query
from test_dashboard import form_csrf, sign_up
from test_page_flows import flash_of, team_with_secret

WHSEC_RE = re.compile(r"whsec_[A-Za-z0-9_-]{20,}")


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    # plain http keeps the cookies; a webhook to this machine is allowed (nothing is sent:
    # background jobs are off).
    return make_settings(app_url="", webhook_allow_private="1")


async def test_an_admin_sets_changes_runs_and_deletes_a_rotation_policy(
        client: TestClient, database_url: str) -> None:
    await sign_up(client)
    csrf, secret_id = await team_with_secret(client, "rot-team")
    page = await client.get("/app/teams/rot-team/secrets")
    assert 'href="/app/teams/rot-team/rotation"' in await page.text()
    html = await (await client.get("/app/teams/rot-team/rotation")).text()
    assert "Belum ada secret yang dirotasi otomatis" in html
    assert f'<option value="{secret_id}"' in html

    form = [("csrf", csrf), ("secret_id", secret_id), ("interval_days", "7"), ("length", "24"),
            ("classes", "lower"), ("classes", "digits"), ("enabled", "on"),
            ("target_kind", "none"), ("value_format", "password")]
    resp = await client.post("/app/teams/rot-team/rotation", data=form, allow_redirects=False)
    assert (resp.status, resp.headers["Location"]) == (303, "/app/teams/rot-team/rotation")
    html = await (await client.get("/app/teams/rot-team/rotation")).text()
    assert flash_of(html) == "Kebijakan rotasi disimpan."
    assert "7 hari" in html and "<code>none</code>" in html
    rows = await query(database_url,
                       "SELECT interval_days, generator FROM secret_rotation_policies")
    assert [(r["interval_days"], r["generator"]) for r in rows] == [
        (7, {"length": 24, "classes": ["lower", "digits"]})]

    # "Ubah": the form filled in with the policy; saving replaces it.
    edit = await (await client.get(f"/app/teams/rot-team/rotation?edit={secret_id}")).text()
    assert "Ubah kebijakan KEY" in edit and 'name="interval_days" type="number" value="7"' in edit
    form[2] = ("interval_days", "14")
    await client.post("/app/teams/rot-team/rotation", data=form)
    rows = await query(database_url, "SELECT interval_days FROM secret_rotation_policies")
    assert [r["interval_days"] for r in rows] == [14]

    # Bad input: the page again with the domain's message, what was typed kept.
    bad = await client.post("/app/teams/rot-team/rotation",
                            data=[*form[:2], ("interval_days", "lots"), *form[3:]])
    text = await bad.text()
    assert bad.status == 400 and "interval_days" in text and 'value="lots"' in text
    bad = await client.post("/app/teams/rot-team/rotation",
                            data=[*form[:7], ("target_kind", "webhook"), ("url", "ftp://x")])
    assert bad.status == 400 and "URL" in await bad.text()
    bad = await client.post("/app/teams/rot-team/rotation", data=[("csrf", csrf),
                                                                  ("secret_id", "nope")])
    assert bad.status == 400 and "Pilih secret yang dirotasi" in await bad.text()

    # Run now: due at once, audited.
    resp = await client.post(f"/app/teams/rot-team/rotation/{secret_id}/run",
                             data={"csrf": csrf}, allow_redirects=False)
    assert resp.status == 303
    shown = await (await client.get(resp.headers["Location"])).text()
    assert flash_of(shown) == "Rotasi dijalankan."
    actions = [r["action"] for r in await query(database_url, "SELECT action FROM audit_logs")]
    assert "rotation_policy_set" in actions and "rotation_requested" in actions

    resp = await client.post(f"/app/teams/rot-team/rotation/{secret_id}/delete",
                             data={"csrf": csrf})
    assert resp.status == 200 and flash_of(await resp.text()) == (
        "Kebijakan rotasi dihapus; riwayatnya tetap ada.")
    assert await query(database_url, "SELECT 1 FROM secret_rotation_policies") == []


async def test_a_rotation_webhook_targets_signing_secret_is_shown_once(
        client: TestClient) -> None:
    await sign_up(client)
    csrf, secret_id = await team_with_secret(client, "rot-hook")
    resp = await client.post("/app/teams/rot-hook/rotation", allow_redirects=False, data=[
        ("csrf", csrf), ("secret_id", secret_id), ("interval_days", "30"), ("length", "32"),
        ("classes", "lower"), ("classes", "upper"), ("enabled", "on"),
        ("target_kind", "webhook"), ("url", "http://127.0.0.1:9/rotate")])
    assert resp.status == 303, await resp.text()
    assert not any(WHSEC_RE.search(v) for v in resp.headers.getall("Set-Cookie"))
    first = await client.get("/app/teams/rot-hook/rotation")
    html = await first.text()
    assert WHSEC_RE.search(html) and first.headers["Cache-Control"] == "no-store"
    assert "KEY (production)" in html
    again = await (await client.get("/app/teams/rot-hook/rotation")).text()
    assert not WHSEC_RE.search(again) and "http://127.0.0.1:9/rotate" in again


async def test_an_admin_creates_tests_and_deletes_a_webhook_its_secret_shown_once(
        client: TestClient, database_url: str) -> None:
    await sign_up(client)
    csrf, _secret_id = await team_with_secret(client, "hook-team")
    page = await client.get("/app/teams/hook-team/secrets")
    assert 'href="/app/teams/hook-team/webhooks"' in await page.text()
    html = await (await client.get("/app/teams/hook-team/webhooks")).text()
    assert "Belum ada webhook di tim ini." in html and 'value="secret.created"' in html

    # No event chosen: the page again with the message, the URL kept.
    bad = await client.post("/app/teams/hook-team/webhooks", data={
        "csrf": csrf, "url": "http://127.0.0.1:9/hook"})
    text = await bad.text()
    assert bad.status == 400 and "setidaknya satu jenis event" in text
    assert 'value="http://127.0.0.1:9/hook"' in text
    bad = await client.post("/app/teams/hook-team/webhooks", data=[
        ("csrf", csrf), ("url", "not a url"), ("events", "secret.created")])
    assert bad.status == 400

    resp = await client.post("/app/teams/hook-team/webhooks", allow_redirects=False, data=[
        ("csrf", csrf), ("url", "http://127.0.0.1:9/hook"), ("description", "CI"),
        ("events", "secret.created"), ("events", "secret.deleted")])
    assert (resp.status, resp.headers["Location"]) == (303, "/app/teams/hook-team/webhooks")
    assert not any(WHSEC_RE.search(v) for v in resp.headers.getall("Set-Cookie"))
    first = await client.get("/app/teams/hook-team/webhooks")
    html = await first.text()
    assert flash_of(html) == "Webhook dibuat." and first.headers["Cache-Control"] == "no-store"
    shown = WHSEC_RE.search(html)
    assert shown is not None
    again = await (await client.get("/app/teams/hook-team/webhooks")).text()
    assert shown.group(0) not in again and "secret.created, secret.deleted" in again
    hook_id = (await query(database_url, "SELECT id FROM webhooks"))[0]["id"]

    resp = await client.post(f"/app/teams/hook-team/webhooks/{hook_id}/test",
                             data={"csrf": csrf})
    text = await resp.text()
    assert resp.status == 200 and flash_of(text).startswith("Event uji (ping) diantrekan")
    assert "<code>ping</code> · pending" in text

    resp = await client.post(f"/app/teams/hook-team/webhooks/{hook_id}/delete",
                             data={"csrf": csrf})
    assert resp.status == 200 and flash_of(await resp.text()) == "Webhook dihapus."
    assert await query(database_url, "SELECT 1 FROM webhooks") == []


async def test_members_below_admin_get_no_link_and_a_403_page(
        client: TestClient, start_client: Callable[..., Any], settings: Settings,
        api: Api) -> None:
    owner = await api.register("page_owner")
    team_id = await api.team(owner, "gated-team")
    await api.secret(owner, team_id, "KEY", "v")
    browser = await start_client(settings)
    member = await sign_up(browser, "page_member")
    await api.add_member(owner, team_id, {"username": member["username"]}, "Member")
    html = await (await browser.get("/app/teams/gated-team/secrets")).text()
    assert "/app/teams/gated-team/rotation" not in html
    assert "/app/teams/gated-team/webhooks" not in html
    for path in ("/app/teams/gated-team/rotation", "/app/teams/gated-team/webhooks"):
        resp = await browser.get(path)
        assert resp.status == 403 and "<html" in (await resp.text()).lower()
    csrf = await form_csrf(browser, "/app/teams")
    resp = await browser.post("/app/teams/gated-team/webhooks", data=[
        ("csrf", csrf), ("url", "http://127.0.0.1:9/hook"), ("events", "secret.created")])
    assert resp.status == 403
    resp = await browser.post("/app/teams/gated-team/rotation", data={
        "csrf": csrf, "secret_id": "00000000-0000-0000-0000-000000000000",
        "interval_days": "7", "length": "32", "target_kind": "none"})
    assert resp.status in (403, 404)


async def test_the_rotation_and_webhook_pages_in_a_browser_on_a_phone(
        client: TestClient, api: Api, database_url: str) -> None:
    """One walk at 390 px in Chromium, by label and role: from the team's secrets to its
    rotation page (a policy set, run now, deleted) and its webhook page (one created, its
    secret shown once, tested, deleted), the page no wider than the window throughout."""
    from test_docs_page import CHROMIUM, CHROMIUM_ARGS, require_chromium
    from test_layout import too_wide
    require_chromium()
    from playwright.async_api import async_playwright, expect

    owner = await api.register("phone_owner")
    team_id = await api.team(owner, "phone-team")
    await api.secret(owner, team_id, "PAYMENTS_PROVIDER_SIGNING_KEY", "v1")
    base = str(client.make_url("/")).rstrip("/")
    wide: dict[str, Any] = {}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 390, "height": 844})
            page.on("dialog", lambda dialog: dialog.accept())  # the confirmations
            await page.goto(f"{base}/signin")
            await page.get_by_label("Email atau username").fill(owner["username"])
            await page.get_by_label("Kata sandi").fill("correct horse 1")
            await page.get_by_role("button", name="Masuk").click()
            await page.wait_for_url(f"{base}/app/teams")
            await page.goto(f"{base}/app/teams/phone-team/secrets")

            await page.get_by_role("navigation", name="Halaman tim").get_by_role(
                "link", name="Rotasi").click()
            await expect(page.get_by_role("heading", name="Atur kebijakan rotasi")).to_be_visible()
            await page.get_by_label("Secret yang dirotasi").select_option(
                label="PAYMENTS_PROVIDER_SIGNING_KEY (production)")
            await page.get_by_label("Setiap berapa hari").fill("10")
            await page.get_by_label("Target", exact=True).select_option("none")
            await page.get_by_role("button", name="Simpan kebijakan").click()
            await expect(page.get_by_role("status")).to_have_text("Kebijakan rotasi disimpan.")
            policies = page.get_by_role("table", name="Kebijakan rotasi tim ini")
            await expect(policies.get_by_role("cell", name="10 hari")).to_be_visible()
            if measured := await too_wide(page):
                wide["rotation"] = measured
            run = page.get_by_role(
                "button", name="Rotasi PAYMENTS_PROVIDER_SIGNING_KEY di production sekarang")
            await run.scroll_into_view_if_needed()
            await expect(run).to_be_in_viewport()  # nothing off to the side
            await run.click()
            await expect(page.get_by_role("status")).to_have_text("Rotasi dijalankan.")
            await page.get_by_role("button", name="Hapus kebijakan PAYMENTS_PROVIDER_SIGNING_KEY"
                                                   " di production").click()
            await expect(page.get_by_text("Belum ada secret yang dirotasi otomatis")
                         ).to_be_visible()

            await page.goto(f"{base}/app/teams/phone-team/secrets")
            await page.get_by_role("navigation", name="Halaman tim").get_by_role(
                "link", name="Webhook").click()
            await page.get_by_label("URL", exact=True).fill("http://127.0.0.1:9/phone-hook")
            await page.get_by_label("secret.created").check()
            await page.get_by_role("button", name="Buat webhook").click()
            created = page.get_by_role("region", name="Secret penanda tangan webhook baru")
            await expect(created.locator("[data-secret-value]")).to_contain_text("whsec_")
            if measured := await too_wide(page):
                wide["webhooks"] = measured
            test = page.get_by_role("button",
                                    name="Kirim event uji ke http://127.0.0.1:9/phone-hook")
            await test.scroll_into_view_if_needed()
            await expect(test).to_be_in_viewport()
            await test.click()
            hooks = page.get_by_role("table", name="Webhook tim ini")
            await expect(hooks).to_contain_text("ping")
            await expect(page.get_by_role("region", name="Secret penanda tangan webhook baru")
                         ).to_have_count(0)
            await page.get_by_role("button",
                                   name="Hapus webhook http://127.0.0.1:9/phone-hook").click()
            await expect(page.get_by_text("Belum ada webhook di tim ini.")).to_be_visible()
        finally:
            await browser.close()
    assert wide == {}
