"""The plan new teams get, chosen by a self-hosted server's first admin on the set-up page
(Professional preselected, or the operator's `CVSM_DEFAULT_PLAN` when set) and changed later in
the admin panel: stored once (`instance_settings`, migration 0034), audited, and what a team
created afterwards gets; a plan that does not exist is a 400 page that changes nothing."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from cvsm_server.accounts import setup_link
from cvsm_server.instance import settings as instance_settings

from conftest import Api, query
from test_admin import make_admin
from test_dashboard import axe_script  # noqa: F401 (a fixture)
from test_docs_page import CHROMIUM, CHROMIUM_ARGS, require_chromium
from test_layout import serious_violations, too_wide
from test_setup_link import CSRF, is_admin, sign_in_as, start_printing

CHECKED = re.compile(r'<input type="radio" name="default_plan" value="([a-z]+)" checked>')
RADIOS = re.compile(r'<input type="radio" name="default_plan" value="([a-z]+)"')


async def setup_form(client: TestClient, user: dict, token: str) -> str:
    client.session.cookie_jar.clear()
    sign_in_as(client, user)
    page = await client.get(f"/setup?token={token}")
    html = await page.text()
    assert page.status == 200 and "Jadikan akun ini admin" in html, html
    return html


async def new_team_plan(client: TestClient, api: Api, user: dict) -> tuple[str, int | None]:
    team_id = await api.team(user)
    resp = await client.get(f"/api/v1/teams/{team_id}", headers=api.auth(user["token"]))
    team = (await resp.json())["team"]
    return team["plan"], team["max_secrets"]


async def test_the_set_up_page_asks_the_plan_for_new_teams_professional_preselected_and_stores_it(
        database_url: str, start_client: Any, make_settings: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    # No CVSM_DEFAULT_PLAN: a self-hosted server's set-up suggests Professional.
    client, [token] = await start_printing(
        start_client, lambda **kw: make_settings(default_plan="", **kw), capsys)
    api = Api(client)
    first = await api.register("self_hoster")
    before = await new_team_plan(client, api, first)
    assert before == ("starter", 50)  # nothing chosen yet, nothing configured: Starter

    html = await setup_form(client, first, token)
    assert RADIOS.findall(html) == ["starter", "professional", "enterprise"]
    assert CHECKED.findall(html) == ["professional"]
    assert "Paket untuk tim baru di server ini" in html  # the fieldset's legend

    resp = await client.post("/setup", data={"csrf": CSRF.search(html).group(1), "token": token,
                                             "default_plan": "enterprise"}, allow_redirects=False)
    assert (resp.status, resp.headers["Location"]) == (303, "/app/admin/users")
    assert await is_admin(database_url, first)
    assert await new_team_plan(client, api, first) == ("enterprise", None)
    assert before == ("starter", 50)  # the team made earlier keeps its plan
    [entry] = await query(database_url, "SELECT user_id, resource, metadata FROM audit_logs "
                                        "WHERE action = 'default_plan_change'")
    assert (str(entry["user_id"]), entry["resource"], entry["metadata"]) == (
        first["id"], "instance", {"from": None, "to": "enterprise", "via": "setup_link"})


async def test_the_operators_default_plan_is_preselected_and_a_script_that_sends_no_plan_chooses_none(
        database_url: str, start_client: Any, make_settings: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    client, [token] = await start_printing(
        start_client, lambda **kw: make_settings(default_plan="starter", **kw), capsys)
    api = Api(client)
    first = await api.register("starter_operator")
    html = await setup_form(client, first, token)
    assert CHECKED.findall(html) == ["starter"]
    resp = await client.post("/setup", data={"csrf": CSRF.search(html).group(1), "token": token},
                             allow_redirects=False)
    assert resp.status == 303 and await is_admin(database_url, first)
    assert await query(database_url, "SELECT * FROM instance_settings") == []
    assert await new_team_plan(client, api, first) == ("starter", 50)


async def test_a_plan_that_does_not_exist_is_a_400_page_and_the_link_still_works(
        database_url: str, start_client: Any, make_settings: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    client, [token] = await start_printing(
        start_client, lambda **kw: make_settings(default_plan="", **kw), capsys)
    api = Api(client)
    first = await api.register("typo_admin")
    html = await setup_form(client, first, token)
    csrf = CSRF.search(html).group(1)
    for bad in ("gold", "", "Professional", "professional\x00"):
        resp = await client.post("/setup", data={"csrf": csrf, "token": token, "default_plan": bad},
                                 allow_redirects=False)
        page = await resp.text()
        assert resp.status == 400, page
        assert "Traceback" not in page and resp.headers["Content-Type"].startswith("text/html")
        if "\x00" not in bad:
            assert instance_settings.PLAN_INVALID in page
    assert not await is_admin(database_url, first)
    assert await query(database_url, "SELECT * FROM instance_settings") == []
    assert setup_link.SETUP_INVALID not in await setup_form(client, first, token)  # still usable
    resp = await client.post("/setup", data={"csrf": csrf, "token": token,
                                             "default_plan": "professional"}, allow_redirects=False)
    assert resp.status == 303 and await is_admin(database_url, first)
    assert await new_team_plan(client, api, first) == ("professional", 500)


async def test_the_admin_panel_changes_the_plan_new_teams_get(
        database_url: str, start_client: Any, make_settings: Any) -> None:
    client = await start_client(make_settings(app_url="", default_plan="professional"))
    api = Api(client)
    boss, person = await api.register("panel_boss"), await api.register("plain_person")
    await make_admin(database_url, boss)

    sign_in_as(client, boss)
    html = await (await client.get("/app/admin/teams")).text()
    assert re.search(r'<option value="professional" selected>', html)  # the configured one
    assert "Belum dipilih" in html
    csrf = CSRF.search(html).group(1)

    refused = await client.post("/app/admin/teams/new-team-plan",
                                data={"csrf": csrf, "default_plan": "platinum"},
                                allow_redirects=False)
    page = await refused.text()
    assert refused.status == 400 and instance_settings.PLAN_INVALID in page
    assert 'aria-invalid="true"' in page
    no_csrf = await client.post("/app/admin/teams/new-team-plan", data={"default_plan": "starter"},
                                allow_redirects=False)
    assert no_csrf.status == 403

    done = await client.post("/app/admin/teams/new-team-plan",
                             data={"csrf": csrf, "default_plan": "starter"}, allow_redirects=False)
    assert (done.status, done.headers["Location"]) == (303, "/app/admin/teams")
    html = await (await client.get("/app/admin/teams")).text()
    assert re.search(r'<option value="starter" selected>', html) and "Belum dipilih" not in html
    assert await new_team_plan(client, api, person) == ("starter", 50)
    [entry] = await query(database_url, "SELECT metadata FROM audit_logs "
                                        "WHERE action = 'default_plan_change'")
    assert entry["metadata"] == {"from": None, "to": "starter"}

    sign_in_as(client, person)  # not an admin: refused, nothing changed
    html = await (await client.get("/app/teams")).text()
    refused = await client.post("/app/admin/teams/new-team-plan",
                                data={"csrf": CSRF.search(html).group(1),
                                      "default_plan": "enterprise"}, allow_redirects=False)
    assert refused.status == 403
    assert await query(database_url, "SELECT default_plan FROM instance_settings") == [
        {"default_plan": "starter"}]


async def test_the_plan_choice_in_a_browser_by_label_at_1280_and_390_px(
        database_url: str, start_client: Any, make_settings: Any, axe_script: Path,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The set-up page's choice and the admin panel's form, used by their labels in Chromium,
    no wider than a phone and without a serious axe-core violation (photographed at both
    widths with CVSM_SCREENSHOTS_DIR set)."""
    require_chromium()
    from playwright.async_api import async_playwright, expect

    # Links use the address asked (plain http keeps the cookie): the link printed is a path.
    client = await start_client(make_settings(app_url="", default_plan="", background_jobs="on"))
    [token] = re.findall(r"/setup\?token=([A-Za-z0-9_-]+)", capsys.readouterr().err)
    api = Api(client)
    first = await api.register("browser_admin")
    base = str(client.make_url("/")).rstrip("/")
    problems: dict[str, Any] = {}
    shots = Path(os.environ.get("CVSM_SCREENSHOTS_DIR") or tmp_path)

    async def check(page: Any, name: str, width: int) -> None:
        if measured := await too_wide(page):
            problems[f"{name}@{width} too wide"] = measured
        if serious := await serious_violations(page, axe_script):
            problems[f"{name}@{width} axe"] = serious
        await page.screenshot(path=str(shots / f"{name}-{width}.png"), full_page=True)

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await (await browser.new_context(bypass_csp=True)).new_page()
            await page.goto(f"{base}/signin")
            await page.get_by_label("Email atau username").fill(first["username"])
            await page.get_by_label("Kata sandi").fill("correct horse 1")
            await page.get_by_role("button", name="Masuk").click()
            await page.wait_for_url(f"{base}/app/teams")
            for width in (1280, 390):
                await page.set_viewport_size({"width": width, "height": 844 if width < 768 else 900})
                await page.goto(f"{base}/setup?token={token}")
                choices = page.get_by_role("group", name="Paket untuk tim baru di server ini")
                await expect(choices.get_by_role("radio", name=re.compile("^professional"))).to_be_checked()
                await check(page, "setup", width)
            await choices.get_by_role("radio", name=re.compile("^enterprise")).check()
            await page.get_by_role("button", name="Jadikan akun ini admin").click()
            await page.wait_for_url(f"{base}/app/admin/users")
            for width in (1280, 390):
                await page.set_viewport_size({"width": width, "height": 844 if width < 768 else 900})
                await page.goto(f"{base}/app/admin/teams")
                form = page.get_by_role("form", name="Paket untuk tim baru")
                await expect(form.get_by_label("Paket", exact=True)).to_have_value("enterprise")
                await check(page, "admin-teams", width)
            await form.get_by_label("Paket", exact=True).select_option("starter")
            await form.get_by_role("button", name="Simpan paket untuk tim baru").click()
            await expect(page.get_by_role("status")).to_contain_text("Paket untuk tim baru disimpan.")
        finally:
            await browser.close()
    assert problems == {}
    assert await query(database_url, "SELECT default_plan FROM instance_settings") == [
        {"default_plan": "starter"}]
