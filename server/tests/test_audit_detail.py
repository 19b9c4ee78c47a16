"""Audit entries say who did what to which (the member and role, the token's name, "via token"),
and the list narrows by action, person, secret and time range."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from conftest import Api, query
from cvsm_server.audit import log as audit
from cvsm_server.core.actor import Actor
from cvsm_server.core.errors import BadRequest

from test_invites import accept, invited


async def entries(database_url: str, action: str) -> list[dict]:
    return await query(database_url, "SELECT user_email, resource_id, metadata FROM audit_logs "
                                     "WHERE action = %s ORDER BY pos", (action,))


async def test_member_update_and_remove_name_the_member_and_both_roles(client, api: Api, owner,
                                                                       team_id, database_url):
    dina = await api.register("dina")
    await api.add_member(owner, team_id, dina, "Viewer")
    resp = await client.patch(f"/api/v1/teams/{team_id}/members/{dina['id']}",
                              headers=api.auth(owner["token"]), json={"role": "Member"})
    assert resp.status == 200, await resp.text()
    resp = await client.delete(f"/api/v1/teams/{team_id}/members/{dina['id']}",
                               headers=api.auth(owner["token"]))
    assert resp.status in (200, 204), await resp.text()
    [added] = await entries(database_url, "member_add")
    [updated] = await entries(database_url, "member_update")
    [removed] = await entries(database_url, "member_remove")
    assert added["metadata"] == {"email": "dina@example.com", "role": "Viewer"}
    assert updated["metadata"] == {"email": "dina@example.com", "from": "Viewer", "to": "Member"}
    assert updated["resource_id"] == dina["id"]
    assert removed["metadata"] == {"email": "dina@example.com", "role": "Member"}


async def test_invite_accepted_names_the_member_and_role(mail_client, mailbox, database_url):
    api = Api(mail_client)
    owner = await api.register("owner_user")
    team_id = await api.team(owner, "acme")
    _, token = await invited(mail_client, mailbox, owner, team_id, "rani@example.com", "Viewer")
    rani = await api.register("rani", email="rani@example.com")
    assert (await accept(mail_client, rani, token)).status == 200
    [created] = await entries(database_url, "invite_created")
    [accepted] = await entries(database_url, "invite_accepted")
    assert created["metadata"] == {"email": "rani@example.com", "role": "Viewer"}
    assert accepted["metadata"] == {"email": "rani@example.com", "role": "Viewer"}


async def test_token_revoke_names_the_token(client, api: Api, owner, database_url):
    created = await api.api_token(owner, name="deploy-bot")
    resp = await client.delete(f"/api/v1/tokens/{created['api_token']['id']}",
                               headers=api.auth(owner["token"]))
    assert resp.status in (200, 204)
    [revoked] = await entries(database_url, "token_revoke")
    assert revoked["metadata"]["name"] == "deploy-bot"
    assert revoked["metadata"]["token_prefix"] == created["api_token"]["token_prefix"]


async def test_reads_and_writes_with_a_token_record_which_token(client, api: Api, owner, team_id,
                                                              database_url):
    secret_id = await api.secret(owner, team_id, "DB_URL", "postgres://s3cret")
    created = await api.api_token(owner, name="ci-runner")
    token, token_id = created["token"], created["api_token"]["id"]
    by_token = await client.get(f"/api/v1/teams/{team_id}/secrets/{secret_id}",
                                headers=api.auth(token))
    assert by_token.status == 200
    by_session = await client.get(f"/api/v1/teams/{team_id}/secrets/{secret_id}",
                                  headers=api.auth(owner["token"]))
    assert by_session.status == 200
    named = await client.get(f"/api/v1/teams/{team_id}/secrets/by-name/DB_URL",
                             headers=api.auth(token))
    reads = await entries(database_url, "read")
    assert reads[0]["metadata"] == {"name": "DB_URL", "environment": "production",
                                    "via_token": "ci-runner", "token_id": token_id}
    assert reads[1]["metadata"] == {"name": "DB_URL", "environment": "production"}
    assert named.status == 200
    assert reads[2]["metadata"]["via_token"] == "ci-runner"
    await api.secret({"token": token}, team_id, "API_KEY", "k")
    [_, made] = await entries(database_url, "create")
    assert made["metadata"]["via_token"] == "ci-runner"
    assert made["metadata"]["token_id"] == token_id


async def test_audit_list_filters_by_action_person_secret_and_time(client, api: Api, owner,
                                                                   team_id, pool, database_url):
    dina = await api.register("dina")
    await api.add_member(owner, team_id, dina, "Member")
    db_url = await api.secret(owner, team_id, "DB_URL", "one")
    await api.secret(dina, team_id, "API_KEY", "two")
    for user in (owner, dina):
        resp = await client.get(f"/api/v1/teams/{team_id}/secrets/{db_url}",
                                headers=api.auth(user["token"]))
        assert resp.status == 200
    actor = Actor.anonymous("127.0.0.1").as_user(uuid.UUID(owner["id"]), owner["email"])
    team = uuid.UUID(team_id)

    async def listed(**params: str) -> list[tuple[str, str]]:
        async with pool.acquire() as conn:
            rows, total = await audit.list_entries(conn, actor, team,
                                                   filters=audit.Filters.parse(params))
        assert total == len(rows)
        return [(r["action"], r["user_email"]) for r in reversed(rows)]

    assert await listed(action="read") == [("read", owner["email"]), ("read", dina["email"])]
    assert await listed(person="DINA@example.com") == [("create", dina["email"]),
                                                       ("read", dina["email"])]
    assert await listed(secret="DB_URL") == [("create", owner["email"]), ("read", owner["email"]),
                                             ("read", dina["email"])]
    assert await listed(secret=db_url, person=dina["email"]) == [("read", dina["email"])]
    assert await listed(action="read", secret="API_KEY") == []
    # reads found by the name of each secret it named, deleted ones too (migration 0040: reads
    # are in neither the action index nor the name index)
    staging = await api.secret(dina, team_id, "DB_URL", "three", environment="staging")
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/{staging}",
                            headers=api.auth(dina["token"]))
    assert resp.status == 200
    resp = await client.delete(f"/api/v1/teams/{team_id}/secrets/{staging}",
                               headers=api.auth(owner["token"]))
    assert resp.status in (200, 204)
    assert await listed(secret="DB_URL") == [
        ("create", owner["email"]), ("read", owner["email"]), ("read", dina["email"]),
        ("create", dina["email"]), ("read", dina["email"]), ("delete", owner["email"])]
    assert await listed(secret="DB_URL", action="read") == [
        ("read", owner["email"]), ("read", dina["email"]), ("read", dina["email"])]
    assert await listed(secret=staging) == [("create", dina["email"]), ("read", dina["email"]),
                                            ("delete", owner["email"])]
    assert await listed(action="create") == [("create", owner["email"]), ("create", dina["email"]),
                                             ("create", dina["email"])]
    future = (datetime.now(timezone.utc) + timedelta(days=1)).isoformat()
    assert await listed(**{"from": future}) == []
    everything = await listed()
    assert len(everything) > 4 and everything == await listed(to=future)
    assert audit.Filters.parse({"action": "read", "from": "2026-01-01T00:00:00Z", "x": "y"}
                               ).as_query() == {"action": "read",
                                                "from": "2026-01-01T00:00:00Z"}


@pytest.mark.parametrize("params", [{"action": "read; drop"}, {"person": "a b"},
                                    {"secret": "x" * 300}, {"from": "yesterday"},
                                    {"from": "2026-02-01", "to": "2026-01-01"}])
def test_audit_filters_refuse_malformed_values_with_a_message(params):
    with pytest.raises(BadRequest) as refused:
        audit.Filters.parse(params)
    assert refused.value.args[0]
