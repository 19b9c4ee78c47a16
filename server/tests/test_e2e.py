"""End-to-end teams through the real API (docs/e2e.md): members' keys, team creation, the
caller's wrap, sealed secrets (create, bulk, update, reads, export), what is refused because it
needs the plaintext, tokens with their key, shares, grants and the roles, removal and re-key.
The clients' side is the Python SDK's `cvsm.e2e` (`e2e_client`)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from conftest import query
from cvsm import e2e as crypto
from e2e_client import alice, team  # noqa: F401 (fixtures)
from e2e_client import E2ETeam, Member, auth, cheap_passphrase_wrap, keyed


# --- members' keys -----------------------------------------------------------------------------

async def test_a_member_sets_reads_rewraps_and_replaces_their_key_pair(api, client):
    bob = Member(await api.register("bob"))
    resp = await client.get("/api/v1/me/e2e-key", headers=auth(bob.token))
    assert resp.status == 404
    passphrase_wrap = crypto.wrap_private_key_with_passphrase(bob.private_key, "long passphrase",
                                                              bob.id)
    body = bob.key_body(wrapped_private_key=passphrase_wrap)
    resp = await client.put("/api/v1/me/e2e-key", headers=auth(bob.token), json=body)
    assert resp.status == 201, await resp.text()
    stored = (await resp.json())["e2e_key"]
    assert stored["public_key"] == body["public_key"]
    assert stored["fingerprint"] == " ".join(
        __import__("hashlib").sha256(bob.public_key).hexdigest()[i:i + 4] for i in range(0, 32, 4))
    resp = await client.get("/api/v1/me/e2e-key", headers=auth(bob.token))
    got = (await resp.json())["e2e_key"]
    assert crypto.open_passphrase_wrap(got["wrapped_private_key"], "long passphrase",
                                       bob.id) == bob.private_key
    # the same public key again: new wraps (a new passphrase), 200
    resp = await client.put("/api/v1/me/e2e-key", headers=auth(bob.token), json=bob.key_body())
    assert resp.status == 200
    # another public key needs "replace"
    other = Member(bob.user)
    resp = await client.put("/api/v1/me/e2e-key", headers=auth(bob.token), json=other.key_body())
    assert resp.status == 409
    assert "replace" in (await resp.json())["error"]
    resp = await client.put("/api/v1/me/e2e-key", headers=auth(bob.token),
                            json=other.key_body(replace=True))
    assert resp.status == 200
    assert (await resp.json())["e2e_key"]["public_key"] == crypto._b64u(other.public_key)


@pytest.mark.parametrize("field, value", [
    ("public_key", "AAAA"),
    ("public_key", "A" * 42 + "B"),  # not canonical base64url
    ("wrapped_private_key", cheap_passphrase_wrap().replace(".600000.", ".599999.")),
    ("wrapped_private_key", "cvsm-pass1.600000.x.y.z"),
    ("recovery_wrapped_private_key", "cvsm-rec1.AAAA.BBBB"),
])
async def test_a_key_pair_of_the_wrong_shape_is_refused(api, client, field, value):
    bob = Member(await api.register("bob"))
    resp = await client.put("/api/v1/me/e2e-key", headers=auth(bob.token),
                            json=bob.key_body(**{field: value}))
    assert resp.status == 400
    assert (await resp.json())["error"]


async def test_the_database_keeps_a_teams_mode_and_one_kind_of_value_per_row(client, alice, team,
                                                                           api, database_url):
    plain = await api.team(alice.user, "plain-team")
    for team_id, mode in ((team.id, "false"), (plain, "true")):
        with pytest.raises(Exception, match="set at its creation only"):
            await query(database_url, f"UPDATE teams SET e2e = {mode} WHERE id = %s", (team_id,))
    secret_id = await team.create_secret(alice, "BOTH", "v")
    with pytest.raises(Exception, match="secrets_sealed_once"):
        await query(database_url, "UPDATE secrets SET key_id = 'k', nonce = '\\x00', "
                                  "ciphertext = '\\x00' WHERE id = %s", (secret_id,))


async def test_an_api_token_can_neither_read_nor_replace_its_users_key_pair(api, client, alice):
    token = (await api.api_token(alice.user))["token"]
    assert (await client.get("/api/v1/me/e2e-key", headers=auth(token))).status == 403
    resp = await client.put("/api/v1/me/e2e-key", headers=auth(token),
                            json=Member(alice.user).key_body(replace=True))
    assert resp.status == 403


# --- teams ---------------------------------------------------------------------------------------

async def test_an_e2e_team_needs_the_creators_key_and_a_client_chosen_id(api, client, alice):
    bob = Member(await api.register("bob"))
    team_id, key = str(uuid.uuid4()), crypto.new_team_key()
    wrap = crypto.wrap_team_key(key, team_id, 1, bob.public_key)
    resp = await client.post("/api/v1/teams", headers=auth(bob.token), json={
        "name": "S", "slug": "sealed-b", "id": team_id, "e2e": {"wrapped_key": wrap}})
    assert resp.status == 400 and "e2e-key" in (await resp.json())["error"]
    resp = await client.post("/api/v1/teams", headers=auth(alice.token), json={
        "name": "S", "slug": "sealed-a", "e2e": {"wrapped_key": wrap}})
    assert resp.status == 400  # no id
    resp = await client.post("/api/v1/teams", headers=auth(alice.token), json={
        "name": "S", "slug": "sealed-a", "id": team_id, "e2e": {"wrapped_key": "cvsm-wrap1.x"}})
    assert resp.status == 400
    resp = await client.post("/api/v1/teams", headers=auth(alice.token), json={
        "name": "S", "slug": "plain-a", "id": team_id})
    assert resp.status == 400  # an id is for end-to-end teams only
    resp = await client.post("/api/v1/teams", headers=auth(alice.token), json={
        "name": "P", "slug": "plain-b"})
    assert (await resp.json())["team"]["e2e"] is False
    assert (await resp.json())["team"]["key_version"] is None


async def test_the_creator_reads_their_wrap_and_it_opens_to_the_team_key(client, alice, team):
    key, version = await alice.team_key(client, team.id)
    assert key == team.key and version == 1
    resp = await client.get(f"/api/v1/teams/{team.id}", headers=auth(alice.token))
    body = (await resp.json())["team"]
    assert body["e2e"] is True and body["key_version"] == 1
    resp = await client.get("/api/v1/teams", headers=auth(alice.token))
    assert [t["e2e"] for t in (await resp.json())["teams"]] == [True]


async def test_the_key_route_refuses_plain_teams_strangers_and_members_without_a_wrap(
        api, client, alice, team):
    plain = await api.team(alice.user, "plain-team")
    resp = await client.get(f"/api/v1/teams/{plain}/e2e/key", headers=auth(alice.token))
    assert resp.status == 400
    stranger = await keyed(api, client, "stranger")
    resp = await client.get(f"/api/v1/teams/{team.id}/e2e/key", headers=auth(stranger.token))
    assert resp.status == 404
    bob = await keyed(api, client, "bob")
    await api.add_member(alice.user, team.id, bob.user, "Member")
    resp = await client.get(f"/api/v1/teams/{team.id}/e2e/key", headers=auth(bob.token))
    assert resp.status == 403
    resp = await client.get(f"/api/v1/teams/{team.id}/e2e/key", headers=auth(alice.token),
                            params={"key_version": "2"})
    assert resp.status == 403  # no such version yet


# --- secrets -------------------------------------------------------------------------------------

async def test_sealed_secrets_are_stored_checked_and_served_as_envelopes(client, alice, team):
    secret_id = await team.create_secret(alice, "DB_URL", "postgres://u:p@h/db")
    # by name, by id, the list and JSON export answer the envelope, which the client opens
    resp = await client.get(f"/api/v1/teams/{team.id}/secrets/by-name/DB_URL",
                            headers=auth(alice.token))
    body = await resp.json()
    assert body["secret"]["e2e"] is True and body["e2e"] is True
    assert body["value"].startswith("cvsm-e2e1.1." + secret_id + ".1.")
    assert team.open(body["value"], name="DB_URL") == "postgres://u:p@h/db"
    resp = await client.get(f"/api/v1/teams/{team.id}/secrets/{secret_id}",
                            headers=auth(alice.token))
    assert team.open((await resp.json())["value"], name="DB_URL") == "postgres://u:p@h/db"
    resp = await client.get(f"/api/v1/teams/{team.id}/secrets", headers=auth(alice.token),
                            params={"search": "DB_"})
    assert [(s["name"], s["e2e"]) for s in (await resp.json())["secrets"]] == [("DB_URL", True)]
    resp = await client.get(f"/api/v1/teams/{team.id}/secrets/export", headers=auth(alice.token),
                            params={"format": "json", "environment": "production"})
    exported = await resp.json()
    assert team.open(exported["DB_URL"], name="DB_URL") == "postgres://u:p@h/db"

    # update: an envelope for version 2 under the current key version
    new = team.seal("postgres://u:q@h/db", secret_id=secret_id, version=2, name="DB_URL")
    resp = await client.put(f"/api/v1/teams/{team.id}/secrets/{secret_id}",
                            headers=auth(alice.token), json={"value": new})
    assert resp.status == 200 and (await resp.json())["secret"]["version"] == 2
    for stale in (team.seal("x", secret_id=secret_id, version=2, name="DB_URL"),
                  team.seal("x", secret_id=secret_id, version=4, name="DB_URL"),
                  team.seal("x", secret_id=secret_id, version=3, name="DB_URL", key_version=2),
                  team.seal("x", secret_id=str(uuid.uuid4()), version=3, name="DB_URL")):
        resp = await client.put(f"/api/v1/teams/{team.id}/secrets/{secret_id}",
                                headers=auth(alice.token), json={"value": stale})
        assert resp.status == 409, await resp.text()
        assert (await resp.json())["error"]
    resp = await client.get(f"/api/v1/teams/{team.id}/secrets/{secret_id}/versions",
                            headers=auth(alice.token))
    assert (await resp.json())["current_version"] == 2
    # a move needs a value sealed for the new environment
    resp = await client.put(f"/api/v1/teams/{team.id}/secrets/{secret_id}",
                            headers=auth(alice.token), json={"environment": "staging"})
    assert resp.status == 400 and "environment" in (await resp.json())["error"]
    moved = team.seal("postgres://s", secret_id=secret_id, version=3, name="DB_URL",
                      environment="staging")
    resp = await client.put(f"/api/v1/teams/{team.id}/secrets/{secret_id}",
                            headers=auth(alice.token),
                            json={"environment": "staging", "value": moved})
    assert resp.status == 200
    resp = await client.get(f"/api/v1/teams/{team.id}/secrets/by-name/DB_URL",
                            headers=auth(alice.token), params={"environment": "staging"})
    assert team.open((await resp.json())["value"], name="DB_URL",
                     environment="staging") == "postgres://s"
    # a description alone needs no value
    resp = await client.put(f"/api/v1/teams/{team.id}/secrets/{secret_id}",
                            headers=auth(alice.token), json={"description": "main db"})
    assert resp.status == 200


async def test_the_json_export_of_an_e2e_team_is_marked_and_a_plain_teams_is_not(api, client,
                                                                                  alice, team):
    # `{NAME: value}` has no room for the `e2e` mark: a client without the key tells by the header
    await team.create_secret(alice, "API_KEY", "sk-live-123")
    token_string, _, _ = await team.token(alice, read_only=True)
    api_part, _ = crypto.split_token(token_string)
    for token, environment in ((alice.token, "production"), (api_part, "production"),
                               (alice.token, None)):
        params = {"format": "json", **({"environment": environment} if environment else {})}
        resp = await client.get(f"/api/v1/teams/{team.id}/secrets/export", headers=auth(token),
                                params=params)
        assert resp.status == 200 and resp.headers["Cvsm-E2E"] == "1"
        assert (await resp.json())["API_KEY"].startswith("cvsm-e2e1.")
    plain = await api.team(alice.user)
    await api.secret(alice.user, plain, "API_KEY", "sk-plain")
    for fmt in ("json", "dotenv"):
        resp = await client.get(f"/api/v1/teams/{plain}/secrets/export", headers=auth(alice.token),
                                params={"format": fmt, "environment": "production"})
        assert resp.status == 200 and "Cvsm-E2E" not in resp.headers
    resp = await client.get(f"/api/v1/teams/{plain}/secrets/export", headers=auth(alice.token),
                            params={"format": "json"})
    assert await resp.json() == {"API_KEY": "sk-plain"} and "Cvsm-E2E" not in resp.headers


async def test_a_create_without_a_matching_envelope_is_refused(api, client, alice, team):
    url = f"/api/v1/teams/{team.id}/secrets"
    secret_id = str(uuid.uuid4())
    sealed = team.seal("v", secret_id=secret_id, version=1, name="A")
    cases = [
        ({"name": "A", "environment": "production", "value": sealed}, 400),  # no id
        ({"id": secret_id, "name": "A", "environment": "production", "value": "plain"}, 400),
        ({"id": secret_id, "name": "A", "environment": "production",
          "value": sealed[:-2]}, 400),  # not canonical / not an envelope
        ({"id": str(uuid.uuid4()), "name": "A", "environment": "production", "value": sealed},
         409),
        ({"id": secret_id, "name": "A", "environment": "production",
          "value": team.seal("v", secret_id=secret_id, version=2, name="A")}, 409),
        ({"id": secret_id, "name": "A", "environment": "production",
          "value": team.seal("v", secret_id=secret_id, version=1, name="A", key_version=2)}, 409),
    ]
    for body, status in cases:
        resp = await client.post(url, headers=auth(alice.token), json=body)
        assert resp.status == status, (body.keys(), await resp.text())
    # a plain team takes no id
    plain = await api.team(alice.user, "plain-team")
    resp = await client.post(f"/api/v1/teams/{plain}/secrets", headers=auth(alice.token),
                             json={"id": secret_id, "name": "A", "environment": "production",
                                   "value": "v"})
    assert resp.status == 400


async def test_an_id_taken_in_this_team_or_another_is_one_distinct_409(api, client, alice, team):
    ours = await team.create_secret(alice, "OURS", "v")
    bob = await keyed(api, client, "bob")
    other = await E2ETeam.create(client, bob, "others")
    theirs = await other.create_secret(bob, "THEIRS", "v")
    answers = []
    for secret_id in (ours, theirs):
        body = {"id": secret_id, "name": "NEW", "environment": "production",
                "value": team.seal("v", secret_id=secret_id, version=1, name="NEW")}
        resp = await client.post(f"/api/v1/teams/{team.id}/secrets", headers=auth(alice.token),
                                 json=body)
        assert resp.status == 409
        answers.append((await resp.json())["error"])
        resp = await client.post(f"/api/v1/teams/{team.id}/secrets/bulk",
                                 headers=auth(alice.token), json={"items": [body]})
        answers.append((await resp.json())["results"][0]["error"])
    # the same answer whichever team holds the id (no oracle), and not the name's
    assert len(set(answers)) == 1 and "id secret sudah dipakai" in answers[0].lower(), answers
    # a name taken is still the name's 409
    secret_id = str(uuid.uuid4())
    resp = await client.post(f"/api/v1/teams/{team.id}/secrets", headers=auth(alice.token), json={
        "id": secret_id, "name": "OURS", "environment": "production",
        "value": team.seal("v", secret_id=secret_id, version=1, name="OURS")})
    assert resp.status == 409 and "nama ini" in (await resp.json())["error"]


async def test_bulk_create_takes_envelopes_each_checked_on_its_own(client, alice, team):
    ids = [str(uuid.uuid4()) for _ in range(3)]
    items = [{"id": ids[0], "name": "ONE", "environment": "production",
              "value": team.seal("1", secret_id=ids[0], version=1, name="ONE")},
             {"id": ids[1], "name": "TWO", "environment": "production",
              "value": team.seal("2", secret_id=ids[1], version=2, name="TWO")},
             {"name": "THREE", "environment": "production",
              "value": team.seal("3", secret_id=ids[2], version=1, name="THREE")}]
    resp = await client.post(f"/api/v1/teams/{team.id}/secrets/bulk", headers=auth(alice.token),
                             json={"items": items})
    body = await resp.json()
    assert [r["ok"] for r in body["results"]] == [True, False, False]
    assert body["results"][0]["id"] == ids[0]


async def test_what_needs_the_plaintext_is_refused_with_the_reason(client, alice, team):
    secret_id = await team.create_secret(alice, "TOKEN", "t-1")
    refusals = [
        client.get(f"/api/v1/teams/{team.id}/secrets/export", headers=auth(alice.token),
                   params={"format": "dotenv"}),
        client.get(f"/api/v1/teams/{team.id}/secrets/export", headers=auth(alice.token),
                   params={"format": "shell"}),
        client.post(f"/api/v1/teams/{team.id}/secrets/bulk/import-dotenv",
                    headers=auth(alice.token),
                    json={"content": "A=1\n", "environment": "production"}),
        client.post(f"/api/v1/teams/{team.id}/secrets/{secret_id}/rollback",
                    headers=auth(alice.token), json={"version": 1}),
        client.post(f"/api/v1/teams/{team.id}/secrets/bulk/move-env", headers=auth(alice.token),
                    json={"ids": [secret_id], "environment": "staging"}),
        client.put(f"/api/v1/teams/{team.id}/secrets/{secret_id}/rotation",
                   headers=auth(alice.token),
                   json={"interval_days": 30, "target": {"kind": "none"}}),
    ]
    for request in refusals:
        resp = await request
        assert resp.status == 400, await resp.text()
        assert "end-to-end" in (await resp.json())["error"]


# --- tokens --------------------------------------------------------------------------------------

async def test_a_token_of_the_team_reads_its_wrap_and_an_envelope_the_sdk_opens(client, alice,
                                                                                team):
    await team.create_secret(alice, "API_KEY", "sk-live-123")
    token_string, private, api_token = await team.token(alice, read_only=True)
    assert api_token["e2e_public_key"] == crypto._b64u(crypto.public_key(private))
    api_part, key_part = crypto.split_token(token_string)
    assert key_part == private
    resp = await client.get(f"/api/v1/teams/{team.id}/e2e/key", headers=auth(api_part))
    body = await resp.json()
    team_key = crypto.unwrap_team_key(body["wrapped_key"], body["team_id"], body["key_version"],
                                      key_part)
    resp = await client.get(f"/api/v1/teams/{team.id}/secrets/by-name/API_KEY",
                            headers=auth(api_part))
    envelope = (await resp.json())["value"]
    assert crypto.open_value(envelope, team_key, team_id=team.id, environment="production",
                             name="API_KEY") == "sk-live-123"
    # the whole token string is not a credential the server knows
    resp = await client.get(f"/api/v1/teams/{team.id}/e2e/key", headers=auth(token_string))
    assert resp.status == 401


async def test_token_rules_for_e2e_teams(api, client, alice, team, database_url):
    private, public = crypto.generate_key_pair()
    e2e_body = {"public_key": crypto._b64u(public), "wrapped_key": team.wrap_for(public)}
    cases = [
        ({"team_id": team.id}, 400),                              # needs e2e
        ({"e2e": e2e_body}, 400),                                 # e2e needs a team
        ({"team_id": team.id, "e2e": {**e2e_body, "wrapped_key": "x"}}, 400),
        ({"team_id": team.id, "e2e": {**e2e_body, "public_key": "x"}}, 400),
    ]
    plain = await api.team(alice.user, "plain-team")
    cases.append(({"team_id": plain, "e2e": e2e_body}, 400))      # a plain team has no key
    for extra, status in cases:
        resp = await client.post("/api/v1/tokens", headers=auth(alice.token),
                                 json={"name": "t", **extra})
        assert resp.status == status, (extra, await resp.text())
    # a member without the key cannot make one
    bob = await keyed(api, client, "bob")
    await api.add_member(alice.user, team.id, bob.user, "Member")
    resp = await client.post("/api/v1/tokens", headers=auth(bob.token),
                             json={"name": "t", "team_id": team.id, "e2e": e2e_body})
    assert resp.status == 403
    # a token without a team reaches names and envelopes, never a key
    unbound = (await api.api_token(alice.user))["token"]
    resp = await client.get(f"/api/v1/teams/{team.id}/e2e/key", headers=auth(unbound))
    assert resp.status == 403
    # revoking a token deletes its wrap
    _, _, api_token = await team.token(alice)
    resp = await client.delete(f"/api/v1/tokens/{api_token['id']}", headers=auth(alice.token))
    assert resp.status == 200
    rows = await query(database_url, "SELECT count(*) AS n FROM team_key_wraps WHERE token_id = %s",
                       (api_token["id"],))
    assert rows[0]["n"] == 0


# --- shares --------------------------------------------------------------------------------------

async def test_a_share_of_an_e2e_team_stores_and_serves_the_clients_envelope(api, client, alice,
                                                                             team):
    secret_id = await team.create_secret(alice, "SHARED", "one time")
    url = f"/api/v1/teams/{team.id}/secrets/{secret_id}/shares"
    resp = await client.post(url, headers=auth(alice.token), json={})
    assert resp.status == 400 and "cvsm-share1" in (await resp.json())["error"]
    resp = await client.post(url, headers=auth(alice.token), json={"value": "cvsm-share1.x.y"})
    assert resp.status == 400
    share_key = crypto.new_team_key()
    envelope = crypto.seal_share("one time", share_key)
    resp = await client.post(url, headers=auth(alice.token), json={"value": envelope})
    assert resp.status == 201, await resp.text()
    link = (await resp.json())["url"]
    token = link.rsplit("/", 1)[1]
    # HEAD says it is end-to-end before a view is spent (the share page refuses a link
    # without its key then)
    for _ in range(2):
        head = await client.head(f"/api/v1/public/share/{token}")
        assert head.status == 200 and head.headers["Cvsm-Share-E2E"] == "1"
    resp = await client.get(f"/api/v1/public/share/{token}")
    body = await resp.json()
    assert body["e2e"] is True and body["value"] == envelope and body["view_count"] == 1
    assert crypto.open_share(body["value"], share_key) == "one time"
    # a plain team's share takes no value, and says it is not e2e
    plain = await api.team(alice.user, "plain-team")
    plain_secret = await api.secret(alice.user, plain, "P", "plain value")
    url = f"/api/v1/teams/{plain}/secrets/{plain_secret}/shares"
    resp = await client.post(url, headers=auth(alice.token), json={"value": envelope})
    assert resp.status == 400
    resp = await client.post(url, headers=auth(alice.token), json={})
    token = (await resp.json())["url"].rsplit("/", 1)[1]
    assert (await client.head(f"/api/v1/public/share/{token}")).headers["Cvsm-Share-E2E"] == "0"
    body = await (await client.get(f"/api/v1/public/share/{token}")).json()
    assert body == {**body, "e2e": False, "value": "plain value"}


# --- members, grants, roles ----------------------------------------------------------------------

async def test_grants_follow_the_roles_and_need_the_granters_key(api, client, alice, team):
    admin = await keyed(api, client, "admin_b")
    member = await keyed(api, client, "member_c")
    viewer = await keyed(api, client, "viewer_d")
    nokey = Member(await api.register("nokey_e"))
    for user, role in ((admin, "Admin"), (member, "Member"), (viewer, "Viewer"),
                       (nokey, "Viewer")):
        await api.add_member(alice.user, team.id, user.user, role)
    url = f"/api/v1/teams/{team.id}/e2e/grants"

    async def grant(by: Member, to: Member) -> Any:
        return await client.post(url, headers=auth(by.token), json={
            "user_id": to.id, "wrapped_key": team.wrap_for(to.public_key),
            "public_key": crypto._b64u(to.public_key)})

    assert (await grant(member, viewer)).status == 403      # Member: below Admin
    assert (await grant(admin, viewer)).status == 403       # Admin without the key
    assert (await grant(alice, admin)).status == 200
    assert (await grant(admin, viewer)).status == 200       # now holds it
    assert (await grant(admin, nokey)).status == 409        # no key pair yet
    stranger = await keyed(api, client, "stranger_f")
    assert (await grant(admin, stranger)).status == 404
    resp = await client.post(url, headers=auth(admin.token),
                             json={"user_id": member.id, "wrapped_key": "cvsm-wrap1.a.b.c",
                                   "public_key": crypto._b64u(member.public_key)})
    assert resp.status == 400
    resp = await client.post(url, headers=auth(admin.token), json={
        "user_id": member.id, "wrapped_key": team.wrap_for(member.public_key)})
    assert resp.status == 400  # the key it was wrapped to is required
    key, _ = await viewer.team_key(client, team.id)
    assert key == team.key

    # the members' keys: every member sees fingerprints and access; tokens for Admin or above
    await team.token(alice)
    resp = await client.get(f"/api/v1/teams/{team.id}/e2e/members", headers=auth(viewer.token))
    body = await resp.json()
    access = {m["username"]: m["has_access"] for m in body["members"]}
    assert access == {"alice": True, "admin_b": True, "member_c": False, "viewer_d": True,
                      "nokey_e": False}
    no_key = next(m for m in body["members"] if m["username"] == "nokey_e")
    assert no_key["public_key"] is None and no_key["fingerprint"] is None
    assert body["tokens"] == []
    resp = await client.get(f"/api/v1/teams/{team.id}/e2e/members", headers=auth(admin.token))
    assert [t["has_access"] for t in (await resp.json())["tokens"]] == [True]
    plain = await api.team(alice.user, "plain-team")
    resp = await client.get(f"/api/v1/teams/{plain}/e2e/members", headers=auth(alice.token))
    assert resp.status == 400


async def test_replacing_a_key_pair_drops_that_members_wraps(api, client, alice, team):
    fresh = Member(alice.user)
    resp = await client.put("/api/v1/me/e2e-key", headers=auth(alice.token),
                            json=fresh.key_body(replace=True))
    assert resp.status == 200
    resp = await client.get(f"/api/v1/teams/{team.id}/e2e/key", headers=auth(alice.token))
    assert resp.status == 403


async def test_a_grant_or_rekey_wrap_to_a_members_replaced_key_is_a_409(api, client, alice, team,
                                                                       database_url):
    bob = await keyed(api, client, "bob")
    await api.add_member(alice.user, team.id, bob.user, "Member")
    stale = bob.public_key  # what Alice's page showed before Bob replaced his key pair
    fresh = Member(bob.user)
    resp = await client.put("/api/v1/me/e2e-key", headers=auth(bob.token),
                            json=fresh.key_body(replace=True))
    assert resp.status == 200
    resp = await client.post(f"/api/v1/teams/{team.id}/e2e/grants", headers=auth(alice.token),
                             json={"user_id": bob.id, "wrapped_key": team.wrap_for(stale),
                                   "public_key": crypto._b64u(stale)})
    assert resp.status == 409 and "berganti" in (await resp.json())["error"]
    resp = await client.get(f"/api/v1/teams/{team.id}/e2e/members", headers=auth(alice.token))
    assert [m["has_access"] for m in (await resp.json())["members"]
            if m["user_id"] == bob.id] == [False]
    assert not await query(database_url, "SELECT 1 FROM team_key_wraps WHERE user_id = %s",
                           (bob.id,))

    # a re-key that adds him with the stale key is refused whole, and one with his new key goes
    new_key = crypto.new_team_key()

    def rekey(bobs: bytes) -> dict:
        return {"key_version": 2, "secrets": [], "wraps": [
            {"user_id": m.id, "public_key": crypto._b64u(k),
             "wrapped_key": team.wrap_for(k, 2, new_key)}
            for m, k in ((alice, alice.public_key), (bob, bobs))]}

    url = f"/api/v1/teams/{team.id}/e2e/rekey"
    resp = await client.post(url, headers=auth(alice.token), json=rekey(stale))
    assert resp.status == 409 and "berganti" in (await resp.json())["error"]
    resp = await client.get(f"/api/v1/teams/{team.id}", headers=auth(alice.token))
    assert (await resp.json())["team"]["key_version"] == 1
    resp = await client.post(url, headers=auth(alice.token), json=rekey(fresh.public_key))
    assert resp.status == 200, await resp.text()
    assert (await fresh.team_key(client, team.id)) == (new_key, 2)


async def test_removing_a_member_deletes_their_wraps_and_their_tokens(api, client, alice, team,
                                                                     database_url):
    bob = await keyed(api, client, "bob")
    await api.add_member(alice.user, team.id, bob.user, "Admin")
    await team.grant(alice, bob)
    token_string, _, _ = await team.token(bob)
    api_part, _ = crypto.split_token(token_string)
    resp = await client.get(f"/api/v1/teams/{team.id}/e2e/key", headers=auth(api_part))
    assert resp.status == 200
    resp = await client.delete(f"/api/v1/teams/{team.id}/members/{bob.id}",
                               headers=auth(alice.token))
    assert resp.status == 200
    rows = await query(database_url, """SELECT count(*) AS n FROM team_key_wraps w
                                         LEFT JOIN api_tokens t ON t.id = w.token_id
                                         WHERE w.user_id = %s OR t.user_id = %s""",
                       (bob.id, bob.id))
    assert rows[0]["n"] == 0
    await api.add_member(alice.user, team.id, bob.user, "Viewer")  # back in: no access
    assert (await client.get(f"/api/v1/teams/{team.id}/e2e/key",
                             headers=auth(bob.token))).status == 403


# --- re-key --------------------------------------------------------------------------------------

async def test_rekey_moves_every_holder_token_and_secret_to_the_new_key_in_one_request(
        api, client, alice, team):
    admin = await keyed(api, client, "admin_b")
    leaver = await keyed(api, client, "leaver_c")
    waiting = await keyed(api, client, "waiting_d")
    for user, role in ((admin, "Admin"), (leaver, "Member"), (waiting, "Viewer")):
        await api.add_member(alice.user, team.id, user.user, role)
    await team.grant(alice, admin)
    await team.grant(alice, leaver)
    values = {"A": "alpha", "B": "beta"}
    ids = {name: await team.create_secret(alice, name, value) for name, value in values.items()}
    token_string, token_private, token_json = await team.token(admin)
    resp = await client.delete(f"/api/v1/teams/{team.id}/members/{leaver.id}",
                               headers=auth(alice.token))
    assert resp.status == 200

    new_key = crypto.new_team_key()
    url = f"/api/v1/teams/{team.id}/e2e/rekey"

    def wraps(*members: Member, token: bool = True) -> list[dict]:
        out = [{"user_id": m.id, "wrapped_key": team.wrap_for(m.public_key, 2, new_key),
                "public_key": crypto._b64u(m.public_key),
                "auth": crypto.recipient_auth(new_key, team.id, 2, "user", m.id, m.public_key)}
               for m in members]
        if token:
            token_public = crypto.public_key(token_private)
            out.append({"token_id": token_json["id"],
                        "wrapped_key": team.wrap_for(token_public, 2, new_key),
                        "auth": crypto.recipient_auth(new_key, team.id, 2, "token", None,
                                                      token_public)})
        return out

    def resealed(version: int = 2, only: tuple[str, ...] = ("A", "B")) -> list[dict]:
        return [{"id": ids[name], "value": crypto.seal_value(
            values[name], new_key, 2, team_id=team.id, secret_id=ids[name], version=version,
            environment="production", name=name)} for name in only]

    link = crypto.make_link(new_key, team.key, team.id, 2)
    good = {"key_version": 2, "wraps": wraps(alice, admin), "secrets": resealed(), "link": link}
    refused = [
        (alice, {**good, "key_version": 3}, 409),
        (alice, {**good, "wraps": wraps(alice)}, 409),                        # admin missing
        (alice, {**good, "wraps": wraps(alice, admin, token=False)}, 409),    # token missing
        (alice, {**good, "wraps": wraps(alice, admin, leaver)}, 409),         # not a member
        (alice, {**good, "secrets": resealed(only=("A",))}, 409),             # B missing
        (alice, {**good, "secrets": resealed(version=3)}, 409),               # stale
        (alice, {**good, "secrets": [{"id": ids["A"], "value": "plain"}]}, 400),
        (alice, {**good, "link": "cvsm-link1.AA.AA"}, 400),                   # not a link
        (alice, {**good, "wraps": [{**good["wraps"][0], "auth": "x"}, *good["wraps"][1:]]}, 400),
        (alice, {**good, "wraps": [{**good["wraps"][0], "token_id": token_json["id"]},
                                   *good["wraps"][1:]]}, 400),        # two recipients in one
        (waiting, good, 403),                                                 # a Viewer
    ]
    for by, body, status in refused:
        resp = await client.post(url, headers=auth(by.token), json=body)
        assert resp.status == status, await resp.text()
    resp = await client.get(f"/api/v1/teams/{team.id}", headers=auth(alice.token))
    assert (await resp.json())["team"]["key_version"] == 1  # nothing moved

    # a member with a key pair but no access may be added by the re-key (a grant)
    body = {**good, "wraps": [*good["wraps"], *wraps(waiting, token=False)]}
    resp = await client.post(url, headers=auth(admin.token), json=body)
    assert resp.status == 200, await resp.text()
    assert await resp.json() == {"key_version": 2, "members": 3, "tokens": 1, "secrets": 2,
                                 "link": True}
    # format 2: the link and each recipient's auth are served back as they came
    body = await (await client.get(f"/api/v1/teams/{team.id}/e2e/key",
                                   headers=auth(waiting.token))).json()
    assert body["links"] == [{"key_version": 2, "link": link}]
    assert body["auth"] == crypto.recipient_auth(new_key, team.id, 2, "user", waiting.id,
                                                 waiting.public_key)
    assert (await (await client.get(f"/api/v1/teams/{team.id}/e2e/key?since=2",
                                    headers=auth(waiting.token))).json())["links"] == []

    for member in (alice, admin, waiting):
        key, version = await member.team_key(client, team.id)
        assert (key, version) == (new_key, 2)
    assert (await client.get(f"/api/v1/teams/{team.id}/e2e/key",
                             headers=auth(leaver.token))).status == 404  # not in the team
    # old versions stay under the old key, whose wraps the holders keep
    old_key, _ = await alice.team_key(client, team.id, key_version=1)
    assert old_key == team.key
    api_part, _ = crypto.split_token(token_string)
    body = await (await client.get(f"/api/v1/teams/{team.id}/e2e/key",
                                   headers=auth(api_part))).json()
    token_key = crypto.unwrap_team_key(body["wrapped_key"], team.id, 2, token_private)
    for name, value in values.items():
        resp = await client.get(f"/api/v1/teams/{team.id}/secrets/by-name/{name}",
                                headers=auth(api_part))
        read = await resp.json()
        assert read["secret"]["version"] == 2 and read["value"].startswith("cvsm-e2e1.2.")
        assert crypto.open_value(read["value"], token_key, team_id=team.id,
                                 environment="production", name=name) == value
    # a write sealed under the old key version is now stale
    resp = await client.put(f"/api/v1/teams/{team.id}/secrets/{ids['A']}",
                            headers=auth(alice.token),
                            json={"value": team.seal("x", secret_id=ids["A"], version=3,
                                                     name="A")})
    assert resp.status == 409
