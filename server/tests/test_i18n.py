"""The language plumbing: texts go through gettext per task, and templates can say `_()`."""

from __future__ import annotations

import asyncio
import gettext

import aiohttp_jinja2
from aiohttp import web

from cvsm_server.core import i18n
from cvsm_server.web.pages import kit


class _English(gettext.NullTranslations):
    def gettext(self, message: str) -> str:
        return {"Tim": "Teams"}.get(message, message)


def test_each_task_keeps_its_own_language():
    i18n.install("en", _English())

    async def read(language: str) -> str:
        i18n.set_language(language)
        await asyncio.sleep(0)
        return i18n.gettext("Tim")

    async def both() -> list[str]:
        return await asyncio.gather(read("en"), read("id"), read("xx"))

    assert asyncio.run(both()) == ["Teams", "Tim", "Tim"]
    assert i18n.gettext("Tim") == "Tim"  # this thread's context was never changed


def test_templates_translate_through_the_current_language():
    i18n.install("en", _English())
    app = web.Application()
    kit.setup(app)
    env = aiohttp_jinja2.get_env(app)
    template = env.from_string('{{ _("Tim") }} / {% trans %}Tim{% endtrans %} / {{ _("Halo %(name)s", name=who) }}')
    with i18n.use_language("en"):
        assert template.render(who="<b>") == "Teams / Teams / Halo &lt;b&gt;"
    assert template.render(who="<b>") == "Tim / Tim / Halo &lt;b&gt;"  # values stay escaped


# --- the catalogs, the language choice, English pages and mails (issue 42, item 1) -------------

import re  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from aiohttp.test_utils import TestClient  # noqa: E402
from babel.messages.pofile import read_po  # noqa: E402

from cvsm_server.core import i18n_tool  # noqa: E402
from cvsm_server.core.config import ConfigError, Settings  # noqa: E402

from conftest import Api, query  # noqa: E402
from stripe_mock import StripeFront, settings_env  # noqa: E402
from test_dashboard import csrf_of, form_csrf, sign_up  # noqa: E402
from test_admin import make_admin  # noqa: E402
from test_setup_link import sign_in_as, start_printing  # noqa: E402


def test_every_text_has_a_translation_in_both_catalogs():
    """Every msgid the templates and Python sources use (`make i18n` extracts them) is in both
    catalogs with a non-empty, non-fuzzy msgstr; nothing obsolete stays behind."""
    assert i18n_tool.problems() == []
    used = {m.id for m in i18n_tool.extract() if m.id}
    for language in i18n.LANGUAGES:
        catalog = i18n_tool.read(language)
        assert {m.id for m in catalog if m.id} == used, language
        assert not catalog.obsolete


def test_the_catalogs_keep_every_placeholder_and_indonesian_is_itself():
    english = i18n_tool.read("en")
    for message in english:
        if not message.id:
            continue
        ids = message.id if isinstance(message.id, tuple) else (message.id,)
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        for string in strings:
            assert set(re.findall(r"%\(\w+\)s", ids[0])) == set(
                re.findall(r"%\(\w+\)s", string)), message.id
            # a message built with values (`i18n.Text`): the same `{name}` placeholders
            assert set(re.findall(r"\{\w+\}", ids[0])) == set(
                re.findall(r"\{\w+\}", string)), message.id
            assert "%" not in re.sub(r"%\(\w+\)s|%%", "", string), message.id
    for message in i18n_tool.read("id"):
        if message.id:
            ids = message.id if isinstance(message.id, tuple) else (message.id,)
            strings = message.string if isinstance(message.string, tuple) else (message.string,)
            assert set(strings) == {ids[0]}, message.id


def test_the_checker_finds_a_missing_translation(tmp_path, monkeypatch):
    """The completeness check itself can fail: an English catalog with one empty msgstr."""
    path = i18n.catalog_path("en")
    with path.open("rb") as handle:
        catalog = read_po(handle, locale="en")
    first = next(m for m in catalog if m.id)
    first.string = ""
    from babel.messages.pofile import write_po
    broken = tmp_path / "en" / "LC_MESSAGES" / "messages.po"
    broken.parent.mkdir(parents=True)
    with broken.open("wb") as handle:
        write_po(handle, catalog)
    (tmp_path / "id" / "LC_MESSAGES").mkdir(parents=True)
    (tmp_path / "id" / "LC_MESSAGES" / "messages.po").write_bytes(i18n.catalog_path("id").read_bytes())
    monkeypatch.setattr(i18n, "LOCALE_DIR", tmp_path)
    assert i18n_tool.problems() == [f"en: untranslated {first.id!r}"]


def test_accept_language_is_negotiated_with_q_values():
    assert i18n.negotiate(None) == "id"
    assert i18n.negotiate("en-US,en;q=0.9") == "en"
    assert i18n.negotiate("fr-FR, en;q=0.5, id;q=0.8") == "id"
    assert i18n.negotiate("id;q=0.1, en;q=0.9") == "en"
    assert i18n.negotiate("de, fr") == "id"
    assert i18n.negotiate("de, fr", default="en") == "en"
    assert i18n.negotiate("en;q=0") == "id"
    assert i18n.negotiate("en;q=abc, id") == "id"


def test_the_default_language_is_a_setting(make_settings: Callable[..., Settings]):
    assert Settings.from_env({"CVSM_DATA_DIR": "/tmp/x"}).default_language == "id"
    assert Settings.from_env({"CVSM_DATA_DIR": "/tmp/x",
                              "CVSM_DEFAULT_LANGUAGE": "EN"}).default_language == "en"
    with pytest.raises(ConfigError, match="CVSM_DEFAULT_LANGUAGE"):
        Settings.from_env({"CVSM_DATA_DIR": "/tmp/x", "CVSM_DEFAULT_LANGUAGE": "fr"})


# Indonesian words that must not be seen on an English page (visible text and the attributes a
# person reads: labels, confirmations, image texts).
STOP_WORDS = ("Tambah", "Hapus", "Simpan", "Masuk", "Keluar", "Kata sandi", "Anggota", "Nilai",
              "Tampilkan", "Cabut", "Buat", "Akun", "Tim", "Bantuan", "Halaman", "Ubah", "Kembali",
              "Unduh", "Impor", "Ekspor", "Cari", "Daftar", "Peran", "Undangan", "Tautan", "Paket",
              "Sesi", "Versi", "Jenis", "Keterangan", "berdampingan", "dibaca", "Anda", "yang", "dan",
              "tidak", "dengan", "untuk",
              # the billing, set-up, device, rotation and webhook pages' own words
              "semua", "Setujui", "Tolak", "Lanjut", "Kode", "Diminta", "Kebijakan", "kebijakan",
              "Rotasi", "Setiap", "Berikutnya", "Kirim", "Pilih", "Langganan", "tagihan", "belum",
              "terbatas", "sekarang", "ini", "Aktif", "nonaktif", "Pengiriman", "Salin", "mesin",
              # the last walk's (issue 42): support, admin panel, help articles, API reference
              "Batal", "Batalkan", "Rahasia", "Percakapan", "Pengguna", "Tiket", "Berlaku",
              "Menurut", "artikel", "Sumber", "Asisten", "Referensi", "Memuat", "Operasi",
              "Jawaban", "wajib", "Dibuat", "Terbuka", "Ditutup", "Catatan", "Balas", "Tutup",
              "kedaluwarsa", "Sampai", "Dari", "Semua", "Pendaftar", "Berlangganan")


def visible_text(html: str) -> str:
    """What a person reads: text outside tags, and the readable attributes."""
    attributes = re.findall(r'(?:aria-label|title|alt|placeholder|data-confirm)="([^"]*)"', html)
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", body)
    return " ".join([text, *attributes])


def indonesian_left(html: str) -> list[str]:
    # The switch back to Indonesian names the language in Indonesian, as it should.
    text = visible_text(html).replace("Bahasa Indonesia", "")
    return [word for word in STOP_WORDS if re.search(rf"\b{re.escape(word.strip())}\b", text)]


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    # plain http keeps the cookies; a webhook to this machine is allowed (it is never sent)
    return make_settings(app_url="", webhook_allow_private="1")


async def english_walk(client: TestClient, headers: dict[str, str]) -> dict[str, str]:
    """The main pages of a signed-in member with a team, a secret, a token, an invitation, a
    rotation policy, a webhook and a `cvsm login` waiting for approval."""
    csrf = await form_csrf(client, "/app/teams")
    await client.post("/app/teams", data={"csrf": csrf, "name": "Lang", "slug": "lang-team"})
    await client.post("/app/teams/lang-team/secrets", data={
        "csrf": csrf, "name": "KEY", "value": "lang-value-1", "environment": "production",
        "type": "other"})
    await client.post("/app/teams/lang-team/invites", data={
        "csrf": csrf, "email": "someone@example.com", "role": "Member"})
    await client.post("/app/tokens", data={"csrf": csrf, "name": "ci", "team": "lang-team",
                                           "environments": "production", "read_only": "on"})
    html = await (await client.get("/app/teams/lang-team/secrets", headers=headers)).text()
    secret_id = re.search(r'/app/teams/lang-team/secrets/([0-9a-f-]{36})"', html).group(1)  # type: ignore[union-attr]
    await client.post("/app/teams/lang-team/rotation", data=[
        ("csrf", csrf), ("secret_id", secret_id), ("interval_days", "7"), ("length", "24"),
        ("classes", "lower"), ("classes", "digits"), ("enabled", "on"), ("target_kind", "none"),
        ("value_format", "password")])
    await client.post("/app/teams/lang-team/webhooks", data=[
        ("csrf", csrf), ("url", "http://127.0.0.1:9/hook"), ("events", "secret.created")])
    started = await client.post("/api/v1/auth/device/code", json={"hostname": "lang-laptop"})
    user_code = (await started.json())["user_code"]
    pages = {}
    for path in ("/app/teams", "/app/teams/lang-team/secrets",
                 f"/app/teams/lang-team/secrets/{secret_id}", "/app/teams/lang-team/members",
                 "/app/teams/lang-team/environments", "/app/teams/lang-team/plan",
                 "/app/teams/lang-team/audit", "/app/teams/lang-team/insights", "/app/tokens",
                 "/app/account", "/app/support", "/app/nowhere",
                 "/app/teams/lang-team/rotation", f"/app/teams/lang-team/rotation?edit={secret_id}",
                 "/app/teams/lang-team/webhooks", "/device", f"/device?user_code={user_code}"):
        page = await client.get(path, headers=headers)
        assert page.status in (200, 404), path
        pages[path] = await page.text()
    return pages


async def test_pages_follow_accept_language_and_leave_no_indonesian(client: TestClient):
    english = {"Accept-Language": "en-GB,en;q=0.9,id;q=0.5"}
    for path in ("/signin", "/signup", "/forgot-password", "/reset-password?token=x"):
        page = await client.get(path, headers=english)
        html = await page.text()
        assert '<html lang="en">' in html, path
        assert indonesian_left(html) == [], (path, indonesian_left(html))
    html = await (await client.get("/signin")).text()
    assert '<html lang="id">' in html and "<h1>Masuk</h1>" in html  # no header: the default
    await sign_up(client)
    pages = await english_walk(client, english)
    for path, html in pages.items():
        assert '<html lang="en">' in html, path
        assert indonesian_left(html) == [], (path, indonesian_left(html))
    # the walk saw the new pages with something on them, not just their empty states
    assert "Delete the policy of KEY in production" in pages["/app/teams/lang-team/rotation"]
    assert "Delete the webhook http://127.0.0.1:9/hook" in pages["/app/teams/lang-team/webhooks"]
    device = next(html for path, html in pages.items() if path.startswith("/device?"))
    assert "lang-laptop" in device and "Approve" in device and "Deny" in device
    assert "Every how many days" in pages[next(p for p in pages if "?edit=" in p)]
    indonesian = await client.get("/app/tokens", headers={"Accept-Language": "id"})
    assert "Buat token" in await indonesian.text()


async def test_the_account_setting_wins_over_the_browser(client: TestClient, database_url: str):
    user = await sign_up(client)
    csrf = await form_csrf(client, "/app/account")
    saved = await client.post("/app/account/language", data={"csrf": csrf, "language": "en"},
                              headers={"Accept-Language": "id"})
    html = await saved.text()  # after the redirect, the flash in the new language
    assert '<html lang="en">' in html and "Language saved." in html
    rows = await query(database_url, "SELECT language FROM users WHERE username = %s",
                       (user["username"],))
    assert rows == [{"language": "en"}]
    page = await client.get("/app/teams", headers={"Accept-Language": "id"})
    assert '<html lang="en">' in await page.text()
    await client.post("/app/account/language", data={"csrf": csrf, "language": ""})
    page = await client.get("/app/teams", headers={"Accept-Language": "id"})
    assert '<html lang="id">' in await page.text()


async def test_the_default_language_setting_applies_without_a_header(
        start_client: Callable[..., Any], make_settings: Callable[..., Settings]):
    try:
        client = await start_client(make_settings(app_url="", default_language="en"))
        html = await (await client.get("/signin")).text()
        assert '<html lang="en">' in html and "<h1>Sign in</h1>" in html
        html = await (await client.get("/signin", headers={"Accept-Language": "id"})).text()
        assert "<h1>Masuk</h1>" in html
        # A task that chose no language (an API request's mail, a job) writes in the default.
        assert i18n.current_language() == "en"
        assert i18n.gettext("Simpan") == "Save"
    finally:
        i18n.set_default("id")
    assert i18n.current_language() == "id"


async def test_a_signed_out_browser_switches_with_a_cookie(client: TestClient):
    page = await client.get("/signin")
    assert 'href="/language/en?next=%2Fsignin"' in await page.text()
    switched = await client.get("/language/en?next=/signup", allow_redirects=False)
    assert (switched.status, switched.headers["Location"]) == (303, "/signup")
    html = await (await client.get("/signup", headers={"Accept-Language": "id"})).text()
    assert '<html lang="en">' in html and "Bahasa Indonesia" in html
    link = await client.get("/setup?token=one-time-secret-token")
    assert "one-time-secret-token" not in await link.text()  # the switch keeps the path only
    away = await client.get("/language/en?next=//evil.example/x", allow_redirects=False)
    assert away.headers["Location"] == "/signin"  # only a path on this site
    await client.get("/language/id")
    assert '<html lang="id">' in await (await client.get("/signin")).text()


async def test_a_refusal_on_a_page_is_translated_and_the_api_stays_indonesian(client: TestClient):
    english = {"Accept-Language": "en"}
    csrf = csrf_of(await (await client.get("/signin", headers=english)).text())
    page = await client.post("/signin", headers=english, data={
        "csrf": csrf, "identifier": "nobody", "password": "wrong password 1"})
    html = await page.text()
    assert page.status == 401 and "Wrong email/username or password" in html, html
    api = await client.post("/api/v1/auth/login", headers=english,
                            json={"identifier": "nobody", "password": "wrong password 1"})
    assert (await api.json())["error"] == "Email/username atau kata sandi salah"
    missing = await client.get("/app/nowhere", headers=english)
    assert missing.status == 404 and "Page not found" in await missing.text()


async def test_patch_me_sets_the_language(client: TestClient, api, owner):
    headers = api.auth(owner["token"])
    me = await client.get("/api/v1/me", headers=headers)
    assert (await me.json())["language"] is None
    for bad in ({"language": "fr"}, {"language": 1}, {}):
        refused = await client.patch("/api/v1/me", headers=headers, json=bad)
        assert refused.status == 400
        assert (await refused.json())["error"] == "Kolom 'language' harus 'id' atau 'en'"
    done = await client.patch("/api/v1/me", headers=headers, json={"language": "en"})
    assert done.status == 200 and (await done.json())["language"] == "en"
    assert (await (await client.get("/api/v1/me", headers=headers)).json())["language"] == "en"
    cleared = await client.patch("/api/v1/me", headers=headers, json={"language": None})
    assert (await cleared.json())["language"] is None
    refused = await client.patch("/api/v1/me", json={"language": "en"})
    assert refused.status == 401


async def test_mails_are_written_in_the_recipients_language(client: TestClient, api, owner,
                                                            database_url: str):
    from datetime import datetime, timezone

    from cvsm_server import db
    from cvsm_server.accounts.deletion import format_when
    from cvsm_server.mail import messages as mail

    i18n.load_catalogs()
    context = {"name": "Ana", "link": "https://cvsm.test/verify-email?token=t",
               "app_url": "https://cvsm.test"}
    english = mail.render("verify_email", "ana@example.com", context, language="en")
    assert english.subject == "Verify your email address"
    assert english.text.startswith("Hello Ana,") and '<html lang="en">' in english.html
    indonesian = mail.render("verify_email", "ana@example.com", context, language="id")
    assert indonesian.subject == "Verifikasi alamat email Anda" and '<html lang="id">' in indonesian.html
    with i18n.use_language("en"):  # no choice: the sending request's language
        assert mail.render("verify_email", "x@example.com", context).subject == english.subject
    invite = mail.render("team_invite", "b@example.com", {
        "inviter": None, "team_name": "<Acme>", "role": "Member", "link": "https://cvsm.test/i",
        "days": 7, "app_url": "https://cvsm.test"}, language="en")
    assert "An admin invites you to join the team <strong>&lt;Acme&gt;</strong>" in invite.html
    assert 'An admin invites you to join the team "<Acme>" on cvsm as Member.' in invite.text

    await client.patch("/api/v1/me", headers=api.auth(owner["token"]), json={"language": "en"})
    pool = await db.create_pool(database_url, maxsize=1)
    try:
        async with db.pool_transaction(pool) as cur:
            assert await mail.language_of(cur, owner["email"].upper()) == "en"
            assert await mail.language_of(cur, "nobody@example.com") is None
    finally:
        pool.close()
        await pool.wait_closed()

    moment = datetime(2025, 6, 12, 14, 3, tzinfo=timezone.utc)
    assert format_when(moment) == "12 Juni 2025 pukul 14.03 UTC"
    with i18n.use_language("en"):
        assert format_when(moment) == "12 June 2025 at 14:03 UTC"


async def test_the_set_up_page_is_english_signed_out_and_with_its_plan_choice(
        start_client: Callable[..., Any], make_settings: Callable[..., Settings],
        capsys: pytest.CaptureFixture[str]):
    client, [token] = await start_printing(
        start_client, lambda **kw: make_settings(default_plan="", **kw), capsys)
    english = {"Accept-Language": "en"}
    signed_out = await (await client.get(f"/setup?token={token}", headers=english)).text()
    assert '<html lang="en">' in signed_out and "Sign in" in signed_out
    assert indonesian_left(signed_out) == [], indonesian_left(signed_out)
    first = await Api(client).register("english_admin")
    sign_in_as(client, first)
    page = await client.get(f"/setup?token={token}", headers=english)
    html = await page.text()
    assert page.status == 200 and "Make this account admin" in html, html
    assert "Plan for new teams on this server" in html and "unlimited" in html
    assert "environments with secrets all" in html  # enterprise: every environment
    assert indonesian_left(html) == [], indonesian_left(html)


async def test_the_plan_page_with_billing_on_is_english(
        start_client: Callable[..., Any], make_settings: Callable[..., Settings],
        stripe_front: StripeFront, database_url: str):
    client = await start_client(make_settings(**settings_env(), stripe_api_base=stripe_front.url,
                                              default_plan="starter", app_url=""))
    api = Api(client)
    owner = await api.register("english_payer")
    await api.team(owner, "english-team")
    sign_in_as(client, owner)
    page = await client.get("/app/teams/english-team/plan", headers={"Accept-Language": "en"})
    html = await page.text()
    assert page.status == 200 and '<html lang="en">' in html, html
    assert "Subscription status: <strong>not subscribed</strong>" in html
    assert ">Choose professional</button>" in html and "Choose a paid plan" in html
    assert indonesian_left(html) == [], indonesian_left(html)
    # the admin panel's teams: the plan for new teams and each team's subscription
    await make_admin(database_url, owner)
    page = await client.get("/app/admin/teams", headers={"Accept-Language": "en"})
    html = await page.text()
    assert page.status == 200 and "Save plan for new teams" in html, html
    assert "Subscription" in html and "not subscribed" in html
    assert indonesian_left(html) == [], indonesian_left(html)


async def test_a_refusal_on_the_device_page_is_english(client: TestClient):
    await sign_up(client)
    page = await client.get("/device?user_code=BCDF-GHJK", headers={"Accept-Language": "en"})
    html = await page.text()
    assert page.status == 404 and "The code is unknown, already used or expired" in html, html
    assert indonesian_left(html) == [], indonesian_left(html)


def test_a_text_with_values_is_indonesian_as_a_str_and_translates_its_template():
    i18n.load_catalogs()  # as the server does at start-up
    text = i18n.Text("Satu tim paling banyak memiliki {n} webhook", n=5)
    assert text == "Satu tim paling banyak memiliki 5 webhook" and isinstance(text, str)
    assert i18n.Text(text) is text  # wrapping one again keeps its template and values
    joined = i18n.Text("{message}. {lift}",
                       message=i18n.Text("Kuota secret tim untuk paket ini sudah penuh"), lift=i18n.Text("Deskripsi maksimal {n} karakter", n=7))
    import json
    assert json.dumps({"error": joined}) == json.dumps(
        {"error": "Kuota secret tim untuk paket ini sudah penuh. Deskripsi maksimal 7 karakter"})
    with i18n.use_language("en"):
        assert i18n.translate(text) == "A team has at most 5 webhooks"
        assert i18n.translate(joined) == ("The team's secret quota for this plan is full. "
                                          "The description is at most 7 characters")
    with i18n.use_language("id"):
        assert i18n.translate(text) == text


async def test_a_refusal_with_values_on_an_english_page_is_english_and_the_api_stays_indonesian(
        start_client: Callable[..., Any], make_settings: Callable[..., Settings]):
    from cvsm_server.secrets import queries as secret_queries
    from cvsm_server.teams import service as teams
    client = await start_client(make_settings(app_url="", default_plan="starter"))
    api = Api(client)
    owner = await api.register("english_quota")
    team_id = await api.team(owner, "quota-team")
    await api.secret(owner, team_id, "FIRST", "first-value-1", "production")
    sign_in_as(client, owner)
    english = {"Accept-Language": "en"}
    csrf = csrf_of(await (await client.get("/app/teams/quota-team/secrets", headers=english)).text())
    page = await client.post("/app/teams/quota-team/secrets", headers=english, data={
        "csrf": csrf, "name": "SECOND", "value": "second-value-2", "environment": "staging",
        "type": "other", "description": ""})
    html = await page.text()
    assert page.status == 403 and '<html lang="en">' in html, html
    assert ("This team&#39;s plan allows only 1 active environment(s) (holding secrets); active now: "
            "production.") in html, html
    assert "This limit is raised by this server&#39;s admin" in html
    assert "cvsm-server team set-plan quota-team professional" in html
    assert "hanya mengizinkan" not in html and "Batas ini" not in html
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets",
                             headers={**english, **api.auth(owner["token"])}, json={"name": "SECOND", "value": "second-value-2", "environment": "staging"})
    assert resp.status == 403
    assert await resp.json() == {"error": teams.quota_message(
        secret_queries.ENVIRONMENT_QUOTA.format(limit=1, active="production"), "quota-team", "starter")}
    assert (await resp.json())["error"].startswith("Paket tim ini hanya mengizinkan 1 environment aktif")


async def test_the_share_page_is_in_the_recipients_language(client: TestClient):
    token = "shr_" + "a" * 32  # the page is the same for every link: it never looks the token up
    english = await client.get(f"/share/{token}", headers={"Accept-Language": "en"})
    html = await english.text()
    assert english.status == 200 and '<html lang="en">' in html, html
    assert ">Show secret</button>" in html and "A secret shared with you" in html
    assert indonesian_left(html) == [], indonesian_left(html)
    assert english.headers["Cache-Control"] == "no-store"
    assert "script-src 'self'" in english.headers["Content-Security-Policy"]
    assert "Set-Cookie" not in english.headers
    indonesian = await (await client.get(f"/share/{token}")).text()
    assert '<html lang="id">' in indonesian and ">Tampilkan secret</button>" in indonesian
    assert token not in html + indonesian


async def test_an_import_s_refused_lines_are_english_on_an_english_page(client: TestClient):
    api = Api(client)
    owner = await api.register("english_import")
    team_id = await api.team(owner, "import-team")
    sign_in_as(client, owner)
    english = {"Accept-Language": "en"}
    csrf = csrf_of(await (await client.get("/app/teams/import-team/secrets",
                                           headers=english)).text())
    page = await client.post("/app/teams/import-team/import", headers=english, data={
        "csrf": csrf, "environment": "development", "content": "not a pair\nA=1\nA=2\n"})
    html = await page.text()
    assert page.status == 200 and '<html lang="en">' in html, html
    assert "Line 1 is not in the KEY=VALUE format" in html, html
    assert "Duplicate name in the file (first on line 2)" in html
    assert "Baris" not in html and "Nama ganda" not in html
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets/bulk/import-dotenv", headers={
        **english, **api.auth(owner["token"])}, json={
        "environment": "staging", "content": "not a pair\nA=1\nA=2\n"})
    errors = [r["error"] for r in (await resp.json())["results"] if not r["ok"]]
    assert errors == ["Baris 1 bukan format KEY=VALUE",
                      "Nama ganda di dalam file (pertama kali di baris 2)"], errors


def _script_texts(name: str, language: str) -> dict[str, str]:
    """A script's `TEXTS.<language>` (static/<name>): each key's string, its parts joined."""
    source = (i18n.LOCALE_DIR.parent / "static" / name).read_text(encoding="utf-8")
    block = re.search(rf"\n    {language}: \{{\n(.*?)\n    \}},", source, re.S)
    assert block is not None, name
    return {key: "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', value))
            for key, value in re.findall(r"^\s+(\w+): ((?:\"(?:[^\"\\]|\\.)*\"\s*\+?\s*)+),?$",
                                         block.group(1), re.M)}


def test_the_scripts_have_their_texts_in_both_languages_and_the_dotenv_ones_match_the_server():
    for name in ("share.js", "e2e-pages.js", "e2e-dotenv.js", "docs.js"):
        indonesian, english = _script_texts(name, "id"), _script_texts(name, "en")
        assert indonesian and set(indonesian) == set(english), name
        assert all(english[key] != indonesian[key] for key in english if key != "locale"), name
    from cvsm_server.secrets import dotenv, inputs
    i18n.load_catalogs()
    script = _script_texts("e2e-dotenv.js", "en")
    with i18n.use_language("en"):
        assert script == {"notKeyValue": i18n.gettext(dotenv.NOT_KEY_VALUE),
                          "unterminated": i18n.gettext(dotenv.UNTERMINATED),
                          "trailingText": i18n.gettext(dotenv.TRAILING_TEXT),
                          "trailingTextSpan": i18n.gettext(dotenv.TRAILING_TEXT_SPAN),
                          "duplicate": i18n.gettext(dotenv.DUPLICATE),
                          "invalidName": i18n.gettext(inputs.INVALID_NAME)}
    assert _script_texts("e2e-dotenv.js", "id")["duplicate"] == dotenv.DUPLICATE


async def test_the_end_to_end_refusals_on_an_english_page_are_english(client: TestClient):
    """The e2e syntax's fixed messages (`e2e/syntax.py`, marked `N_`, those with values raised as
    `Text`) shown on a page are in its language; the API's JSON keeps the Indonesian text."""
    import base64
    import os

    from cvsm_server.e2e import syntax
    await sign_up(client)
    english = {"Accept-Language": "en"}
    csrf = await form_csrf(client, "/app/account")
    page = await client.post("/app/account/e2e", headers=english, data={
        "csrf": csrf, "public_key": "not-a-key", "wrapped_private_key": "x",
        "recovery_wrapped_private_key": "y"})
    html = await page.text()
    assert page.status == 400 and '<html lang="en">' in html, html
    assert ("The &#39;public_key&#39; field must be an X25519 public key (32 bytes, base64url "
            "without padding)") in html, html
    assert "harus kunci publik" not in html
    key = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    page = await client.post("/app/account/e2e", headers=english, data={
        "csrf": csrf, "public_key": key, "wrapped_private_key": "x",
        "recovery_wrapped_private_key": "y"})
    html = await page.text()
    assert page.status == 400 and "with 600000 to 10000000 iterations" in html, html
    assert indonesian_left(html) == [], indonesian_left(html)
    other = await Api(client).register("e2e_api_english")
    resp = await client.put("/api/v1/me/e2e-key", headers={**english, **Api.auth(other["token"])},
                            json={"public_key": key, "wrapped_private_key": "x",
                                  "recovery_wrapped_private_key": "y"})
    assert resp.status == 400  # the API: the contract's Indonesian, filled in
    assert (await resp.json())["error"] == syntax.BAD_PASS.format(
        low=syntax.MIN_ITERATIONS, high=syntax.MAX_ITERATIONS)
    assert (await resp.json())["error"].startswith("Kolom 'wrapped_private_key' harus")


async def test_the_rest_of_the_english_dashboard_leaves_no_indonesian(
        client: TestClient, database_url: str):
    """The pages the main walk does not reach: the support page with an answered question and
    an escalation, the admin panel (users, teams, a team's plan, stats, tickets, a ticket), the
    newsletter, mail-link and invitation pages, the API reference; each with `Accept-Language:
    en`, none showing an Indonesian word outside what a person typed."""
    english = {"Accept-Language": "en"}
    user = await sign_up(client)
    [row] = await query(database_url, "SELECT id FROM users WHERE username = %s",
                        (user["username"],))
    await make_admin(database_url, {"id": row["id"]})
    csrf = await form_csrf(client, "/app/teams")
    await client.post("/app/teams", data={"csrf": csrf, "name": "Walk", "slug": "walk-team"})
    asked = await client.post("/app/support", headers=english, data={
        "csrf": csrf, "message": "how do I create an API token?"})
    html = await asked.text()
    conversation = re.search(r'name="conversation_id" value="([0-9a-f-]{36})"', html).group(1)  # type: ignore[union-attr]
    await client.post("/app/support/escalate", headers=english, data={
        "csrf": csrf, "conversation_id": conversation, "note": "please help"})
    [ticket] = await query(database_url, "SELECT id FROM support_tickets")
    [team] = await query(database_url, "SELECT id FROM teams WHERE slug = 'walk-team'")
    paths = ["/app/support", f"/app/support?c={conversation}", "/app/admin/users",
             "/app/admin/teams", f"/app/admin/teams/{team['id']}", "/app/admin/stats",
             "/app/admin/tickets", "/app/admin/tickets?status=closed",
             f"/app/admin/tickets/{ticket['id']}", "/newsletter", "/newsletter/confirm?token=x",
             "/verify-email?token=x", "/invites/accept?token=x", "/api/v1/docs"]
    for path in paths:
        page = await client.get(path, headers=english)
        html = await page.text()
        assert page.status in (200, 400, 404), (path, page.status)  # a wrong link's refusal
        assert '<html lang="en">' in html, path
        # what the person typed (the question and the note) is theirs, shown as written
        seen = html.replace("please help", "")
        assert indonesian_left(seen) == [], (path, indonesian_left(seen))
    support_page = await (await client.get(f"/app/support?c={conversation}", headers=english)).text()
    assert "According to the article \u201cAPI tokens and their scope\u201d" in support_page
    assert "Sources: API tokens and their scope" in support_page
