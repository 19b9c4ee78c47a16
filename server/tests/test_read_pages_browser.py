"""The read pages in a real browser (Debian's Chromium through Playwright), driven by visible
labels and roles at 1280 and 390 px, each checked with axe-core (no serious or critical
violation) and for width (no document wider than the window): an owner reveals a secret's
current value and a version's, compares two versions, sees who read it and through which
token, reveals one cell of the environments side by side, deletes an unread secret and revokes
an unused token from the read insights, filters the audit log by a link and downloads its
export, and reads the plan; a Viewer is shown none of the controls the server would refuse.
With CVSM_SCREENSHOTS_DIR set (docs/screenshots) each page is photographed at both widths."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from conftest import Api, query
from cvsm_server.core.config import Settings
from test_dashboard import axe_script  # noqa: F401 (a fixture)
from test_docs_page import CHROMIUM, CHROMIUM_ARGS, require_chromium
from test_layout import serious_violations, too_wide

WIDTHS = (1280, 390)


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(app_url="")  # links use the address asked; plain http keeps the cookie


async def arrange(client: TestClient, api: Api, database_url: str) -> dict[str, Any]:
    owner = await api.register("owner_user")
    viewer = await api.register("viewer_user")
    team_id = await api.team(owner, "acme-platform")
    await api.add_member(owner, team_id, viewer, "Viewer")
    auth = api.auth(owner["token"])
    db_url = await api.secret(owner, team_id, "DATABASE_URL", "postgres://db-a:5432/app")
    for value in ("postgres://db-b:5432/app", "postgres://db-b:6432/app"):
        resp = await client.put(f"/api/v1/teams/{team_id}/secrets/{db_url}", headers=auth,
                                json={"value": value})
        assert resp.status == 200
    await api.secret(owner, team_id, "DATABASE_URL", "postgres://db-b:6432/app",
                     environment="staging")
    await api.secret(owner, team_id, "STRIPE_KEY", "sk_live_1")
    await api.secret(owner, team_id, "STRIPE_KEY", "sk_test_1", environment="staging")
    await api.secret(owner, team_id, "DEBUG_TOOLBAR", "on", environment="development")
    stale = await api.secret(owner, team_id, "LEGACY_FTP_PASSWORD", "hunter2")
    await query(database_url, "UPDATE secrets SET created_at = now() - interval '40 days' "
                              "WHERE team_id = %s", (team_id,))
    token = await api.api_token(owner, name="deploy-bot")
    forgotten = await api.api_token(owner, name="old-laptop")
    await query(database_url, "UPDATE api_tokens SET created_at = now() - interval '40 days' "
                              "WHERE id = %s", (forgotten["api_token"]["id"],))
    for secret in ("DATABASE_URL", "STRIPE_KEY", "DEBUG_TOOLBAR"):
        for environment in ("production", "staging", "development"):
            resp = await client.get(f"/api/v1/teams/{team_id}/secrets/by-name/{secret}",
                                    params={"environment": environment},
                                    headers=api.auth(token["token"]))
            assert resp.status in (200, 404)
    assert stale
    team = "acme-platform"
    return {"owner": owner, "viewer": viewer, "team": team,
            "secret": f"/app/teams/{team}/secrets/{db_url}"}


async def test_the_read_pages_work_by_label_on_desktops_and_phones_and_pass_axe_core(
        client: TestClient, api: Api, database_url: str, axe_script: Path, tmp_path: Path) -> None:
    require_chromium()
    from playwright.async_api import async_playwright, expect

    arranged = await arrange(client, api, database_url)
    team = arranged["team"]
    base = str(client.make_url("/")).rstrip("/")
    shots = Path(os.environ.get("CVSM_SCREENSHOTS_DIR") or tmp_path)
    problems: dict[str, Any] = {}

    async def check(page: Any, name: str, width: int, focus: Any = None) -> None:
        """Width, axe-core and (with CVSM_SCREENSHOTS_DIR) a screenshot of what is shown,
        scrolled to `focus` (a locator) when given."""
        if measured := await too_wide(page):
            problems[f"{name}@{width} too wide"] = measured
        if serious := await serious_violations(page, axe_script):
            problems[f"{name}@{width} axe"] = serious
        for value in await page.locator("[data-secret-value], pre.diff").all():
            await value.evaluate("node => { node.textContent = 'cvsm_…' }")
        if focus is not None:
            await focus.evaluate("node => node.scrollIntoView({block: 'start'})")
        await page.screenshot(path=str(shots / f"{name}-{width}.png"))

    async def sign_in(page: Any, user: dict[str, Any]) -> None:
        await page.context.clear_cookies()
        await page.goto(f"{base}/signin")
        await page.get_by_label("Email atau username").fill(user["username"])
        await page.get_by_label("Kata sandi").fill("correct horse 1")
        await page.get_by_role("button", name="Masuk").click()
        await page.wait_for_url(f"{base}/app/teams")

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            # The pages' CSP allows only their own scripts; the checker is let in for the test.
            context = await browser.new_context(bypass_csp=True, accept_downloads=True)
            page = await context.new_page()
            page.on("dialog", lambda dialog: dialog.accept())  # the confirmations
            await sign_in(page, arranged["owner"])
            for width in WIDTHS:
                await page.set_viewport_size({"width": width, "height": 844 if width < 768 else 900})
                # The secret page: the current value, a version's, a diff, who read it.
                await page.goto(f"{base}/app/teams/{team}/secrets")
                await page.get_by_role("link", name="DATABASE_URL").first.click()
                await page.get_by_role("button", name="Tampilkan nilai sekarang").click()
                await expect(page.get_by_label("Nilai sekarang", exact=True)).to_have_text(
                    "postgres://db-b:6432/app")
                await page.get_by_role("button", name="Tampilkan nilai versi 1").click()
                await expect(page.get_by_label("Nilai versi 1")).to_have_text(
                    "postgres://db-a:5432/app")
                await page.get_by_label("Dari versi", exact=True).select_option("1")
                await page.get_by_label("Ke versi", exact=True).select_option("3")
                await page.get_by_role("button", name="Bandingkan").click()
                await expect(page.get_by_role("heading", name="Perbedaan versi 1 ke versi 3")
                             ).to_be_visible()
                await expect(page.locator("pre.diff")).to_contain_text("+postgres://db-b:6432/app")
                readers = page.get_by_role("region", name="Pembacaan dalam 30 hari terakhir")
                await expect(readers).to_contain_text("via token deploy-bot")
                await check(page, "secret-diff", width,
                            page.get_by_role("heading", name="Perbedaan versi 1 ke versi 3"))

                # Environments side by side, one cell revealed.
                await page.goto(f"{base}/app/teams/{team}/secrets")
                await page.get_by_role("link", name="Environment berdampingan").click()
                await expect(page.get_by_text("1 dengan nilai berbeda")).to_be_visible()
                await page.get_by_role("button", name="Tampilkan nilai STRIPE_KEY di staging").click()
                await expect(page.get_by_label("Nilai STRIPE_KEY di staging")).to_have_text("sk_test_1")
                await check(page, "environments", width)

                # The plan and its quotas.
                await page.get_by_role("link", name="Kembali ke secret").click()
                await page.get_by_role("link", name="Paket dan kuota").click()
                await expect(page.get_by_role("heading", name="Jika kuota menolak")).to_be_visible()
                await check(page, "plan", width)

                # The audit log: a filter by link, then the export through the session.
                await page.goto(f"{base}/app/teams/{team}/audit")
                await page.get_by_role("link", name="Saring tindakan compare_environments").first.click()
                await expect(page.get_by_role("link", name="Hapus filter tindakan compare_environments")
                             ).to_be_visible()
                assert "action=compare_environments" in page.url
                await page.get_by_label("Tindakan", exact=True).select_option("read")
                await page.get_by_role("button", name="Saring").click()
                await expect(page.get_by_role("region", name="Entri log audit")).to_contain_text(
                    "via token deploy-bot")
                await check(page, "audit-filtered", width,
                            page.get_by_text("Filter aktif") if width < 768 else None)
                async with page.expect_download() as download:
                    await page.get_by_role("button", name="Unduh CSV").click()
                assert (await download.value).suggested_filename.endswith(".csv")

            # Read insights: one-click delete and revoke, each confirmed (once is enough).
            await page.goto(f"{base}/app/teams/{team}/secrets")
            await page.get_by_role("link", name="Wawasan baca").click()
            for width in WIDTHS:
                await page.set_viewport_size({"width": width, "height": 844 if width < 768 else 900})
                await page.reload()
                await check(page, "insights", width)
            await page.get_by_role("button", name="Hapus LEGACY_FTP_PASSWORD di production").click()
            await expect(page.get_by_text("LEGACY_FTP_PASSWORD")).to_have_count(0)
            await page.get_by_role("button", name="Cabut token old-laptop").click()
            await expect(page.get_by_text("old-laptop")).to_have_count(0)

            # A Viewer: no control the server would refuse.
            await sign_in(page, arranged["viewer"])
            for width in WIDTHS:
                await page.set_viewport_size({"width": width, "height": 844 if width < 768 else 900})
                await page.goto(f"{base}/app/teams/{team}/secrets")
                for name in ("Simpan", "Impor", "Hapus STRIPE_KEY"):
                    await expect(page.get_by_role("button", name=name, exact=True)).to_have_count(0)
                await expect(page.get_by_role("heading", name="Tambah secret")).to_have_count(0)
                for name in ("Log audit", "Wawasan baca"):
                    await expect(page.get_by_role("link", name=name)).to_have_count(0)
                await page.get_by_role("button", name="Tampilkan nilai STRIPE_KEY").click()
                await expect(page.locator("[data-secret-value]")).to_have_text("sk_live_1")
                await check(page, "viewer-secrets", width)
                await page.get_by_role("link", name="Anggota").click()
                for name in ("Ubah peran", "Keluarkan owner_user", "Tambah"):
                    await expect(page.get_by_role("button", name=name)).to_have_count(0)
                await expect(page.get_by_role("button", name="Keluar dari tim")).to_have_count(1)
                await check(page, "viewer-members", width)
                await page.goto(f"{base}{arranged['secret']}")
                for name in ("Simpan perubahan", "Kembalikan ke versi 1"):
                    await expect(page.get_by_role("button", name=name)).to_have_count(0)
                await expect(page.get_by_role("button", name="Tampilkan nilai versi 1")).to_be_visible()
                await check(page, "viewer-secret", width)
        finally:
            await browser.close()
    assert problems == {}
