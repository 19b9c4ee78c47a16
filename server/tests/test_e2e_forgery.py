"""Issue 37's attacks on end-to-end teams, made by whoever writes the server's database: each test
edits the real embedded PostgreSQL as its superuser (`query` on `database_url`), as an operator
would, and each ends in a client's refusal (docs/e2e.md, "Format 2"), never a forged value:

- a token's wrap replaced by a wrap of the operator's key to the token's real public key, values
  sealed under that key (with or without made-up links): the Python SDK's DecryptionError;
- a forged export (a `NODE_OPTIONS` that would run the operator's code) never reaches a program:
  `inject` sets nothing;
- a member's wrap replaced the same way: the member's client refuses it against its anchor;
- a member's public key swapped in the database: the fingerprint the member's own client computes
  differs from the one the Admin is shown (the out-of-band check before a grant), and a re-key
  refuses to wrap to the swapped key;
- a recipient injected by the operator (a token row with the operator's key, with a made-up or a
  copied auth): a re-key refuses it and sends nothing.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

import cvsm
from conftest import query
from cvsm import e2e as crypto
from cvsm_server.e2e.syntax import fingerprint
from e2e_client import alice, team  # noqa: F401 (fixtures)
from e2e_client import E2ETeam, Member, auth, keyed

VALUE = "postgres://app:asli@db.internal/app"


def sdk(client: Any, token: str, team: E2ETeam) -> cvsm.AsyncClient:
    return cvsm.AsyncClient(token=token, base_url=str(client.make_url("/api/v1")), team=team.id,
                            environment="production", cache_ttl=0)


async def operator_reseals(database_url: str, team: E2ETeam, key: bytes, key_version: int,
                           values: dict[str, str]) -> None:
    """Seal `values` (name -> value) under the operator's `key` over the live secrets of those
    names (adding none: a secret of another name is made through the API first)."""
    rows = await query(database_url, "SELECT id, name, environment, version FROM secrets "
                                     "WHERE team_id = %s AND deleted_at IS NULL", (team.id,))
    for row in rows:
        if row["name"] in values:
            envelope = crypto.seal_value(values[row["name"]], key, key_version, team_id=team.id,
                                         secret_id=str(row["id"]), version=row["version"],
                                         environment=row["environment"], name=row["name"])
            await query(database_url, "UPDATE secrets SET envelope = %s WHERE id = %s",
                        (envelope, row["id"]))


async def operator_wraps(database_url: str, team: E2ETeam, key: bytes, key_version: int,
                         public_key: bytes, *, token_id: str | None = None,
                         user_id: str | None = None) -> None:
    """Replace one recipient's wrap of `key_version` by a wrap of the operator's `key` to the
    recipient's real public key, with an auth the operator makes with its own key."""
    wrapped = crypto.wrap_team_key(key, team.id, key_version, public_key)
    made_up = crypto.recipient_auth(key, team.id, key_version, "user" if user_id else "token",
                                    user_id, public_key)
    column, recipient = ("token_id", token_id) if token_id else ("user_id", user_id)
    await query(database_url,
                f"UPDATE team_key_wraps SET wrapped_key = %s, auth = %s "
                f"WHERE team_id = %s AND key_version = %s AND {column} = %s",
                (wrapped, made_up, team.id, key_version, recipient))


async def test_a_token_wrap_of_the_operators_key_is_refused_by_the_sdk(client, alice, team,
                                                                       database_url):
    await team.create_secret(alice, "DATABASE_URL", VALUE)
    token, token_private, _ = await team.token(alice)
    token_id = (await query(database_url, "SELECT id FROM api_tokens WHERE team_id = %s",
                            (team.id,)))[0]["id"]
    async with sdk(client, token, team) as honest:
        assert await honest.get("DATABASE_URL") == VALUE
    operators = crypto.new_team_key()
    await operator_wraps(database_url, team, operators, 1, crypto.public_key(token_private),
                         token_id=str(token_id))
    await operator_reseals(database_url, team, operators, 1, {"DATABASE_URL": "postgres://op"})
    async with sdk(client, token, team) as reader:
        with pytest.raises(cvsm.DecryptionError, match="pinned commitment") as caught:
            await reader.get("DATABASE_URL")
        assert "postgres://op" not in str(caught.value)
    # the same key served as a newer version, with a link the operator made to a key of its own
    await query(database_url, "UPDATE teams SET key_version = 2 WHERE id = %s", (team.id,))
    await query(database_url, "UPDATE team_key_wraps SET key_version = 2 WHERE token_id = %s",
                (token_id,))
    await operator_wraps(database_url, team, operators, 2, crypto.public_key(token_private),
                         token_id=str(token_id))
    await query(database_url,
                "INSERT INTO team_key_links (team_id, key_version, link) VALUES (%s, 2, %s)",
                (team.id, crypto.make_link(operators, crypto.new_team_key(), team.id, 2)))
    await operator_reseals(database_url, team, operators, 2, {"DATABASE_URL": "postgres://op"})
    async with sdk(client, token, team) as reader:
        with pytest.raises(cvsm.DecryptionError, match="pinned commitment"):
            await reader.get("DATABASE_URL")
    # and without any link
    await query(database_url, "DELETE FROM team_key_links WHERE team_id = %s", (team.id,))
    async with sdk(client, token, team) as reader:
        with pytest.raises(cvsm.DecryptionError, match="link of key version 2 is missing"):
            await reader.get_all()


async def test_a_forged_export_never_reaches_a_program(client, alice, team, database_url,
                                                      monkeypatch):
    await team.create_secret(alice, "DATABASE_URL", VALUE)
    await team.create_secret(alice, "NODE_OPTIONS", "--max-old-space-size=256")
    token, token_private, token_json = await team.token(alice)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("NODE_OPTIONS", raising=False)
    operators = crypto.new_team_key()
    await operator_wraps(database_url, team, operators, 1, crypto.public_key(token_private),
                         token_id=token_json["id"])
    hostile = "--import=data:text/javascript,process.stdout.write('dikuasai operator')"
    await operator_reseals(database_url, team, operators, 1,
                           {"DATABASE_URL": "postgres://op", "NODE_OPTIONS": hostile})
    async with sdk(client, token, team) as reader:
        with pytest.raises(cvsm.DecryptionError):
            await reader.get_all()
        with pytest.raises(cvsm.DecryptionError) as caught:
            await reader.inject()
    assert "NODE_OPTIONS" not in os.environ and "DATABASE_URL" not in os.environ
    assert hostile not in str(caught.value)


async def test_a_members_wrap_of_the_operators_key_is_refused_by_the_members_client(
        api, client, alice, team, database_url):
    bob = await keyed(api, client, "bob")
    await api.add_member(alice.user, team.id, bob.user, "Member")
    await team.grant(alice, bob)
    assert await bob.open_team(client, team.id) == (team.key, 1)  # first open: anchor stored
    first_anchor = (await query(database_url, "SELECT anchor FROM team_e2e_anchors "
                                              "WHERE user_id = %s", (bob.id,)))[0]["anchor"]
    await team.rekey(alice)
    assert await bob.open_team(client, team.id) == (team.key, 2)  # walks to his anchor: moves
    operators = crypto.new_team_key()
    for member in (alice, bob):
        await operator_wraps(database_url, team, operators, 2, member.public_key,
                             user_id=member.id)
        with pytest.raises(crypto.E2EError, match="pinned commitment"):
            await member.open_team(client, team.id)
    # bob's older anchor served again (the operator kept a copy), with a link the operator made
    # from its key to one of its own: the chain still has to reach bob's version 1
    await query(database_url, "UPDATE team_e2e_anchors SET anchor = %s WHERE user_id = %s",
                (first_anchor, bob.id))
    await query(database_url, "UPDATE team_key_links SET link = %s WHERE team_id = %s",
                (crypto.make_link(operators, crypto.new_team_key(), team.id, 2), team.id))
    with pytest.raises(crypto.E2EError, match="pinned commitment"):
        await bob.open_team(client, team.id)


async def test_a_public_key_swapped_before_a_grant_shows_two_fingerprints(api, client, alice,
                                                                          team, database_url):
    bob = await keyed(api, client, "bob")
    await api.add_member(alice.user, team.id, bob.user, "Member")
    _, attackers = crypto.generate_key_pair()
    await query(database_url, "UPDATE user_e2e_keys SET public_key = %s WHERE user_id = %s",
                (attackers, bob.id))
    listing = await (await client.get(f"/api/v1/teams/{team.id}/e2e/members",
                                      headers=auth(alice.token))).json()
    shown_to_admin = next(m["fingerprint"] for m in listing["members"] if m["user_id"] == bob.id)
    stored = await (await client.get("/api/v1/me/e2e-key", headers=auth(bob.token))).json()
    # the stored row's fingerprint, which the account page showed before format 2, agrees
    assert shown_to_admin == fingerprint(attackers) == stored["e2e_key"]["fingerprint"]
    # bob's own client computes his from the public key of the private key it opened: they differ
    opened = crypto.open_recovery_wrap(stored["e2e_key"]["recovery_wrapped_private_key"],
                                       bob.recovery_key, bob.id)
    assert fingerprint(crypto.public_key(opened)) != shown_to_admin


async def test_a_public_key_swapped_at_a_rekey_is_refused(api, client, alice, team,
                                                          database_url):
    bob = await keyed(api, client, "bob")
    await api.add_member(alice.user, team.id, bob.user, "Member")
    await team.grant(alice, bob)
    await team.create_secret(alice, "A", "alpha")
    _, attackers = crypto.generate_key_pair()
    await query(database_url, "UPDATE user_e2e_keys SET public_key = %s WHERE user_id = %s",
                (attackers, bob.id))
    with pytest.raises(crypto.E2EError, match="not added by a holder"):
        await team.rekey(alice)
    rows = await query(database_url, "SELECT key_version FROM teams WHERE id = %s", (team.id,))
    assert rows[0]["key_version"] == 1  # nothing was sent


@pytest.mark.parametrize("copied_auth", [False, True])
async def test_an_injected_recipient_is_refused_at_a_rekey(api, client, alice, team,
                                                           database_url, copied_auth):
    _, _, honest = await team.token(alice)
    _, attackers = crypto.generate_key_pair()
    token_id = uuid.uuid4()
    await query(database_url,
                """INSERT INTO api_tokens (id, user_id, name, token_prefix, token_hash, team_id,
                                           e2e_public_key)
                   VALUES (%s, %s, 'operator', 'cvsm_op', %s, %s, %s)""",
                (token_id, alice.id, os.urandom(32), team.id, attackers))
    # an auth the operator makes up, or the honest token's auth copied onto the injected row
    auth_value = (await query(database_url, "SELECT auth FROM team_key_wraps WHERE token_id = %s",
                              (honest["id"],)))[0]["auth"] if copied_auth else "A" * 43
    await query(database_url,
                """INSERT INTO team_key_wraps (team_id, key_version, token_id, wrapped_key, auth)
                   VALUES (%s, 1, %s, %s, %s)""",
                (team.id, token_id, crypto.wrap_team_key(crypto.new_team_key(), team.id, 1,
                                                         attackers), auth_value))
    listing = await (await client.get(f"/api/v1/teams/{team.id}/e2e/members",
                                      headers=auth(alice.token))).json()
    assert len(listing["tokens"]) == 2  # the server lists it: the client is what refuses it
    with pytest.raises(crypto.E2EError, match="not added by a holder"):
        await team.rekey(alice)
    rows = await query(database_url, "SELECT key_version FROM teams WHERE id = %s", (team.id,))
    assert rows[0]["key_version"] == 1
