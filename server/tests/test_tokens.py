"""API access tokens: format, storage, expiry, revocation, prefix locks, IP allowlists, client IP,
and lock state shared with a second server process."""

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from conftest import Api, query
from test_credentials import second_process


def secrets_url(team_id):
    return f"/api/v1/teams/{team_id}/secrets"


async def test_create_returns_full_token_once_and_lists_only_the_prefix(client, api: Api, owner, database_url):
    created = await api.api_token(owner, name="deploy")
    token = created["token"]
    assert token.startswith("cvsm_") and len(token) == 69
    assert all(c in "0123456789abcdef" for c in token[5:])
    assert created["api_token"]["token_prefix"] == token[:13]
    listing = await client.get("/api/v1/tokens", headers=api.auth(owner["token"]))
    text = await listing.text()
    assert token not in text and token[13:] not in text
    tokens = (await listing.json())["tokens"]
    assert [t["name"] for t in tokens] == ["deploy"]
    assert "token" not in tokens[0] and "token_hash" not in tokens[0]
    rows = await query(database_url, "SELECT t::text AS row FROM api_tokens t")
    assert token[5:] not in rows[0]["row"]  # only a keyed hash is stored


async def test_token_acts_as_its_user_in_that_users_teams(client, api: Api, owner, team_id):
    token = (await api.api_token(owner))["token"]
    await api.secret(owner, team_id, "VIA_TOKEN", "v")
    resp = await client.get(secrets_url(team_id), headers=api.auth(token))
    assert resp.status == 200 and (await resp.json())["total"] == 1
    stranger = await api.register()
    stranger_token = (await api.api_token(stranger))["token"]
    assert (await client.get(secrets_url(team_id), headers=api.auth(stranger_token))).status == 404


async def test_revoked_token_gets_401(client, api: Api, owner, team_id):
    created = await api.api_token(owner)
    h = api.auth(created["token"])
    assert (await client.get(secrets_url(team_id), headers=h)).status == 200
    resp = await client.delete(f"/api/v1/tokens/{created['api_token']['id']}", headers=api.auth(owner["token"]))
    assert resp.status == 200
    assert (await client.get(secrets_url(team_id), headers=h)).status == 401
    again = await client.delete(f"/api/v1/tokens/{created['api_token']['id']}", headers=api.auth(owner["token"]))
    assert again.status == 404


async def test_cannot_revoke_another_users_token(client, api: Api, owner):
    other = await api.register()
    created = await api.api_token(other)
    resp = await client.delete(f"/api/v1/tokens/{created['api_token']['id']}", headers=api.auth(owner["token"]))
    assert resp.status == 404
    assert (await client.get("/api/v1/me", headers=api.auth(created["token"]))).status == 200


async def test_expired_token_gets_401(client, api: Api, owner, database_url):
    created = await api.api_token(owner)
    await query(database_url, "UPDATE api_tokens SET expires_at = now() - interval '1 second'")
    assert (await client.get("/api/v1/me", headers=api.auth(created["token"]))).status == 401


async def test_expires_at_must_be_a_future_iso_timestamp(client, api: Api, owner):
    h = api.auth(owner["token"])
    past = (datetime.now(timezone.utc) - timedelta(minutes=1)).isoformat()
    future = (datetime.now(timezone.utc) + timedelta(days=1)).isoformat()
    assert (await client.post("/api/v1/tokens", headers=h, json={"name": "x", "expires_at": past})).status == 400
    assert (await client.post("/api/v1/tokens", headers=h, json={"name": "x", "expires_at": "tomorrow"})).status == 400
    ok = await client.post("/api/v1/tokens", headers=h, json={"name": "x", "expires_at": future})
    assert ok.status == 201 and (await ok.json())["api_token"]["expires_at"] is not None
    assert (await client.post("/api/v1/tokens", headers=h, json={"name": ""})).status == 400
    assert (await client.post("/api/v1/tokens", headers=h, json={"name": "x", "allowed_ips": ["nope"]})).status == 400
    assert (await client.post("/api/v1/tokens", headers=h, json={"name": "x", "allowed_ips": "1.2.3.4"})).status == 400


async def test_malformed_tokens_never_reach_storage_or_count_as_failures(client, api: Api, owner, database_url):
    for bad in ("cvsm_" + "G" * 64, "cvsm_" + "A" * 64, "cvsm_" + "0" * 63, "cvsm_" + "0" * 65):
        assert (await client.get("/api/v1/me", headers=api.auth(bad))).status == 401
    assert await query(database_url, "SELECT * FROM token_prefix_failures") == []


def wrong_token_like(token: str, n: int) -> str:
    """A well-formed token with the same prefix as `token` but a different tail."""
    tail = format(n, "x").rjust(8, "0")
    return token[:13] + tail + ("0" if token[21] != "0" else "1") * (69 - 21)


async def test_eleven_wrong_tokens_lock_the_prefix_even_for_the_right_token(client, api: Api, owner):
    token = (await api.api_token(owner))["token"]
    statuses = [(await client.get("/api/v1/me", headers=api.auth(wrong_token_like(token, i)))).status
                for i in range(11)]
    assert statuses[:10] == [401] * 10
    assert statuses[10] == 429
    resp = await client.get("/api/v1/me", headers=api.auth(token))
    assert resp.status == 429
    retry_after = int(resp.headers["Retry-After"])
    assert 1 <= retry_after <= 300
    # another prefix is unaffected
    other = (await api.api_token(owner))["token"]
    assert (await client.get("/api/v1/me", headers=api.auth(other))).status == 200


async def test_lock_expires_after_its_window(client, api: Api, owner, database_url):
    token = (await api.api_token(owner))["token"]
    for i in range(10):
        await client.get("/api/v1/me", headers=api.auth(wrong_token_like(token, i)))
    assert (await client.get("/api/v1/me", headers=api.auth(token))).status == 429
    await query(database_url, "UPDATE token_prefix_locks SET locked_until = now() - interval '1 second'")
    assert (await client.get("/api/v1/me", headers=api.auth(token))).status == 200


async def test_fifty_concurrent_wrong_lookups_are_all_counted(client, api: Api, owner, database_url):
    token = (await api.api_token(owner))["token"]
    await query(database_url, "CREATE TABLE seen_failures (n integer)")
    await query(database_url, "GRANT INSERT ON seen_failures TO cvsm_app")  # the server's role
    await query(database_url, """
        CREATE FUNCTION count_failure() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN INSERT INTO seen_failures VALUES (1); RETURN NEW; END $$;
        CREATE TRIGGER count_failure AFTER INSERT ON token_prefix_failures
            FOR EACH ROW EXECUTE FUNCTION count_failure();""")
    responses = await asyncio.gather(*[
        client.get("/api/v1/me", headers=api.auth(wrong_token_like(token, i))) for i in range(50)])
    statuses = [r.status for r in responses]
    # Every lookup that reached storage was counted; the tenth locked the prefix, and requests
    # arriving after the lock were refused before any lookup.
    counted = (await query(database_url, "SELECT count(*) AS n FROM seen_failures"))[0]["n"]
    assert statuses.count(401) == counted
    assert counted >= 10
    assert statuses.count(429) == 50 - counted
    assert (await client.get("/api/v1/me", headers=api.auth(token))).status == 429


async def test_allowlist_accepts_cidrs_and_single_addresses(make_settings, start_client):
    client = await start_client(make_settings(trusted_proxies="127.0.0.1"))
    api = Api(client)
    user = await api.register()
    token = (await api.api_token(user, allowed_ips=["203.0.113.0/24", "2001:db8::1", "198.51.100.7"]))["token"]

    async def status(ip):
        resp = await client.get("/api/v1/me", headers={**api.auth(token), "X-Forwarded-For": ip})
        return resp.status

    assert await status("203.0.113.200") == 200
    assert await status("2001:db8::1") == 200
    assert await status("198.51.100.7") == 200
    assert await status("::ffff:198.51.100.7") == 200  # IPv4-mapped IPv6 counts as its IPv4 form
    assert await status("198.51.100.8") == 403


async def test_five_allowlist_misses_from_several_addresses_lock_the_token_for_an_hour(make_settings, start_client,
                                                                                       database_url):
    client = await start_client(make_settings(trusted_proxies="127.0.0.1/32"))
    api = Api(client)
    user = await api.register()
    token = (await api.api_token(user, allowed_ips=["10.0.0.1"]))["token"]
    for i in range(4):
        resp = await client.get("/api/v1/me", headers={**api.auth(token), "X-Forwarded-For": f"192.0.2.{i + 1}"})
        assert resp.status == 403
    row = (await query(database_url, "SELECT failed_auth_count, locked_until FROM api_tokens"))[0]
    assert row["failed_auth_count"] == 4 and row["locked_until"] is None
    resp = await client.get("/api/v1/me", headers={**api.auth(token), "X-Forwarded-For": "192.0.2.9"})
    assert resp.status == 403
    row = (await query(database_url, "SELECT failed_auth_count, locked_until, now() AS now FROM api_tokens"))[0]
    assert row["failed_auth_count"] == 0
    assert timedelta(minutes=59) < row["locked_until"] - row["now"] <= timedelta(hours=1)
    # locked: even the allowed address gets 401 until then
    resp = await client.get("/api/v1/me", headers={**api.auth(token), "X-Forwarded-For": "10.0.0.1"})
    assert resp.status == 401


async def test_concurrent_allowlist_misses_are_all_counted(make_settings, start_client, database_url):
    client = await start_client(make_settings())
    api = Api(client)
    user = await api.register()
    token = (await api.api_token(user, allowed_ips=["10.0.0.1"]))["token"]
    responses = await asyncio.gather(*[client.get("/api/v1/me", headers=api.auth(token)) for _ in range(4)])
    assert [r.status for r in responses] == [403] * 4
    row = (await query(database_url, "SELECT failed_auth_count FROM api_tokens"))[0]
    assert row["failed_auth_count"] == 4


async def test_forwarded_for_is_ignored_from_an_untrusted_peer(client, api: Api, owner):
    token = (await api.api_token(owner, allowed_ips=["203.0.113.5"]))["token"]
    resp = await client.get("/api/v1/me", headers={**api.auth(token), "X-Forwarded-For": "203.0.113.5"})
    assert resp.status == 403  # the peer 127.0.0.1 is not a trusted proxy: the header is ignored


async def test_rightmost_untrusted_hop_is_the_client(make_settings, start_client, database_url):
    client = await start_client(make_settings(trusted_proxies="127.0.0.1,10.0.0.0/8"))
    api = Api(client)
    user = await api.register()
    team = await api.team(user)
    sid = await api.secret(user, team, "S", "v")
    await client.get(f"/api/v1/teams/{team}/secrets/{sid}",
                     headers={**api.auth(user["token"]), "X-Forwarded-For": "6.6.6.6, 198.51.100.9, 10.1.2.3"})
    row = (await query(database_url, "SELECT ip_address FROM audit_logs WHERE action = 'read'"))[0]
    assert row["ip_address"] == "198.51.100.9"


async def test_token_records_last_ip_and_user_agent(make_settings, start_client):
    client = await start_client(make_settings(trusted_proxies="127.0.0.1"))
    api = Api(client)
    user = await api.register()
    token = (await api.api_token(user))["token"]
    await client.get("/api/v1/me", headers={**api.auth(token), "User-Agent": "deploy-bot/2",
                                            "X-Forwarded-For": "198.51.100.20"})
    listed = (await (await client.get("/api/v1/tokens", headers=api.auth(user["token"]))).json())["tokens"][0]
    assert listed["last_ip"] == "198.51.100.20" and listed["last_user_agent"] == "deploy-bot/2"


async def test_prefix_lock_holds_on_a_second_server_process(client, api: Api, owner, database_url, tmp_path):
    """Ten failures on this process, then the right token on another process sharing the database."""
    token = (await api.api_token(owner))["token"]
    async with second_process(database_url, tmp_path, "off") as (session, base):
        async with session.get(f"{base}/me", headers=api.auth(token)) as resp:
            assert resp.status == 200
        for i in range(10):
            await client.get("/api/v1/me", headers=api.auth(wrong_token_like(token, i)))
        async with session.get(f"{base}/me", headers=api.auth(token)) as resp:
            assert resp.status == 429
            assert int(resp.headers["Retry-After"]) >= 1


@pytest.mark.parametrize("header", ["Token abc", "Bearer", "Basic dXNlcjpwYXNz", ""])
async def test_missing_or_wrong_scheme_is_401(client, header):
    resp = await client.get("/api/v1/me", headers={"Authorization": header} if header else {})
    assert resp.status == 401
