"""The admin panel's pages and the support page over real HTTP (cookies, CSRF, CSP): admins
only, users granted, revoked, disabled and enabled, the plan form's defaults, the numbers, and
a ticket from the support page answered and closed in the panel, its reply mailed."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from conftest import Api, query
from smtpbox import Mailbox
from test_admin import make_admin
from test_dashboard import axe_script, csrf_of  # noqa: F401 (a fixture)
from test_docs_page import CHROMIUM, CHROMIUM_ARGS, require_chromium

from cvsm_server.core.config import Settings
from cvsm_server.web.pages.rendering import CSP

ESCALATE = 'action="/app/support/escalate"'  # the "Bicara dengan manusia" form


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(app_url="", default_plan="starter")  # plain http keeps the cookie


def sign_in_as(client: TestClient, user: dict) -> None:
    """The browser now carries `user`'s session (the cookie holds a session JWT)."""
    client.session.cookie_jar.clear()
    client.session.cookie_jar.update_cookies({"cvsm_session": user["token"]})


async def page(client: TestClient, path: str, status: int = 200) -> str:
    resp = await client.get(path, allow_redirects=False)
    html = await resp.text()
    assert resp.status == status, html
    assert resp.headers["Content-Security-Policy"] == CSP
    return html


async def post(client: TestClient, path: str, form: dict, status: int = 303) -> Any:
    resp = await client.post(path, data=form, allow_redirects=False)
    assert resp.status == status, await resp.text()
    return resp


async def test_only_admins_see_the_panel_and_its_link(client: TestClient, api: Api,
                                                      database_url: str) -> None:
    user = await api.register("plain_person")
    boss = await api.register("panel_boss")
    await make_admin(database_url, boss)
    sign_in_as(client, user)
    assert 'href="/app/admin"' not in await page(client, "/app/teams")
    for path in ("/app/admin", "/app/admin/users", "/app/admin/teams", "/app/admin/stats",
                 "/app/admin/tickets", f"/app/admin/teams/{await api.team(user)}"):
        assert "Hanya admin" in await page(client, path, 403)
    csrf = csrf_of(await page(client, "/app/teams"))
    await post(client, f"/app/admin/users/{boss['id']}", {"csrf": csrf, "action": "disable"}, 403)
    sign_in_as(client, boss)
    assert 'href="/app/admin"' in await page(client, "/app/teams")
    resp = await client.get("/app/admin", allow_redirects=False)
    assert resp.headers["Location"] == "/app/admin/users"
    client.session.cookie_jar.clear()
    resp = await client.get("/app/admin/users", allow_redirects=False)
    assert (resp.status, resp.headers["Location"]) == (303, "/signin")


async def test_admins_search_page_grant_and_disable_users(client: TestClient, api: Api,
                                                          database_url: str) -> None:
    boss = await api.register("users_boss")
    await make_admin(database_url, boss)
    for i in range(27):
        await api.register(f"member_{i:02d}")
    target = await api.register("the_target")
    sign_in_as(client, boss)
    html = await page(client, "/app/admin/users?q=member_")
    assert "Halaman 1 dari 2 · 27 hasil" in html and "member_26@example.com" in html
    html = await page(client, "/app/admin/users?q=member_&page=2")
    assert "member_00@example.com" in html and "member_26@example.com" not in html
    html = await page(client, "/app/admin/users?q=users_boss")
    assert "Akun Anda" in html and 'value="revoke"' not in html  # no buttons on your own row

    csrf = csrf_of(html)
    form = {"csrf": csrf, "q": "the_target", "page": "1"}
    resp = await post(client, f"/app/admin/users/{target['id']}", {**form, "action": "grant"})
    assert resp.headers["Location"] == "/app/admin/users?q=the_target&page=1"
    await post(client, f"/app/admin/users/{target['id']}", {**form, "action": "disable"})
    [row] = await query(database_url, "SELECT is_admin, disabled_at FROM users WHERE id = %s",
                        (target["id"],))
    assert row["is_admin"] is True and row["disabled_at"] is not None
    assert (await client.get("/api/v1/me", headers=api.auth(target["token"]))).status == 401
    assert "Nonaktif" in await page(client, "/app/admin/users?q=the_target")
    await post(client, f"/app/admin/users/{target['id']}", {**form, "action": "enable"})
    await post(client, f"/app/admin/users/{target['id']}", {**form, "action": "revoke"})
    assert (await client.get("/api/v1/me", headers=api.auth(target["token"]))).status == 200
    # Without the CSRF token nothing happens; on yourself the page says why.
    await post(client, f"/app/admin/users/{target['id']}", {"action": "disable"}, 403)
    resp = await post(client, f"/app/admin/users/{boss['id']}", {**form, "action": "revoke"}, 400)
    assert "Anda tidak dapat mencabut" in await resp.text()
    actions = [r["action"] for r in await query(
        database_url, "SELECT action FROM audit_logs WHERE resource = 'user' ORDER BY created_at")]
    assert actions == ["admin_grant", "user_disable", "user_enable", "admin_revoke"]


async def test_the_plan_form_prefills_each_plans_quotas_and_empty_means_unlimited(
        client: TestClient, api: Api, database_url: str) -> None:
    boss = await api.register("plans_boss")
    await make_admin(database_url, boss)
    owner = await api.register("plan_owner")
    team_id = await api.team(owner, "plan-team")
    sign_in_as(client, boss)
    html = await page(client, "/app/admin/teams?q=plan-team")
    assert f'href="/app/admin/teams/{team_id}"' in html and "0 / 50" in html

    def quotas(html: str) -> tuple[str, str]:
        secrets = re.search(r'name="max_secrets"[^>]*value="([^"]*)"', html).group(1)
        members = re.search(r'name="max_members"[^>]*value="([^"]*)"', html).group(1)
        return secrets, members

    assert quotas(await page(client, f"/app/admin/teams/{team_id}")) == ("50", "5")  # the team's own
    assert quotas(await page(client, f"/app/admin/teams/{team_id}?plan=starter")) == ("50", "5")
    html = await page(client, f"/app/admin/teams/{team_id}?plan=professional")
    assert quotas(html) == ("500", "25")  # the plan table's, as a new team on it gets
    assert 'data-max-secrets="500" data-max-members="25"' in html  # for app.js
    assert "professional: secret 500, anggota 25" in html
    assert quotas(await page(client, f"/app/admin/teams/{team_id}?plan=enterprise")) == ("", "")

    csrf = csrf_of(html)
    resp = await post(client, f"/app/admin/teams/{team_id}",
                      {"csrf": csrf, "plan": "enterprise", "max_secrets": "2000", "max_members": ""})
    # Post/redirect/get: the plan's page says it once (a flash message, not a query string).
    assert resp.headers["Location"] == f"/app/admin/teams/{team_id}"
    assert 'role="status">Paket tim disimpan.' in await page(client, resp.headers["Location"])
    assert "Paket tim disimpan." not in await page(client, resp.headers["Location"])
    [team] = await query(database_url, "SELECT plan, max_secrets, max_members FROM teams WHERE id = %s",
                         (team_id,))
    assert (team["plan"], team["max_secrets"], team["max_members"]) == ("enterprise", 2000, None)
    for bad in ({"plan": "gold", "max_secrets": "", "max_members": ""},
                {"plan": "starter", "max_secrets": "-1", "max_members": ""},
                {"plan": "starter", "max_secrets": "lima", "max_members": ""}):
        resp = await post(client, f"/app/admin/teams/{team_id}", {"csrf": csrf, **bad}, 400)
        assert 'class="error"' in await resp.text()
    await post(client, f"/app/admin/teams/{team_id}", {"plan": "starter"}, 403)  # no CSRF
    [row] = await query(database_url, "SELECT count(*) AS n FROM audit_logs WHERE action = 'team_plan_change'")
    assert row["n"] == 1


async def test_the_stats_page_counts_the_instance(client: TestClient, api: Api,
                                                  database_url: str) -> None:
    boss = await api.register("stats_boss")
    await make_admin(database_url, boss)
    owner = await api.register("stats_owner")
    team_id = await api.team(owner)
    await api.secret(owner, team_id, "ONE", "v")
    sign_in_as(client, boss)
    html = await page(client, "/app/admin/stats")
    assert re.search(r"Pengguna</th><td>2<", html) and re.search(r"Secret aktif</th><td>1<", html)
    assert re.search(r"Tim dengan paket starter</th><td>1<", html)


@pytest.fixture
async def web(start_client: Callable[..., Any], make_settings: Callable[..., Settings],
              mailbox: Mailbox) -> TestClient:
    return await start_client(make_settings(app_url="", smtp_url=mailbox.url, background_jobs="on",
                                            mail_poll_seconds="1",
                                            support_email="desk@example.com"))


async def test_a_ticket_from_the_support_page_is_answered_and_closed_in_the_panel(
        web: TestClient, mailbox: Mailbox, database_url: str) -> None:
    api = Api(web)
    user = await api.register("page_user")
    boss = await api.register("page_boss")
    await make_admin(database_url, boss)

    # The support page without JavaScript: ask, see the answer, escalate.
    sign_in_as(web, user)
    html = await page(web, "/app/support")
    assert 'src="/static/support.js"' in html and 'aria-live="polite"' in html
    assert ESCALATE not in html  # nothing to escalate yet
    resp = await post(web, "/app/support", {"csrf": csrf_of(html), "message": "cara membuat token API"})
    location = resp.headers["Location"]
    assert location.startswith("/app/support?c=")
    html = await page(web, location.split("#")[0])
    assert "cara membuat token API" in html and "Sumber: Token API dan cakupannya" in html
    assert ESCALATE in html
    conversation_id = re.search(r'name="conversation_id" value="([0-9a-f-]{36})"', html).group(1)
    await post(web, "/app/support", {"message": "token"}, 403)  # CSRF

    # What support.js does: the same form, answered as JSON.
    resp = await web.post("/app/support", data={"csrf": csrf_of(html), "message": "lupa kata sandi",
                                                "conversation_id": conversation_id},
                          headers={"Accept": "application/json"})
    answer = await resp.json()
    assert resp.status == 200 and answer["conversation_id"] == conversation_id
    assert answer["articles"][0]["slug"] == "atur-ulang-kata-sandi"
    resp = await web.post("/app/support", data={"csrf": csrf_of(html), "message": ""},
                          headers={"Accept": "application/json"})
    assert resp.status == 400 and "error" in await resp.json()

    resp = await post(web, "/app/support/escalate", {"csrf": csrf_of(html), "note": "Masih bingung",
                                                     "conversation_id": conversation_id})
    html = await page(web, resp.headers["Location"])
    assert "sudah diteruskan ke admin" in html and ESCALATE not in html
    assert "escalated" not in resp.headers["Location"]  # said by a flash, once
    assert "Permintaan Anda sudah diteruskan" not in await page(web, resp.headers["Location"])
    mailed = await mailbox.receive("desk@example.com", subject="Tiket dukungan baru")
    link = re.search(r"/app/admin/tickets/[0-9a-f-]{36}", mailed.get_body(("plain",)).get_content())
    ticket_path = link.group(0)

    # Another user cannot open this conversation.
    other = await api.register("page_other")
    sign_in_as(web, other)
    await page(web, f"/app/support?c={conversation_id}", 404)

    # The admin answers in the panel; the reply is mailed and shows in the user's conversation.
    sign_in_as(web, boss)
    html = await page(web, "/app/admin/tickets")
    assert ticket_path in html and "page_user@example.com" in html
    html = await page(web, ticket_path)
    assert "Masih bingung" in html and "cara membuat token API" in html
    await page(web, "/app/admin/tickets/00000000-0000-4000-8000-000000000000", 404)
    # An empty reply is refused beside its field, on the ticket's page again.
    empty = await post(web, f"{ticket_path}/reply", {"csrf": csrf_of(html), "message": " "}, 400)
    assert re.search(r'<textarea id="reply" name="message"[^>]*aria-invalid="true" '
                     r'aria-describedby="reply-error"', await empty.text())
    resp = await post(web, f"{ticket_path}/reply", {"csrf": csrf_of(html),
                                                    "message": "Buka halaman Token API."})
    assert resp.headers["Location"] == ticket_path
    assert "Balasan terkirim" in await page(web, resp.headers["Location"])
    assert "Balasan terkirim" not in await page(web, ticket_path)  # said once
    reply = await mailbox.receive(user["email"], subject="Balasan untuk permintaan bantuan")
    assert "Buka halaman Token API." in reply.get_body(("plain",)).get_content()
    resp = await post(web, f"{ticket_path}/close", {"csrf": csrf_of(html)})
    html = await page(web, resp.headers["Location"])
    assert "Ditutup" in html and "Kirim balasan" not in html and "Tiket ditutup." in html
    assert ticket_path not in await page(web, "/app/admin/tickets")
    assert ticket_path in await page(web, "/app/admin/tickets?status=closed")
    assert "Tiket dukungan terbuka</th><td>0<" in await page(web, "/app/admin/stats")

    sign_in_as(web, user)
    html = await page(web, f"/app/support?c={conversation_id}")
    assert "Buka halaman Token API." in html and ESCALATE in html  # closed: again


async def test_the_chat_widget_asks_and_escalates_without_a_reload_in_a_browser(
        client: TestClient, api: Api, database_url: str, axe_script: Path) -> None:
    """support.js in Chromium: answers appear in the live region without a page load, the
    escalation button makes a ticket; the support page and the panel pass axe-core."""
    require_chromium()
    from playwright.async_api import async_playwright, expect

    user = await api.register("browser_user")
    boss = await api.register("browser_boss")
    await make_admin(database_url, boss)
    base = str(client.make_url("/")).rstrip("/")
    found: dict[str, list[str]] = {}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(bypass_csp=True)  # for the axe script only
            page = await context.new_page()

            async def check(name: str) -> None:
                await page.add_script_tag(path=str(axe_script))
                result = await page.evaluate("() => axe.run(document, {runOnly: ['wcag2a', 'wcag2aa']})")
                serious = [f"{v['id']}: {v['help']}" for v in result["violations"]
                           if v["impact"] in ("serious", "critical")]
                if serious:
                    found[name] = serious

            await context.add_cookies([{"name": "cvsm_session", "value": user["token"], "url": base}])
            await page.goto(f"{base}/app/support")
            await check("/app/support")
            log = page.locator("#percakapan")
            await page.get_by_label("Pertanyaan Anda").fill("bagaimana mengaktifkan 2FA?")
            await page.get_by_role("button", name="Kirim pertanyaan").click()
            await expect(log).to_contain_text("Pindai kode QR")
            await expect(page.get_by_role("button", name="Bicara dengan manusia")).to_be_visible()
            await page.evaluate("() => { window.stayed = true; }")
            await page.get_by_label("Pertanyaan Anda").fill("lupa kata sandi")
            await page.get_by_role("button", name="Kirim pertanyaan").click()
            await expect(log).to_contain_text("Sumber: Lupa kata sandi")
            assert await page.evaluate("() => window.stayed === true")  # no page load
            await check("/app/support with answers")
            await page.get_by_label("Catatan untuk admin").fill("Perlu bantuan manusia")
            await page.get_by_role("button", name="Bicara dengan manusia").click()
            await expect(page.get_by_role("status")).to_contain_text("sudah diteruskan ke admin")
            assert await page.evaluate("() => window.stayed === true")

            await context.clear_cookies()
            await context.add_cookies([{"name": "cvsm_session", "value": boss["token"], "url": base}])
            for path in ("/app/admin/users", "/app/admin/teams", "/app/admin/stats", "/app/admin/tickets"):
                await page.goto(f"{base}{path}")
                await check(path)
            await page.get_by_role("link", name=re.compile(r"\d{4}-\d\d-\d\d")).click()
            await expect(page.get_by_text("Perlu bantuan manusia")).to_be_visible()
            await check("ticket")
            team_id = await api.team(boss, "browser-team")
            await page.goto(f"{base}/app/admin/teams/{team_id}")
            await page.get_by_label("Paket", exact=True).select_option("professional")
            await expect(page.get_by_label("Kuota secret (kosong: tanpa batas)")).to_have_value("500")
            await expect(page.get_by_label("Kuota anggota (kosong: tanpa batas)")).to_have_value("25")
            await check("plan form")
        finally:
            await browser.close()
    assert found == {}
