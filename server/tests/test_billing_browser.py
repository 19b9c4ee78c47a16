"""Paying for a plan in a real browser (Debian's Chromium through Playwright, by label and role,
at 1280 and 390 px), against stripe-mock: the Owner chooses Professional and the browser is sent
to the Checkout URL stripe-mock returned (the plan page's own CSP lets its form go there); the
signed `checkout.session.completed` arrives; the reloaded plan page says Professional and offers
the billing portal. A Viewer sees the plan and the subscription's state and no billing control.
Each page is checked with axe-core (no serious or critical violation) and for width; with
CVSM_SCREENSHOTS_DIR set each is photographed at both widths."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from conftest import Api
from stripe_mock import StripeFront, settings_env
from test_dashboard import axe_script  # noqa: F401 (a fixture)
from test_docs_page import CHROMIUM, CHROMIUM_ARGS, require_chromium
from test_layout import serious_violations, too_wide
from test_plan_billing_pages import complete_checkout

WIDTHS = (1280, 390)
CHECKOUT = "https://checkout.stripe.com/"


async def test_the_owner_pays_for_professional_and_a_viewer_sees_no_billing_control(
        start_client: Any, make_settings: Any, stripe_front: StripeFront, database_url: str,
        axe_script: Path, tmp_path: Path) -> None:
    require_chromium()
    from playwright.async_api import async_playwright, expect

    client: TestClient = await start_client(make_settings(
        **settings_env(), stripe_api_base=stripe_front.url, default_plan="starter", app_url=""))
    api = Api(client)
    owner, viewer = await api.register("paying_owner"), await api.register("team_viewer")
    slugs = {width: f"team-at-{width}" for width in WIDTHS}  # a team paid for at each width
    team_ids = {}
    for slug in slugs.values():
        team_ids[slug] = await api.team(owner, slug)
        await api.add_member(owner, team_ids[slug], viewer, "Viewer")
    base = str(client.make_url("/")).rstrip("/")
    problems: dict[str, Any] = {}
    shots = Path(os.environ.get("CVSM_SCREENSHOTS_DIR") or tmp_path)

    async def check(page: Any, name: str, width: int) -> None:
        if measured := await too_wide(page):
            problems[f"{name}@{width} too wide"] = measured
        if serious := await serious_violations(page, axe_script):
            problems[f"{name}@{width} axe"] = serious
        await page.screenshot(path=str(shots / f"{name}-{width}.png"), full_page=True)

    async def signed_in(browser: Any, user: dict, *, bypass_csp: bool) -> Any:
        page = await (await browser.new_context(bypass_csp=bypass_csp)).new_page()
        await page.goto(f"{base}/signin")
        await page.get_by_label("Email atau username").fill(user["username"])
        await page.get_by_label("Kata sandi").fill("correct horse 1")
        await page.get_by_role("button", name="Masuk").click()
        await page.wait_for_url(f"{base}/app/teams")
        return page

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            # The Owner's clicks run under the pages' real CSP (its form-action is what lets the
            # 303 reach Stripe); axe-core is injected in a second context that bypasses it.
            paying = await signed_in(browser, owner, bypass_csp=False)
            checker = await signed_in(browser, owner, bypass_csp=True)
            # Stripe's Checkout is not reachable from here: answered in the browser.
            await paying.context.route(f"{CHECKOUT}**", lambda route: route.fulfill(
                status=200, content_type="text/html",
                body="<!doctype html><title>Checkout</title><h1>Stripe Checkout</h1>"))
            for width in WIDTHS:
                slug, size = slugs[width], {"width": width, "height": 844 if width < 768 else 900}
                await paying.set_viewport_size(size)
                await checker.set_viewport_size(size)
                plan_url = f"{base}/app/teams/{slug}/plan"
                await checker.goto(plan_url)
                await check(checker, "plan-choose", width)

                await paying.goto(plan_url)
                await expect(paying.get_by_text("Status langganan")).to_contain_text(
                    "belum berlangganan")
                paid = paying.get_by_role("form", name="professional")
                await expect(paid).to_contain_text("500")  # its quotas
                async with paying.expect_request(lambda r: r.url.startswith(CHECKOUT)) as sent:
                    await paid.get_by_role("button", name="Pilih professional").click()
                request = await sent.value
                assert request.redirected_from is not None  # the 303 of the page's POST
                assert request.redirected_from.url == f"{base}/app/teams/{slug}/plan/checkout"
                await paying.wait_for_url(f"{CHECKOUT}**")
                await expect(paying.get_by_role("heading", name="Stripe Checkout")).to_be_visible()
                assert stripe_front.calls["POST /v1/checkout/sessions"] == WIDTHS.index(width) + 1

                # Stripe tells the server; the plan page, reloaded, says Professional.
                await complete_checkout(client, stripe_front, database_url, team_ids[slug])
                await paying.goto(plan_url)
                await expect(paying.get_by_text("Paket tim ini:")).to_contain_text("professional")
                await expect(paying.get_by_text("Status langganan")).to_contain_text("aktif")
                await expect(paying.get_by_role("button", name="Kelola tagihan")).to_be_visible()
                await expect(paying.get_by_role("button", name="Pilih professional")).to_have_count(0)
                await checker.goto(plan_url)
                await check(checker, "plan-subscribed", width)

            watching = await signed_in(browser, viewer, bypass_csp=True)
            for width in WIDTHS:
                await watching.set_viewport_size({"width": width,
                                                  "height": 844 if width < 768 else 900})
                await watching.goto(f"{base}/app/teams/{slugs[width]}/plan")
                await expect(watching.get_by_text("Paket tim ini:")).to_contain_text("professional")
                await expect(watching.get_by_text("Status langganan")).to_contain_text("aktif")
                await expect(watching.get_by_text("Hanya Owner tim")).to_be_visible()
                for name in ("Kelola tagihan", "Pilih professional", "Pilih enterprise"):
                    await expect(watching.get_by_role("button", name=name)).to_have_count(0)
                await check(watching, "plan-viewer", width)
        finally:
            await browser.close()
    assert problems == {}
