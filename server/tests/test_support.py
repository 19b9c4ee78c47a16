"""The support assistant over real HTTP and a real PostgreSQL: answers quote the help article a
question is about (full-text search), an unanswerable question offers a human, conversations
belong to their user, messages are limited in size and rate, an escalation is a ticket mailed to
`CVSM_SUPPORT_EMAIL` (a real SMTP server), and an admin's reply is mailed to the user."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from conftest import Api, query
from smtpbox import Mailbox
from test_admin import make_admin

from cvsm_server.support import service as support
from cvsm_server.core.config import Settings

SUPPORT_EMAIL = "helpdesk@example.com"


async def ask(client: TestClient, user: dict, message: str, conversation_id: str | None = None,
              *, status: int = 200) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message}
    if conversation_id is not None:
        body["conversation_id"] = conversation_id
    resp = await client.post("/api/v1/support/chat", headers=Api.auth(user["token"]), json=body)
    assert resp.status == status, await resp.text()
    return await resp.json()


@pytest.mark.parametrize(("question", "slug", "quoted"), [
    ("Bagaimana cara membuat token API untuk CI?", "token-api", "Token hanya ditampilkan sekali"),
    ("bisakah token dibatasi hanya baca untuk staging saja?", "token-api", "read-only"),
    ("saya lupa kata sandi", "atur-ulang-kata-sandi", "Lupa kata sandi?"),
    ("bagaimana mengaktifkan 2FA?", "autentikasi-dua-faktor", "Pindai kode QR"),
    ("berapa batas secret di paket starter?", "paket-dan-kuota", "50 secret dan 5 anggota"),
    ("kenapa environment kedua ditolak di paket starter?", "paket-dan-kuota",
     "Environment aktif adalah"),
    ("cara menghapus akun saya", "hapus-akun", "7 hari"),
    ("tautan berbagi saya sudah kedaluwarsa", "tautan-berbagi", "kedaluwarsa"),
    ("how do I use cvsm run in the terminal", "sdk-dan-perintah-cvsm", "cvsm run -- PERINTAH"),
    ("mengundang rekan ke tim lewat email", "undangan-tim", "meskipun mereka belum punya akun"),
])
async def test_answers_quote_the_article_the_question_is_about(
        client: TestClient, api: Api, question: str, slug: str, quoted: str) -> None:
    user = await api.register()
    answer = await ask(client, user, question)
    assert answer["matched"] is True
    assert answer["articles"][0]["slug"] == slug, answer["articles"]
    assert quoted in answer["answer"]
    assert answer["answer"].startswith(f"Menurut artikel \u201c{answer['articles'][0]['title']}\u201d")


async def test_a_question_without_a_match_offers_a_human(client: TestClient, api: Api) -> None:
    user = await api.register()
    for question in ("resep rendang padang", "apa?", "???"):
        answer = await ask(client, user, question)
        assert answer == {"conversation_id": answer["conversation_id"], "answer": support.NO_MATCH,
                          "answer_html": support.render_markdown(support.NO_MATCH),
                          "articles": [], "matched": False}
    assert "Bicara dengan manusia" in support.NO_MATCH


async def test_conversations_are_kept_and_belong_to_their_user(client: TestClient, api: Api) -> None:
    alice, bob = await api.register(), await api.register()
    first = await ask(client, alice, "token API")
    second = await ask(client, alice, "lupa kata sandi", first["conversation_id"])
    assert second["conversation_id"] == first["conversation_id"]
    resp = await client.get(f"/api/v1/support/conversations/{first['conversation_id']}",
                            headers=api.auth(alice["token"]))
    conversation = (await resp.json())["conversation"]
    assert [m["author"] for m in conversation["messages"]] == ["user", "assistant"] * 2
    assert conversation["messages"][2]["body"] == "lupa kata sandi"
    assert conversation["messages"][3]["articles"][0]["slug"] == "atur-ulang-kata-sandi"
    assert conversation["ticket"] is None
    # Bob can neither read nor continue nor escalate Alice's conversation.
    resp = await client.get(f"/api/v1/support/conversations/{first['conversation_id']}",
                            headers=api.auth(bob["token"]))
    assert resp.status == 404
    await ask(client, bob, "token", first["conversation_id"], status=404)
    await ask(client, bob, "token", "not-a-uuid", status=404)
    resp = await client.post("/api/v1/support/escalate", headers=api.auth(bob["token"]),
                             json={"conversation_id": first["conversation_id"], "note": "hi"})
    assert resp.status == 404


async def test_only_signed_in_sessions_may_ask(client: TestClient, api: Api) -> None:
    user = await api.register()
    assert (await client.post("/api/v1/support/chat", json={"message": "token"})).status == 401
    token = (await api.api_token(user))["token"]
    resp = await client.post("/api/v1/support/chat", headers=api.auth(token), json={"message": "token"})
    assert resp.status == 403


async def test_messages_are_limited_in_size_and_shape(client: TestClient, api: Api) -> None:
    user = await api.register()
    for bad in ({}, {"message": ""}, {"message": "   "}, {"message": 5},
                {"message": "x" * (support.MAX_MESSAGE + 1)},
                {"message": "token", "conversation_id": 7}):
        resp = await client.post("/api/v1/support/chat", headers=api.auth(user["token"]), json=bad)
        assert resp.status == 400, bad
    resp = await client.post("/api/v1/support/chat", headers=api.auth(user["token"]), data=b"{no")
    assert resp.status == 400
    resp = await client.post("/api/v1/support/chat", headers=api.auth(user["token"]),
                             json={"message": "x" * 20_000})
    assert resp.status == 413
    await ask(client, user, "x" * support.MAX_MESSAGE)  # the limit itself is allowed


async def test_questions_are_rate_limited_per_user(start_client: Callable[..., Any],
                                                   make_settings: Callable[..., Settings]) -> None:
    client = await start_client(make_settings(ratelimit_support="3/600"))
    api = Api(client)
    user, other = await api.register(), await api.register()
    for _ in range(3):
        await ask(client, user, "token")
    resp = await client.post("/api/v1/support/chat", headers=api.auth(user["token"]),
                             json={"message": "token"})
    assert resp.status == 429 and int(resp.headers["Retry-After"]) >= 1
    await ask(client, other, "token")  # per user


async def test_articles_load_once_by_content_hash(start_client: Callable[..., Any],
                                                   make_settings: Callable[..., Settings],
                                                   database_url: str) -> None:
    # The test databases are cloned from a template that has the articles already: start from
    # none, as a new install does, so that the app's start-up is what loads them.
    await query(database_url, "DELETE FROM help_articles")
    assert await query(database_url, "SELECT 1 FROM help_passages") == []
    await start_client(make_settings())
    rows = await query(database_url, "SELECT language, slug, content_hash, updated_at "
                                     "FROM help_articles ORDER BY language, slug")
    shipped = support.shipped_articles()
    assert [(r["language"], r["slug"], r["content_hash"]) for r in rows] == [
        (a.language, a.slug, a.content_hash) for a in shipped]
    from cvsm_server import db
    pool = await db.create_pool(database_url, maxsize=1)
    try:
        assert await support.load_articles(pool) == 0  # unchanged: nothing rewritten
        changed = [support.parse_article("token-api", "# Token\n\nTeks baru tentang token.\n"),
                   *[a for a in shipped if (a.language, a.slug) != ("id", "token-api")][:-1]]
        assert await support.load_articles(pool, changed) == 2  # one changed, one removed
        passages = await query(database_url, "SELECT text FROM help_passages "
                                             "WHERE language = 'id' AND slug = 'token-api'")
        assert [p["text"] for p in passages] == ["Teks baru tentang token."]
        english = await query(database_url, "SELECT text FROM help_passages "
                                            "WHERE language = 'en' AND slug = 'token-api'")
        assert len(english) == 5  # the other language's article of that slug is its own
        assert len(await query(database_url, "SELECT 1 FROM help_articles")) == len(shipped) - 1
        assert await support.load_articles(pool) == 2
    finally:
        pool.close()
        await pool.wait_closed()


# Markdown and sources ------------------------------------------------------------------------

def test_markdown_is_rendered_with_raw_html_escaped_and_unsafe_links_refused() -> None:
    html = support.render_markdown("Jalankan `cvsm run -- make` lalu **simpan**.\n\n"
                                   "<script>alert(1)</script> <img src=x onerror=alert(1)>\n\n"
                                   "[klik](javascript:alert(1)) [docs](https://cvsm.test/docs)")
    assert "<code>cvsm run -- make</code>" in html and "<strong>simpan</strong>" in html
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;img src=x" in html
    assert "javascript:" not in html.replace("[klik](javascript:alert(1))", "")
    assert 'href="javascript' not in html and '<a href="https://cvsm.test/docs">docs</a>' in html


HOSTILE_ARTICLE = """# Rotasi kunci zamrud

Untuk rotasi kunci zamrud jalankan `cvsm rotate --zamrud` <script>alert(1)</script> sekarang.

## Lain

<b>Bukan HTML</b> tentang gerhana.
"""
PARTIAL_ARTICLE = """# Gerhana zamrud

Tentang gerhana dan zamrud saja, tanpa kata ketiga.
"""


async def load_extra_articles(database_url: str, *articles: support.Article) -> None:
    from cvsm_server import db
    pool = await db.create_pool(database_url, maxsize=1)
    try:
        await support.load_articles(pool, [*support.shipped_articles(), *articles])
    finally:
        pool.close()
        await pool.wait_closed()


async def test_answers_render_markdown_with_an_articles_raw_html_escaped_and_only_matching_sources(
        start_client: Callable[..., Any], make_settings: Callable[..., Settings],
        database_url: str) -> None:
    from test_dashboard import form_csrf, sign_up
    client = await start_client(make_settings(app_url=""))
    await load_extra_articles(database_url,
                              support.parse_article("rotasi-zamrud", HOSTILE_ARTICLE),
                              support.parse_article("gerhana-zamrud", PARTIAL_ARTICLE))
    await sign_up(client)
    question = "rotasi zamrud gerhana <em>tolong</em>"
    resp = await client.post("/app/support", headers={"Accept": "application/json"}, data={
        "csrf": await form_csrf(client, "/app/support?new=1"), "message": question})
    assert resp.status == 200, await resp.text()
    answer = await resp.json()
    # Only the article with all three words is a source, not the one sharing two of them.
    assert [a["slug"] for a in answer["articles"]] == ["rotasi-zamrud"]
    assert "<code>cvsm rotate --zamrud</code>" in answer["answer_html"]
    assert "&lt;script&gt;" in answer["answer_html"] and "<script>" not in answer["answer_html"]
    page = await client.get(f"/app/support?c={answer['conversation_id']}")
    html = await page.text()
    assert "<code>cvsm rotate --zamrud</code>" in html
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)" in html
    # The question is shown as written, its tags as text.
    assert "<em>tolong</em>" not in html and "&lt;em&gt;tolong&lt;/em&gt;" in html
    assert "Sumber: Rotasi kunci zamrud</p>" in html and "Gerhana zamrud" not in html


# Escalation and tickets ---------------------------------------------------------------------

@pytest.fixture
async def desk(start_client: Callable[..., Any], make_settings: Callable[..., Settings],
               mailbox: Mailbox) -> TestClient:
    return await start_client(make_settings(smtp_url=mailbox.url, background_jobs="on",
                                            mail_poll_seconds="1", support_email=SUPPORT_EMAIL))


async def test_escalation_mails_the_support_address_and_admins_reply_by_mail(
        desk: TestClient, mailbox: Mailbox, database_url: str) -> None:
    api = Api(desk)
    user = await api.register("needs_help")
    boss = await api.register("help_admin")
    await make_admin(database_url, boss)
    chat = await ask(desk, user, "resep rendang padang")
    resp = await desk.post("/api/v1/support/escalate", headers=api.auth(user["token"]),
                           json={"conversation_id": chat["conversation_id"],
                                 "note": "Kunci master hilang, tolong"})
    assert resp.status == 201, await resp.text()
    ticket = (await resp.json())["ticket"]
    assert (ticket["status"], ticket["note"], ticket["user"]["email"]) == \
        ("open", "Kunci master hilang, tolong", user["email"])
    message = await mailbox.receive(SUPPORT_EMAIL, subject="Tiket dukungan baru")
    text = message.get_body(("plain",)).get_content()
    assert "Kunci master hilang, tolong" in text and "resep rendang padang" in text
    assert f"/app/admin/tickets/{ticket['id']}" in text
    # One open ticket per conversation.
    resp = await desk.post("/api/v1/support/escalate", headers=api.auth(user["token"]),
                           json={"conversation_id": chat["conversation_id"], "note": "lagi"})
    assert resp.status == 409

    # Only admins see tickets.
    assert (await desk.get("/api/v1/admin/tickets", headers=api.auth(user["token"]))).status == 403
    listed = await (await desk.get("/api/v1/admin/tickets", headers=api.auth(boss["token"]))).json()
    assert [t["id"] for t in listed["tickets"]] == [ticket["id"]] and listed["total"] == 1
    resp = await desk.post(f"/api/v1/admin/tickets/{ticket['id']}/reply",
                           headers=api.auth(user["token"]), json={"message": "saya admin"})
    assert resp.status == 403
    resp = await desk.post(f"/api/v1/admin/tickets/{ticket['id']}/reply",
                           headers=api.auth(boss["token"]), json={"message": "Pakai cadangan kunci."})
    assert resp.status == 200, await resp.text()
    reply = await mailbox.receive(user["email"], subject="Balasan untuk permintaan bantuan")
    assert "Pakai cadangan kunci." in reply.get_body(("plain",)).get_content()
    conversation = (await (await desk.get(f"/api/v1/support/conversations/{chat['conversation_id']}",
                                          headers=api.auth(user["token"]))).json())["conversation"]
    assert conversation["messages"][-1]["author"] == "admin"
    assert conversation["messages"][-1]["body"] == "Pakai cadangan kunci."

    detail = await (await desk.get(f"/api/v1/admin/tickets/{ticket['id']}",
                                   headers=api.auth(boss["token"]))).json()
    assert [m["author"] for m in detail["messages"]] == ["user", "assistant", "admin"]
    resp = await desk.post(f"/api/v1/admin/tickets/{ticket['id']}/close", headers=api.auth(boss["token"]))
    assert (await resp.json())["ticket"]["status"] == "closed"
    resp = await desk.post(f"/api/v1/admin/tickets/{ticket['id']}/reply",
                           headers=api.auth(boss["token"]), json={"message": "lagi"})
    assert resp.status == 409
    closed = await (await desk.get("/api/v1/admin/tickets?status=closed",
                                   headers=api.auth(boss["token"]))).json()
    assert [t["id"] for t in closed["tickets"]] == [ticket["id"]]
    assert (await desk.get("/api/v1/admin/tickets?status=nope",
                           headers=api.auth(boss["token"]))).status == 400
    # A closed ticket lets the conversation be escalated again.
    resp = await desk.post("/api/v1/support/escalate", headers=api.auth(user["token"]),
                           json={"conversation_id": chat["conversation_id"], "note": "masih"})
    assert resp.status == 201

    actions = [r["action"] for r in await query(
        database_url, "SELECT action FROM audit_logs WHERE resource = 'support_ticket' "
                      "ORDER BY created_at, action")]
    assert actions == ["support_escalate", "support_reply", "support_close", "support_escalate"]


async def test_without_a_support_address_the_ticket_is_only_in_the_panel(
        client: TestClient, api: Api, database_url: str) -> None:
    user = await api.register()
    chat = await ask(client, user, "token")
    resp = await client.post("/api/v1/support/escalate", headers=api.auth(user["token"]),
                             json={"conversation_id": chat["conversation_id"], "note": "tolong"})
    assert resp.status == 201
    assert await query(database_url, "SELECT 1 FROM mail_outbox WHERE purpose = 'support_ticket'") == []
    assert len(await query(database_url, "SELECT 1 FROM support_tickets")) == 1


def test_the_support_address_setting_is_one_email_address() -> None:
    from cvsm_server.core.config import ConfigError
    env = {"CVSM_DATA_DIR": "/tmp/unused"}
    assert Settings.from_env(env).support_email is None
    assert Settings.from_env({**env, "CVSM_SUPPORT_EMAIL": " desk@example.com "}).support_email == \
        "desk@example.com"
    for bad in ("desk", "a@b.c, d@e.f", "Desk <desk@example.com>"):
        with pytest.raises(ConfigError, match="CVSM_SUPPORT_EMAIL"):
            Settings.from_env({**env, "CVSM_SUPPORT_EMAIL": bad})


# English beside Indonesian (issue 42) ------------------------------------------------------------

def test_every_article_is_shipped_in_both_languages_with_the_same_sections() -> None:
    indonesian = {a.slug: a for a in support.shipped_articles("id")}
    english = {a.slug: a for a in support.shipped_articles("en")}
    assert indonesian and set(english) == set(indonesian)
    for slug, article in english.items():
        assert len(article.passages) == len(indonesian[slug].passages), slug
        assert article.title != indonesian[slug].title, slug


@pytest.mark.parametrize(("question", "slug", "quoted"), [
    ("How do I create an API token for CI?", "token-api", "A token is shown once only"),
    ("can a token be limited to read-only for staging?", "token-api", "read-only"),
    ("I forgot my password", "atur-ulang-kata-sandi", "Forgot your password?"),
    ("how do I turn on two-factor authentication?", "autentikasi-dua-faktor", "Scan the QR code"),
    ("how many secrets does the starter plan allow?", "paket-dan-kuota", "50 secrets and 5 members"),
    ("delete my account", "hapus-akun", "7 days"),
    ("my share link expired", "tautan-berbagi", "expired"),
    ("inviting a colleague to the team by email", "undangan-tim", "even when they have no account"),
    ("when does my cvsm login token expire?", "token-api", "90 days"),
])
async def test_an_english_account_asks_in_english_and_finds_english_articles(
        client: TestClient, api: Api, question: str, slug: str, quoted: str) -> None:
    user = await api.register()
    await client.patch("/api/v1/me", headers=api.auth(user["token"]), json={"language": "en"})
    answer = await ask(client, user, question)
    assert answer["matched"] is True, answer
    assert answer["articles"][0]["slug"] == slug, answer["articles"]
    english_titles = {a.slug: a.title for a in support.shipped_articles("en")}
    assert [a["title"] for a in answer["articles"]] == [
        english_titles[a["slug"]] for a in answer["articles"]]
    assert quoted in answer["answer"], answer["answer"]
    assert answer["answer"].startswith(f"According to the article \u201c{english_titles[slug]}\u201d")


async def test_the_api_answers_in_the_accounts_language_and_its_errors_stay_indonesian(
        client: TestClient, api: Api) -> None:
    user = await api.register()
    # No language chosen: Indonesian, whatever the request's Accept-Language.
    resp = await client.post("/api/v1/support/chat", headers={
        **api.auth(user["token"]), "Accept-Language": "en"}, json={"message": "token API"})
    answer = await resp.json()
    assert answer["answer"].startswith("Menurut artikel"), answer
    unmatched = await ask(client, user, "resep rendang padang")
    assert unmatched["answer"] == support.NO_MATCH
    await client.patch("/api/v1/me", headers=api.auth(user["token"]), json={"language": "en"})
    unmatched = await ask(client, user, "a recipe for beef rendang")
    assert unmatched["matched"] is False and unmatched["answer"].startswith("Sorry, I have not found")
    assert "Talk to a human" in unmatched["answer"]
    resp = await client.post("/api/v1/support/chat", headers={
        **api.auth(user["token"]), "Accept-Language": "en"}, json={"message": "  "})
    assert (resp.status, await resp.json()) == (400, {"error": "Kolom 'message' wajib diisi"})


async def test_the_support_page_answers_and_refuses_in_the_page_language(
        start_client: Callable[..., Any], make_settings: Callable[..., Settings]) -> None:
    from test_dashboard import csrf_of, sign_up
    client = await start_client(make_settings(app_url=""))
    await sign_up(client)
    english = {"Accept-Language": "en"}
    csrf = csrf_of(await (await client.get("/app/support?new=1", headers=english)).text())
    page = await client.post("/app/support", headers=english, data={
        "csrf": csrf, "message": "how do I revoke an API token?"})
    html = await page.text()
    assert page.status == 200 and '<html lang="en">' in html, html
    assert "According to the article \u201cAPI tokens and their scope\u201d" in html, html
    assert "Sources: API tokens and their scope" in html
    conversation = re.search(r'name="conversation_id" value="([0-9a-f-]{36})"', html).group(1)
    # the page's script asks with Accept: application/json: its answer and refusals are English
    resp = await client.post("/app/support", headers={**english, "Accept": "application/json"},
                             data={"csrf": csrf, "message": "x" * (support.MAX_MESSAGE + 1)})
    assert (resp.status, await resp.json()) == (
        400, {"error": f"The 'message' field is at most {support.MAX_MESSAGE} characters"})
    # the escalation's refusal beside its form (it was the API's Indonesian text)
    page = await client.post("/app/support/escalate", headers=english, data={
        "csrf": csrf, "conversation_id": conversation, "note": "n" * (support.MAX_MESSAGE + 1)})
    html = await page.text()
    assert page.status == 400 and f"The &#39;note&#39; field is at most {support.MAX_MESSAGE}" in html, html
    assert "paling banyak" not in html
    resp = await client.post("/app/support/escalate",
                             headers={**english, "Accept": "application/json"},
                             data={"csrf": csrf, "conversation_id": conversation, "note": "help"})
    assert resp.status == 201
    notice = (await resp.json())["notice"]
    assert "admin" in notice and "email" in notice and "Permintaan" not in notice, notice
    # The same page in Indonesian answers in Indonesian.
    page = await client.post("/app/support", headers={"Accept-Language": "id"}, data={
        "csrf": csrf, "message": "bagaimana mencabut token API?"})
    html = await page.text()
    assert "Menurut artikel \u201cToken API dan cakupannya\u201d" in html


def test_the_ticket_mail_names_the_authors_in_its_language() -> None:
    from cvsm_server.core import i18n
    from cvsm_server.mail import messages as mail
    i18n.load_catalogs()
    context = {"ticket_id": "t-1", "user_email": "ana@example.com", "user_name": "Ana",
               "note": "tolong", "link": "https://cvsm.test/app/admin/tickets/t-1",
               "app_url": "https://cvsm.test",
               "transcript": support._transcript([
                   {"author": "user", "body": "lupa kata sandi"},
                   {"author": "assistant", "body": "Buka halaman Masuk."}])}
    english = mail.render("support_ticket", "desk@example.com", context, language="en")
    assert "User: lupa kata sandi\n\nAssistant: Buka halaman Masuk." in english.text, english.text
    assert "User: lupa kata sandi" in english.html and "Pengguna" not in english.text
    indonesian = mail.render("support_ticket", "desk@example.com", context, language="id")
    assert "Pengguna: lupa kata sandi\n\nAsisten: Buka halaman Masuk." in indonesian.text
