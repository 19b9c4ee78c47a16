"""The dashboard's forms of end-to-end teams over plain HTTP (no browser): what they take is what
the page's script (static/e2e-pages.js) sends, made here with the Python reference `cvsm.e2e`,
and what the script could get wrong, or a hand-made post, is a 4xx page with an Indonesian
message, never a 500 and never a stored plaintext."""

from __future__ import annotations

import html
import json
import os
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from conftest import query
from cvsm import e2e
from cvsm_server.e2e import service as server_e2e
from cvsm_server.e2e import syntax as e2e_syntax
from cvsm_server.core.config import Settings
from test_dashboard import csrf_of, form_csrf, sign_up

PASSPHRASE = "kuda laut batu hijau 7"


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(app_url="")  # plain http keeps the cookie


def context_of(html: str) -> dict[str, str]:
    """The `#e2e-context` data attributes of a page."""
    match = re.search(r'<div id="e2e-context" hidden([^>]*)>', html)
    assert match, "the page has no #e2e-context"
    return {k: v for k, v in re.findall(r' data-([a-z-]+)="([^"]*)"', match.group(1))}


async def keyed_member(client: TestClient) -> dict[str, Any]:
    """A member signed up through the pages, with a key pair set up through the account form."""
    await sign_up(client)
    page = await client.get("/app/account")
    html = await page.text()
    user_id = context_of(html)["user-id"]
    private, public = e2e.generate_key_pair()
    recovery = os.urandom(32)
    resp = await client.post("/app/account/e2e", allow_redirects=False, data={
        "csrf": csrf_of(html), "public_key": e2e._b64u(public),
        "wrapped_private_key": e2e.wrap_private_key_with_passphrase(private, PASSPHRASE, user_id),
        "recovery_wrapped_private_key": e2e.wrap_private_key_with_recovery(private, recovery,
                                                                           user_id)})
    assert resp.status == 303, await resp.text()
    return {"user_id": user_id, "private": private, "public": public,
            "csrf": await form_csrf(client, "/app/account")}


async def e2e_team(client: TestClient, member: dict[str, Any], slug: str) -> dict[str, Any]:
    team_id, key = str(uuid.uuid4()), e2e.new_team_key()
    resp = await client.post("/app/teams", allow_redirects=False, data={
        "csrf": member["csrf"], "name": slug, "slug": slug, "e2e": "1", "id": team_id,
        "wrapped_key": e2e.wrap_team_key(key, team_id, 1, member["public"])})
    assert resp.status == 303, await resp.text()
    return {"id": team_id, "key": key, "slug": slug}


async def test_the_pages_take_what_the_script_seals_and_refuse_the_rest_with_a_4xx(
        client: TestClient, database_url: str) -> None:
    member = await keyed_member(client)
    csrf = member["csrf"]
    page = await client.get("/app/account")
    assert "Sidik jari kunci publik Anda" in await page.text()
    assert page.headers["Cache-Control"] == "no-store"  # it holds the passphrase's wrap

    # The account form: a public key that is not one is the account page again, with the reason.
    resp = await client.post("/app/account/e2e", data={
        "csrf": csrf, "public_key": "bukan-kunci", "wrapped_private_key": "x",
        "recovery_wrapped_private_key": "y"})
    assert resp.status == 400 and "kunci publik X25519" in await resp.text()

    # Team creation with the box but nothing from the script (no HTTPS, no JavaScript).
    resp = await client.post("/app/teams", data={"csrf": csrf, "name": "n", "slug": "no-script",
                                                  "e2e": "1"})
    assert resp.status == 400 and "HTTPS" in await resp.text()
    assert not await query(database_url, "SELECT 1 FROM teams WHERE slug = 'no-script'")

    team = await e2e_team(client, member, "sealed-pages")
    secrets_page = await client.get(f"/app/teams/{team['slug']}/secrets")
    html = await secrets_page.text()
    assert context_of(html)["team-id"] == team["id"]
    assert context_of(html)["wrapped-key"].startswith("cvsm-wrap1.")

    # A value typed in clear (a form posted without the script) is refused, and not stored.
    resp = await client.post(f"/app/teams/{team['slug']}/secrets", data={
        "csrf": csrf, "name": "CLEAR", "value": "in-clear-value", "environment": "production"})
    assert resp.status == 400
    assert not await query(database_url, "SELECT 1 FROM secrets WHERE name = 'CLEAR'")

    # The .env import: what the script sends, and what it could send wrong.
    secret_id = str(uuid.uuid4())
    sealed = e2e.seal_value("imported-value", team["key"], 1, team_id=team["id"],
                            secret_id=secret_id, version=1, environment="production", name="IMP")
    resp = await client.post(f"/app/teams/{team['slug']}/import", data={
        "csrf": csrf, "environment": "production", "items": json.dumps([
            {"line": 1, "name": "IMP", "id": secret_id, "value": sealed},
            {"line": 2, "name": None, "error": "Baris 2 bukan format KEY=VALUE"},
            {"line": 3, "name": "PLAIN", "id": str(uuid.uuid4()), "value": "in-clear"}])})
    assert resp.status == 200  # followed to the list, which says what happened once
    html = await resp.text()
    assert "1 dibuat, 2 gagal." in html and "Baris 2 bukan format KEY=VALUE" in html
    for items in ("not json", json.dumps({"a": 1}), json.dumps([1, 2])):
        resp = await client.post(f"/app/teams/{team['slug']}/import", data={
            "csrf": csrf, "environment": "production", "items": items})
        assert resp.status == 400 and "muat ulang halaman" in await resp.text()

    # Every page of the team answers (none opens a value on the server).
    secret_page = f"/app/teams/{team['slug']}/secrets/{secret_id}"
    for path in ("secrets", "members", "environments", "insights", "audit", "plan"):
        resp = await client.get(f"/app/teams/{team['slug']}/{path}")
        assert resp.status == 200, path
    resp = await client.get(secret_page)
    assert resp.status == 200 and 'data-e2e-update' in await resp.text()
    for data in ({}, {"version": "1"}):
        resp = await client.post(f"{secret_page}/value", data={"csrf": csrf, **data})
        html = await resp.text()
        assert resp.status == 200 and f'data-e2e-envelope="{sealed}"' in html
        assert "imported-value" not in html
    resp = await client.post(f"/app/teams/{team['slug']}/environments/reveal",
                             data={"csrf": csrf, "secret_id": secret_id})
    assert resp.status == 200 and "data-e2e-envelope" in await resp.text()

    # The export: a page holding the envelopes for the script, never a value.
    resp = await client.post(f"/app/teams/{team['slug']}/export", data={
        "csrf": csrf, "environment": "production", "format": "dotenv"})
    html = await resp.text()
    assert resp.status == 200 and "data-e2e-export" in html and "imported-value" not in html
    assert resp.headers["Cache-Control"] == "no-store"

    # A grant with something that is not a wrap; a re-key payload that is not the script's.
    other = str(uuid.uuid4())
    resp = await client.post(f"/app/teams/{team['slug']}/e2e/grants/{other}", data={
        "csrf": csrf, "wrapped_key": "cvsm-wrap1.x"})
    assert resp.status == 400
    plan = await client.post(f"/app/teams/{team['slug']}/e2e/rekey", data={"csrf": csrf})
    html = await plan.text()
    assert plan.status == 200 and "data-e2e-rekey" in html and "imported-value" not in html
    assert plan.headers["Cache-Control"] == "no-store"
    for payload in ("not json", "[]"):
        resp = await client.post(f"/app/teams/{team['slug']}/e2e/rekey", data={
            "csrf": csrf, "payload": payload})
        assert resp.status == 400, payload
    resp = await client.post(f"/app/teams/{team['slug']}/e2e/rekey", data={
        "csrf": csrf, "payload": json.dumps({"key_version": 2, "wraps": [], "secrets": []})})
    assert resp.status == 409 and "Kunci tim end-to-end" in await resp.text()
    rows = await query(database_url, "SELECT key_version FROM teams WHERE id = %s", (team["id"],))
    assert rows == [{"key_version": 1}]
    dump = await query(database_url, "SELECT s::text AS row FROM secrets s")
    assert not any("in-clear" in r["row"] or "imported-value" in r["row"] for r in dump)


async def test_a_sealed_import_and_a_rekey_above_the_page_form_limit_go_through(
        client: TestClient, database_url: str) -> None:
    # 190 lines of 1,000 bytes (a .env well within its 200 KB) sealed, JSON- and form-encoded:
    # more than the pages' default 256 KB form, as is the re-key that seals them all again.
    member = await keyed_member(client)
    csrf = member["csrf"]
    team = await e2e_team(client, member, "big-pages")
    items, names = [], {}
    for line in range(1, 191):
        secret_id, name = str(uuid.uuid4()), f"BIG_{line}"
        names[secret_id] = name
        items.append({"line": line, "name": name, "id": secret_id, "value": e2e.seal_value(
            "v" * 1000, team["key"], 1, team_id=team["id"], secret_id=secret_id, version=1,
            environment="production", name=name)})
    body = {"csrf": csrf, "environment": "production", "items": json.dumps(items)}
    assert len(json.dumps(body)) > 256 * 1024
    resp = await client.post(f"/app/teams/{team['slug']}/import", data=body)
    assert resp.status == 200, await resp.text()
    assert "190 dibuat, 0 gagal." in await resp.text()

    fresh = e2e.new_team_key()
    payload = {"key_version": 2, "wraps": [{
        "user_id": member["user_id"], "public_key": e2e._b64u(member["public"]),
        "wrapped_key": e2e.wrap_team_key(fresh, team["id"], 2, member["public"])}],
        "secrets": [{"id": secret_id, "value": e2e.seal_value(
            "w" * 1000, fresh, 2, team_id=team["id"], secret_id=secret_id, version=2,
            environment="production", name=name)} for secret_id, name in names.items()]}
    assert len(json.dumps(payload)) > 256 * 1024
    resp = await client.post(f"/app/teams/{team['slug']}/e2e/rekey", allow_redirects=False,
                             data={"csrf": csrf, "payload": json.dumps(payload)})
    assert resp.status == 303, await resp.text()
    rows = await query(database_url, "SELECT key_version FROM teams WHERE id = %s", (team["id"],))
    assert rows == [{"key_version": 2}]


@pytest.mark.parametrize("item", [
    {"line": 1, "name": 5, "error": "x"},
    {"line": "1", "name": "A", "error": "x"},
    {"line": 1, "name": "A", "error": ["x"]},
    {"line": 1, "name": ["A"], "id": str(uuid.uuid4()), "value": "cvsm-e2e1.x"},
    {"line": 1, "name": "A", "id": 7, "value": "cvsm-e2e1.x"},
    {"line": 1, "name": "A", "id": str(uuid.uuid4()), "value": {"v": 1}},
])
async def test_a_sealed_import_item_of_the_wrong_shape_is_the_pages_400(
        client: TestClient, database_url: str, item: dict[str, Any]) -> None:
    member = await keyed_member(client)
    team = await e2e_team(client, member, "odd-items")
    resp = await client.post(f"/app/teams/{team['slug']}/import", data={
        "csrf": member["csrf"], "environment": "production", "items": json.dumps([item])})
    assert resp.status == 400 and "muat ulang halaman" in await resp.text()
    assert not await query(database_url, "SELECT 1 FROM secrets")


async def test_the_grant_form_names_the_key_it_wrapped_to_and_a_replaced_one_is_refused(
        client: TestClient, database_url: str) -> None:
    member = await keyed_member(client)
    team = await e2e_team(client, member, "grant-form")
    html = await (await client.get(f"/app/teams/{team['slug']}/members")).text()
    assert 'data-e2e-grant' not in html  # nobody waiting yet
    # The form as the script fills it: the wrap and the public key it was made for.
    url = f"/app/teams/{team['slug']}/e2e/grants/{member['user_id']}"
    _private, other = e2e.generate_key_pair()
    resp = await client.post(url, data={
        "csrf": member["csrf"], "public_key": e2e._b64u(other),
        "wrapped_key": e2e.wrap_team_key(team["key"], team["id"], 1, other)})
    assert resp.status == 409 and "berganti" in await resp.text()
    resp = await client.post(url, allow_redirects=False, data={
        "csrf": member["csrf"], "public_key": e2e._b64u(member["public"]),
        "wrapped_key": e2e.wrap_team_key(team["key"], team["id"], 1, member["public"])})
    assert resp.status == 303, await resp.text()


async def test_the_pages_carry_every_wrap_the_member_holds_after_a_rekey(
        client: TestClient) -> None:
    """A value sealed before a re-key names the older key version: the page's context carries
    the member's wrap of every version they hold (`wraps`), so the script can open it."""
    member = await keyed_member(client)
    team = await e2e_team(client, member, "rekeyed-pages")
    fresh = e2e.new_team_key()
    resp = await client.post(f"/app/teams/{team['slug']}/e2e/rekey", allow_redirects=False, data={
        "csrf": member["csrf"], "payload": json.dumps({"key_version": 2, "secrets": [], "wraps": [
            {"user_id": member["user_id"], "public_key": e2e._b64u(member["public"]),
             "wrapped_key": e2e.wrap_team_key(fresh, team["id"], 2, member["public"])}]})})
    assert resp.status == 303, await resp.text()
    for path in ("secrets", "members", "environments"):
        ctx = context_of(await (await client.get(f"/app/teams/{team['slug']}/{path}")).text())
        assert ctx["key-version"] == "2"
        wraps = json.loads(html.unescape(ctx["wraps"]))
        assert sorted(wraps) == ["1", "2"], path
        assert {version: e2e.unwrap_team_key(wrapped, team["id"], int(version), member["private"])
                for version, wrapped in wraps.items()} == {"1": team["key"], "2": fresh}


async def test_the_forms_carry_format_2_auth_link_and_the_members_anchor(
        client: TestClient, database_url: str) -> None:
    """Format 2 through the pages: creation and the re-key take each wrap's `auth`, the re-key
    its `link`; the anchor route stores the member's sealed anchor (204) and the pages hand it
    back in `#e2e-context`; a malformed anchor is the 400 with the domain's message. The re-key's
    plan carries each recipient's auth and fingerprint, and its confirmation lists them."""
    member = await keyed_member(client)
    team_id, key = str(uuid.uuid4()), e2e.new_team_key()
    own = e2e.recipient_auth(key, team_id, 1, "user", member["user_id"], member["public"])
    resp = await client.post("/app/teams", allow_redirects=False, data={
        "csrf": member["csrf"], "name": "f2", "slug": "format-dua", "e2e": "1", "id": team_id,
        "wrapped_key": e2e.wrap_team_key(key, team_id, 1, member["public"]), "auth": own})
    assert resp.status == 303, await resp.text()
    stored = await query(database_url, "SELECT auth FROM team_key_wraps WHERE team_id = %s",
                         (team_id,))
    assert [r["auth"] for r in stored] == [own]

    anchor = e2e.seal_anchor(member["private"], member["user_id"], team_id, 1,
                             e2e.commitment(key, team_id, 1))
    url = "/app/teams/format-dua/e2e/anchor"
    resp = await client.post(url, allow_redirects=False,
                             data={"csrf": member["csrf"], "anchor": "cvsm-anchor1.AA.AA"})
    assert resp.status == 400 and "anchor" in await resp.text()
    resp = await client.post(url, allow_redirects=False, data={"csrf": member["csrf"],
                                                               "anchor": anchor})
    assert resp.status == 204, await resp.text()
    resp = await client.post(url, allow_redirects=False, data={"anchor": anchor})  # no csrf
    assert resp.status in (400, 403)
    ctx = context_of(await (await client.get("/app/teams/format-dua/secrets")).text())
    assert html.unescape(ctx["anchor"]) == anchor and ctx["team-ref"] == "format-dua"

    page = await client.post("/app/teams/format-dua/e2e/rekey", data={"csrf": member["csrf"]})
    text = await page.text()
    assert e2e_syntax.fingerprint(member["public"]) in text  # the confirmation lists it
    plan = json.loads(html.unescape(re.search(r'data-plan="([^"]*)"', text).group(1)))
    assert plan["recipients"][0]["auth"] == own
    fresh = e2e.new_team_key()
    link = e2e.make_link(fresh, key, team_id, 2)
    resp = await client.post("/app/teams/format-dua/e2e/rekey", allow_redirects=False, data={
        "csrf": member["csrf"], "payload": json.dumps({
            "key_version": 2, "secrets": [], "link": link, "wraps": [{
                "user_id": member["user_id"], "public_key": e2e._b64u(member["public"]),
                "wrapped_key": e2e.wrap_team_key(fresh, team_id, 2, member["public"]),
                "auth": e2e.recipient_auth(fresh, team_id, 2, "user", member["user_id"],
                                           member["public"])}]})})
    assert resp.status == 303, await resp.text()
    links = await query(database_url, "SELECT key_version, link FROM team_key_links "
                        "WHERE team_id = %s", (team_id,))
    assert [(r["key_version"], r["link"]) for r in links] == [(2, link)]
    ctx = context_of(await (await client.get("/app/teams/format-dua/secrets")).text())
    assert json.loads(html.unescape(ctx["links"])) == {"2": link}
