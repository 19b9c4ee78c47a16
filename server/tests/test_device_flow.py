"""CLI sign-in (RFC 8628, `cvsm login`): the terminal's code, the /device page where a signed-in
member approves or denies it, the polls' fixed error values, the narrow token minted once, and
the token asking about and revoking itself. The app from its factory, the real database."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from aiohttp.test_utils import TestClient

from cvsm_server.accounts import device_flow

from conftest import Api, query

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
CODE = "/api/v1/auth/device/code"
TOKEN = "/api/v1/auth/device/token"


async def start(client: TestClient, hostname: str = "laptop-ani") -> dict[str, Any]:
    resp = await client.post(CODE, json={"hostname": hostname},
                             headers={"User-Agent": "cvsm-cli/0.5 (linux)"})
    assert resp.status == 200, await resp.text()
    assert resp.headers["Cache-Control"] == "no-store"
    return await resp.json()


async def poll(client: TestClient, device_code: str) -> tuple[int, dict[str, Any]]:
    resp = await client.post(TOKEN, json={"device_code": device_code,
                                          "grant_type": device_flow.GRANT_TYPE})
    return resp.status, await resp.json()


async def let_interval_pass(database_url: str) -> None:
    await query(database_url, "UPDATE device_authorizations "
                              "SET last_polled_at = last_polled_at - interval '1 minute'")


def sign_in_as(client: TestClient, user: dict) -> None:
    client.session.cookie_jar.clear()
    client.session.cookie_jar.update_cookies({"cvsm_session": user["token"]})


async def open_page(client: TestClient, user: dict, user_code: str) -> tuple[int, str]:
    sign_in_as(client, user)
    page = await client.get("/device", params={"user_code": user_code})
    return page.status, await page.text()


async def decide(client: TestClient, user: dict, user_code: str, decision: str = "approve",
                 **fields: Any) -> tuple[int, str, str]:
    """Open the page as `user` and post the decision: (status, Location, page)."""
    sign_in_as(client, user)
    html = await (await client.get("/app/account")).text()  # the session's CSRF token
    data: list[tuple[str, str]] = [("csrf", CSRF.search(html).group(1)),
                                   ("user_code", user_code), ("decision", decision)]
    for name, value in fields.items():
        for one in value if isinstance(value, list) else [value]:
            data.append((name, one))
    resp = await client.post("/device", data=data, allow_redirects=False)
    return resp.status, resp.headers.get("Location", ""), await resp.text()


async def test_the_whole_flow_mints_one_narrow_token_for_that_machine(
        client: TestClient, api: Api, owner, team_id, database_url) -> None:
    await api.secret(owner, team_id, "DB_URL", "postgres://x", environment="staging")
    started = await start(client)
    assert re.fullmatch(r"[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}",
                        started["user_code"])
    assert started["verification_uri"] == "https://cvsm.test/device"
    assert started["verification_uri_complete"] == (
        f"https://cvsm.test/device?user_code={started['user_code']}")
    assert started["expires_in"] == 600 and started["interval"] == 5
    rows = await query(database_url, "SELECT t::text AS row FROM device_authorizations t")
    assert started["device_code"] not in rows[0]["row"]  # only its keyed hash is stored

    assert await poll(client, started["device_code"]) == (400, {"error": "authorization_pending"})

    # The page shows which machine asked, then the member approves for one team, reads only.
    status, html = await open_page(client, owner, started["user_code"].lower().replace("-", " "))
    assert status == 200 and "laptop-ani" in html and "127.0.0.1" in html
    assert "cvsm-cli/0.5 (linux)" in html and started["user_code"] in html
    status, location, _ = await decide(client, owner, started["user_code"], team="acme",
                                       read_only="on", environments=["staging"])
    assert (status, location) == (303, "/device")

    status, body = await poll(client, started["device_code"])
    assert status == 200, body
    token = body["access_token"]
    assert re.fullmatch(r"cvsm_[0-9a-f]{64}", token) and body["token_type"] == "Bearer"
    assert body["api_token"]["name"] == "cvsm login on laptop-ani"
    assert body["api_token"]["read_only"] is True
    assert body["api_token"]["environments"] == ["staging"]
    assert body["team"] == {"id": team_id, "slug": "acme", "name": "Team"}

    # It reads the team's staging secrets, and nothing wider.
    auth = api.auth(token)
    resp = await client.get(f"/api/v1/teams/acme/secrets/export",
                            params={"format": "json", "environment": "staging"}, headers=auth)
    assert resp.status == 200 and await resp.json() == {"DB_URL": "postgres://x"}
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets", headers=auth,
                             json={"name": "NEW", "value": "v", "environment": "staging"})
    assert resp.status == 403
    other = await api.team(owner, "other")
    assert (await client.get(f"/api/v1/teams/{other}/secrets", headers=auth)).status == 404

    # Answered once: the code is spent.
    assert await poll(client, started["device_code"]) == (400, {"error": "invalid_grant"})
    audit = await query(database_url, "SELECT action, metadata FROM audit_logs "
                                      "WHERE action IN ('device_approve', 'token_create')")
    assert sorted(a["action"] for a in audit) == ["device_approve", "token_create"]
    assert token not in str(audit)

    # whoami and logout: the token about itself, then revoking itself.
    resp = await client.get("/api/v1/tokens/current", headers=auth)
    current = await resp.json()
    assert resp.status == 200 and current["api_token"]["id"] == body["api_token"]["id"]
    assert current["team"]["slug"] == "acme" and token not in await resp.text()
    assert (await client.delete("/api/v1/tokens/current", headers=auth)).status == 200
    assert (await client.get("/api/v1/me", headers=auth)).status == 401
    jwt = api.auth(owner["token"])
    assert (await client.get("/api/v1/tokens/current", headers=jwt)).status == 403


async def test_denied_expired_wrong_and_unsupported(client: TestClient, api: Api, owner, team_id,
                                                    database_url) -> None:
    denied = await start(client)
    status, location, _ = await decide(client, owner, denied["user_code"], "deny")
    assert (status, location) == (303, "/device")
    assert await poll(client, denied["device_code"]) == (400, {"error": "access_denied"})
    # A denied code cannot be approved afterwards.
    status, _, html = await decide(client, owner, denied["user_code"], team="acme")
    assert status == 404 and device_flow.USER_CODE_UNKNOWN in html
    assert await poll(client, denied["device_code"]) == (400, {"error": "access_denied"})

    expired = await start(client)
    await query(database_url, "UPDATE device_authorizations SET expires_at = now() "
                              "WHERE user_code = %s", (expired["user_code"].replace("-", ""),))
    assert await poll(client, expired["device_code"]) == (400, {"error": "expired_token"})
    status, html = await open_page(client, owner, expired["user_code"])
    assert status == 404 and device_flow.USER_CODE_UNKNOWN in html

    assert await poll(client, "not-a-code") == (400, {"error": "invalid_grant"})
    resp = await client.post(TOKEN, json={"device_code": "x", "grant_type": "password"})
    assert (resp.status, await resp.json()) == (400, {"error": "unsupported_grant_type"})
    resp = await client.post(TOKEN, json={})
    assert resp.status == 400 and (await resp.json())["error"] == "Kolom 'device_code' wajib diisi"
    resp = await client.post(CODE, json={"hostname": "a\nb"})
    assert resp.status == 400 and "hostname" in (await resp.json())["error"]
    assert (await client.post(CODE, json={"hostname": "h" * 65})).status == 400
    assert (await client.post(CODE, json={"hostname": " "})).status == 400
    assert (await client.post(CODE, data="x" * 5000)).status == 413
    assert (await client.post(CODE)).status == 200  # no body: no host name


async def test_polling_faster_than_the_interval_is_told_to_slow_down(
        client: TestClient, owner, database_url) -> None:
    started = await start(client)
    assert await poll(client, started["device_code"]) == (400, {"error": "authorization_pending"})
    assert await poll(client, started["device_code"]) == (400, {"error": "slow_down"})
    [row] = await query(database_url, "SELECT interval_seconds FROM device_authorizations")
    assert row["interval_seconds"] == 10  # RFC 8628 3.5: 5 seconds more from now on
    await let_interval_pass(database_url)
    assert await poll(client, started["device_code"]) == (400, {"error": "authorization_pending"})


async def test_a_stranger_cannot_approve_for_a_team_they_are_not_in(
        client: TestClient, api: Api, owner, team_id, database_url) -> None:
    stranger = await api.register("stranger")
    await api.team(stranger, "strangers")
    started = await start(client)
    status, _, html = await decide(client, stranger, started["user_code"], team="acme",
                                   read_only="on")
    assert status == 404 and "Tim tidak ditemukan" in html
    status, _, html = await decide(client, stranger, started["user_code"], team=team_id)
    assert status == 404
    assert await poll(client, started["device_code"]) == (400, {"error": "authorization_pending"})
    # Not signed in: the page sends to sign-in, and back here with the code.
    client.session.cookie_jar.clear()
    page = await client.get("/device", params={"user_code": started["user_code"]},
                            allow_redirects=False)
    assert page.status == 303
    location = urlsplit(page.headers["Location"])
    assert location.path == "/signin"
    assert parse_qs(location.query)["next"] == [f"/device?user_code={started['user_code']}"]
    # And a post without the session's CSRF token changes nothing.
    sign_in_as(client, owner)
    resp = await client.post("/device", data={"user_code": started["user_code"],
                                              "decision": "approve", "team": "acme"})
    assert resp.status == 403
    await let_interval_pass(database_url)
    assert await poll(client, started["device_code"]) == (400, {"error": "authorization_pending"})


async def test_a_viewer_cannot_mint_more_than_a_viewers_token(
        client: TestClient, api: Api, owner, team_id, database_url) -> None:
    viewer = await api.register("viewer")
    await api.add_member(owner, team_id, viewer, "Viewer")
    started = await start(client)
    # Asking for a writing token is refused, and the code stays pending.
    status, _, html = await decide(client, viewer, started["user_code"], team="acme")
    assert status == 403 and device_flow.VIEWER_READ_ONLY in html
    assert await poll(client, started["device_code"]) == (400, {"error": "authorization_pending"})
    status, _, _ = await decide(client, viewer, started["user_code"], team="acme",
                                read_only="on")
    assert status == 303
    await let_interval_pass(database_url)
    status, body = await poll(client, started["device_code"])
    assert status == 200 and body["api_token"]["read_only"] is True
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets",
                             headers=api.auth(body["access_token"]),
                             json={"name": "NOPE", "value": "v", "environment": "production"})
    assert resp.status == 403


async def test_a_member_demoted_to_viewer_before_the_poll_gets_a_read_only_token(
        client: TestClient, api: Api, owner, team_id, database_url) -> None:
    member = await api.register("member")
    await api.add_member(owner, team_id, member, "Member")
    started = await start(client)
    assert (await decide(client, member, started["user_code"], team="acme"))[0] == 303
    resp = await client.patch(f"/api/v1/teams/{team_id}/members/{member['id']}",
                              headers=api.auth(owner["token"]), json={"role": "Viewer"})
    assert resp.status == 200, await resp.text()
    status, body = await poll(client, started["device_code"])
    assert status == 200 and body["api_token"]["read_only"] is True


async def test_guessing_user_codes_is_slowed_per_account(client: TestClient, api: Api, owner,
                                                         team_id) -> None:
    started = await start(client)
    for guess in ("BBBB-BBBB", "CCCC-CCCC", "DDDD-DDDD", "FFFF-FFFF", "GGGG-GGGG", "HHHH-HHHH"):
        if guess == started["user_code"]:
            continue
        status, _html = await open_page(client, owner, guess)
        assert status == 404
    # Now even the right code waits (the wait is no oracle), on the page and in the form.
    status, _ = await open_page(client, owner, started["user_code"])
    assert status == 429
    status, _, _ = await decide(client, owner, started["user_code"], team="acme", read_only="on")
    assert status == 429
    assert await poll(client, started["device_code"]) == (400, {"error": "authorization_pending"})
    # Another member is not slowed by them.
    other = await api.register("other")
    await api.add_member(owner, team_id, other, "Member")
    status, _ = await open_page(client, other, started["user_code"])
    assert status == 200


async def test_code_requests_are_rate_limited_per_address(start_client, make_settings) -> None:
    client = await start_client(make_settings(ratelimit_auth="3/60"))
    for _ in range(3):
        assert (await client.post(CODE)).status == 200
    resp = await client.post(CODE)
    assert resp.status == 429 and int(resp.headers["Retry-After"]) >= 1


async def test_the_page_without_a_code_asks_for_one(client: TestClient, owner) -> None:
    sign_in_as(client, owner)
    page = await client.get("/device")
    html = await page.text()
    assert page.status == 200 and 'name="user_code"' in html and "XXXX-XXXX" in html
    assert page.headers["Cache-Control"] == "no-store"


async def test_an_end_to_end_team_is_refused_for_the_browser_to_wrap_its_key(
        client: TestClient, api: Api, database_url) -> None:
    """A token of an end-to-end team needs the team key wrapped to it by a browser holding it
    (the tokens page does that): the device flow refuses such a team and stays pending."""
    from e2e_client import E2ETeam, Member

    alice = Member(await api.register("alice"))
    await alice.setup_key(client)
    team = await E2ETeam.create(client, alice)
    started = await start(client)
    status, _, html = await decide(client, alice.user, started["user_code"], team=team.id,
                                   read_only="on")
    assert status == 400 and "Tim end-to-end" in html
    assert await poll(client, started["device_code"]) == (400, {"error": "authorization_pending"})


# --- a `cvsm login` token expires (CVSM_DEVICE_TOKEN_DAYS, issue 42) ---------------------------

from datetime import datetime, timedelta, timezone  # noqa: E402

import pytest  # noqa: E402

from cvsm_server.accounts import tokens  # noqa: E402
from cvsm_server.core.config import ConfigError, Settings  # noqa: E402


async def login(client: TestClient, user: dict, team: str = "acme") -> dict[str, Any]:
    """A whole `cvsm login`: the code, its approval on the page, the poll's answer."""
    started = await start(client)
    status, location, _ = await decide(client, user, started["user_code"], team=team)
    assert (status, location) == (303, "/device")
    status, body = await poll(client, started["device_code"])
    assert status == 200, body
    client.session.cookie_jar.clear()
    return body


def near(when: str, expected: datetime) -> bool:
    return abs(datetime.fromisoformat(when) - expected) < timedelta(minutes=2)


async def test_a_minted_token_expires_in_90_days_shown_to_whoami_and_on_the_tokens_page(
        client: TestClient, api: Api, owner, team_id, database_url) -> None:
    body = await login(client, owner)
    expires_at = body["api_token"]["expires_at"]
    assert expires_at is not None
    assert near(expires_at, datetime.now(timezone.utc) + timedelta(days=90)), expires_at
    [row] = await query(database_url, "SELECT expires_at FROM api_tokens WHERE id = %s",
                        (body["api_token"]["id"],))
    assert near(row["expires_at"].isoformat(), datetime.now(timezone.utc) + timedelta(days=90))
    current = await client.get("/api/v1/tokens/current", headers=api.auth(body["access_token"]))
    assert (await current.json())["api_token"]["expires_at"] == expires_at
    sign_in_as(client, owner)
    page = await (await client.get("/app/tokens", headers={"Accept-Language": "en"})).text()
    day = datetime.fromisoformat(expires_at).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M")
    assert "Valid until" in page and f"{day} UTC" in page, page


async def test_with_one_day_a_login_token_is_refused_a_day_later_as_any_expired_token(
        start_client, make_settings, database_url, monkeypatch: pytest.MonkeyPatch) -> None:
    client = await start_client(make_settings(device_token_days="1"))
    api = Api(client)
    owner = await api.register("short_lived")
    await api.team(owner, "acme")
    body = await login(client, owner)
    assert near(body["api_token"]["expires_at"], datetime.now(timezone.utc) + timedelta(days=1))
    auth = api.auth(body["access_token"])
    assert (await client.get("/api/v1/me", headers=auth)).status == 200  # cached from now on
    # A day and a minute later: this process's clock and the database's rows both moved on.
    later = timedelta(days=1, minutes=1)
    real_now = tokens.now
    monkeypatch.setattr(tokens, "now", lambda: real_now() + later)
    await query(database_url, "UPDATE api_tokens SET expires_at = expires_at - %s WHERE id = %s",
                (later, body["api_token"]["id"]))
    refused = await client.get("/api/v1/me", headers=auth)
    assert (refused.status, await refused.json()) == (401, {"error": tokens.INVALID})
    # the same answer as a token made in the dashboard that expired
    made = await api.api_token(owner)
    await query(database_url, "UPDATE api_tokens SET expires_at = now() - interval '1 second' "
                              "WHERE id = %s", (made["api_token"]["id"],))
    other = await client.get("/api/v1/me", headers=api.auth(made["token"]))
    assert (other.status, await other.json()) == (401, {"error": tokens.INVALID})


def test_the_device_token_days_setting() -> None:
    base = {"CVSM_DATA_DIR": "/tmp/x"}
    assert Settings.from_env(base).device_token_days == 90
    assert Settings.from_env({**base, "CVSM_DEVICE_TOKEN_DAYS": "1"}).device_token_days == 1
    for bad in ("0", "-1", "3651", "ninety", "1.5"):
        with pytest.raises(ConfigError, match="CVSM_DEVICE_TOKEN_DAYS"):
            Settings.from_env({**base, "CVSM_DEVICE_TOKEN_DAYS": bad})
