"""Hostile input to the dashboard and the API, issue 36's LOW items, over real HTTP with real CSRF
tokens against the real database: numbers written in Unicode digits (`²`, `①`, `٣`), NUL
characters and broken UTF-8 in every numeric field of a form, a query or a JSON body; multipart
bodies aiohttp cannot read; line breaks a browser sends as CRLF; what `cvsm-server mail show
--links` prints of a user's own text; end-to-end envelopes one byte over the value limit; a
used setup link; the events of `/secrets/changes` against the OpenAPI document.

Each is a 4xx with an Indonesian message (a page under the dashboard, JSON under the API) or the
right answer, never a 500.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jsonschema
import pytest
from aiohttp.test_utils import TestClient

from conftest import Api, query
from test_changes import open_stream
from e2e_client import E2ETeam, Member, auth as e2e_auth
from test_dashboard import form_csrf
from test_outbox import wait_for_mail
from test_read_pages import sign_in, versioned
from test_setup_link import confirm, sign_in_as, start_printing

from cvsm_server.runtime import cli
from cvsm_server.e2e import service as e2e
from cvsm_server.e2e import syntax as e2e_syntax
from cvsm_server.core import inputs
from cvsm_server.mail import outbox
from cvsm_server.accounts import setup_link
from cvsm_server.core.config import Settings
from cvsm_server.core.errors import BadRequest
from cvsm_server.web.request import FORM_NOT_UTF8


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(app_url="")  # links use the address asked; plain http keeps the cookie


# Numbers as text: `str.isdigit()` says yes to all of these, `int()` refuses or misreads them.
UNICODE_DIGITS = {"superscript": "²", "circled": "①", "arabic-indic": "٣", "mixed": "1²",
                  "fullwidth": "１", "nul": "1\x00", "underscore": "1_0"}
# The same, %-escaped in a query string, and broken UTF-8 there.
QUERY_DIGITS = {"superscript": "%C2%B2", "circled": "%E2%91%A0", "arabic-indic": "%D9%A3",
                "fullwidth": "%EF%BC%91", "nul": "1%00", "broken utf-8": "%FF"}


def test_decimal_reads_ascii_digits_only() -> None:
    decimal, is_digits, whole_number = inputs.decimal, inputs.is_digits, inputs.whole_number
    assert decimal("42") == 42 and decimal(" 007 ") == 7 and decimal("-3", signed=True) == -3
    for text in [*UNICODE_DIGITS.values(), "", "-3", "+3", "1e3", "0x10", " ", "1 2", None, 3]:
        assert decimal(text) is None, text
    assert decimal("9" * 19) is not None and decimal("9" * 20) is None
    assert decimal("0" * 40 + "5") == 5 and decimal("1" * 10_000) is None
    assert is_digits("123456", 6) and not is_digits("12345①", 6) and not is_digits("١٢٣٤٥٦", 6)
    assert whole_number("n", "12") == 12
    for text in ("²", "-1", str(2**31)):
        with pytest.raises(BadRequest, match="Kolom 'n' harus bilangan bulat"):
            whole_number("n", text)


async def assert_refused_page(resp: Any, status: int = 400, message: str | None = None) -> str:
    """A refusal that is a dashboard page (not JSON, not a traceback) with its message."""
    text = await resp.text()
    assert resp.status == status, text
    assert resp.content_type == "text/html", text
    assert "Traceback" not in text and 'role="alert"' in text
    if message is not None:
        assert message.replace("'", "&#39;") in text, text
    return text


@pytest.fixture
async def dashboard(client: TestClient, api: Api, owner: dict, team_id: str,
                    database_url: str) -> dict[str, str]:
    """The owner (an admin too) signed in, with DB_URL at version 3: the pages' paths."""
    secret_id = await versioned(client, api, owner, team_id)
    await query(database_url, "UPDATE users SET is_admin = true WHERE id = %s", (owner["id"],))
    await sign_in(client, owner)
    page = f"/app/teams/{team_id}/secrets/{secret_id}"
    return {"team": team_id, "secret": secret_id, "page": page,
            "csrf": await form_csrf(client, page)}


# Item 1: every numeric field of the dashboard's forms ---------------------------------------

# (the form's path under the secret page or absolute, the fields besides the number, the
# numeric field, the message)
NUMERIC_FORMS = {
    "reveal version": ("/value", {}, "version", "Pilih nomor versi yang ada"),
    "diff from": ("/diff", {"to": "2"}, "from", "Pilih nomor versi yang ada"),
    "diff to": ("/diff", {"from": "1"}, "to", "Pilih nomor versi yang ada"),
    "rollback version": ("/rollback", {}, "version", "Kolom 'version' harus bilangan bulat"),
    "share max_views": ("/shares", {"ttl_hours": "24"}, "max_views",
                        "Kolom 'max_views' harus bilangan bulat"),
    "share ttl_hours": ("/shares", {"max_views": "1"}, "ttl_hours",
                        "Kolom 'ttl_hours' harus bilangan bulat"),
    "plan max_secrets": ("admin-team", {"plan": "professional", "max_members": ""},
                         "max_secrets", "Kolom 'max_secrets' harus bilangan bulat"),
    "plan max_members": ("admin-team", {"plan": "professional", "max_secrets": ""},
                         "max_members", "Kolom 'max_members' harus bilangan bulat"),
}


@pytest.mark.parametrize("form", NUMERIC_FORMS)
async def test_a_number_in_unicode_digits_in_a_form_is_a_400_page(
        client: TestClient, dashboard: dict[str, str], form: str, database_url: str) -> None:
    path, fields, name, message = NUMERIC_FORMS[form]
    action = f"/app/admin/teams/{dashboard['team']}" if path == "admin-team" \
        else dashboard["page"] + path
    plan = "SELECT plan, max_secrets, max_members FROM teams WHERE id = %s"
    before = await query(database_url, plan, (dashboard["team"],))
    for digits, number in UNICODE_DIGITS.items():
        resp = await client.post(action, data={"csrf": dashboard["csrf"], **fields, name: number},
                                 allow_redirects=False)
        # The form parser refuses a NUL before any field is read.
        await assert_refused_page(resp, 400, "berisi karakter yang tidak valid"
                                  if digits == "nul" else message)
    for broken in (b"%FF", b"\xff", b"1%C0%80"):  # broken UTF-8, escaped and raw
        body = urlencode({"csrf": dashboard["csrf"], **fields}).encode() + b"&" \
            + name.encode() + b"=" + broken
        resp = await client.post(action, data=body, allow_redirects=False, headers={
            "Content-Type": "application/x-www-form-urlencoded"})
        await assert_refused_page(resp, 400, FORM_NOT_UTF8)
    assert await query(database_url, "SELECT 1 FROM secret_shares") == []
    assert await query(database_url, plan, (dashboard["team"],)) == before


# A list's page number is navigation: one it cannot read shows the first page.
PAGED = ["/app/teams/{team}/audit", "/app/admin/users", "/app/admin/teams", "/app/admin/tickets"]


async def test_a_page_number_in_unicode_digits_shows_the_first_page_or_a_400_page(
        client: TestClient, dashboard: dict[str, str]) -> None:
    for path in PAGED:
        for digits, number in QUERY_DIGITS.items():
            resp = await client.get(path.format(team=dashboard["team"]) + "?page=" + number)
            if digits in ("nul", "broken utf-8"):  # no page reads a query string holding these
                await assert_refused_page(resp, 400, "Parameter URL tidak valid")
            else:
                text = await resp.text()
                assert resp.status == 200, (path, digits, text)
                assert "Halaman 1 dari" in text or path != PAGED[0], text


async def test_the_admin_users_form_keeps_a_page_number_it_cannot_read_as_the_first(
        client: TestClient, dashboard: dict[str, str], api: Api) -> None:
    other = await api.register()
    csrf = await form_csrf(client, "/app/admin/users")
    resp = await client.post(f"/app/admin/users/{other['id']}", data={
        "csrf": csrf, "action": "grant", "q": "", "page": "²"}, allow_redirects=False)
    assert resp.status == 303, await resp.text()
    assert resp.headers["Location"].endswith("page=1")


async def test_an_audit_filter_time_in_unicode_digits_is_a_400_page(
        client: TestClient, dashboard: dict[str, str]) -> None:
    for name in ("from", "to"):
        for number in QUERY_DIGITS.values():
            resp = await client.get(f"/app/teams/{dashboard['team']}/audit?{name}=2024-01-0{number}")
            await assert_refused_page(resp, 400)
        for number in UNICODE_DIGITS.values():
            resp = await client.post(f"/app/teams/{dashboard['team']}/audit/export", data={
                "csrf": dashboard["csrf"], "format": "csv", name: f"2024-01-0{number}"})
            assert resp.status == 400, (name, number, await resp.text())


TOTP_CODES = ["①②③④⑤⑥", "١٢٣٤٥٦", "１２３４５６", "²²²²²²", "12345\u202e"]


async def test_a_two_factor_code_in_unicode_digits_is_refused_as_a_code(
        client: TestClient, dashboard: dict[str, str]) -> None:
    csrf = await form_csrf(client, "/app/account")
    await client.post("/app/account/2fa/setup", data={"csrf": csrf})
    for code in TOTP_CODES:
        resp = await client.post("/app/account/2fa/enable", data={"csrf": csrf, "code": code},
                                 allow_redirects=False)
        await assert_refused_page(resp, 400, "Kode autentikasi")


async def test_the_api_refuses_a_two_factor_code_in_unicode_digits_as_a_code(
        client: TestClient, api: Api, owner: dict) -> None:
    auth = api.auth(owner["token"])
    setup = await client.post("/api/v1/me/2fa/setup", headers=auth, json={})
    assert setup.status == 200, await setup.text()
    for code in TOTP_CODES:
        resp = await client.post("/api/v1/me/2fa/enable", headers=auth, json={"code": code})
        assert resp.status == 400, await resp.text()
        assert "Kode autentikasi" in (await resp.json())["error"]


async def test_a_csrf_token_with_a_non_ascii_character_is_the_403_page(
        client: TestClient, dashboard: dict[str, str]) -> None:
    for csrf in ("é" * 64, "①" * 64, "\u202e" + "0" * 63):
        resp = await client.post("/app/teams", data={"csrf": csrf, "name": "X", "slug": "x-team"},
                                 allow_redirects=False)
        await assert_refused_page(resp, 403)
        resp = await client.post("/signin/2fa", data={"csrf": csrf, "pending": csrf, "code": "1"},
                                 allow_redirects=False)
        assert resp.status == 403 and "Traceback" not in await resp.text()


async def test_a_flash_cookie_with_a_non_ascii_mac_is_ignored(client: TestClient,
                                                              dashboard: dict[str, str]) -> None:
    client.session.cookie_jar.update_cookies({"cvsm_flash": "team_created.é"})
    resp = await client.get("/app/teams")
    assert resp.status == 200, await resp.text()


# The API's numeric query parameters: the same rule, a JSON 400.
API_QUERIES = ["/api/v1/teams/{team}/secrets?limit={n}", "/api/v1/teams/{team}/secrets?offset={n}",
               "/api/v1/teams/{team}/audit?limit={n}", "/api/v1/teams/{team}/audit?offset={n}",
               "/api/v1/teams/{team}/e2e/key?key_version={n}", "/api/v1/admin/users?limit={n}",
               "/api/v1/admin/teams?offset={n}"]


async def test_an_api_number_in_unicode_digits_is_a_json_400(
        client: TestClient, dashboard: dict[str, str], api: Api, owner: dict) -> None:
    for path in API_QUERIES:
        for number in QUERY_DIGITS.values():
            resp = await client.get(path.format(team=dashboard["team"], n=number),
                                    headers=api.auth(owner["token"]))
            assert resp.status == 400, await resp.text()
            assert "error" in await resp.json()


# Item 2: bodies aiohttp's readers raise on -------------------------------------------------

BROKEN_BODIES = {
    "part header without a colon": ("multipart/form-data; boundary=zz", b"--zz\r\nbroken"),
    "part header cut short": ("multipart/form-data; boundary=zz",
                              b"--zz\r\nContent-Disposition: form-data; name=\"a\"\r\n"),
    "part header line too long": ("multipart/form-data; boundary=zz",
                                  b"--zz\r\nX-A: " + b"a" * 100_000 + b"\r\n\r\nx\r\n--zz--\r\n"),
    "unknown transfer encoding": (
        "multipart/form-data; boundary=zz",
        b"--zz\r\nContent-Disposition: form-data; name=\"a\"\r\n"
        b"Content-Transfer-Encoding: x-nope\r\n\r\nx\r\n--zz--\r\n"),
    "quoted boundary unterminated": ('multipart/form-data; boundary="zz', b"--zz\r\nbroken"),
    "utf-16": ("application/x-www-form-urlencoded; charset=utf-16", "a=b".encode("utf-16")),
    "utf-16 part": ("multipart/form-data; boundary=zz",
                    b"--zz\r\nContent-Disposition: form-data; name=\"a\"\r\n"
                    b"Content-Type: text/plain; charset=utf-16\r\n\r\n\xff\xfea\x00\r\n--zz--\r\n"),
    "nul in a part name": ("multipart/form-data; boundary=zz",
                           b"--zz\r\nContent-Disposition: form-data; name=\"a\x00\"\r\n\r\n"
                           b"x\r\n--zz--\r\n"),
    "broken utf-8 in a part": ("multipart/form-data; boundary=zz",
                               b"--zz\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n"
                               b"\xff\xfe\r\n--zz--\r\n"),
    "broken utf-8 in a part name": ("multipart/form-data; boundary=zz",
                                    b"--zz\r\nContent-Disposition: form-data; name=\"\xff\"\r\n"
                                    b"\r\nx\r\n--zz--\r\n"),
}


@pytest.mark.parametrize("form", ["/signin", "/app/teams", "/app/teams/{team}/import"])
async def test_a_form_body_aiohttp_cannot_read_is_a_400_page(
        client: TestClient, dashboard: dict[str, str], form: str) -> None:
    path = form.format(team=dashboard["team"])
    for name, (content_type, body) in BROKEN_BODIES.items():
        resp = await client.post(path, data=body, headers={"Content-Type": content_type},
                                 allow_redirects=False)
        text = await resp.text()
        assert resp.status == 400, (name, text)
        assert resp.content_type == "text/html" and 'role="alert"' in text, (name, text)


# Item 3: a textarea's line breaks come as CRLF; what is stored is what the person typed -------

PEM_TYPED = "-----BEGIN KEY-----\nMIIB\nAAAA\n-----END KEY-----"
PEM_POSTED = PEM_TYPED.replace("\n", "\r\n")  # as a browser submits a textarea


async def by_name(client: TestClient, api: Api, owner: dict, team_id: str, name: str) -> str:
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/by-name/{name}",
                            headers=api.auth(owner["token"]))
    assert resp.status == 200, await resp.text()
    return (await resp.json())["value"]


async def test_dashboard_values_and_imports_are_stored_with_the_line_breaks_typed(
        client: TestClient, dashboard: dict[str, str], api: Api, owner: dict) -> None:
    team, csrf = dashboard["team"], dashboard["csrf"]
    resp = await client.post(f"/app/teams/{team}/secrets", data={
        "csrf": csrf, "name": "TYPED_PEM", "value": PEM_POSTED, "environment": "production",
        "type": "other", "description": "a\r\nb"}, allow_redirects=False)
    assert resp.status == 303, await resp.text()
    assert await by_name(client, api, owner, team, "TYPED_PEM") == PEM_TYPED

    resp = await client.post(dashboard["page"], data={
        "csrf": csrf, "value": "old\rmac\r\n" + PEM_POSTED, "type": "", "description": ""},
        allow_redirects=False)
    assert resp.status == 303, await resp.text()
    assert await by_name(client, api, owner, team, "DB_URL") == "old\nmac\n" + PEM_TYPED

    content = f'IMPORTED_PEM="{PEM_POSTED}"\r\nPLAIN=one\r\n'
    resp = await client.post(f"/app/teams/{team}/import", data={
        "csrf": csrf, "content": content, "environment": "production"}, allow_redirects=False)
    assert resp.status == 303, await resp.text()
    assert await by_name(client, api, owner, team, "IMPORTED_PEM") == PEM_TYPED
    assert await by_name(client, api, owner, team, "PLAIN") == "one"
    export = await client.get(f"/api/v1/teams/{team}/secrets/export?format=json",
                              headers=api.auth(owner["token"]))
    assert "\r" not in await export.text()

    # The API stores a value as it was sent.
    await api.secret(owner, team, "API_CRLF", "a\r\nb")
    assert await by_name(client, api, owner, team, "API_CRLF") == "a\r\nb"


# Item 4: `cvsm-server mail show --links` prints the server's links only ------------------------

async def test_mail_show_prints_only_the_links_the_server_made_and_escapes_bidi_characters(
        database_url: str, start_client: Callable[..., Any],
        make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    settings = make_settings(background_jobs="on", mail_poll_seconds="1")
    client = await start_client(settings)
    bait = "https://cvsm.test/verify-email?token=ATTACKER"
    resp = await client.post("/api/v1/auth/register", json={
        "email": "eve@example.com", "username": "eve_bait", "password": "correct horse 1",
        "name": f"Eve {bait} \u202egnp.exe"})
    assert resp.status == 201, await resp.text()
    await wait_for_mail(settings.outbox_dir)
    for name in [n for n in os.environ if n.startswith("CVSM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CVSM_DATA_DIR", str(settings.data_dir))

    assert cli.main(["mail", "show", "--last", "--links"]) == 0
    out = capsys.readouterr().out
    [link] = out.splitlines()
    assert link.startswith("https://cvsm.test/verify-email?token=") and "ATTACKER" not in link

    assert cli.main(["mail", "show", "--last"]) == 0
    out = capsys.readouterr().out
    assert "\u202e" not in out and "\\u202egnp.exe" in out
    assert f"{outbox.NOT_SERVER_LINK}{bait}" in out
    assert f"\n{link}\n" in out  # the server's own link, unmarked


# Item 5: an end-to-end value's limit is 65,536 bytes whatever the envelope's numbers ----------

def envelope_of(size: int, secret_id: str) -> str:
    """An envelope of the right shape for a value of `size` bytes (the server opens nothing:
    random bytes are as good as a ciphertext), at key version 1 and version 1."""
    def b64u(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    return f"cvsm-e2e1.1.{secret_id}.1.{b64u(os.urandom(12))}.{b64u(os.urandom(size + 16))}"


async def test_an_end_to_end_value_over_65536_bytes_is_refused_with_short_version_numbers(
        client: TestClient, api: Api) -> None:
    alice = Member(await api.register())
    await alice.setup_key(client)
    team = await E2ETeam.create(client, alice)
    for size, status in ((65_536, 201), (65_537, 400), (65_549, 400), (65_550, 400)):
        secret_id = str(uuid.uuid4())
        resp = await client.post(f"/api/v1/teams/{team.id}/secrets", headers=e2e_auth(alice.token),
                                 json={"id": secret_id, "name": f"BIG_{size}",
                                       "environment": "production",
                                       "value": envelope_of(size, secret_id)})
        assert resp.status == status, (size, await resp.text())
    assert len(envelope_of(65_549, secret_id)) <= e2e_syntax.MAX_ENVELOPE_LENGTH  # what got through


# Item 6: a setup link that was used shows no form ----------------------------------------------

async def test_a_used_setup_link_says_so_and_shows_no_form(
        database_url: str, start_client: Callable[..., Any],
        make_settings: Callable[..., Settings], capsys: pytest.CaptureFixture[str]) -> None:
    client, [token] = await start_printing(start_client, make_settings, capsys)
    api = Api(client)
    first, second = await api.register(), await api.register()
    status, location, _ = await confirm(client, first, token)
    assert (status, location) == (303, "/app/admin/users")
    for user in (second, None):  # signed in as another account, and signed out
        client.session.cookie_jar.clear()
        if user is not None:
            sign_in_as(client, user)
        page = await client.get(f"/setup?token={token}")
        await assert_refused_page(page, 400, setup_link.SETUP_INVALID)
        html = await page.text()
        assert "<form" not in html.split("<main", 1)[1] and token not in html


# Item 7: the change stream's events are what the OpenAPI document says (Schemathesis ST108) ----

async def test_the_change_streams_events_conform_to_the_openapi_document(
        client: TestClient, api: Api, owner: dict, team_id: str, tmp_path: Path) -> None:
    await api.secret(owner, team_id, "WATCHED", "x")
    base = str(client.make_url("/")).rstrip("/")
    config = tmp_path / "schemathesis.toml"
    config.write_text(f'max-stream-events = 1\n[parameters]\n"path.team_id" = "{team_id}"\n')
    args = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run",
            f"{base}/api/v1/openapi.json", "--url", base,
            "--header", f"Authorization: Bearer {owner['token']}",
            "--include-operation-id", "secret_changes", "--checks", "response_schema_conformance",
            "--phases", "examples,coverage", "--max-examples", "5", "--generation-deterministic",
            "--no-shrink", "--workers", "1", "--no-color", "--request-timeout", "5"]
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=tmp_path,
        env={**os.environ, "SCHEMATHESIS_HOOKS": "", "NO_COLOR": "1"})
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=240)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-6000:]
    assert "Tested: 1" in text and "ST108" not in text, text[-6000:]


async def test_every_kind_of_change_stream_event_is_one_the_document_describes(
        client: TestClient, api: Api, owner: dict, team_id: str) -> None:
    """Schemathesis reads the first event only: here a snapshot, changes, a deletion and the
    end, each checked against the document's `itemSchema` (its `contentSchema` too)."""
    doc = await (await client.get("/api/v1/openapi.json")).json()
    [operation] = [item["get"] for path, item in doc["paths"].items()
                   if path.endswith("/secrets/changes")]
    item_schema = operation["responses"]["200"]["content"]["text/event-stream"]["itemSchema"]
    seen = []

    def check(name: str, data: Any) -> None:
        event = {"event": name, "data": json.dumps(data)}
        [branch] = [b for b in item_schema["oneOf"]
                    if b["properties"]["event"]["const"] == name]
        jsonschema.Draft202012Validator(item_schema).validate(event)
        jsonschema.Draft202012Validator(branch["properties"]["data"]["contentSchema"]).validate(data)
        seen.append((name, sorted(data)))

    secret_id = await api.secret(owner, team_id, "WATCHED", "one")
    created = await api.api_token(owner)
    resp, stream = await open_stream(client, team_id, created["token"])
    check("snapshot", await stream.expect("snapshot"))
    auth = api.auth(owner["token"])
    resp = await client.put(f"/api/v1/teams/{team_id}/secrets/{secret_id}", headers=auth,
                            json={"value": "two"})
    assert resp.status == 200
    check("change", await stream.expect("change"))
    assert (await client.delete(f"/api/v1/teams/{team_id}/secrets/{secret_id}",
                                headers=auth)).status == 200
    check("change", await stream.expect("change"))
    assert (await client.delete(f"/api/v1/tokens/{created['api_token']['id']}",
                                headers=auth)).status == 200
    check("end", await stream.expect("end"))
    assert seen == [("snapshot", ["secrets"]), ("change", ["environment", "name", "version"]),
                    ("change", ["deleted", "name"]), ("end", ["status"])]


async def test_a_credential_that_is_not_utf8_is_a_401(start_client: Callable[..., Any],
                                                     make_settings: Callable[..., Settings]) -> None:
    client = await start_client(make_settings(metrics_token="m" * 32))
    for path in ("/api/v1/me", "/metrics"):
        for credential in (b"Bearer \xff\xfe", b"Bearer cvsm_\xc3\x28", "Bearer ①²٣".encode()):
            resp = await client.get(path, headers={"Authorization": credential.decode("latin-1")})
            text = await resp.text()
            assert resp.status == 401, (path, credential, text)
