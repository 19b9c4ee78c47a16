"""Share links: creation, the anonymous view (one view per call, atomically), list, revoke."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
from datetime import datetime, timedelta, timezone

import pytest

from conftest import MASTER_KEY, Api, query
from cvsm_server.crypto.sealing import Keyring

TOKEN_RE = re.compile(r"https://cvsm\.test/share/(shr_[A-Za-z0-9_-]{43})\Z")


async def create_share(client, api: Api, user: dict, team_id: str, secret_id: str, **body):
    return await client.post(f"/api/v1/teams/{team_id}/secrets/{secret_id}/shares",
                             headers=api.auth(user["token"]), json=body)


async def new_share(client, api: Api, user: dict, team_id: str, secret_id: str, **body) -> tuple[dict, str]:
    resp = await create_share(client, api, user, team_id, secret_id, **body)
    assert resp.status == 201, await resp.text()
    data = await resp.json()
    match = TOKEN_RE.match(data["url"])
    assert match, data["url"]
    return data["share"], match.group(1)


async def view(client, token: str, **headers: str):
    return await client.get(f"/api/v1/public/share/{token}", headers=headers)


async def warm_pool(client) -> None:
    """Open the pool's connections first, so concurrent requests really overlap in the database
    (a cold pool opens connections one by one, which serialises the requests by accident)."""
    responses = await asyncio.gather(*(view(client, "shr_warm_up") for _ in range(25)))
    assert {r.status for r in responses} == {404}


@pytest.fixture
async def secret_id(api: Api, owner, team_id) -> str:
    return await api.secret(owner, team_id, "DB_PASSWORD", "hunter2-original")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# --- creation ---------------------------------------------------------------------------------

async def test_create_share_returns_share_and_url_with_shr_token_and_defaults(client, api: Api, owner,
                                                                              team_id, secret_id):
    before = datetime.now(timezone.utc)
    resp = await create_share(client, api, owner, team_id, secret_id)
    assert resp.status == 201
    body = await resp.json()
    assert set(body) == {"share", "url"}
    token = TOKEN_RE.match(body["url"]).group(1)
    share = body["share"]
    assert set(share) == {"id", "secret_id", "max_views", "view_count", "expires_at", "revoked_at",
                          "created_at"}
    assert (share["secret_id"], share["max_views"], share["view_count"], share["revoked_at"]) == (
        secret_id, 1, 0, None)
    expires = parse_time(share["expires_at"])
    assert before + timedelta(hours=24) - timedelta(seconds=5) < expires
    assert expires < datetime.now(timezone.utc) + timedelta(hours=24, seconds=5)
    assert token not in json.dumps(share)


async def test_create_share_accepts_an_empty_body_and_explicit_limits(client, api: Api, owner, team_id,
                                                                      secret_id):
    resp = await client.post(f"/api/v1/teams/{team_id}/secrets/{secret_id}/shares",
                             headers=api.auth(owner["token"]))
    assert resp.status == 201
    share, _ = await new_share(client, api, owner, team_id, secret_id, max_views=10, ttl_hours=168)
    assert share["max_views"] == 10
    assert parse_time(share["expires_at"]) > datetime.now(timezone.utc) + timedelta(hours=167)


@pytest.mark.parametrize("body", [
    {"max_views": 0}, {"max_views": 11}, {"max_views": "3"}, {"max_views": True}, {"max_views": 2.5},
    {"ttl_hours": 0}, {"ttl_hours": 169}, {"ttl_hours": -1}, {"ttl_hours": "24"},
])
async def test_create_share_rejects_limits_out_of_range(client, api: Api, owner, team_id, secret_id,
                                                        database_url, body):
    resp = await create_share(client, api, owner, team_id, secret_id, **body)
    assert resp.status == 400
    assert list(await resp.json()) == ["error"]
    assert await query(database_url, "SELECT id FROM secret_shares") == []


async def test_create_share_rejects_malformed_json_with_400(client, api: Api, owner, team_id, secret_id):
    for data in (b"{not json", b"[1]", b"   "):
        resp = await client.post(f"/api/v1/teams/{team_id}/secrets/{secret_id}/shares", data=data,
                                 headers={**api.auth(owner["token"]), "Content-Type": "application/json"})
        assert resp.status == 400, data


async def test_create_share_needs_member_and_a_secret_of_this_team(client, api: Api, owner, team_id,
                                                                   secret_id):
    viewer = await api.register("viewer_user")
    await api.add_member(owner, team_id, viewer, "Viewer")
    assert (await create_share(client, api, viewer, team_id, secret_id)).status == 403
    stranger = await api.register("stranger")
    assert (await create_share(client, api, stranger, team_id, secret_id)).status == 404
    other_team = await api.team(stranger, "stranger-team")
    assert (await create_share(client, api, stranger, other_team, secret_id)).status == 404
    assert (await create_share(client, api, owner, team_id, "not-a-uuid")).status == 404
    member = await api.register("member_user")
    await api.add_member(owner, team_id, member, "Member")
    assert (await create_share(client, api, member, team_id, secret_id)).status == 201


async def test_share_token_is_stored_only_as_keyed_hash_and_value_only_encrypted(
        client, api: Api, owner, team_id, secret_id, database_url):
    share, token = await new_share(client, api, owner, team_id, secret_id)
    [row] = await query(database_url, "SELECT * FROM secret_shares")
    expected = Keyring(base64.b64decode(MASTER_KEY)).token_hash(token)
    assert bytes(row["token_hash"]) == expected
    assert bytes(row["token_hash"]) != hashlib.sha256(token.encode()).digest()
    dump = json.dumps({k: bytes(v).hex() if isinstance(v, memoryview) else str(v) for k, v in row.items()})
    assert token not in dump and token.encode().hex() not in dump
    assert b"hunter2" not in bytes(row["ciphertext"])


async def test_share_create_is_audited_without_token_or_value(client, api: Api, owner, team_id,
                                                              secret_id, database_url):
    share, token = await new_share(client, api, owner, team_id, secret_id, max_views=3, ttl_hours=2)
    [entry] = await query(database_url, "SELECT * FROM audit_logs WHERE action = 'share_create'")
    assert entry["resource_id"] == share["id"]
    assert entry["metadata"] == {"secret_id": secret_id, "name": "DB_PASSWORD", "max_views": 3,
                                 "ttl_hours": 2}
    dump = json.dumps(entry, default=str)
    assert token not in dump and token[4:] not in dump and "hunter2" not in dump


# --- viewing ----------------------------------------------------------------------------------

async def test_view_returns_the_value_as_it_was_when_shared(client, api: Api, owner, team_id, secret_id):
    share, token = await new_share(client, api, owner, team_id, secret_id, max_views=2)
    resp = await client.put(f"/api/v1/teams/{team_id}/secrets/{secret_id}",
                            headers=api.auth(owner["token"]), json={"value": "changed-later"})
    assert resp.status == 200
    resp = await view(client, token)
    assert resp.status == 200
    assert await resp.json() == {"secret_name": "DB_PASSWORD", "value": "hunter2-original",
                                 "view_count": 1, "max_views": 2, "expires_at": share["expires_at"],
                                 "e2e": False}


async def test_each_view_consumes_one_and_a_used_up_share_is_gone(client, api: Api, owner, team_id,
                                                                 secret_id, database_url):
    _, token = await new_share(client, api, owner, team_id, secret_id, max_views=3)
    counts = []
    for _ in range(3):
        resp = await view(client, token)
        assert resp.status == 200
        counts.append((await resp.json())["view_count"])
    assert counts == [1, 2, 3]
    resp = await view(client, token)
    assert resp.status == 410
    assert list(await resp.json()) == ["error"]
    [row] = await query(database_url, "SELECT view_count FROM secret_shares")
    assert row["view_count"] == 3


async def test_25_concurrent_views_of_a_one_view_share_give_exactly_one_value(
        client, api: Api, owner, team_id, secret_id, database_url):
    _, token = await new_share(client, api, owner, team_id, secret_id, max_views=1)
    await warm_pool(client)
    responses = await asyncio.gather(*(view(client, token) for _ in range(25)))
    statuses = sorted(r.status for r in responses)
    assert statuses == [200] + [410] * 24
    values = [(await r.json()).get("value") for r in responses]
    assert [v for v in values if v is not None] == ["hunter2-original"]
    [row] = await query(database_url, "SELECT view_count FROM secret_shares")
    assert row["view_count"] == 1
    assert len(await query(database_url, "SELECT id FROM audit_logs WHERE action = 'share_view'")) == 1


async def test_concurrent_views_never_exceed_max_views(client, api: Api, owner, team_id, secret_id):
    _, token = await new_share(client, api, owner, team_id, secret_id, max_views=4)
    await warm_pool(client)
    responses = await asyncio.gather(*(view(client, token) for _ in range(15)))
    ok = [await r.json() for r in responses if r.status == 200]
    assert len(ok) == 4
    assert sorted(body["view_count"] for body in ok) == [1, 2, 3, 4]
    assert sum(r.status == 410 for r in responses) == 11


@pytest.mark.parametrize("token", ["shr_" + "A" * 43, "shr_", "cvsm_" + "0" * 64, "anything",
                                   "shr_" + "x" * 300])
async def test_unknown_or_malformed_token_is_404(client, token):
    resp = await view(client, token)
    assert resp.status == 404
    assert list(await resp.json()) == ["error"]


async def test_expired_share_is_410(client, api: Api, owner, team_id, secret_id, database_url):
    share, token = await new_share(client, api, owner, team_id, secret_id, max_views=5)
    await query(database_url, "UPDATE secret_shares SET expires_at = now() - interval '1 second' "
                              "WHERE id = %s", (share["id"],))
    assert (await view(client, token)).status == 410
    [row] = await query(database_url, "SELECT view_count FROM secret_shares")
    assert row["view_count"] == 0


async def test_view_is_audited_with_ip_and_user_agent_and_no_value(client, api: Api, owner, team_id,
                                                                   secret_id):
    share, token = await new_share(client, api, owner, team_id, secret_id)
    resp = await view(client, token, **{"User-Agent": "share-viewer/1.0"})
    assert resp.status == 200
    resp = await client.get(f"/api/v1/teams/{team_id}/audit", headers=api.auth(owner["token"]))
    entry = next(e for e in (await resp.json())["logs"] if e["action"] == "share_view")
    assert entry["resource"] == "share" and entry["resource_id"] == share["id"]
    assert entry["ip_address"] == "127.0.0.1"
    assert entry["user_agent"] == "share-viewer/1.0"
    assert entry["user_email"] is None
    assert entry["metadata"]["secret_id"] == secret_id
    dump = json.dumps(entry)
    assert "hunter2" not in dump and token[4:] not in dump


async def test_failed_views_consume_nothing_and_write_no_audit(client, api: Api, owner, team_id,
                                                               secret_id, database_url):
    _, token = await new_share(client, api, owner, team_id, secret_id)
    assert (await view(client, token)).status == 200
    assert (await view(client, token)).status == 410
    assert (await view(client, "shr_unknown")).status == 404
    assert len(await query(database_url, "SELECT id FROM audit_logs WHERE action = 'share_view'")) == 1


# --- list and revoke --------------------------------------------------------------------------

async def test_list_shares_shows_state_without_tokens(client, api: Api, owner, team_id, secret_id):
    first, token1 = await new_share(client, api, owner, team_id, secret_id, max_views=2)
    second, token2 = await new_share(client, api, owner, team_id, secret_id)
    await view(client, token1)
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/{secret_id}/shares",
                            headers=api.auth(owner["token"]))
    assert resp.status == 200
    body = await resp.json()
    assert {s["id"]: s["view_count"] for s in body["shares"]} == {first["id"]: 1, second["id"]: 0}
    text = json.dumps(body)
    assert token1 not in text and token2 not in text and "hash" not in text


async def test_list_shares_needs_member_and_hides_other_teams(client, api: Api, owner, team_id, secret_id):
    viewer = await api.register("viewer_user")
    await api.add_member(owner, team_id, viewer, "Viewer")
    url = f"/api/v1/teams/{team_id}/secrets/{secret_id}/shares"
    assert (await client.get(url, headers=api.auth(viewer["token"]))).status == 403
    stranger = await api.register("stranger")
    assert (await client.get(url, headers=api.auth(stranger["token"]))).status == 404


async def test_revoked_share_is_410_and_revoke_is_audited(client, api: Api, owner, team_id, secret_id,
                                                          database_url):
    share, token = await new_share(client, api, owner, team_id, secret_id, max_views=3)
    url = f"/api/v1/teams/{team_id}/secrets/{secret_id}/shares/{share['id']}"
    resp = await client.delete(url, headers=api.auth(owner["token"]))
    assert resp.status == 200
    assert await resp.json() == {"ok": True}
    assert (await view(client, token)).status == 410
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/{secret_id}/shares",
                            headers=api.auth(owner["token"]))
    assert (await resp.json())["shares"][0]["revoked_at"] is not None
    [entry] = await query(database_url, "SELECT * FROM audit_logs WHERE action = 'share_revoke'")
    assert entry["resource_id"] == share["id"]


async def test_revoke_needs_member_and_the_share_of_this_secret(client, api: Api, owner, team_id,
                                                                secret_id):
    share, token = await new_share(client, api, owner, team_id, secret_id)
    other_secret = await api.secret(owner, team_id, "OTHER", "x")
    url = f"/api/v1/teams/{team_id}/secrets/{other_secret}/shares/{share['id']}"
    assert (await client.delete(url, headers=api.auth(owner["token"]))).status == 404
    url = f"/api/v1/teams/{team_id}/secrets/{secret_id}/shares/00000000-0000-0000-0000-000000000000"
    assert (await client.delete(url, headers=api.auth(owner["token"]))).status == 404
    viewer = await api.register("viewer_user")
    await api.add_member(owner, team_id, viewer, "Viewer")
    url = f"/api/v1/teams/{team_id}/secrets/{secret_id}/shares/{share['id']}"
    assert (await client.delete(url, headers=api.auth(viewer["token"]))).status == 403
    assert (await view(client, token)).status == 200


async def test_deleting_the_secret_revokes_its_shares(client, api: Api, owner, team_id, secret_id):
    _, token = await new_share(client, api, owner, team_id, secret_id, max_views=5)
    assert (await view(client, token)).status == 200
    resp = await client.delete(f"/api/v1/teams/{team_id}/secrets/{secret_id}", headers=api.auth(owner["token"]))
    assert resp.status == 200
    assert (await view(client, token)).status == 410


async def test_bulk_deleting_the_secret_revokes_its_shares(client, api: Api, owner, team_id, secret_id):
    _, token = await new_share(client, api, owner, team_id, secret_id, max_views=5)
    resp = await client.delete(f"/api/v1/teams/{team_id}/secrets/bulk", headers=api.auth(owner["token"]),
                               json={"ids": [secret_id]})
    assert await resp.json() == {"deleted": 1}
    assert (await view(client, token)).status == 410
