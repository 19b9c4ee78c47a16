"""The /device page (`cvsm login`) in a real browser (Debian's Chromium through Playwright), at
1280 and 390 px, by label and role: the terminal's link opens the request with its machine
shown, the page is no wider than the window and has no serious axe-core violation, approving
says so, and the terminal's next poll gets its token."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from conftest import Api
from cvsm_server.core.config import Settings
from test_dashboard import axe_script  # noqa: F401 (a fixture)
from test_docs_page import CHROMIUM, CHROMIUM_ARGS, require_chromium
from test_device_flow import poll, start
from test_layout import serious_violations, too_wide


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(app_url="")  # links use the address asked; plain http keeps the cookie


async def test_the_device_page_approves_by_label_on_desktops_and_phones(
        client: TestClient, api: Api, axe_script: Path) -> None:
    require_chromium()
    from playwright.async_api import async_playwright, expect

    owner = await api.register("device_owner")
    await api.team(owner, "device-team")
    base = str(client.make_url("/")).rstrip("/")
    host = client.make_url("/").host
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for width in (1280, 390):
                started = await start(client, hostname=f"build-box-{width}")
                viewport = {"width": width, "height": 844 if width < 768 else 900}
                context = await browser.new_context(bypass_csp=True, viewport=viewport)
                await context.add_cookies([{"name": "cvsm_session", "value": owner["token"],
                                            "domain": host, "path": "/"}])
                page = await context.new_page()
                assert started["verification_uri_complete"].startswith(f"{base}/device?")
                await page.goto(started["verification_uri_complete"])
                await expect(page.get_by_role("heading", name=started["user_code"])).to_be_visible()
                await expect(page.get_by_text(f"build-box-{width}")).to_be_visible()
                assert await too_wide(page) is None, await too_wide(page)
                assert await serious_violations(page, axe_script) == []
                await page.get_by_label("Tim").select_option("device-team")
                await page.get_by_role("button", name="Setujui").click()
                await expect(page.get_by_role("status")).to_contain_text("Disetujui")
                # Typing a code by hand: the form with its label, no wider than the window.
                await expect(page.get_by_label("Kode")).to_be_visible()
                assert await too_wide(page) is None
                status, body = await poll(client, started["device_code"])
                assert status == 200 and body["team"]["slug"] == "device-team"
                await context.close()
        finally:
            await browser.close()
