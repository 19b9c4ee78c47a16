"""Read insights on the real database: who read a secret (and through which token), the team's
secrets nobody read and tokens nobody used in 30 days, and environments side by side by digest."""

from __future__ import annotations

import uuid

import pytest

from conftest import MASTER_KEY, Api, query
from cvsm_server.audit import insights
from cvsm_server.core.actor import Actor, Scope
from cvsm_server.core.config import parse_master_key
from cvsm_server.crypto.sealing import Keyring
from cvsm_server.core.errors import Forbidden, NotFound


@pytest.fixture
def keyring():
    return Keyring(parse_master_key(MASTER_KEY))


def as_actor(user: dict, **kw) -> Actor:
    return Actor.anonymous("127.0.0.1").as_user(uuid.UUID(user["id"]), user["email"], **kw)


async def backdate(database_url: str, table: str, row_id: str, days: int) -> None:
    await query(database_url, f"UPDATE {table} SET created_at = now() - make_interval(days => %s) "
                              "WHERE id = %s", (days, row_id))


async def old_read(database_url: str, team_id: str, secret_id: str, days: int) -> None:
    await query(database_url, """INSERT INTO audit_logs (team_id, user_email, action, resource,
                                     resource_id, metadata, created_at)
                                 VALUES (%s, 'gone@example.com', 'read', 'secret', %s, '{}',
                                         now() - make_interval(days => %s))""",
                (team_id, secret_id, days))


async def read(client, api: Api, token: str, team_id: str, secret_id: str) -> None:
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/{secret_id}", headers=api.auth(token))
    assert resp.status == 200


async def test_secret_readers_lists_the_last_30_days_newest_first_with_the_token(
        client, api: Api, owner, team_id, pool, database_url):
    viewer = await api.register("vera")
    await api.add_member(owner, team_id, viewer, "Viewer")
    secret_id = await api.secret(owner, team_id, "DB_URL", "postgres://s3cret")
    other_id = await api.secret(owner, team_id, "OTHER", "x")
    await old_read(database_url, team_id, secret_id, 31)
    await read(client, api, viewer["token"], team_id, secret_id)
    token = (await api.api_token(owner, name="ci-runner"))["token"]
    await read(client, api, token, team_id, secret_id)
    await read(client, api, owner["token"], team_id, other_id)
    async with pool.acquire() as conn:
        readers = await insights.secret_readers(conn, as_actor(owner), uuid.UUID(team_id),
                                                uuid.UUID(secret_id))
        assert [(r["email"], r["via_token"]) for r in readers] == [
            (owner["email"], "ci-runner"), (viewer["email"], None)]
        assert readers[0]["at"] >= readers[1]["at"]
        with pytest.raises(Forbidden):
            await insights.secret_readers(conn, as_actor(viewer), uuid.UUID(team_id),
                                          uuid.UUID(secret_id))
        stranger = await api.register("stranger")
        with pytest.raises(NotFound):
            await insights.secret_readers(conn, as_actor(stranger), uuid.UUID(team_id),
                                          uuid.UUID(secret_id))


async def test_unread_secrets_are_the_old_ones_nobody_read_in_30_days(
        client, api: Api, owner, team_id, pool, database_url):
    stale = await api.secret(owner, team_id, "STALE", "1")
    never = await api.secret(owner, team_id, "NEVER", "2", environment="staging")
    fresh_read = await api.secret(owner, team_id, "READ_NOW", "3")
    await api.secret(owner, team_id, "NEW", "4")  # younger than the window: not stale
    for secret_id in (stale, never, fresh_read):
        await backdate(database_url, "secrets", secret_id, 60)
    await old_read(database_url, team_id, stale, 40)
    await old_read(database_url, team_id, fresh_read, 40)
    await read(client, api, owner["token"], team_id, fresh_read)
    async with pool.acquire() as conn:
        rows = await insights.unread_secrets(conn, as_actor(owner), uuid.UUID(team_id))
    assert [(r["name"], r["environment"], r["last_read_at"] is None) for r in rows] == [
        ("NEVER", "staging", True), ("STALE", "production", False)]


async def test_unused_tokens_are_those_that_reach_the_team_and_idled_30_days(
        client, api: Api, owner, team_id, pool, database_url):
    dina = await api.register("dina")
    await api.add_member(owner, team_id, dina, "Member")
    stranger = await api.register("stranger")
    other_team = await api.team(owner, "other")
    made = {}
    for name, user, body in [("idle-mine", owner, {}), ("idle-dina", dina, {}),
                             ("used", owner, {}), ("scoped-here", owner, {"team_id": team_id}),
                             ("scoped-other", owner, {"team_id": other_team}),
                             ("strangers", stranger, {}), ("young", owner, {})]:
        made[name] = await api.api_token(user, name=name, **body)
    for name in made:
        if name != "young":
            await backdate(database_url, "api_tokens", made[name]["api_token"]["id"], 60)
    await query(database_url, "UPDATE api_tokens SET last_used_at = now() - interval '40 days' "
                              "WHERE name = 'scoped-here'")
    await query(database_url, "UPDATE api_tokens SET last_used_at = now() WHERE name = 'used'")
    async with pool.acquire() as conn:
        rows = await insights.unused_tokens(conn, as_actor(owner), uuid.UUID(team_id))
        assert sorted((r["name"], r["owner_email"], r["mine"]) for r in rows) == [
            ("idle-dina", dina["email"], False), ("idle-mine", owner["email"], True),
            ("scoped-here", owner["email"], True)]
        with pytest.raises(Forbidden):
            await insights.unused_tokens(conn, as_actor(dina), uuid.UUID(team_id))


async def test_environments_side_by_side_show_missing_and_differing_by_digest_only(
        client, api: Api, owner, team_id, pool, keyring, database_url):
    await api.secret(owner, team_id, "SAME", "same-value", environment="production")
    await api.secret(owner, team_id, "SAME", "same-value", environment="staging")
    await api.secret(owner, team_id, "SAME", "dev-value", environment="development")
    await api.secret(owner, team_id, "ONLY_PROD", "p", environment="production")
    await api.secret(owner, team_id, "SPLIT", "a", environment="production")
    await api.secret(owner, team_id, "SPLIT", "b", environment="staging")
    team = uuid.UUID(team_id)
    async with pool.acquire() as conn:
        first = await insights.compare_environments(conn, as_actor(owner), keyring, team)
        second = await insights.compare_environments(conn, as_actor(owner), keyring, team)
    assert first.environments == ("production", "staging", "development")
    rows = {r.name: r for r in first.rows}
    assert list(rows) == ["ONLY_PROD", "SAME", "SPLIT"]
    same = rows["SAME"].cells
    assert same["production"].digest == same["staging"].digest != same["development"].digest
    assert rows["SAME"].differs and rows["SAME"].missing == []
    assert rows["ONLY_PROD"].missing == ["staging", "development"]
    assert not rows["ONLY_PROD"].differs
    assert rows["SPLIT"].differs and rows["SPLIT"].missing == ["development"]
    # The digest is keyed per call: it cannot be matched across calls or against a guess.
    again = {r.name: r for r in second.rows}["SAME"].cells
    assert again["production"].digest != same["production"].digest
    assert all(value not in repr(first) for value in ("same-value", "dev-value"))
    entries = await query(database_url, "SELECT metadata FROM audit_logs "
                                        "WHERE action = 'compare_environments'")
    assert len(entries) == 2
    assert entries[0]["metadata"] == {"environments": ["production", "staging", "development"],
                                      "names": 3, "differing": 2, "missing": 2}


async def test_environments_side_by_side_keep_to_a_tokens_scope_and_the_team(
        client, api: Api, owner, team_id, pool, keyring):
    await api.secret(owner, team_id, "A", "1", environment="production")
    await api.secret(owner, team_id, "A", "2", environment="development")
    scoped = as_actor(owner, via="api_token",
                      scope=Scope(environments=("development",), read_only=True))
    stranger = await api.register("stranger")
    async with pool.acquire() as conn:
        result = await insights.compare_environments(conn, scoped, keyring, uuid.UUID(team_id))
        assert result.environments == ("development",)
        assert [(r.name, list(r.cells)) for r in result.rows] == [("A", ["development"])]
        with pytest.raises(NotFound):
            await insights.compare_environments(conn, as_actor(stranger), keyring,
                                                uuid.UUID(team_id))
