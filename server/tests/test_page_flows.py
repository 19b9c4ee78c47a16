"""The dashboard's flows on its kit (`web.pages.kit`): post/redirect/get with a value shown once,
flash messages after every change, forms that keep what was typed (never a secret) with the
message beside its field, two-factor set-up that survives a wrong code, the narrowest token
by default, and an HTML error page for every failure under a page."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pyotp
import pytest
from aiohttp.test_utils import TestClient

from cvsm_server.accounts import tokens
from cvsm_server.core.config import Settings

from conftest import Api, query
from test_dashboard import csrf_of, form_csrf, sign_up
from test_email_links import web  # noqa: F401 - the fixture: mail to `mailbox`, plain http
from test_invites import invited

TOKEN_RE = re.compile(r"cvsm_[0-9a-f]{64}")


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(app_url="")  # plain http keeps the cookies


def flash_of(html: str) -> str | None:
    match = re.search(r'<p class="flash ok" role="status">([^<]*)</p>', html)
    return match.group(1) if match else None


async def team_with_secret(client: TestClient, slug: str) -> tuple[str, str]:
    csrf = await form_csrf(client, "/app/teams")
    await client.post("/app/teams", data={"csrf": csrf, "name": slug, "slug": slug})
    await client.post(f"/app/teams/{slug}/secrets", data={
        "csrf": csrf, "name": "KEY", "value": "flow-value-1", "environment": "production",
        "type": "other"})
    html = await (await client.get(f"/app/teams/{slug}/secrets")).text()
    secret_id = re.search(rf'/app/teams/{slug}/secrets/([0-9a-f-]{{36}})"', html).group(1)  # type: ignore[union-attr]
    return csrf, secret_id


async def test_a_new_token_is_shown_once_after_a_redirect_and_a_reload_creates_none(
        client: TestClient, database_url: str) -> None:
    await sign_up(client)
    csrf, _ = await team_with_secret(client, "prg-team")
    resp = await client.post("/app/tokens", allow_redirects=False, data=[
        ("csrf", csrf), ("name", "deploy"), ("team", "prg-team"), ("environments", "production"),
        ("read_only", "on")])
    assert (resp.status, resp.headers["Location"]) == (303, "/app/tokens")
    # Neither the address nor any cookie holds the token in the clear.
    assert not TOKEN_RE.search(resp.headers["Location"])
    assert not any(TOKEN_RE.search(v) for v in resp.headers.getall("Set-Cookie"))
    first = await client.get("/app/tokens")
    html = await first.text()
    assert first.status == 200 and first.headers["Cache-Control"] == "no-store"
    token = TOKEN_RE.search(html).group(0)  # type: ignore[union-attr]
    assert flash_of(html) == "Token dibuat."
    again = await client.get("/app/tokens")  # the reload: a GET, shown no more
    text = await again.text()
    assert token not in text and not TOKEN_RE.search(text) and flash_of(text) is None
    assert again.headers["Cache-Control"] == "no-cache"
    rows = await query(database_url, "SELECT 1 FROM api_tokens WHERE name = 'deploy'")
    assert len(rows) == 1


async def test_the_kept_token_opens_only_for_its_own_session(client: TestClient,
                                                            start_client: Callable[..., Any],
                                                            settings: Settings) -> None:
    await sign_up(client)
    csrf = await form_csrf(client, "/app/tokens")
    resp = await client.post("/app/tokens", allow_redirects=False,
                             data={"csrf": csrf, "name": "stolen", "read_only": "on"})
    sealed = resp.cookies["cvsm_once"].value
    other = await start_client(settings)
    await sign_up(other)
    page = await other.get("/app/tokens", cookies={"cvsm_once": sealed})
    assert page.status == 200 and not TOKEN_RE.search(await page.text())


async def test_a_share_link_is_shown_once_after_a_redirect(client: TestClient) -> None:
    await sign_up(client)
    csrf, secret_id = await team_with_secret(client, "share-team")
    path = f"/app/teams/share-team/secrets/{secret_id}"
    resp = await client.post(f"{path}/shares", allow_redirects=False,
                             data={"csrf": csrf, "max_views": "1", "ttl_hours": "2"})
    assert (resp.status, resp.headers["Location"]) == (303, path)
    assert "shr_" not in resp.headers["Location"]
    first = await client.get(path)
    html = await first.text()
    assert first.headers["Cache-Control"] == "no-store" and re.search(r"/share/shr_", html)
    assert flash_of(html) == "Tautan berbagi dibuat."
    assert "/share/shr_" not in await (await client.get(path)).text()


async def test_every_change_says_so_on_the_next_page(client: TestClient, api: Any,
                                                     database_url: str) -> None:
    page = await client.get("/signup")
    signed_up = await client.post("/signup", data={
        "csrf": csrf_of(await page.text()), "name": "F", "email": "flash@example.com",
        "username": "flash_user", "password": "correct horse 1"})
    assert "Kami sudah mengirim email verifikasi" in (flash_of(await signed_up.text()) or "")
    other = await api.register("flash_mate")
    csrf = await form_csrf(client, "/app/teams")
    steps: list[tuple[str, dict[str, str], str]] = [
        ("/app/teams", {"name": "Flash", "slug": "flash-team"}, "Tim dibuat."),
        ("/app/teams/flash-team/secrets", {"name": "K", "value": "v-1", "environment": "production",
                                           "type": "other"}, "Secret disimpan."),
        ("/app/teams/flash-team/members", {"identifier": "flash_mate", "role": "Viewer"},
         "Anggota ditambahkan."),
        (f"/app/teams/flash-team/members/{other['id']}", {"role": "Member", "action": "role"},
         "Peran anggota diubah."),
        (f"/app/teams/flash-team/members/{other['id']}", {"role": "", "action": "remove"},
         "Anggota dikeluarkan dari tim."),
        ("/app/teams/flash-team/invites", {"email": "invited@example.com", "role": "Member"},
         "Undangan dikirim."),
        ("/app/account/verify-email", {}, "Tautan verifikasi sudah dikirim ke email Anda (berlaku 48 jam)."),
    ]
    for path, data, said in steps:
        resp = await client.post(path, data={"csrf": csrf, **data})
        html = await resp.text()
        assert resp.status == 200 and flash_of(html) == said, (path, html[-2000:])
        # Said once: the next page is quiet.
        assert flash_of(await (await client.get("/app/teams")).text()) is None
    secret_id = (await query(database_url, "SELECT id FROM secrets WHERE name = 'K'"))[0]["id"]
    base = f"/app/teams/flash-team/secrets/{secret_id}"
    for path, data, said in [
        (base, {"value": "", "type": "other", "description": "noted"}, "Perubahan secret disimpan."),
        (f"{base}/delete", {"environment": "production"}, "Secret dihapus."),
    ]:
        resp = await client.post(path, data={"csrf": csrf, **data})
        assert flash_of(await resp.text()) == said
    invite_id = (await query(database_url, "SELECT id FROM team_invites"))[0]["id"]
    resp = await client.post(f"/app/teams/flash-team/invites/{invite_id}/revoke", data={"csrf": csrf})
    assert flash_of(await resp.text()) == "Undangan dicabut."
    resp = await client.post("/app/account/delete", data={"csrf": csrf, "password": "correct horse 1"})
    assert flash_of(await resp.text()) == "Penghapusan akun dijadwalkan 7 hari lagi."
    resp = await client.post("/app/account/delete/cancel", data={"csrf": csrf})
    assert flash_of(await resp.text()) == "Penghapusan akun dibatalkan."
    resp = await client.post("/signout", data={"csrf": csrf})
    assert flash_of(await resp.text()) == "Anda sudah keluar dari semua perangkat."


async def test_accepting_an_invite_says_so(web: TestClient, mailbox: Any) -> None:
    api = Api(web)
    owner = await api.register("inviting_owner")
    team = await api.team(owner, "invite-flash")
    await sign_up(web, "invited_user")
    _, token = await invited(web, mailbox, owner, team, "invited_user@example.com")
    page = await web.get(f"/invites/accept?token={token}")
    accepted = await web.post("/invites/accept", data={"csrf": csrf_of(await page.text()),
                                                       "token": token})
    assert accepted.status == 200
    assert flash_of(await accepted.text()) == "Undangan diterima: Anda sekarang anggota tim ini."


async def test_a_refused_form_keeps_what_was_typed_but_never_a_value(client: TestClient) -> None:
    await sign_up(client)
    csrf, _ = await team_with_secret(client, "kept-team")
    bad = await client.post("/app/teams/kept-team/secrets", data={
        "csrf": csrf, "name": "9BAD", "value": "typed-value-789", "environment": "staging",
        "type": "password", "description": "kept note"})
    html = await bad.text()
    assert bad.status == 400 and "typed-value-789" not in html
    assert 'value="9BAD"' in html and 'value="kept note"' in html
    assert '<option value="password" selected>' in html
    missing = await client.post("/app/teams/kept-team/members", data={
        "csrf": csrf, "identifier": "nobody_here", "role": "Member"})
    text = await missing.text()
    assert missing.status == 404
    # The message beside its field, which says it is invalid and points at it.
    assert re.search(r'id="member-identifier" name="identifier" value="nobody_here"[^>]*'
                     r'aria-invalid="true" aria-describedby="member-identifier-error"', text)
    assert 'id="member-identifier-error"' in text


async def test_a_wrong_code_keeps_the_two_factor_key(client: TestClient) -> None:
    await sign_up(client)
    csrf = await form_csrf(client, "/app/account")
    setup = await client.post("/app/account/2fa/setup", allow_redirects=False, data={"csrf": csrf})
    assert (setup.status, setup.headers["Location"]) == (303, "/app/account")
    page = await client.get("/app/account")
    assert page.headers["Cache-Control"] == "no-store"
    key = re.search(r"<code data-secret-value>([A-Z2-7]+)</code>", await page.text()).group(1)  # type: ignore[union-attr]
    wrong_code = pyotp.TOTP(key).at(time.time() + 600)  # a real code, of another time
    for code, said in (("12345", "harus 6 angka"), (wrong_code, "Kode autentikasi salah")):
        wrong = await client.post("/app/account/2fa/enable", data={"csrf": csrf, "code": code})
        html = await wrong.text()
        assert wrong.status == 400 and wrong.headers["Cache-Control"] == "no-store"
        assert f"<code data-secret-value>{key}</code>" in html  # the same key, still usable
        assert re.search(r'id="totp-code-error" class="field-error" role="alert">[^<]*' + said, html)
        assert 'aria-invalid="true"' in html and f'value="{code}"' not in html
    # A reload of the account page keeps the key too (no new one is made by a GET).
    assert f"<code data-secret-value>{key}</code>" in await (await client.get("/app/account")).text()
    done = await client.post("/app/account/2fa/enable",
                             data={"csrf": csrf, "code": pyotp.TOTP(key).now()})
    html = await done.text()
    assert flash_of(html) == "Verifikasi dua langkah aktif." and "Aktif:" in html
    assert key not in html


async def test_each_sign_in_code_error_says_what_was_wrong(client: TestClient, api: Any) -> None:
    user = await api.register("code_errors")
    setup = await client.post("/api/v1/me/2fa/setup", headers=api.auth(user["token"]))
    totp = pyotp.TOTP((await setup.json())["secret"])
    used = totp.now()
    resp = await client.post("/api/v1/me/2fa/enable", headers=api.auth(user["token"]), json={"code": used})
    assert resp.status == 200
    csrf = await form_csrf(client, "/signin")
    step = await client.post("/signin", data={"csrf": csrf, "identifier": "code_errors",
                                              "password": user["password"]})
    pending = re.search(r'name="pending" value="([^"]+)"', await step.text()).group(1)  # type: ignore[union-attr]
    for code, said in ((used, "sudah dipakai"), ("000000", "Kode autentikasi salah"),
                       ("12ab", "harus 6 angka")):
        wrong = await client.post("/signin/2fa", data={"csrf": csrf, "pending": pending, "code": code})
        html = await wrong.text()
        assert wrong.status == 401 and "kata sandi salah" not in html
        assert re.search(r'id="code-error" class="field-error" role="alert">[^<]*' + said, html), html


async def test_the_token_form_defaults_to_the_narrowest_token(client: TestClient) -> None:
    await sign_up(client)
    await team_with_secret(client, "narrow-team")
    html = await (await client.get("/app/tokens")).text()
    form = html[html.index('action="/app/tokens"'):]
    assert re.search(r'<option value="narrow-team" selected>', form)
    assert re.search(r'<option value="">Semua tim saya \(lebih luas\)</option>', form)
    assert re.search(r'value="production" checked', form)
    assert not re.search(r'value="(staging|development)" checked', form)
    assert re.search(r'name="read_only" checked', form)


async def test_an_unknown_dashboard_path_is_the_html_error_page(client: TestClient) -> None:
    await sign_up(client)
    for method, path in (("GET", "/app/nope"), ("GET", "/app/teams/x/secrets/y/z"),
                         ("POST", "/app/nope")):
        resp = await client.request(method, path)
        html = await resp.text()
        assert resp.status == 404 and resp.content_type == "text/html", (method, path)
        assert "Halaman tidak ditemukan" in html and 'aria-label="Navigasi utama"' in html
    api = await client.get("/api/v1/nope")
    assert api.status == 404 and api.content_type == "application/json"


async def test_a_failure_under_a_page_is_the_html_error_page_without_detail(
        client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    await sign_up(client)

    async def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("internal detail 1234")

    monkeypatch.setattr(tokens, "list_tokens", broken)
    resp = await client.get("/app/tokens")
    html = await resp.text()
    assert resp.status == 500 and resp.content_type == "text/html"
    assert "Terjadi kesalahan pada server" in html and "internal detail" not in html
    assert "Traceback" not in html
    assert any("unhandled error on GET /app/tokens" in r.getMessage() for r in caplog.records)


def beside(field_id: str, value: str | None, html: str) -> bool:
    """Whether the field `field_id` is marked invalid and points at its message (and, when
    `value` is given, shows that value kept)."""
    kept = rf' value="{re.escape(value)}"' if value is not None else ""
    return re.search(rf'id="{field_id}" name="[a-z_]+"(?: type="[a-z]+")?{kept}[^>]*aria-invalid="true" '
                     rf'aria-describedby="{field_id}-error"', html) is not None


async def test_the_signed_out_forms_keep_what_was_typed_but_never_a_password(
        client: TestClient, api: Any) -> None:
    await api.register("kept_taken")
    csrf = await form_csrf(client, "/signup")
    taken = await client.post("/signup", data={
        "csrf": csrf, "name": "Kept Name", "email": "kept_fresh@example.com",
        "username": "kept_taken", "password": "typed-password-55", "newsletter": "on"})
    html = await taken.text()
    assert taken.status == 409 and "typed-password-55" not in html
    assert beside("username", "kept_taken", html) and 'id="username-error"' in html
    assert 'value="kept_fresh@example.com"' in html and 'value="Kept Name"' in html
    assert 'name="newsletter" checked' in html
    short = await client.post("/signup", data={
        "csrf": csrf, "name": "Kept Name", "email": "kept_short@example.com",
        "username": "kept_short", "password": "short"})
    html = await short.text()
    assert short.status == 400 and beside("password", None, html) and 'value="short"' not in html
    assert not beside("username", "kept_short", html)

    wrong = await client.post("/signin", data={"csrf": csrf, "identifier": "kept_taken",
                                               "password": "not-the-password-1"})
    html = await wrong.text()
    assert wrong.status == 401 and 'class="error" role="alert"' in html
    assert 'value="kept_taken"' in html and "not-the-password-1" not in html

    differ = await client.post("/reset-password", data={
        "csrf": csrf, "token": "link-token-1", "password": "first-password-1",
        "password_again": "other-password-2"})
    html = await differ.text()
    assert differ.status == 400 and beside("password-again", None, html)
    assert "first-password-1" not in html and "other-password-2" not in html
    assert 'name="token" value="link-token-1"' in html  # the link's token, for the next try
    stale = await client.post("/reset-password", data={
        "csrf": csrf, "token": "link-token-1", "password": "same-password-3",
        "password_again": "same-password-3"})
    html = await stale.text()
    assert stale.status == 400 and 'class="error" role="alert">Tautan atur ulang' in html

    bad = await client.post("/newsletter", data={"csrf": csrf, "email": "not-an-address"})
    html = await bad.text()
    assert bad.status == 400 and beside("newsletter-email", "not-an-address", html)


async def test_a_signed_out_form_with_a_bad_csrf_token_is_refused(client: TestClient) -> None:
    await form_csrf(client, "/signup")  # the pre-session cookie, but not its token
    for path in ("/signup", "/signin", "/forgot-password", "/reset-password", "/verify-email",
                 "/newsletter", "/newsletter/confirm"):
        resp = await client.post(path, data={"csrf": "forged", "email": "x@example.com",
                                             "token": "t", "identifier": "x", "password": "p"})
        assert resp.status == 403 and "Formulir kedaluwarsa" in await resp.text(), path


async def test_a_wrong_method_on_a_dashboard_page_is_the_html_405_page(client: TestClient) -> None:
    await sign_up(client)
    token_id = "00000000-0000-4000-8000-000000000000"
    for method, path, allow in (("DELETE", "/app/teams", "GET, HEAD, POST"),
                                ("PUT", "/app/tokens", "GET, HEAD, POST"),
                                ("GET", f"/app/tokens/{token_id}/revoke", "POST"),
                                ("POST", "/app/admin/stats", "GET, HEAD")):
        resp = await client.request(method, path, allow_redirects=False)
        html = await resp.text()
        assert (resp.status, resp.content_type) == (405, "text/html"), (method, path)
        assert resp.headers["Allow"] == allow, (method, path)
        assert "Halaman ini tidak menerima metode itu" in html and "Traceback" not in html
        assert 'aria-label="Navigasi utama"' in html  # the page, signed in
    # A path no page has stays the 404 page, whatever the method.
    for method in ("GET", "DELETE"):
        resp = await client.request(method, "/app/teams/x/nothing/here")
        assert (resp.status, resp.content_type) == (404, "text/html")
        assert "Allow" not in resp.headers


def test_a_refused_form_never_keeps_a_secret_field_even_unnamed() -> None:
    """What a page shows again of a refused form leaves out the value, password, code and
    token fields whatever form they are in, besides those the form names itself."""
    from multidict import MultiDict, MultiDictProxy

    from cvsm_server.web.pages.forms import Form

    data = MultiDictProxy(MultiDict({"name": "DB_URL", "value": "s3cret", "password": "pw",
                                     "code": "123456", "token": "t0k", "csrf": "c",
                                     "note": "typed"}))
    assert Form(data).kept() == {"name": "DB_URL", "note": "typed"}
    assert Form(data, secret=("note",)).kept() == {"name": "DB_URL"}
