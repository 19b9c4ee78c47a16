"""The domain layer on its own: functions called with an Actor and a connection, no aiohttp, on
the real (embedded) PostgreSQL."""

from __future__ import annotations

import pytest

from conftest import MASTER_KEY, JWT_SECRET, query
from cvsm_server.audit import log as audit
from cvsm_server.secrets import bulk
from cvsm_server.teams import roles
from cvsm_server.secrets import service as secrets
from cvsm_server.secrets import inputs as secret_inputs
from cvsm_server.accounts import sessions
from cvsm_server.teams import service as teams
from cvsm_server.accounts import users
from cvsm_server.core.actor import Actor
from cvsm_server.core.config import parse_master_key
from cvsm_server.crypto.sealing import Keyring
from cvsm_server.core.errors import BadRequest, Forbidden, NotFound
from cvsm_server.crypto.passwords import PasswordHasher

# Which modules are the domain, and that they load nothing of aiohttp or `web`: test_layering.


@pytest.fixture
def keyring():
    return Keyring(parse_master_key(MASTER_KEY))


async def make_user(pool, name: str, client: Actor) -> Actor:
    async with pool.acquire() as conn:
        user, _ = await users.register(conn, PasswordHasher(), sessions.JwtSigner(JWT_SECRET),
                                       email=f"{name}@example.com", username=name,
                                       password="correct horse 1", name=name.title())
    return client.as_user(user["id"], user["email"], via="jwt")


async def test_create_and_read_a_secret_records_the_actor_without_a_request(pool, keyring, database_url):
    client = Actor.anonymous("203.0.113.7", "deploy-script/1.0 " + "x" * 600)
    owner = await make_user(pool, "dina", client)
    async with pool.acquire() as conn:
        team = await teams.create_team(conn, owner, "Acme", "acme")
        item = secret_inputs.SecretInput.checked(name="DB_URL", value="postgres://s3cret",
                                           environment="production")
        row = await secrets.create_secret(conn, owner, keyring, team["id"], item)
        read, value = await secrets.read_secret(conn, owner, keyring, team["id"], row["id"])
    assert value == "postgres://s3cret" and read["name"] == "DB_URL"
    entries = await query(database_url, "SELECT action, ip_address, user_agent, user_email "
                                        "FROM audit_logs WHERE team_id = %s ORDER BY created_at",
                          (team["id"],))
    assert [e["action"] for e in entries] == ["team_create", "create", "read"]
    assert {e["ip_address"] for e in entries} == {"203.0.113.7"}
    assert {len(e["user_agent"]) for e in entries} == {512}  # cut once, in the Actor
    assert {e["user_email"] for e in entries} == {"dina@example.com"}
    assert "s3cret" not in repr(item)


async def test_viewer_cannot_create_and_stranger_sees_no_team(pool, keyring):
    client = Actor.anonymous("127.0.0.1")
    owner = await make_user(pool, "owner_a", client)
    viewer = await make_user(pool, "viewer_b", client)
    stranger = await make_user(pool, "stranger_c", client)
    async with pool.acquire() as conn:
        team = await teams.create_team(conn, owner, "Acme", "acme-2")
        await teams.add_member(conn, owner, team["id"], "viewer_b", roles.VIEWER)
        item = secret_inputs.SecretInput.checked(name="A", value="1", environment="staging")
        with pytest.raises(Forbidden):
            await secrets.create_secret(conn, viewer, keyring, team["id"], item)
        with pytest.raises(NotFound):
            await secrets.list_secrets(conn, stranger, team["id"])
        rows, total = await secrets.list_secrets(conn, viewer, team["id"])
    assert (rows, total) == ([], 0)


@pytest.mark.parametrize("field, value", [("name", "1BAD"), ("name", "has-dash"),
                                          ("environment", "prod"), ("type", "ssh_key"),
                                          ("value", "x" * 65537)])
def test_one_secret_input_rule_for_create_and_bulk(field, value):
    fields = {"name": "OK", "value": "v", "environment": "production", "type": "credential"}
    fields[field] = value
    with pytest.raises(BadRequest) as single:
        secret_inputs.SecretInput.checked(**fields)
    with pytest.raises(BadRequest) as item:
        bulk.item_input(fields)
    assert single.value.message == item.value.message


async def test_audit_listing_is_admin_only_in_the_domain(pool):
    client = Actor.anonymous("127.0.0.1")
    owner = await make_user(pool, "owner_d", client)
    member = await make_user(pool, "member_e", client)
    async with pool.acquire() as conn:
        team = await teams.create_team(conn, owner, "Acme", "acme-3")
        await teams.add_member(conn, owner, team["id"], "member_e", roles.MEMBER)
        with pytest.raises(Forbidden):
            await audit.list_entries(conn, member, team["id"])
        rows, total = await audit.list_entries(conn, owner, team["id"])
    assert total == 2 and [r["action"] for r in rows] == ["member_add", "team_create"]
