"""Tables on phones, in a real browser (Debian's Chromium through Playwright): at 360 and 390 px
every page with a table shows its rows as cards (each cell under its column's name, the table
still a table to screen readers); at those widths and at 768 px the document is no wider than
the window, nothing in the page scrolls sideways inside its own box, and every button, link and
field of the main content lies inside the window horizontally, for an Owner (and instance
admin) and for a Viewer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from conftest import Api
from cvsm_server.core.config import Settings
from test_admin import make_admin
from test_docs_page import CHROMIUM, CHROMIUM_ARGS, require_chromium

WIDTHS = (360, 390, 768)
CARD_BELOW = 600  # px: narrower windows show a table's rows as cards

# The document's width, the boxes that scroll sideways, and the controls of <main> that are
# (partly) outside the window horizontally.
MEASURE = """() => {
  const width = window.innerWidth;
  const name = el => `${el.tagName.toLowerCase()}` +
    `${el.getAttribute("aria-label") ? "[" + el.getAttribute("aria-label") + "]" : ""}` +
    ` "${(el.textContent || el.value || "").trim().slice(0, 30)}"`;
  const outside = [];
  for (const el of document.querySelectorAll(
      "main a, main button, main select, main textarea, main input:not([type=hidden])")) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 && box.height === 0) continue;
    if (box.left < -0.5 || box.right > width + 0.5) {
      outside.push(`${name(el)} ${Math.round(box.left)}..${Math.round(box.right)}`);
    }
  }
  const scrolling = [];
  for (const el of document.querySelectorAll("body *")) {
    const x = getComputedStyle(el).overflowX;
    if ((x === "auto" || x === "scroll") && el.scrollWidth > el.clientWidth + 1) {
      scrolling.push(`${name(el)} ${el.scrollWidth}>${el.clientWidth}`);
    }
  }
  return {scroll: document.documentElement.scrollWidth, inner: width,
          outside: outside.slice(0, 8), scrolling: scrolling.slice(0, 8)};
}"""

# Each body cell's label as shown (its ::before), and whether the rows are cards (blocks).
CARDS = """table => {
  const cells = [...table.querySelectorAll("tbody td[data-label]")];
  return {
    labels: cells.map(td => getComputedStyle(td, "::before").content),
    blocks: [...table.querySelectorAll("tbody tr")].every(
      tr => getComputedStyle(tr).display === "block"),
  };
}"""


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    # Links use the address asked; plain http keeps the cookie; a webhook to this machine is
    # allowed (nothing is sent: background jobs are off).
    return make_settings(app_url="", webhook_allow_private="1")


async def arrange(client: TestClient, api: Api, database_url: str) -> dict[str, Any]:
    owner = await api.register("owner_user")
    await make_admin(database_url, owner)
    viewer = await api.register("viewer_with_a_long_username_indeed")
    team_id = await api.team(owner, "acme-platform-team")
    await api.add_member(owner, team_id, viewer, "Viewer")
    auth = api.auth(owner["token"])
    resp = await client.post(f"/api/v1/teams/{team_id}/invites", headers=auth,
                             json={"email": "someone.invited.with.a.long.address@example.com",
                                   "role": "Viewer"})
    assert resp.status == 201, await resp.text()
    secret_id = await api.secret(owner, team_id, "DATABASE_URL_FOR_THE_PRIMARY_REPLICA_OF_APP",
                                 "postgres://primary.example.internal:5432/app")
    for value in ("postgres://a-much-longer-host-name.example.internal:5432/application_db",
                  "postgres://primary.example.internal:6432/app"):
        resp = await client.put(f"/api/v1/teams/{team_id}/secrets/{secret_id}", headers=auth,
                                json={"value": value})
        assert resp.status == 200, await resp.text()
    for environment in ("staging", "development"):
        await api.secret(owner, team_id, "STRIPE_API_KEY", f"sk_{environment}_1",
                         environment=environment)
    await api.secret(owner, team_id, "SESSION_SECRET", "s3cr3t")
    await api.api_token(owner, name="deploy from the continuous integration runner")
    resp = await client.put(f"/api/v1/teams/{team_id}/secrets/{secret_id}/rotation", headers=auth,
                            json={"interval_days": 30, "target": {
                                "kind": "webhook",
                                "url": "http://127.0.0.1:9/a/rather/long/rotation/hook/path"}})
    assert resp.status == 200, await resp.text()
    resp = await client.post(f"/api/v1/teams/{team_id}/webhooks", headers=auth, json={
        "url": "http://127.0.0.1:9/hooks/a-rather-long-path-for-the-team-webhook",
        "events": ["secret.created", "secret.updated", "secret.deleted", "member.added"]})
    assert resp.status == 201, await resp.text()
    hook_id = (await resp.json())["webhook"]["id"]
    resp = await client.post(f"/api/v1/teams/{team_id}/webhooks/{hook_id}/test", headers=auth)
    assert resp.status in (200, 201, 202), await resp.text()
    await api.api_token(viewer, name="viewer laptop")
    team = "acme-platform-team"
    team_pages = {
        "secrets": f"/app/teams/{team}/secrets",
        "secret": f"/app/teams/{team}/secrets/{secret_id}",
        "environments": f"/app/teams/{team}/environments",
        "members": f"/app/teams/{team}/members",
        "audit": f"/app/teams/{team}/audit",
        "insights": f"/app/teams/{team}/insights",
        "plan": f"/app/teams/{team}/plan",
        "rotation": f"/app/teams/{team}/rotation",
        "webhooks": f"/app/teams/{team}/webhooks",
        "tokens": "/app/tokens",
    }
    admin_pages = {
        "admin-users": "/app/admin/users",
        "admin-teams": "/app/admin/teams",
        "admin-stats": "/app/admin/stats",
        "admin-tickets": "/app/admin/tickets",
    }
    return {"owner": owner, "viewer": viewer, "team_pages": team_pages,
            "admin_pages": admin_pages}


async def test_every_table_is_cards_on_phones_with_every_control_on_screen(
        client: TestClient, api: Api, database_url: str) -> None:
    require_chromium()
    from playwright.async_api import async_playwright, expect

    arranged = await arrange(client, api, database_url)
    base = str(client.make_url("/")).rstrip("/")
    problems: dict[str, Any] = {}
    seen: list[str] = []

    async def sign_in(page: Any, user: dict[str, Any]) -> None:
        await page.context.clear_cookies()
        await page.goto(f"{base}/signin")
        await page.get_by_label("Email atau username").fill(user["username"])
        await page.get_by_label("Kata sandi").fill("correct horse 1")
        await page.get_by_role("button", name="Masuk").click()
        await page.wait_for_url(f"{base}/app/teams")

    async def visit(page: Any, who: str, name: str, path: str) -> None:
        for width in WIDTHS:
            await page.set_viewport_size({"width": width, "height": 800})
            resp = await page.goto(f"{base}{path}")
            assert resp is not None, (who, name)
            if resp.status == 403:
                continue  # not this role's page
            assert resp.status == 200, (who, name, resp.status)
            if name == "secret" and who == "owner":
                # A revealed version's value sits in its card too.
                await page.get_by_role("button", name="Tampilkan nilai versi 1").click()
                await expect(page.get_by_label("Nilai versi 1")).to_be_visible()
            measured = await page.evaluate(MEASURE)
            if (measured["scroll"] > measured["inner"] or measured["outside"]
                    or measured["scrolling"]):
                problems[f"{who} {name}@{width}"] = measured
            for table in await page.locator("main table").all() if width < CARD_BELOW else []:
                cards = await table.evaluate(CARDS)
                if not cards["blocks"]:
                    problems[f"{who} {name}@{width} rows not cards"] = cards
                if any(label in ("none", "normal", '""') for label in cards["labels"]):
                    problems[f"{who} {name}@{width} unlabelled cells"] = cards
            seen.append(f"{who} {name}@{width}")

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await (await browser.new_context()).new_page()
            await sign_in(page, arranged["owner"])
            pages = {**arranged["team_pages"], **arranged["admin_pages"]}
            for name, path in pages.items():
                await visit(page, "owner", name, path)

            # The cards keep what a screen reader needs: the table, its rows and its cells.
            await page.set_viewport_size({"width": 390, "height": 800})
            await page.goto(f"{base}{arranged['team_pages']['members']}")
            members = page.get_by_role("table", name="Anggota tim")
            await expect(members).to_be_visible()
            row = members.get_by_role("row").filter(
                has=page.get_by_role("rowheader", name="owner_user"))
            await expect(row.get_by_role("cell", name="owner_user@example.com")).to_be_visible()
            email = row.get_by_role("cell", name="owner_user@example.com")
            assert await email.evaluate(
                "td => getComputedStyle(td, '::before').content") == '"Email"'
            await expect(members.get_by_role("columnheader", name="Peran")).to_be_attached()
            # A role select and the remove button of a card are on screen and usable.
            viewer_row = members.get_by_role("row").filter(
                has=page.get_by_role("rowheader", name=arranged["viewer"]["username"]))
            await expect(viewer_row.get_by_role("combobox")).to_be_in_viewport()
            await expect(viewer_row.get_by_role("button").first).to_be_in_viewport()

            await sign_in(page, arranged["viewer"])
            for name, path in arranged["team_pages"].items():
                await visit(page, "viewer", name, path)
        finally:
            await browser.close()
    assert problems == {}, "\n".join(f"{k}: {v}" for k, v in problems.items())
    assert "owner members@360" in seen and "viewer secrets@390" in seen
    assert sum(1 for s in seen if s.startswith("viewer")) >= 8, seen
