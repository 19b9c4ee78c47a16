"""The pages as people see them on phones and desktops, in a real browser (Debian's Chromium
through Playwright): at 360, 390, 768 and 1280 px no page's document is wider than the window,
the top bar's links and "Keluar" stay on screen, and axe-core finds no serious or critical
violation at 390 and 1280 px. With CVSM_SCREENSHOTS_DIR set (docs/screenshots), each main page
is photographed at 1280 and 390 px.

The owner of a team with secrets in every environment, a member, a pending invitation, an API
token, a share link, a support conversation and a ticket visits every main page, the admin
pages included; the signed-out pages (sign-in, sign-up, the share page, the API reference) are
visited too."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from conftest import Api
from cvsm_server.core.config import Settings
from test_admin import make_admin
from test_dashboard import axe_script  # noqa: F401 (a fixture)
from test_docs_page import CHROMIUM, CHROMIUM_ARGS, require_chromium

WIDTHS = (360, 390, 768, 1280)
AXE_WIDTHS = (390, 1280)
SHOT_WIDTHS = (390, 1280)

# What sticks out of the window, for the failure message: the widest elements past its edge.
OVERFLOW = """() => {
  const width = window.innerWidth;
  const out = [];
  for (const el of document.querySelectorAll("body *")) {
    const box = el.getBoundingClientRect();
    if (box.right > width + 0.5 && box.width > 0 && !el.closest("pre")) {
      out.push(`${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""}` +
               `${el.className && typeof el.className === "string" ? "." + el.className : ""}` +
               ` right=${Math.round(box.right)}`);
    }
  }
  return {scroll: document.documentElement.scrollWidth, inner: width, out: out.slice(0, 8)};
}"""
AXE_RUN = "() => axe.run(document, {runOnly: ['wcag2a', 'wcag2aa', 'best-practice']})"


async def too_wide(page: Any) -> dict[str, Any] | None:
    """What sticks out of the window (`OVERFLOW`'s measure) when the page is wider, else None.
    Measured once the page has loaded, its stylesheet in: a text the test waited for is in the
    document maybe before app.css is, and under load a page was measured unstyled (its phone
    table as wide as a desktop's)."""
    await page.wait_for_load_state("load")
    measured = await page.evaluate(OVERFLOW)
    return measured if measured["scroll"] > measured["inner"] else None


async def serious_violations(page: Any, axe_script: Path) -> list[str]:
    """axe-core's serious and critical WCAG 2 A/AA and best-practice violations on the page."""
    await page.add_script_tag(path=str(axe_script))
    result = await page.evaluate(AXE_RUN)
    return [f"{v['id']}: {v['help']} ({len(v['nodes'])})"
            for v in result["violations"] if v["impact"] in ("serious", "critical")]


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(app_url="")  # links use the address asked; plain http keeps the cookie


async def arrange(client: TestClient, api: Api, database_url: str) -> dict[str, Any]:
    """An owner (and instance admin) with everything the pages show; returns the paths."""
    owner = await api.register("owner_user", password="correct horse 1")
    await make_admin(database_url, owner)
    member = await api.register("member_with_a_rather_long_username")
    team_id = await api.team(owner, "acme-platform-team")
    await api.add_member(owner, team_id, member, "Member")
    auth = api.auth(owner["token"])
    resp = await client.post(f"/api/v1/teams/{team_id}/invites", headers=auth,
                             json={"email": "someone.invited.with.a.long.address@example.com",
                                   "role": "Viewer"})
    assert resp.status == 201, await resp.text()
    secret_id = ""
    for environment in ("production", "staging", "development"):
        for name in ("DATABASE_URL_FOR_THE_PRIMARY_REPLICA", "STRIPE_API_KEY", "SESSION_SECRET"):
            made = await api.secret(owner, team_id, name, f"{environment}-value-{name.lower()}",
                                    environment=environment)
            if environment == "production" and name == "DATABASE_URL_FOR_THE_PRIMARY_REPLICA":
                secret_id = made
    resp = await client.put(f"/api/v1/teams/{team_id}/secrets/{secret_id}", headers=auth,
                            json={"value": "postgres://primary.example.internal:5432/app"})
    assert resp.status == 200, await resp.text()
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets/{secret_id}/shares", headers=auth,
                             json={"max_views": 2})
    assert resp.status == 201, await resp.text()
    share_path = "/share/" + (await resp.json())["url"].rsplit("/share/", 1)[1]
    used_up = await client.post(f"/api/v1/teams/{team_id}/secrets/{secret_id}/shares",
                                headers=auth, json={"max_views": 1})
    used_up_path = "/share/" + (await used_up.json())["url"].rsplit("/share/", 1)[1]
    assert (await client.get(f"/api/v1/public/{used_up_path[1:]}")).status == 200
    await api.api_token(owner, name="deploy from the continuous integration runner")
    chat = await client.post("/api/v1/support/chat", headers=auth,
                             json={"message": "bagaimana membuat token API untuk CI?"})
    assert chat.status == 200, await chat.text()
    conversation_id = (await chat.json())["conversation_id"]
    escalated = await client.post("/api/v1/support/escalate", headers=auth,
                                  json={"conversation_id": conversation_id,
                                        "note": "Tolong bantu, token saya ditolak."})
    assert escalated.status == 201, await escalated.text()
    ticket_id = (await escalated.json())["ticket"]["id"]
    team = "acme-platform-team"
    return {
        "owner": owner,
        "pages": {
            "teams": "/app/teams",
            "secrets": f"/app/teams/{team}/secrets",
            "secret": f"/app/teams/{team}/secrets/{secret_id}",
            "members": f"/app/teams/{team}/members",
            "tokens": "/app/tokens",
            "audit": f"/app/teams/{team}/audit",
            "account": "/app/account",
            "support": "/app/support",
            "admin": "/app/admin",
            "admin-users": "/app/admin/users",
            "admin-teams": "/app/admin/teams",
            "admin-plan": f"/app/admin/teams/{team_id}",
            "admin-stats": "/app/admin/stats",
            "admin-tickets": "/app/admin/tickets",
            "admin-ticket": f"/app/admin/tickets/{ticket_id}",
        },
        "public": {"signin": "/signin", "signup": "/signup", "share": share_path,
                   "share-used-up": used_up_path, "docs": "/api/v1/docs"},
    }


async def check_apart(page: Any, first: str, second: str) -> None:
    """The boxes of `first` and `second` neither touch nor overlap (4 px at least between)."""
    a = await page.locator(first).first.bounding_box()
    b = await page.locator(second).first.bounding_box()
    assert a is not None and b is not None, (first, second)
    below = b["y"] >= a["y"] + a["height"] + 4
    beside = b["x"] >= a["x"] + a["width"] + 4
    assert below or beside, (first, a, second, b)


async def test_every_page_fits_phones_and_desktops_and_passes_axe_core(
        client: TestClient, api: Api, database_url: str, axe_script: Path, tmp_path: Path) -> None:
    require_chromium()
    from playwright.async_api import async_playwright, expect

    arranged = await arrange(client, api, database_url)
    base = str(client.make_url("/")).rstrip("/")
    shots = Path(os.environ.get("CVSM_SCREENSHOTS_DIR") or tmp_path)
    wide: dict[str, Any] = {}
    violations: dict[str, list[str]] = {}
    missing: list[str] = []

    async def visit(page: Any, name: str, path: str) -> None:
        for width in WIDTHS:
            await page.set_viewport_size({"width": width, "height": 844 if width < 768 else 900})
            resp = await page.goto(f"{base}{path}")
            assert resp is not None and resp.status == 200, (name, resp and resp.status)
            if name == "docs":
                await page.wait_for_selector("body[data-rendered]", timeout=15000)
            if name.startswith("share"):
                await page.wait_for_load_state("networkidle")
            if measured := await too_wide(page):
                wide[f"{name}@{width}"] = measured
            if width in AXE_WIDTHS and (serious := await serious_violations(page, axe_script)):
                violations[f"{name}@{width}"] = serious
            if width in SHOT_WIDTHS and not name.startswith("admin-") and name != "share-used-up":
                for value in await page.locator("[data-secret-value]").all():
                    await value.evaluate("node => { node.textContent = 'cvsm_…' }")
                await page.screenshot(path=str(shots / f"{name}-{width}.png"))

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            # The pages' CSP allows only their own scripts; the checker is let in for the test.
            context = await browser.new_context(bypass_csp=True)
            page = await context.new_page()
            page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
            for name, path in arranged["public"].items():
                await visit(page, name, path)
            await page.set_viewport_size({"width": 390, "height": 844})
            await page.goto(f"{base}{arranged['public']['share-used-up']}")
            await expect(page.get_by_role("heading", name="Tautan ini tidak dapat dipakai lagi")
                         ).to_be_visible()
            await expect(page.get_by_role("button", name="Tampilkan secret")).to_be_hidden()
            await expect(page.locator("link[rel=icon]")).to_have_attribute("href", "data:,")

            await page.goto(f"{base}/signin")
            await page.get_by_label("Email atau username").fill("owner_user")
            await page.get_by_label("Kata sandi").fill("correct horse 1")
            await page.get_by_role("button", name="Masuk").click()
            await page.wait_for_url(f"{base}/app/teams")
            for name, path in arranged["pages"].items():
                await visit(page, name, path)

            # The boxes that show a value once, on a phone: apart from what follows them, the
            # value apart from its copy button.
            await page.set_viewport_size({"width": 390, "height": 844})
            await page.goto(f"{base}/app/tokens")
            await page.get_by_label("Nama", exact=True).fill("phone")
            await page.get_by_role("button", name="Buat token").click()
            await expect(page.get_by_role("heading", name="Token baru: phone")).to_be_visible()
            await check_apart(page, "section.card:has([data-secret-value])", "section.card + *")
            await check_apart(page, "[data-secret-value]", "[data-secret-value] + button")
            measured = await page.evaluate(OVERFLOW)
            assert measured["scroll"] <= measured["inner"], ("new token", measured)
            await page.goto(f"{base}/app/account")
            await page.get_by_role("button", name="Siapkan verifikasi dua langkah").click()
            await expect(page.get_by_role("button", name="Salin nilai ke papan klip")).to_be_visible()
            await check_apart(page, "code[data-secret-value]", "code[data-secret-value] + button")
            measured = await page.evaluate(OVERFLOW)
            assert measured["scroll"] <= measured["inner"], ("two-factor set-up", measured)
            for value in await page.locator("[data-secret-value]").all():
                await value.evaluate("node => { node.textContent = 'JBSWY3DPEHPK3PXP' }")
            await page.screenshot(path=str(shots / "account-2fa-390.png"))

            # The top bar at the narrowest width: every link and "Keluar" on screen.
            await page.set_viewport_size({"width": 360, "height": 800})
            await page.goto(f"{base}/app/teams")
            for link in ("Tim", "Token API", "Akun", "Bantuan", "Admin"):
                await expect(page.get_by_role("link", name=link, exact=True)).to_be_in_viewport()
            await expect(page.get_by_role("button", name="Keluar", exact=True)).to_be_in_viewport()
        finally:
            await browser.close()
    assert wide == {}, "\n".join(f"{k}: {v}" for k, v in wide.items())
    assert violations == {}
    assert missing == []


async def share_page_walk(client: TestClient, api: Api, *, console: bool) -> list[str]:
    """Open a two-view share link in a browser under the page's own CSP, reveal it twice (with
    a reload between), reload once more; returns the failed requests (and, with `console`, the
    console's errors and warnings)."""
    require_chromium()
    from playwright.async_api import async_playwright, expect

    owner = await api.register("sharer")
    team_id = await api.team(owner, "share-team")
    secret_id = await api.secret(owner, team_id, "DB_URL", "postgres://db.internal/app")
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets/{secret_id}/shares",
                             headers=api.auth(owner["token"]), json={"max_views": 2})
    path = "/share/" + (await resp.json())["url"].rsplit("/share/", 1)[1]
    base = str(client.make_url("/")).rstrip("/")
    problems: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            shared = await browser.new_page(viewport={"width": 390, "height": 844})
            if console:
                # The used-up check is a HEAD answered 410 (no view spent), which Chromium logs
                # as a failed load: the one expected message.
                shared.on("console", lambda m: problems.append(f"{m.type}: {m.text}")
                          if m.type in ("error", "warning")
                          and "status of 410" not in m.text else None)
            shared.on("response", lambda r: problems.append(f"{r.status} {r.url}")
                      if r.status >= 400 and r.request.method != "HEAD" else None)
            await shared.goto(f"{base}{path}")
            await shared.wait_for_load_state("networkidle")
            for left in ("Sisa kesempatan melihat: 1 dari 2", "tautan ini sudah habis dipakai"):
                await shared.get_by_role("button", name="Tampilkan secret").click()
                await expect(shared.locator("#meta")).to_contain_text(left)
                await expect(shared.locator("#secret-value")).to_have_text(
                    "postgres://db.internal/app")
                await shared.reload()
                await shared.wait_for_load_state("networkidle")
            await expect(shared.get_by_role("heading", name="Tautan ini tidak dapat dipakai lagi")
                         ).to_be_visible()
            await expect(shared.get_by_role("button", name="Tampilkan secret")).to_be_hidden()
        finally:
            await browser.close()
    return problems


async def test_the_share_page_shows_views_left_then_a_used_up_state_and_fetches_no_favicon(
        client: TestClient, api: Api) -> None:
    assert await share_page_walk(client, api, console=False) == []


async def test_the_share_page_logs_nothing_in_the_console(client: TestClient, api: Api) -> None:
    assert await share_page_walk(client, api, console=True) == []
