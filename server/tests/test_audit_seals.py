"""The leaner audit write path (migration 0017): seals appended beside the log instead of
rewriting its entries, the sealer's position mark, no foreign keys on the log (its entries lock
no team or user row), the delete paths' nulling done by triggers, and a log sealed under 0016
verifying after the upgrade."""

from __future__ import annotations

import asyncio
import uuid

import psycopg2

from cvsm_server.audit import log as audit, chain as audit_chain
from cvsm_server.audit import verify as audit_verify
from cvsm_server import db
from cvsm_server.crypto.sealing import Keyring
from cvsm_server.web.state import CHECKPOINT_SIGNER, POOL
from conftest import Api, query, server_url
from test_audit_chain import ROWS, as_superuser, sealed_rows, seal_now

UNSEALED = """SELECT count(*) AS n FROM audit_logs a
              WHERE NOT EXISTS (SELECT 1 FROM audit_seals s WHERE s.pos = a.pos)"""


async def sealed_below(database_url: str) -> int:
    rows = await query(database_url, "SELECT sealed_below FROM audit_seal_state")
    return rows[0]["sealed_below"]


async def test_a_log_sealed_under_0016_keeps_verifying_after_0017(fresh_database):
    """An upgrade with sealed entries, a signed checkpoint, entries not sealed yet and one of a
    team deleted before it was sealed (0012 pinned its chain): 0017 seals what was pending with
    0012's rules, moves every chain field to the seals, and the chains verify and go on."""
    url = fresh_database(empty=True)
    kept, gone = uuid.uuid4(), uuid.uuid4()
    signer = audit_chain.CheckpointSigner(Keyring(bytes(32)))
    pool = await db.create_pool(url, maxsize=2)
    try:
        assert await db.migrate(pool, upto=16) == list(range(1, 17))
        async with db.cursor(pool) as cur:
            for team, slug in ((kept, "kept"), (gone, "gone")):
                await cur.execute("INSERT INTO teams (id, slug, name) VALUES (%s, %s, 'T')",
                                  (team, slug))
            for i in range(3):
                await audit.record(cur, None, "sealed", "test", team_id=kept, metadata={"i": i})
            await audit.record(cur, None, "sealed", "test", team_id=gone)
            await audit.record(cur, None, "sealed", "test")  # the account chain
            await cur.execute("SELECT cvsm_audit_seal(5000, true)")
            head = await db.fetchone(cur, "SELECT seq, hash FROM audit_logs WHERE chain_id = %s "
                                          "ORDER BY seq DESC LIMIT 1", (kept,))
            await audit_chain.write_checkpoint(cur, signer, kept, head["seq"], bytes(head["hash"]),
                                               "demand")
            for i in range(2):
                await audit.record(cur, None, "pending", "test", team_id=kept, metadata={"i": i})
            await audit.record(cur, None, "pending", "test", team_id=gone)
            await cur.execute("DELETE FROM teams WHERE id = %s", (gone,))  # 0012 pins its chain
        assert await db.migrate(pool) == [n for n, _, _ in db.migration_files() if n > 16]
        assert (await query(url, UNSEALED))[0]["n"] == 0  # the migration sealed what was pending
        async with db.cursor(pool) as cur:
            for i in range(2):
                await audit.record(cur, None, "after", "test", team_id=kept, metadata={"i": i})
            assert await audit_chain.seal(cur) == 2
            verdicts = {chain: await audit_verify.verify_chain(cur, signer, chain)
                        for chain in (kept, gone, audit_chain.ACCOUNT_CHAIN)}
    finally:
        pool.close()
        await pool.wait_closed()
    assert {c: (v.ok, v.checked) for c, v in verdicts.items()} == {
        kept: (True, 7), gone: (True, 2), audit_chain.ACCOUNT_CHAIN: (True, 1)}
    assert verdicts[kept].checkpoint["seq"] == 3
    rows = await query(url, ROWS, (kept,))
    assert [(r["seq"], r["action"]) for r in rows] == [
        (1, "sealed"), (2, "sealed"), (3, "sealed"), (4, "pending"), (5, "pending"),
        (6, "after"), (7, "after")]
    rows = await query(url, ROWS, (gone,))
    assert [(r["seq"], r["action"], r["team_id"]) for r in rows] == [
        (1, "sealed", None), (2, "pending", None)]
    columns = await query(url, """SELECT column_name FROM information_schema.columns
                                  WHERE table_name = 'audit_logs'""")
    assert {"chain_id", "seq", "prev_hash", "hash"}.isdisjoint(c["column_name"] for c in columns)


async def test_an_audited_read_locks_neither_its_team_nor_its_user(client, api: Api, owner,
                                                                   team_id, database_url):
    """With the foreign keys gone, writing an entry takes no share lock on the team and user rows
    (a lock and WAL record each, multixacts under concurrency): a read goes through while both
    rows are locked FOR UPDATE."""
    sid = await api.secret(owner, team_id, "A", "v")
    holder = psycopg2.connect(database_url)
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT 1 FROM teams WHERE id = %s FOR UPDATE", (team_id,))
            cur.execute("SELECT 1 FROM users WHERE id = %s FOR UPDATE", (owner["id"],))
            resp = await asyncio.wait_for(
                client.get(f"/api/v1/teams/{team_id}/secrets/{sid}",
                           headers=api.auth(owner["token"])), 10)
            assert resp.status == 200
    finally:
        holder.rollback()
        holder.close()
    rows = await query(database_url, "SELECT user_id FROM audit_logs WHERE action = 'read'")
    assert [str(r["user_id"]) for r in rows] == [owner["id"]]


async def test_the_sealers_mark_waits_for_an_open_transactions_entry(client, api: Api, owner,
                                                                     team_id, database_url):
    """The sealer scans only from its mark; the mark never passes an entry whose transaction is
    still open, however many batches are sealed meanwhile, and moves on once it committed."""
    app_url = server_url(database_url)
    early = psycopg2.connect(app_url)
    try:
        with early.cursor() as cur:
            cur.execute("""INSERT INTO audit_logs (team_id, action, resource)
                           VALUES (%s, 'early', 'x') RETURNING pos""", (team_id,))
            pos = cur.fetchone()[0]
            for i in range(4):
                await query(app_url, "INSERT INTO audit_logs (team_id, action, resource) "
                                     "VALUES (%s, 'late', 'x')", (team_id,))
                assert await seal_now(client) == 1 + (i == 0)  # first also the team's creation
                assert await sealed_below(database_url) <= pos
        early.commit()
    finally:
        early.close()
    assert await seal_now(client) == 1
    for _ in range(2):
        await query(app_url, "INSERT INTO audit_logs (team_id, action, resource) "
                             "VALUES (%s, 'later', 'x')", (team_id,))
        assert await seal_now(client) == 1
    assert await sealed_below(database_url) > pos
    rows = await query(database_url, ROWS, (team_id,))
    assert [r["action"] for r in rows] == ["team_create", *["late"] * 4, "early", "later", "later"]
    async with db.cursor(client.app[POOL]) as cur:
        verdict = await audit_verify.verify_chain(cur, client.app[CHECKPOINT_SIGNER],
                                                 uuid.UUID(team_id))
    assert verdict.ok and verdict.checked == 8


async def test_a_team_deleted_while_an_entry_is_written_keeps_it_in_its_chain_for_90_days(
        client, api: Api, owner, team_id, database_url):
    """An entry committed after its team's deletion (its writer checked the team just before)
    keeps the team's id: nothing nulls it, its chain is the team's, and retention treats a team
    that no longer exists like none (90 days), so the purge still removes it in time."""
    h = api.auth(owner["token"])
    assert (await client.delete(f"/api/v1/teams/{team_id}", headers=h)).status in (200, 204)
    await query(server_url(database_url), "INSERT INTO audit_logs (team_id, action, resource) "
                                          "VALUES (%s, 'late', 'x')", (team_id,))
    rows = await sealed_rows(database_url, team_id)
    assert [(r["seq"], r["action"], str(r["team_id"]) if r["team_id"] else None) for r in rows] == [
        (1, "team_create", None), (2, "late", team_id)]
    days = await query(database_url, "SELECT cvsm_audit_retention_days(%s) AS d", (team_id,))
    assert days[0]["d"] == 90
    await as_superuser(database_url, ("UPDATE audit_logs SET created_at = created_at - "
                                      "interval '91 days' WHERE action IN ('team_create', 'late')",
                                      ()))
    assert await audit.purge_expired(client.app[POOL], client.app[CHECKPOINT_SIGNER]) == 2
    assert await query(database_url, ROWS, (team_id,)) == []
    left = await query(database_url, "SELECT count(*) AS n FROM audit_seals WHERE chain_id = %s",
                       (team_id,))
    assert left[0]["n"] == 0  # the seals went with their entries


async def test_deleting_users_and_teams_nulls_their_references_in_one_statement_each(
        client, api: Api, database_url):
    """The triggers that replaced the foreign keys' ON DELETE SET NULL, for several rows at once
    (the account purge deletes a user's teams one by one; an operator may delete many)."""
    users = [await api.register() for _ in range(2)]
    teams = [await api.team(u) for u in users]
    for user, team in zip(users, teams):
        await api.secret(user, team, "A", "v")
    await query(database_url, "DELETE FROM teams WHERE id = ANY(%s::uuid[])", (teams,))
    await query(database_url, "DELETE FROM users WHERE id = ANY(%s::uuid[])",
                ([u["id"] for u in users],))
    rows = await query(database_url, "SELECT team_id, user_id, user_email FROM audit_logs "
                                     "WHERE action IN ('team_create', 'create')")
    assert len(rows) == 4
    assert all(r["team_id"] is None and r["user_id"] is None and r["user_email"] for r in rows)
    chains = {str(r["chain_id"]) for r in await query(
        database_url, "SELECT chain_id FROM audit_chain_entries WHERE action = 'create'")}
    assert chains == set(teams)


async def test_a_seal_holds_no_link_and_its_entry_still_hashes_with_the_one_before(
        client, api: Api, owner, team_id, database_url):
    """Migration 0042: a seal is its entry's position, chain, seq, hash and time (108 B a row,
    141 with the link); the link is the seal before it, or the purge checkpoint there."""
    await api.secret(owner, team_id, "A", "v")
    await seal_now(client)
    columns = await query(database_url, """SELECT column_name FROM information_schema.columns
                                           WHERE table_name = 'audit_seals'""")
    assert {c["column_name"] for c in columns} == {"pos", "chain_id", "seq", "hash", "created_at"}
    sizes = await query(database_url, "SELECT max(pg_column_size(s.*)) AS b FROM audit_seals s")
    assert sizes[0]["b"] <= 104  # the row's header and columns: its line pointer makes 108
    rows = await sealed_rows(database_url, team_id)
    assert len(rows) >= 2 and bytes(rows[0]["prev_hash"]) == audit_chain.GENESIS
    for before, row in zip(rows, rows[1:]):
        assert bytes(row["prev_hash"]) == bytes(before["hash"])
        assert audit_chain.entry_hash(row) == bytes(row["hash"])
