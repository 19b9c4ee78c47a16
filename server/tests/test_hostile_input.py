"""Hostile input to the dashboard's forms and pages, the API's names and the mail built from them
(issue 24, items 6 and 7), over real HTTP with real CSRF tokens.

A form or query the server cannot use (a NUL character, invalid UTF-8, another charset, broken
multipart) is a 400 page with an Indonesian message, never a 500; names that are shown on one
line or reach a mail header refuse control characters; mail built from a name stored before
that rule is still delivered.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from conftest import Api, query
from test_dashboard import csrf_of, form_csrf, sign_up
from test_webhooks import wait_until

from cvsm_server.mail import messages as mail
from cvsm_server.core.config import Settings
from cvsm_server.web.request import FORM_INVALID, FORM_NOT_UTF8, QUERY_INVALID
from cvsm_server.web.state import KEYRING, POOL

TEAM = "hostile-team"
CONTROL = "Kolom 'name' tidak boleh berisi karakter kontrol atau baris baru"


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(app_url="")  # links use the address asked; plain http keeps the cookie


@dataclass
class Browser:
    """A signed-in dashboard client with a team, and the CSRF tokens of both kinds of form."""

    client: TestClient
    session_csrf: str

    async def anonymous_csrf(self, path: str) -> str:
        """The CSRF token of a signed-out form (its page sets the pre-session cookie)."""
        self.client.session.cookie_jar.clear(lambda cookie: cookie.key == "cvsm_session")
        page = await self.client.get(path)
        assert page.status == 200, await page.text()
        return csrf_of(await page.text())


@pytest.fixture
async def browser(client: TestClient, database_url: str) -> Browser:
    """Signed in as an admin (the admin pages search too), with the team `TEAM`."""
    user = await sign_up(client)
    await query(database_url, "UPDATE users SET is_admin = true WHERE username = %s",
                (user["username"],))
    csrf = await form_csrf(client, "/app/teams")
    resp = await client.post("/app/teams", data={"csrf": csrf, "name": "Hostile", "slug": TEAM},
                             allow_redirects=False)
    assert resp.status == 303, await resp.text()
    return Browser(client, csrf)


async def assert_error_page(resp: Any, message: str | None = None) -> str:
    """A 400 that is a page (not JSON, not a traceback) saying what was wrong."""
    text = await resp.text()
    assert resp.status == 400, text
    assert resp.content_type == "text/html", text
    assert "Traceback" not in text and text.lstrip().startswith("<!doctype html>")
    assert 'role="alert"' in text
    if message is not None:
        assert message.replace("'", "&#39;") in text, text
    return text


# Item 6: a NUL character in a field of each form, and in a page's query string -------------

SIGNED_OUT_FORMS = {
    "signin": ("/signin", {"identifier": "web\x00user", "password": "correct horse 1"}),
    "signup": ("/signup", {"name": "Nul\x00Name", "email": "nul@example.com",
                           "username": "nul_user", "password": "correct horse 1"}),
    "forgot-password": ("/forgot-password", {"email": "nul\x00@example.com"}),
    "newsletter": ("/newsletter", {"email": "nul\x00@example.com"}),
}
SIGNED_IN_FORMS = {
    "team name": ("/app/teams", {"name": "Nul\x00Team", "slug": "nul-team"}),
    "member identifier": (f"/app/teams/{TEAM}/members", {"identifier": "nul\x00user",
                                                          "role": "Member"}),
    "invite email": (f"/app/teams/{TEAM}/invites", {"email": "nul\x00@example.com",
                                                     "role": "Member"}),
    "token name": ("/app/tokens", {"name": "nul\x00token"}),
}


@pytest.mark.parametrize("form", SIGNED_OUT_FORMS)
async def test_a_nul_character_in_a_signed_out_form_is_a_400_page(
        browser: Browser, form: str, database_url: str) -> None:
    path, fields = SIGNED_OUT_FORMS[form]
    csrf = await browser.anonymous_csrf(path)
    resp = await browser.client.post(path, data={"csrf": csrf, **fields}, allow_redirects=False)
    await assert_error_page(resp, "berisi karakter yang tidak valid")
    assert await query(database_url, "SELECT 1 FROM users WHERE username = 'nul_user'") == []


@pytest.mark.parametrize("form", SIGNED_IN_FORMS)
async def test_a_nul_character_in_a_signed_in_form_is_a_400_page(
        browser: Browser, form: str, database_url: str) -> None:
    path, fields = SIGNED_IN_FORMS[form]
    resp = await browser.client.post(path, data={"csrf": browser.session_csrf, **fields},
                                     allow_redirects=False)
    await assert_error_page(resp, "berisi karakter yang tidak valid")
    assert await query(database_url, "SELECT 1 FROM teams WHERE slug = 'nul-team'") == []


@pytest.mark.parametrize("path", [f"/app/teams/{TEAM}/secrets?q=%00", "/app/admin/users?q=%00",
                                  "/app/admin/teams?q=%00", f"/app/teams/{TEAM}/secrets?q=%FF"])
async def test_a_nul_or_invalid_utf8_in_a_page_query_is_a_400_page(browser: Browser, path: str) -> None:
    await assert_error_page(await browser.client.get(path), QUERY_INVALID)


# Item 6: bodies no form parser can read, on a signed-out form, a signed-in one and the .env
# import (a multipart form with a file) -------------------------------------------------------

URLENCODED = "application/x-www-form-urlencoded"
BODIES = {
    # (Content-Type, body after the CSRF field, the message)
    "invalid UTF-8": (URLENCODED, b"&name=\xff\xfe", FORM_NOT_UTF8),
    "invalid UTF-8 escaped": (URLENCODED, b"&name=%FF%FE", FORM_NOT_UTF8),
    "unknown charset": (f"{URLENCODED}; charset=x-no-such-charset", b"&name=x", FORM_NOT_UTF8),
    "another charset": (f"{URLENCODED}; charset=latin-1", b"&name=caf\xe9", FORM_NOT_UTF8),
    "broken multipart": ("multipart/form-data; boundary=XyZ", b"not a multipart body", FORM_INVALID),
    "multipart without a boundary": ("multipart/form-data", b"--XyZ\r\n", FORM_INVALID),
}
FORMS = {"signin": "/signin", "teams": "/app/teams", ".env import": f"/app/teams/{TEAM}/import"}


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("form", FORMS)
async def test_a_form_body_that_cannot_be_read_is_a_400_page(browser: Browser, form: str,
                                                             body: str) -> None:
    path = FORMS[form]
    csrf = await browser.anonymous_csrf(path) if form == "signin" else browser.session_csrf
    content_type, rest, message = BODIES[body]
    data = rest if content_type.startswith("multipart") else f"csrf={csrf}".encode() + rest
    resp = await browser.client.post(path, data=data, headers={"Content-Type": content_type},
                                     allow_redirects=False)
    await assert_error_page(resp, message)


def multipart(boundary: str, *parts: tuple[dict[str, str], bytes]) -> bytes:
    out = b""
    for headers, content in parts:
        out += f"--{boundary}\r\n".encode()
        out += "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode() + b"\r\n"
        out += content + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


async def test_a_multipart_env_file_is_imported_and_a_part_in_another_charset_is_refused(
        browser: Browser, database_url: str) -> None:
    boundary = uuid.uuid4().hex
    csrf = ({"Content-Disposition": 'form-data; name="csrf"'}, browser.session_csrf.encode())
    environment = ({"Content-Disposition": 'form-data; name="environment"'}, b"staging")
    upload = ({"Content-Disposition": 'form-data; name="file"; filename="app.env"',
               "Content-Type": "application/octet-stream"}, b"FROM_FILE=caf\xc3\xa9\n")
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    path = f"/app/teams/{TEAM}/import"
    resp = await browser.client.post(path, data=multipart(boundary, csrf, environment, upload),
                                     headers=headers)
    assert resp.status == 200 and "1 dibuat" in await resp.text()
    rows = await query(database_url, "SELECT name, environment FROM secrets")
    assert [(r["name"], r["environment"]) for r in rows] == [("FROM_FILE", "staging")]

    latin = ({"Content-Disposition": 'form-data; name="content"',
              "Content-Type": "text/plain; charset=latin-1"}, b"OTHER=caf\xe9\n")
    resp = await browser.client.post(path, data=multipart(boundary, csrf, environment, latin),
                                     headers=headers)
    await assert_error_page(resp, FORM_NOT_UTF8)
    nul = ({"Content-Disposition": 'form-data; name="content"'}, b"OTHER=x\x00y\n")
    resp = await browser.client.post(path, data=multipart(boundary, csrf, environment, nul),
                                     headers=headers)
    await assert_error_page(resp, "berisi karakter yang tidak valid")
    assert len(await query(database_url, "SELECT 1 FROM secrets")) == 1


async def test_a_form_over_its_limit_is_refused_even_without_a_content_length(browser: Browser) -> None:
    async def chunks() -> Any:
        yield f"csrf={browser.session_csrf}&slug=big-team&name=".encode()
        for _ in range(20):
            yield b"x" * 16384  # 320 KiB in all, chunked: no Content-Length to refuse up front

    resp = await browser.client.post("/app/teams", data=chunks(),
                                     headers={"Content-Type": URLENCODED})
    await assert_error_page(resp, "Formulir terlalu besar")


async def test_the_api_still_answers_its_errors_as_json(client: TestClient) -> None:
    resp = await client.post("/api/v1/auth/login", data=b'{"identifier": "a\\u0000b"}',
                             headers={"Content-Type": "application/json"})
    assert resp.status == 400 and (await resp.json())["error"]
    resp = await client.get("/api/v1/health?q=%00")
    assert resp.status == 200


# Item 7: control characters in names ---------------------------------------------------------

LINE_BREAKS = ["Ops\r\nBcc: victim@example.com", "Ops\nTeam", "Ops\u2028Team", "Ops\x85Team",
               "Ops\x1bTeam", "Ops\x7fTeam", "Ops\tTeam"]


@pytest.mark.parametrize("name", LINE_BREAKS)
async def test_a_team_name_with_a_control_character_is_refused_by_the_api(
        api: Api, name: str, database_url: str) -> None:
    owner = await api.register()
    resp = await api.client.post("/api/v1/teams", headers=api.auth(owner["token"]),
                                 json={"name": name, "slug": "crlf-team"})
    assert resp.status == 400 and (await resp.json())["error"] == CONTROL
    assert await query(database_url, "SELECT 1 FROM teams WHERE slug = 'crlf-team'") == []


async def test_a_team_name_with_a_line_break_is_refused_by_the_dashboard(
        browser: Browser, database_url: str) -> None:
    resp = await browser.client.post("/app/teams", data={
        "csrf": browser.session_csrf, "name": "Ops\r\nBcc: victim@example.com", "slug": "crlf-team"})
    text = await resp.text()
    assert resp.status == 400 and CONTROL.replace("'", "&#39;") in text
    assert 'value="crlf-team"' in text  # the form comes back with what was typed
    assert await query(database_url, "SELECT 1 FROM teams WHERE slug = 'crlf-team'") == []


async def test_user_and_token_names_and_addresses_refuse_control_characters(api: Api) -> None:
    resp = await api.client.post("/api/v1/auth/register", json={
        "email": "ctl@example.com", "username": "ctl_user", "password": "correct horse 1",
        "name": "Ctl\r\nUser"})
    assert resp.status == 400 and (await resp.json())["error"] == CONTROL
    resp = await api.client.post("/api/v1/auth/register", json={
        "email": "ctl\x01@example.com", "username": "ctl_user", "password": "correct horse 1",
        "name": "Ctl"})
    assert resp.status == 400
    owner = await api.register()
    resp = await api.client.post("/api/v1/tokens", headers=api.auth(owner["token"]),
                                 json={"name": "ci\nbuild"})
    assert resp.status == 400 and (await resp.json())["error"] == CONTROL
    team_id = await api.team(owner)
    resp = await api.client.post(f"/api/v1/teams/{team_id}/invites", headers=api.auth(owner["token"]),
                                 json={"email": "a\x0b@example.com", "role": "Member"})
    assert resp.status == 400


# Item 7: mail from a name stored before the rule still arrives --------------------------------

async def test_an_invitation_to_a_team_named_with_a_line_break_before_the_fix_is_delivered(
        mail_client: TestClient, mailbox: Any, database_url: str) -> None:
    api = Api(mail_client)
    owner = await api.register()
    team_id = await api.team(owner)
    # As a team created before names refused control characters.
    await query(database_url, "UPDATE teams SET name = %s WHERE id = %s",
                ("Old\r\nBcc: victim@example.com\u2028Team", team_id))
    resp = await mail_client.post(f"/api/v1/teams/{team_id}/invites", headers=api.auth(owner["token"]),
                                  json={"email": "joiner@example.com", "role": "Member"})
    assert resp.status == 201, await resp.text()
    message = await mailbox.receive("joiner@example.com", subject="Undangan")
    assert message["Subject"] == "Undangan bergabung ke tim Old  Bcc: victim@example.com Team di cvsm"
    assert message["Bcc"] is None and not mailbox.to("victim@example.com")
    await outbox_emptied(database_url)


async def outbox_emptied(database_url: str) -> None:
    """The sender deletes a message's row just after SMTP took it: wait for that too."""
    async def empty() -> bool:
        return await query(database_url, "SELECT 1 FROM mail_outbox") == []
    await wait_until(empty, "the delivered message to leave the outbox", timeout=10)


async def test_a_message_queued_with_a_line_break_in_its_subject_is_delivered(
        mail_client: TestClient, mailbox: Any, database_url: str) -> None:
    """A message rendered and queued before subjects were folded (as the old code did)."""
    queued = mail.Message(to="old@example.com", subject="Undangan ke tim Old\r\nTeam",
                          text="Halo\n", html="<p>Halo</p>")
    async with mail.db.cursor(mail_client.app[POOL]) as cur:
        await mail.enqueue(cur, mail_client.app[KEYRING], "team_invite", queued)
    message = await mailbox.receive("old@example.com")
    assert message["Subject"] == "Undangan ke tim Old  Team"
    await outbox_emptied(database_url)


def test_header_text_is_folded_onto_one_line() -> None:
    built = mail.Message(to="a@example.com", subject="A\r\nB\x00C\u2029D", text="t\n",
                         html="<p>t</p>").to_email("cvsm <noreply@example.com>")
    assert built["Subject"] == "A  B C D"
    assert re.search(rb"\r\nSubject: A  B C D\r\n", built.as_bytes())
