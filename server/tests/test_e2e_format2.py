"""End-to-end format 2 on the server's side (docs/e2e.md, "Format 2"): the key answer's links and
auth, the members' auths, anchors (session JWT only, dropped when a member leaves), the shapes
the server refuses (low-order public keys, a passphrase wrap above the PBKDF2 ceiling, a bad
auth, link or anchor), a token wrapped for a stale key version, an old version's envelope served
by the API, and a whole token string kept out of the access log."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import query
from cvsm import e2e as crypto
from cvsm_server.web.accesslog import redact
from e2e_client import alice, team  # noqa: F401 (fixtures)
from e2e_client import E2ETeam, Member, auth, cheap_passphrase_wrap, keyed

VECTORS_LOW_ORDER = [
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    "4Ot6fDtBuK4WVuP68Z_EatoJjeucMrH9hmIFFl9JuAA",
    "7P_______________________________________38",
    "7v________________________________________8",
]


async def test_the_key_answer_carries_the_callers_auth_and_the_links(api, client, alice, team):
    bob = await keyed(api, client, "bob")
    await api.add_member(alice.user, team.id, bob.user, "Admin")
    await team.grant(alice, bob)
    token_string, _, token_json = await team.token(alice)
    summary = await team.rekey(bob)
    assert summary["link"] is True and summary["key_version"] == 2
    await team.rekey(alice)
    body = await (await client.get(f"/api/v1/teams/{team.id}/e2e/key",
                                   headers=auth(bob.token))).json()
    assert body["key_version"] == 3 and [link["key_version"] for link in body["links"]] == [2, 3]
    assert crypto.open_link(body["links"][1]["link"], team.keys[3], team.id, 3) == team.keys[2]
    crypto.check_recipient_auth(body["auth"], team.keys[3], team.id, 3, "user", bob.id,
                                bob.public_key)
    # an earlier version's wrap comes with its own auth; `since` narrows the links
    body = await (await client.get(f"/api/v1/teams/{team.id}/e2e/key?key_version=1&since=2",
                                   headers=auth(alice.token))).json()
    assert body["key_version"] == 1 and [link["key_version"] for link in body["links"]] == [3]
    crypto.check_recipient_auth(body["auth"], team.keys[1], team.id, 1, "user", alice.id,
                                alice.public_key)
    # the members' listing carries each current wrap's auth, the token's too
    listing = await (await client.get(f"/api/v1/teams/{team.id}/e2e/members",
                                      headers=auth(alice.token))).json()
    (token,) = listing["tokens"]
    assert token["token_id"] == token_json["id"] and token["auth"] is not None
    crypto.check_recipient_auth(token["auth"], team.keys[3], team.id, 3, "token", None,
                                crypto._unb64u(token["public_key"]))
    # the token's pin (version 1) holds through the two links
    parts = crypto.parse_token(token_string)
    body = await (await client.get(f"/api/v1/teams/{team.id}/e2e/key",
                                   headers=auth(parts.api_token))).json()
    key = crypto.unwrap_team_key(body["wrapped_key"], team.id, 3, parts.private_key)
    crypto.verify_chain(key, 3, team.id, {link["key_version"]: link["link"]
                                          for link in body["links"]},
                        parts.key_version, parts.commitment)


async def test_anchors_are_a_members_own_and_session_only(api, client, alice, team, database_url):
    url = f"/api/v1/teams/{team.id}/e2e/anchor"
    resp = await client.get(url, headers=auth(alice.token))  # stored by the creator's client
    assert resp.status == 200
    assert crypto.open_anchor((await resp.json())["anchor"], alice.private_key, alice.id,
                              team.id) == (1, team.commitment(1))
    bob = await keyed(api, client, "bob")
    await api.add_member(alice.user, team.id, bob.user, "Viewer")
    resp = await client.get(url, headers=auth(bob.token))
    assert resp.status == 404 and "error" in await resp.json()
    await team.grant(alice, bob)
    assert await bob.open_team(client, team.id) == (team.key, 1)  # trust on first use, stored
    assert (await client.get(url, headers=auth(bob.token))).status == 200
    for bad in ("x", "cvsm-anchor1.AA.AA", "cvsm-anchor1." + "A" * 16 + "." + "A" * 20):
        resp = await client.put(url, headers=auth(bob.token), json={"anchor": bad})
        assert resp.status == 400, bad
    token_string, _, _ = await team.token(alice)
    api_part = crypto.parse_token(token_string).api_token
    assert (await client.get(url, headers=auth(api_part))).status == 403
    outsider = await keyed(api, client, "carol")
    assert (await client.get(url, headers=auth(outsider.token))).status == 404
    # leaving the team drops the member's anchor with their wraps
    resp = await client.delete(f"/api/v1/teams/{team.id}/members/{bob.id}",
                               headers=auth(alice.token))
    assert resp.status == 200
    rows = await query(database_url, "SELECT user_id FROM team_e2e_anchors WHERE team_id = %s",
                       (team.id,))
    assert [str(r["user_id"]) for r in rows] == [alice.id]


async def test_low_order_keys_bad_auths_and_the_pbkdf2_ceiling_are_refused(api, client, alice,
                                                                           team):
    bob = Member(await api.register("bob"))
    for low in VECTORS_LOW_ORDER:
        resp = await client.put("/api/v1/me/e2e-key", headers=auth(bob.token),
                                json={**bob.key_body(), "public_key": low})
        assert resp.status == 400 and "berorde rendah" in (await resp.json())["error"]
        resp = await client.post("/api/v1/tokens", headers=auth(alice.token), json={
            "name": "app", "team_id": team.id,
            "e2e": {"public_key": low, "wrapped_key": team.wrap_for(bob.public_key)}})
        assert resp.status == 400, low
    too_many = cheap_passphrase_wrap().replace(f".{crypto.MIN_ITERATIONS}.", ".10000001.")
    most = cheap_passphrase_wrap().replace(f".{crypto.MIN_ITERATIONS}.", ".10000000.")
    resp = await client.put("/api/v1/me/e2e-key", headers=auth(bob.token),
                            json=bob.key_body(wrapped_private_key=too_many))
    assert resp.status == 400 and "10000000" in (await resp.json())["error"]
    resp = await client.put("/api/v1/me/e2e-key", headers=auth(bob.token),
                            json=bob.key_body(wrapped_private_key=most))
    assert resp.status == 201
    await api.add_member(alice.user, team.id, bob.user, "Viewer")
    resp = await client.post(f"/api/v1/teams/{team.id}/e2e/grants", headers=auth(alice.token),
                             json={"user_id": bob.id, "wrapped_key": team.wrap_for(bob.public_key),
                                   "public_key": crypto._b64u(bob.public_key), "auth": "A" * 44})
    assert resp.status == 400 and "autentikasi" in (await resp.json())["error"]


async def test_a_token_wrapped_for_a_stale_key_version_is_a_409(api, client, alice, team):
    private, public = crypto.generate_key_pair()
    resp = await client.post("/api/v1/tokens", headers=auth(alice.token), json={
        "name": "app", "team_id": team.id,
        "e2e": {"public_key": crypto._b64u(public), "wrapped_key": team.wrap_for(public),
                "key_version": 2, "auth": team.auth_for("token", public)}})
    assert resp.status == 409 and "versi" in (await resp.json())["error"]


async def test_an_old_versions_envelope_is_served_by_the_api(api, client, alice, team):
    secret_id = await team.create_secret(alice, "DB", "first")
    resp = await client.put(f"/api/v1/teams/{team.id}/secrets/{secret_id}",
                            headers=auth(alice.token),
                            json={"value": team.seal("second", secret_id=secret_id, version=2,
                                                     name="DB")})
    assert resp.status == 200, await resp.text()
    await team.rekey(alice)
    url = f"/api/v1/teams/{team.id}/secrets/{secret_id}/versions"
    for version, value in ((1, "first"), (2, "second"), (3, "second")):
        body = await (await client.get(f"{url}/{version}", headers=auth(alice.token))).json()
        assert body["version"] == version and body["e2e"] is True
        under = crypto.parse_envelope(body["value"]).key_version
        assert team.open(body["value"], name="DB", key=team.keys[under]) == value
    for missing in ("4", "0", "01", "99999999999"):
        assert (await client.get(f"{url}/{missing}", headers=auth(alice.token))).status == 404


def test_a_whole_token_string_is_redacted_in_a_path_and_a_user_agent():
    token = crypto.join_token("cvsm_" + "ab" * 32, bytes(range(1, 33)), 7, bytes(32))
    key_part = token.split(".", 1)[1]
    for text in (f"GET /api/v1/x/{token}/y", f"curl/8 {token}",
                 f"/x/{token.replace('.', '%2E')}"):
        out = redact(text)
        assert "cvsm_[redacted]" in out and key_part.split(".")[0] not in out, out
        assert crypto._b64u(bytes(32)) not in out
