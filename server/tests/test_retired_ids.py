"""Retired ids (issue 36, item 1; migration 0019): an id that ever named a team or a secret never
names another, so nobody reaches a deleted team's audit chain or a deleted secret's entries by
choosing its id for an end-to-end team or secret."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg2
import pytest

from cvsm_server.audit import log as audit
from cvsm_server import db
from cvsm_server.accounts import deletion
from conftest import query, server_url
from e2e_client import E2ETeam, Member, auth, keyed


def sealed_item(team: E2ETeam, secret_id: str, name: str = "REUSED") -> dict[str, Any]:
    return {"id": secret_id, "name": name, "environment": "production",
            "value": team.seal("v", secret_id=secret_id, version=1, name=name)}


async def create_with_id(client: Any, member: Member, team_id: str) -> Any:
    from cvsm import e2e as crypto
    key = crypto.new_team_key()
    return await client.post("/api/v1/teams", headers=auth(member.token), json={
        "name": "Again", "slug": f"again-{uuid.uuid4().hex[:8]}", "id": team_id,
        "e2e": {"wrapped_key": crypto.wrap_team_key(key, team_id, 1, member.public_key)}})


async def test_a_deleted_teams_id_and_its_secrets_ids_are_never_given_again(api, client,
                                                                           database_url):
    alice, mallory = await keyed(api, client), await keyed(api, client)
    old = await E2ETeam.create(client, alice)
    secret_id = await old.create_secret(alice, "DB_URL", "postgres://old")
    resp = await client.delete(f"/api/v1/teams/{old.id}", headers=auth(alice.token))
    assert resp.status == 200, await resp.text()
    # alice's team's chain still holds its entries, keyed by its id
    assert (await query(database_url, "SELECT count(*) AS n FROM audit_logs a "
                        "JOIN audit_seals s USING (pos) WHERE s.chain_id = %s",
                        (old.id,)))[0]["n"] > 0
    retired = await query(database_url, "SELECT id, kind FROM retired_ids ORDER BY kind")
    assert {(str(r["id"]), r["kind"]) for r in retired} == {(old.id, "team"),
                                                           (secret_id, "secret")}

    taken = await create_with_id(client, mallory, old.id)
    assert taken.status == 409, await taken.text()
    assert (await taken.json())["error"] == "Id tim sudah digunakan"
    # a live team's id gets the very same answer (no oracle between in use and retired)
    mine = await E2ETeam.create(client, mallory)
    live = await create_with_id(client, mallory, mine.id)
    assert live.status == 409 and await live.json() == await taken.json()
    for path in ("audit/export", "audit/verify", "audit"):
        resp = await client.get(f"/api/v1/teams/{old.id}/{path}", headers=auth(mallory.token))
        assert resp.status == 404, (path, resp.status)
        assert "postgres" not in await resp.text()

    # the deleted secret's id: refused in a create and in a bulk create, as an id in use is
    resp = await client.post(f"/api/v1/teams/{mine.id}/secrets", headers=auth(mallory.token),
                             json=sealed_item(mine, secret_id))
    assert resp.status == 409
    message = (await resp.json())["error"]
    assert "id secret sudah dipakai" in message.lower()
    resp = await client.post(f"/api/v1/teams/{mine.id}/secrets/bulk",
                             headers=auth(mallory.token),
                             json={"items": [sealed_item(mine, secret_id)]})
    assert resp.status == 200
    result = (await resp.json())["results"][0]
    assert result["ok"] is False and result["error"] == message
    # the deleted team's id cannot name a secret either
    resp = await client.post(f"/api/v1/teams/{mine.id}/secrets", headers=auth(mallory.token),
                             json=sealed_item(mine, old.id))
    assert resp.status == 409
    # a fresh id still works
    fresh = str(uuid.uuid4())
    resp = await client.post(f"/api/v1/teams/{mine.id}/secrets", headers=auth(mallory.token),
                             json=sealed_item(mine, fresh))
    assert resp.status == 201, await resp.text()


async def test_every_delete_path_retires_and_the_database_refuses_a_retired_id(
        api, client, database_url, owner, team_id):
    """The account purge deletes an owner's teams (and their secrets) as the system: retired
    too. Any writer inserting a retired id is refused by the database itself."""
    secret_id = await api.secret(owner, team_id, "TOKEN", "t-1")
    await query(database_url, "UPDATE users SET delete_after = now() - interval '1 day' "
                "WHERE id = %s", (owner["id"],))
    pool = await db.create_pool(server_url(database_url), maxsize=2)  # the server's own role
    try:
        purged = await deletion.purge_due(pool, datetime.now(timezone.utc))
        assert uuid.UUID(owner["id"]) in purged
        rows = await query(database_url, "SELECT id, kind FROM retired_ids")
        assert {(str(r["id"]), r["kind"]) for r in rows} >= {(team_id, "team"),
                                                             (secret_id, "secret")}
        async with db.cursor(pool) as cur:
            with pytest.raises(psycopg2.errors.UniqueViolation, match="retired"):
                await cur.execute("INSERT INTO teams (id, slug, name) VALUES (%s, 'back', 'B')",
                                  (team_id,))
            # the server's role may add, never remove
            with pytest.raises(psycopg2.errors.InsufficientPrivilege):
                await cur.execute("DELETE FROM retired_ids")
    finally:
        pool.close()
        await pool.wait_closed()


async def test_the_migration_retires_ids_the_audit_log_keeps_without_their_team(fresh_database):
    """Teams and secrets deleted before 0019: their ids are in the chains and entries left."""
    url = fresh_database(empty=True)
    kept, gone, gone_secret, kept_secret = (uuid.uuid4() for _ in range(4))
    pool = await db.create_pool(url, maxsize=2)
    try:
        assert await db.migrate(pool, upto=18) == list(range(1, 19))
        async with db.cursor(pool) as cur:
            for team, slug in ((kept, "kept"), (gone, "gone")):
                await cur.execute("INSERT INTO teams (id, slug, name) VALUES (%s, %s, 'T')",
                                  (team, slug))
            await cur.execute("INSERT INTO secrets (id, team_id, name, environment, version, "
                              "key_id, nonce, ciphertext) VALUES (%s, %s, 'K', 'production', 1, "
                              "'k', '\\x00', '\\x00')", (kept_secret, kept))
            await audit.record(cur, None, "create", "secret", team_id=kept,
                               resource_id=kept_secret)
            await audit.record(cur, None, "create", "secret", team_id=gone,
                               resource_id=gone_secret)
            await audit.record(cur, None, "team_delete", "team", resource_id=gone)
            await cur.execute("SELECT cvsm_audit_seal(5000, true)")
            await cur.execute("DELETE FROM teams WHERE id = %s", (gone,))
        assert await db.migrate(pool) == [n for n, _, _ in db.migration_files() if n > 18]
    finally:
        pool.close()
        await pool.wait_closed()
    rows = await query(url, "SELECT id, kind FROM retired_ids")
    assert {(r["id"], r["kind"]) for r in rows} == {(gone, "team"), (gone_secret, "secret")}
