"""The dashboard's flows in a real browser (Debian's Chromium through Playwright), driven as a
person would, by visible labels, roles and texts, at 1280 and 390 px, with axe-core (no serious
or critical violation) and the width check on every page the walk lands on: sign-up says the
verification mail was sent; two-factor set-up survives a wrong code (the same key, the message
beside the field) and is then enabled; sign-out and a sign-in whose wrong code says what was
wrong; an API token made with the narrowest defaults is shown once and a reload neither shows it
again nor makes a second; editing and deleting a secret say so; an unknown /app path is the HTML
404 page; a Viewer is offered no create, delete or import control. With CVSM_SCREENSHOTS_DIR
set (docs/screenshots), the refused 2FA code and the new token are photographed at both widths.
The invitation link's landing page (over HTTP) names the team, the inviter and the role."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyotp
import pytest
from aiohttp.test_utils import TestClient

from conftest import Api
from cvsm_server.core.config import Settings
from test_dashboard import axe_script, sign_up  # noqa: F401 (a fixture)
from test_docs_page import CHROMIUM, CHROMIUM_ARGS, require_chromium
from test_email_links import web  # noqa: F401 - the fixture: mail to `mailbox`, plain http
from test_invites import invited
from test_layout import serious_violations, too_wide

WIDTHS = (1280, 390)
TOKEN_RE = re.compile(r"cvsm_[0-9a-f]{64}")


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(app_url="")  # links use the address asked; plain http keeps the cookie


async def test_the_flows_work_by_label_on_desktops_and_phones_and_pass_axe_core(
        client: TestClient, api: Api, axe_script: Path, tmp_path: Path) -> None:
    require_chromium()
    from playwright.async_api import async_playwright, expect

    base = str(client.make_url("/")).rstrip("/")
    shots = Path(os.environ.get("CVSM_SCREENSHOTS_DIR") or tmp_path)
    problems: dict[str, Any] = {}

    async def landed(page: Any, name: str, width: int, *, shot: bool = False,
                     mask: str = "cvsm_…", focus: Any = None) -> None:
        """The page just reached: no wider than the window, no serious axe-core violation;
        with `shot`, photographed (a value shown once masked, scrolled to `focus` when given)
        as `name`-`width`.png."""
        if measured := await too_wide(page):
            problems[f"{name}@{width} too wide"] = measured
        if serious := await serious_violations(page, axe_script):
            problems[f"{name}@{width} axe"] = serious
        if shot:
            for value in await page.locator("[data-secret-value]").all():
                await value.evaluate("(node, mask) => { node.textContent = mask }", mask)
            if focus is not None:
                await focus.evaluate("node => node.scrollIntoView({block: 'start'})")
            await page.screenshot(path=str(shots / f"{name}-{width}.png"))

    async def flash(page: Any, text: str) -> None:
        await expect(page.get_by_role("status")).to_have_text(text)

    async def sign_in(page: Any, username: str) -> None:
        await page.get_by_label("Email atau username").fill(username)
        await page.get_by_label("Kata sandi").fill("correct horse 1")
        await page.get_by_role("button", name="Masuk").click()

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for width in WIDTHS:
                # One context per width; the pages' CSP allows only their own scripts, so the
                # checker is let in for the test.
                context = await browser.new_context(
                    bypass_csp=True, viewport={"width": width, "height": 844 if width < 768 else 900})
                page = await context.new_page()
                page.on("dialog", lambda dialog: dialog.accept())  # the confirmations
                username, team = f"flow_{width}", f"flow-{width}"
                viewer = await api.register(f"flow_viewer_{width}")

                # 1. Sign-up: the flash says the verification mail was sent.
                await page.goto(f"{base}/signin")
                await page.get_by_role("link", name="Daftar").click()
                await page.get_by_label("Nama", exact=True).fill("Flow User")
                await page.get_by_label("Email").fill(f"{username}@example.com")
                await page.get_by_label("Username").fill(username)
                await page.get_by_label("Kata sandi").fill("correct horse 1")
                await page.get_by_role("button", name="Buat akun").click()
                await page.wait_for_url(f"{base}/app/teams")
                await flash(page, "Akun dibuat. Kami sudah mengirim email verifikasi ke alamat "
                                  "Anda: buka tautannya dalam 48 jam.")
                await landed(page, "signed-up", width)

                # 2. Two-factor set-up: a wrong code keeps the key, the right one enables it.
                await page.get_by_role("link", name="Akun", exact=True).click()
                await page.get_by_role("button", name="Siapkan verifikasi dua langkah").click()
                key_text = page.locator("code[data-secret-value]")
                key = (await key_text.inner_text()).strip()
                code = page.get_by_label("Kode enam digit")
                await code.fill(pyotp.TOTP(key).at(time.time() + 600))  # real, of another time
                await page.get_by_role("button", name="Aktifkan").click()
                await expect(code).to_have_attribute("aria-invalid", "true")
                await expect(code).to_have_accessible_description(
                    re.compile("Kode autentikasi salah"))
                await expect(key_text).to_have_text(key)  # the key scanned still works
                await expect(code).to_have_value("")
                await landed(page, "account-2fa-wrong-code", width, shot=True,
                             mask="JBSWY3DPEHPK3PXP", focus=key_text)
                await code.fill(pyotp.TOTP(key).now())
                await page.get_by_role("button", name="Aktifkan").click()
                await flash(page, "Verifikasi dua langkah aktif.")
                await expect(page.get_by_text("Aktif:")).to_be_visible()
                await expect(page.get_by_text(key)).to_have_count(0)
                await landed(page, "two-factor-on", width)

                # Sign out, then in again: a wrong code says so, the right one signs in.
                await page.get_by_role("button", name="Keluar", exact=True).click()
                await page.wait_for_url(f"{base}/signin")
                await flash(page, "Anda sudah keluar dari semua perangkat.")
                await landed(page, "signed-out", width)
                await sign_in(page, username)
                code = page.get_by_label("Kode dari aplikasi autentikator")
                await code.fill("000000")
                await page.get_by_role("button", name="Verifikasi").click()
                await expect(code).to_have_accessible_description(
                    re.compile("Kode autentikasi salah"))
                await expect(page.get_by_text("kata sandi salah")).to_have_count(0)
                await landed(page, "two-factor-step-wrong-code", width)
                # The enabling code's step is spent: the next one.
                await code.fill(pyotp.TOTP(key).at(time.time() + 30))
                await page.get_by_role("button", name="Verifikasi").click()
                await page.wait_for_url(f"{base}/app/teams")

                # A team with a secret, and the Viewer added (each change says so).
                await page.get_by_label("Nama tim").fill(f"Flow {width}")
                await page.get_by_label("Slug").fill(team)
                await page.get_by_role("button", name="Buat tim").click()
                await flash(page, "Tim dibuat.")
                for name in ("KEPT_KEY", "GONE_KEY"):
                    await page.get_by_label("Nama", exact=True).fill(name)
                    await page.get_by_label("Nilai", exact=True).fill(f"value-of-{name.lower()}")
                    await page.get_by_role("button", name="Simpan", exact=True).click()
                    await flash(page, "Secret disimpan.")
                await landed(page, "secrets", width)
                await page.get_by_role("link", name="Anggota").click()
                identifier = page.get_by_label("Email atau username pengguna terdaftar")
                await identifier.fill(viewer["username"])
                add_member = page.locator("form").filter(has=identifier)  # not the invitation's
                await add_member.get_by_label("Peran", exact=True).select_option("Viewer")
                await add_member.get_by_role("button", name="Tambah", exact=True).click()
                await flash(page, "Anggota ditambahkan.")
                await landed(page, "members", width)

                # 3. An API token: the narrowest by default, shown once, never made twice.
                await page.get_by_role("link", name="Token API").click()
                await expect(page.get_by_label("Tim", exact=True)).to_have_value(team)
                await expect(page.get_by_label("production")).to_be_checked()
                for environment in ("staging", "development"):
                    await expect(page.get_by_label(environment)).not_to_be_checked()
                await expect(page.get_by_label("Hanya baca")).to_be_checked()
                await landed(page, "tokens", width)
                await page.get_by_label("Nama", exact=True).fill("flow deploy")
                await page.get_by_role("button", name="Buat token").click()
                await flash(page, "Token dibuat.")
                await expect(page.get_by_role("heading", name="Token baru: flow deploy")
                             ).to_be_visible()
                assert TOKEN_RE.fullmatch(
                    (await page.locator("[data-secret-value]").inner_text()).strip())
                # The box's heading sits at its padding (1rem and the border), no margin added.
                box = await page.get_by_role("region", name="Token baru: flow deploy").bounding_box()
                heading = await page.get_by_role("heading", name="Token baru: flow deploy"
                                                 ).bounding_box()
                assert box and heading and heading["y"] - box["y"] <= 18, (box, heading)
                await landed(page, "tokens-created", width, shot=True)
                await page.reload()
                await expect(page.get_by_role("heading", name="Token baru: flow deploy")
                             ).to_have_count(0)
                await expect(page.get_by_role("rowheader", name="flow deploy")).to_have_count(1)
                assert not TOKEN_RE.search(await page.content())
                assert page.url == f"{base}/app/tokens"

                # 4. Editing and deleting a secret say so; an unknown path is the 404 page.
                await page.get_by_role("link", name="Tim", exact=True).click()
                await page.get_by_role("link", name=f"Flow {width}", exact=True).click()
                await page.get_by_role("link", name="KEPT_KEY").click()
                await page.get_by_label("Keterangan").fill("edited in the browser")
                await page.get_by_role("button", name="Simpan perubahan").click()
                await flash(page, "Perubahan secret disimpan.")
                await expect(page.get_by_label("Keterangan")).to_have_value("edited in the browser")
                await landed(page, "secret-edited", width)
                await page.goto(f"{base}/app/teams/{team}/secrets")
                await page.get_by_role("button", name="Hapus GONE_KEY").click()  # confirmed
                await flash(page, "Secret dihapus.")
                await expect(page.get_by_role("link", name="GONE_KEY")).to_have_count(0)
                await landed(page, "secret-deleted", width)
                missing = await page.goto(f"{base}/app/no/such/page")
                assert missing is not None and missing.status == 404
                assert missing.headers["content-type"].startswith("text/html")
                await expect(page.get_by_role("heading", level=1)).to_be_visible()
                await expect(page.get_by_role("alert")).to_have_text("Halaman tidak ditemukan")
                await expect(page.get_by_role("navigation", name="Navigasi utama")).to_be_visible()
                assert not (await page.locator("body").inner_text()).lstrip().startswith("{")
                await landed(page, "not-found", width)

                # 5. The Viewer: no create, delete or import control on the secrets page.
                await context.clear_cookies()
                await page.goto(f"{base}/signin")
                await sign_in(page, viewer["username"])
                await page.wait_for_url(f"{base}/app/teams")
                await page.get_by_role("link", name=f"Flow {width}", exact=True).click()
                await expect(page.get_by_role("link", name="KEPT_KEY")).to_be_visible()
                for name in ("Simpan", "Impor", "Hapus KEPT_KEY"):
                    await expect(page.get_by_role("button", name=name, exact=True)).to_have_count(0)
                await expect(page.get_by_role("heading", name="Tambah secret")).to_have_count(0)
                await landed(page, "viewer-secrets", width)
                await context.close()
        finally:
            await browser.close()
    assert problems == {}


async def test_the_invitation_landing_page_names_the_team_the_inviter_and_the_role(
        web: TestClient, mailbox: Any) -> None:
    api = Api(web)
    owner = await api.register("landing_owner")
    made = await web.post("/api/v1/teams", headers=api.auth(owner["token"]),
                          json={"name": "Landing Crew", "slug": "landing-crew"})
    team_id = (await made.json())["team"]["id"]
    invite, token = await invited(web, mailbox, owner, team_id, "landing_guest@example.com",
                                  "Viewer")
    for signed_in in (False, True):
        if signed_in:
            await sign_up(web, "landing_guest")
        page = await web.get(f"/invites/accept?token={token}")
        html = await page.text()
        assert page.status == 200
        said = re.search(r'<p id="invite-summary">(.*?)</p>', html, re.S)
        assert said, html
        assert re.sub(r"<[^>]+>", "", said.group(1)).split() == (
            "landing_owner@example.com mengundang Anda ke tim Landing Crew (landing-crew) "
            "sebagai Viewer.").split()
    # Nothing is said of an invitation the link no longer opens, nor of a made-up one.
    revoked = await web.delete(f"/api/v1/teams/{team_id}/invites/{invite['id']}",
                               headers=api.auth(owner["token"]))
    assert revoked.status in (200, 204), await revoked.text()
    for stale in (token, "not-a-real-token"):
        page = await web.get(f"/invites/accept?token={stale}")
        text = await page.text()
        assert page.status == 400 and 'id="invite-summary"' not in text
        assert "landing_owner" not in text and "Undangan tidak valid" in text
        assert 'action="/invites/accept"' not in text


# The pages photographed in both languages (docs/screenshots/<name>-<lang>-<width>.png) when
# CVSM_SCREENSHOTS_DIR is set: sign-in, the secrets list, a secret's page, the members page.
LANGUAGE_SHOTS = ("signin", "secrets", "secret", "members")


async def test_the_walk_in_english_and_indonesian_by_label_on_desktops_and_phones(
        client: TestClient, api: Api, axe_script: Path, tmp_path: Path) -> None:
    """The same walk read in each language (the browser's `Accept-Language`, then the account's
    own choice): every label, button and flash in that language, axe-core and the width check on
    every page, at 1280 and 390 px."""
    require_chromium()
    from playwright.async_api import async_playwright, expect

    base = str(client.make_url("/")).rstrip("/")
    shots = Path(os.environ.get("CVSM_SCREENSHOTS_DIR") or tmp_path)
    problems: dict[str, Any] = {}
    words = {
        "en": {"sign_up": "Sign up", "name": "Name", "password": "Password",
               "create_account": "Create account", "created": "Account created.",
               "team_name": "Team name", "create_team": "Create team",
               "team_created": "Team created.", "value": "Value", "save": "Save",
               "saved": "Secret saved.", "members": "Members", "account": "Account",
               "add_member": "Add a member", "reveal": "Reveal the current value",
               "language": "Language of pages and emails", "save_language": "Save language",
               "language_saved": "Bahasa disimpan.", "sign_in": "Sign in"},
        "id": {"sign_up": "Daftar", "name": "Nama", "password": "Kata sandi",
               "create_account": "Buat akun", "created": "Akun dibuat.",
               "team_name": "Nama tim", "create_team": "Buat tim",
               "team_created": "Tim dibuat.", "value": "Nilai", "save": "Simpan",
               "saved": "Secret disimpan.", "members": "Anggota", "account": "Akun",
               "add_member": "Tambah anggota", "reveal": "Tampilkan nilai sekarang",
               "language": "Bahasa halaman dan email", "save_language": "Simpan bahasa",
               "language_saved": "Language saved.", "sign_in": "Masuk"},
    }

    async def landed(page: Any, name: str, lang: str, width: int) -> None:
        assert await page.locator("html").get_attribute("lang") == lang, (name, lang)
        if measured := await too_wide(page):
            problems[f"{name}-{lang}@{width} too wide"] = measured
        if serious := await serious_violations(page, axe_script):
            problems[f"{name}-{lang}@{width} axe"] = serious
        if name in LANGUAGE_SHOTS:
            await page.screenshot(path=str(shots / f"{name}-{lang}-{width}.png"))

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for lang, w in words.items():
                other = "id" if lang == "en" else "en"
                for width in WIDTHS:
                    context = await browser.new_context(
                        bypass_csp=True, locale="en-US" if lang == "en" else "id-ID",
                        extra_http_headers={"Accept-Language": f"{lang};q=1, {other};q=0.5"},
                        viewport={"width": width, "height": 844 if width < 768 else 900})
                    page = await context.new_page()
                    username, team = f"lang_{lang}_{width}", f"lang-{lang}-{width}"
                    await page.goto(f"{base}/signin")
                    await expect(page.get_by_role("heading", level=1)).to_have_text(w["sign_in"])
                    await landed(page, "signin", lang, width)
                    await page.get_by_role("link", name=w["sign_up"]).click()
                    await page.get_by_label(w["name"], exact=True).fill("Lang User")
                    await page.get_by_label("Email").fill(f"{username}@example.com")
                    await page.get_by_label("Username").fill(username)
                    await page.get_by_label(w["password"]).fill("correct horse 1")
                    await page.get_by_role("button", name=w["create_account"]).click()
                    await page.wait_for_url(f"{base}/app/teams")
                    await expect(page.get_by_role("status")).to_contain_text(w["created"])
                    await landed(page, "teams", lang, width)

                    await page.get_by_label(w["team_name"]).fill(team)
                    await page.get_by_label("Slug").fill(team)
                    await page.get_by_role("button", name=w["create_team"]).click()
                    await expect(page.get_by_role("status")).to_have_text(w["team_created"])
                    await page.goto(f"{base}/app/teams/{team}/secrets")
                    await page.get_by_label(w["name"], exact=True).fill("DATABASE_URL")
                    await page.get_by_label(w["value"], exact=True).fill("postgres://db/app")
                    await page.get_by_role("button", name=w["save"], exact=True).click()
                    await expect(page.get_by_role("status")).to_have_text(w["saved"])
                    await landed(page, "secrets", lang, width)
                    await page.get_by_role("link", name="DATABASE_URL").click()
                    await expect(page.get_by_role("button", name=w["reveal"])).to_be_visible()
                    await landed(page, "secret", lang, width)
                    await page.goto(f"{base}/app/teams/{team}/members")
                    await expect(page.get_by_role("heading", name=w["add_member"])).to_be_visible()
                    await landed(page, "members", lang, width)

                    # The account's own choice wins over the browser's from then on.
                    await page.get_by_role("link", name=w["account"], exact=True).click()
                    await page.get_by_label(w["language"]).select_option(other)
                    await page.get_by_role("button", name=w["save_language"]).click()
                    await expect(page.get_by_role("status")).to_have_text(w["language_saved"])
                    await landed(page, "account", other, width)
                    await context.close()
        finally:
            await browser.close()
    assert problems == {}
