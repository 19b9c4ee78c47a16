"""`GET /api/v1/docs` renders the OpenAPI document in a real browser (headless Chromium, through
Playwright's async API) with no console error, under the page's strict CSP, using only this
server's own assets.

The browser is Debian's `chromium` (`.ci/run` installs it); Playwright never downloads one.
Outside CI the test is skipped when `/usr/bin/chromium` is absent; under `CI=true` it fails."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cvsm_server.web import apidoc
from cvsm_server.web.routes import ROUTES

CHROMIUM = Path("/usr/bin/chromium")
# `--accept-lang=id`: the walks find controls by their Indonesian labels, and the pages follow the
# browser's `Accept-Language` (en-US unless told); a walk in English sets its context's locale.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--accept-lang=id"]


def require_chromium() -> None:
    if CHROMIUM.exists():
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{CHROMIUM} is missing under CI=true (.ci/run installs Debian's chromium)")
    pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium); the docs page test needs a "
                "browser and Playwright never downloads one")


async def test_page_headers(client: Any) -> None:
    resp = await client.get("/api/v1/docs")
    assert resp.status == 200
    assert resp.content_type == "text/html"
    csp = resp.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self';" in csp
    assert "unsafe-inline" not in csp
    html = await resp.text()
    assert "<script>" not in html and "style=" not in html and "//" not in html.replace(
        "<!doctype", "")  # no inline script or style, no absolute or CDN address
    for name in ("docs.js", "docs.css"):
        asset = await client.get(f"/static/{name}")
        assert asset.status == 200


async def test_renders_in_chromium_without_console_errors(client: Any, tmp_path: Path) -> None:
    require_chromium()
    from playwright.async_api import async_playwright

    base = str(client.make_url("/")).rstrip("/")
    problems: list[str] = []
    foreign: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("request", lambda r: foreign.append(r.url)
                    if not r.url.startswith(base) else None)
            resp = await page.goto(f"{base}/api/v1/docs")
            assert resp is not None and resp.status == 200
            await page.wait_for_selector("body[data-rendered]", timeout=15000)
            rendered = int(await page.get_attribute("body", "data-rendered") or 0)
            operations = sum(len(item) for item in apidoc.document(ROUTES)["paths"].values())
            assert rendered == operations
            assert await page.locator("article").count() == operations
            assert "cvsm API" in await page.title()
            assert await page.locator("#op-create_secret").is_visible()
            text = await page.locator("#op-create_secret").inner_text()
            assert "^[A-Za-z_][A-Za-z0-9_]{0,254}$" in text and "production" in text
            # the browser asks for Indonesian: the chrome is Indonesian, the document's texts not
            # (the headings are shown in capitals: compared in lower case)
            assert "jawaban" in text.lower() and "token bearer" in text
            assert "isi permintaan (application/json, wajib)" in text.lower()
            assert (await page.locator("#title").inner_text()).startswith("Referensi ")
            shot = tmp_path / "docs.png"
            await page.screenshot(path=str(shot), full_page=False)
            assert shot.stat().st_size > 10_000
        finally:
            await browser.close()
    assert problems == []
    assert foreign == []


async def test_the_chrome_follows_the_page_language(client: Any) -> None:
    """The reference's title, headings, navigation and language switch are in the page's
    language (the cookie, `Accept-Language`, the server's default); its script's labels follow
    `<html lang>` (`TEXTS` in docs.js); the OpenAPI document itself stays English."""
    from test_i18n import indonesian_left

    english = await client.get("/api/v1/docs", headers={"Accept-Language": "en-GB,en;q=0.9"})
    html = await english.text()
    assert english.status == 200 and '<html lang="en">' in html, html
    assert "<title>cvsm API reference</title>" in html and 'aria-label="Operations"' in html
    assert 'href="/language/id?next=%2Fapi%2Fv1%2Fdocs"' in html and "Bahasa Indonesia" in html
    assert "in English, as in the OpenAPI document" in html
    assert indonesian_left(html) == [], indonesian_left(html)
    assert "Accept-Language" in english.headers["Vary"]
    indonesian = await (await client.get("/api/v1/docs")).text()  # no header: the default
    assert '<html lang="id">' in indonesian and "<title>Referensi API cvsm</title>" in indonesian
    assert 'aria-label="Operasi"' in indonesian and 'href="/language/en?next=%2Fapi%2Fv1%2Fdocs"' in indonesian
    # the switch's cookie (`/language/en`) wins over the browser's Accept-Language
    html = await (await client.get("/api/v1/docs", headers={
        "Accept-Language": "id", "Cookie": "cvsm_lang=en"})).text()
    assert '<html lang="en">' in html
