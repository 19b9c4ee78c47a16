"""The audit log stored by month (issue 40, item 3; migration 0024): the upgrade keeps every
entry and chain, partitions are made ahead, and retention drops a whole expired month (its
stragglers of the next month first) while the chain verifies across it and goes on; a month
holding entries still kept is left to the per-entry purge."""

from __future__ import annotations

import uuid
from datetime import date, datetime, timedelta, timezone

import psycopg2
import pytest

from conftest import query, server_url
from cvsm_server import db
from cvsm_server.audit import archive as audit_archive, chain as audit_chain, log as audit
from cvsm_server.audit import verify as audit_verify
from cvsm_server.audit import watch as audit_watch
from cvsm_server.runtime import cli
from cvsm_server.crypto.sealing import Keyring
from cvsm_server.web.state import CHECKPOINT_SIGNER


def month_start(when: datetime) -> date:
    return date(when.year, when.month, 1)


def next_month(m: date) -> date:
    return date(m.year + (m.month == 12), m.month % 12 + 1, 1)


async def exists(database_url: str, name: str) -> bool:
    return (await query(database_url, "SELECT to_regclass(%s) IS NOT NULL AS e", (name,)))[0]["e"]


def suffix(m: date) -> str:
    return f"y{m.year:04d}m{m.month:02d}"


async def move_and_rechain(database_url: str, team_id: str, times: dict[int, datetime]) -> None:
    """Give the chain's entries at these seqs these times (entry and seal: their partitions move)
    and re-seal the chain with the same hashes the database makes, as if written then."""
    conn = psycopg2.connect(database_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SET LOCAL session_replication_role = replica")
            for seq, at in times.items():
                cur.execute("""UPDATE audit_logs SET created_at = %s WHERE pos =
                               (SELECT pos FROM audit_seals WHERE chain_id = %s AND seq = %s)""",
                            (at, team_id, seq))
                cur.execute("UPDATE audit_seals SET created_at = %s WHERE chain_id = %s "
                            "AND seq = %s", (at, team_id, seq))
    finally:
        conn.close()
    rows = await query(database_url, """
        SELECT s.pos, s.seq, a.id, a.created_at, a.user_email, a.action, a.resource,
               a.resource_id, a.ip_address, a.user_agent, a.metadata::text AS metadata_text,
               s.chain_id
        FROM audit_seals s JOIN audit_logs a ON a.pos = s.pos
        WHERE s.chain_id = %s ORDER BY s.seq""", (team_id,))
    prev, updates = audit_chain.GENESIS, []
    for row in rows:
        row["prev_hash"] = prev
        prev = audit_chain.entry_hash(row)
        updates.append((prev, row["pos"]))
    conn = psycopg2.connect(database_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SET LOCAL session_replication_role = replica")
            cur.executemany("UPDATE audit_seals SET hash = %s WHERE pos = %s", updates)
    finally:
        conn.close()


async def twenty_entries(database_url: str, pool, team_id: str) -> None:
    await query(database_url, """INSERT INTO audit_logs (team_id, action, resource, resource_id)
                                 SELECT %s, 'update', 'secret', 's' || i
                                 FROM generate_series(1, 20) i""", (team_id,))
    async with db.cursor(pool) as cur:
        await audit_chain.seal(cur)


async def test_an_expired_month_is_dropped_whole_and_the_chain_verifies_across_it(
        client, team_id, database_url, pool):
    signer, team = client.app[CHECKPOINT_SIGNER], uuid.UUID(team_id)
    await query(database_url, "UPDATE teams SET plan = 'starter' WHERE id = %s", (team_id,))
    await twenty_entries(database_url, pool, team_id)  # seq 2..21 (1 is the team's creation)
    old = month_start(datetime.now(timezone.utc) - timedelta(days=100))
    after = next_month(old)
    await query(database_url, "SELECT cvsm_audit_make_months(%s, %s)", (old, next_month(after)))
    start = datetime(old.year, old.month, 1, tzinfo=timezone.utc)
    times = {seq: start + timedelta(days=1, seconds=seq) for seq in range(1, 16) if seq != 14}
    # seq 14 was sealed before 15 but stamped just after midnight: a straggler of the next month
    times[14] = datetime(after.year, after.month, 1, tzinfo=timezone.utc) + timedelta(seconds=1)
    await move_and_rechain(database_url, team_id, times)
    assert await exists(database_url, f"audit_logs_{suffix(old)}")

    removed = await audit_chain.purge_expired(pool, signer)  # Starter: 30 days

    assert removed == 15
    assert not await exists(database_url, f"audit_logs_{suffix(old)}")
    assert not await exists(database_url, f"audit_seals_{suffix(old)}")
    left = await query(database_url, "SELECT min(seq) AS first, count(*) AS n FROM audit_seals "
                                     "WHERE chain_id = %s", (team_id,))
    assert (left[0]["first"], left[0]["n"]) == (16, 6)
    marks = await query(database_url, "SELECT seq FROM audit_checkpoints WHERE chain_id = %s "
                                      "AND kind = 'purge'", (team_id,))
    assert [m["seq"] for m in marks] == [15]
    async with db.cursor(pool) as cur:
        await audit.record(cur, None, "after", "test", team_id=team)
        await audit_chain.seal(cur)
        verdict = await audit_verify.verify_chain(cur, signer, team)
    assert verdict.ok and verdict.checked == 7
    # the months ahead exist: an insert never lacks its partition
    now = month_start(datetime.now(timezone.utc))
    for m in (now, next_month(now), next_month(next_month(now))):
        assert await exists(database_url, f"audit_logs_{suffix(m)}")
    assert await audit_chain.purge_expired(pool, signer) == 0


async def test_a_month_with_entries_still_kept_stays_and_the_drop_refuses_it(
        client, api, owner, team_id, database_url, pool):
    signer = client.app[CHECKPOINT_SIGNER]
    await twenty_entries(database_url, pool, team_id)
    old = month_start(datetime.now(timezone.utc) - timedelta(days=100))
    await query(database_url, "SELECT cvsm_audit_make_months(%s, %s)", (old, next_month(old)))
    start = datetime(old.year, old.month, 1, tzinfo=timezone.utc)
    await move_and_rechain(database_url, team_id,
                           {seq: start + timedelta(days=2, seconds=seq) for seq in range(1, 11)})
    await query(database_url, "UPDATE teams SET plan = 'enterprise' WHERE id = %s", (team_id,))
    assert await audit_chain.purge_expired(pool, signer) == 0
    assert await exists(database_url, f"audit_logs_{suffix(old)}")
    # asked directly, the database says why (and a checkpoint alone does not make it go)
    with pytest.raises(psycopg2.errors.RaiseException, match="keeps its entries"):
        await query(server_url(database_url), "SELECT cvsm_audit_drop_month(%s)", (old,))
    await query(database_url, "UPDATE teams SET plan = 'starter' WHERE id = %s", (team_id,))
    with pytest.raises(psycopg2.errors.RaiseException, match="no checkpoint"):
        await query(server_url(database_url), "SELECT cvsm_audit_drop_month(%s)", (old,))
    # the server's role can neither drop a partition itself nor detach one
    for sql in (f"DROP TABLE audit_logs_{suffix(old)}",
                f"ALTER TABLE audit_logs DETACH PARTITION audit_logs_{suffix(old)}"):
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            await query(server_url(database_url), sql)
    assert await audit_chain.purge_expired(pool, signer) == 10
    async with db.cursor(pool) as cur:
        verdict = await audit_verify.verify_chain(cur, signer, uuid.UUID(team_id))
    assert verdict.ok and verdict.checked == 11


async def test_a_log_of_0023_is_partitioned_by_0024_and_keeps_verifying(fresh_database):
    url = fresh_database(empty=True)
    team = uuid.uuid4()
    signer = audit_chain.CheckpointSigner(Keyring(bytes(32)))
    pool = await db.create_pool(url, maxsize=2)
    try:
        assert await db.migrate(pool, upto=23) == list(range(1, 24))
        async with db.cursor(pool) as cur:
            await cur.execute("INSERT INTO teams (id, slug, name) VALUES (%s, 't', 'T')", (team,))
            for i in range(4):
                await audit.record(cur, None, "before", "test", team_id=team, metadata={"i": i})
            await audit_chain.seal(cur)
            await audit_chain.checkpoint_now(cur, signer, team)
            await audit.record(cur, None, "pending", "test", team_id=team)
        assert 24 in await db.migrate(pool)
        async with db.cursor(pool) as cur:
            await audit.record(cur, None, "after", "test", team_id=team)
            assert await audit_chain.seal(cur) == 2
            verdict = await audit_verify.verify_chain(cur, signer, team)
    finally:
        pool.close()
        await pool.wait_closed()
    assert verdict.ok and verdict.checked == 6 and verdict.checkpoint["seq"] == 4
    kinds = await query(url, "SELECT relkind FROM pg_class WHERE relname IN "
                              "('audit_logs', 'audit_seals')")
    assert [k["relkind"] for k in kinds] == ["p", "p"]


async def test_a_month_is_archived_before_it_is_dropped_and_the_file_verifies_offline(
        client, team_id, database_url, pool, tmp_path, capsys):
    signer = client.app[CHECKPOINT_SIGNER]
    await query(database_url, "UPDATE teams SET plan = 'starter' WHERE id = %s", (team_id,))
    await twenty_entries(database_url, pool, team_id)
    old = month_start(datetime.now(timezone.utc) - timedelta(days=100))
    await query(database_url, "SELECT cvsm_audit_make_months(%s, %s)", (old, next_month(old)))
    start = datetime(old.year, old.month, 1, tzinfo=timezone.utc)
    await move_and_rechain(database_url, team_id,
                           {seq: start + timedelta(days=3, seconds=seq) for seq in range(1, 9)})
    assert await audit.purge_expired(pool, signer, tmp_path) == 8
    assert not await exists(database_url, f"audit_logs_{suffix(old)}")
    path = tmp_path / f"audit-{team_id}-{old:%Y-%m}.jsonl"
    verdict = audit_archive.verify_file(path, signer.public_key)
    assert verdict.ok and verdict.entries == 8 and verdict.key_id == signer.key_id
    lines = path.read_text().splitlines()
    assert len(lines) == 10 and '"action":"team_create"' in lines[1]
    assert cli.main(["audit", "verify", "--file", str(path),
                     "--public-key", signer.public_key.hex()]) == 0
    assert "intact, 8 entries (seq 1 to 8)" in capsys.readouterr().out
    # another key, an edited line, a removed line: each fails, naming the line
    assert not audit_archive.verify_file(path, bytes(32)).ok
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join([*lines[:4], lines[4].replace('"update"', '"delete"'),
                                 *lines[5:]]) + "\n")
    verdict = audit_archive.verify_file(edited)
    assert (verdict.ok, verdict.line) == (False, 5) and "edited" in verdict.reason
    assert cli.main(["audit", "verify", "--file", str(edited)]) == 1
    assert "broken at line 5" in capsys.readouterr().err
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join([*lines[:3], *lines[4:]]) + "\n")
    verdict = audit_archive.verify_file(cut)
    assert (verdict.ok, verdict.line) == (False, 4) and "missing" in verdict.reason


async def test_the_verify_job_checks_only_what_was_sealed_since_its_last_run(
        client, team_id, database_url, pool, caplog):
    signer, team = client.app[CHECKPOINT_SIGNER], uuid.UUID(team_id)
    await twenty_entries(database_url, pool, team_id)  # seq 1..21
    async with db.cursor(pool) as cur:
        await audit_chain.checkpoint_now(cur, signer, team)
    first = await audit_watch.verify_since_last_run(pool, signer)
    assert first >= 1  # from each chain's newest checkpoint: its head entry, for this team
    await twenty_entries(database_url, pool, team_id)  # seq 22..41
    async with db.cursor(pool) as cur:
        await audit_chain.checkpoint_now(cur, signer, team)
    await query(database_url, "INSERT INTO audit_logs (team_id, action, resource) "
                              "VALUES (%s, 'x', 'x')", (team_id,))  # seq 42
    # from the checkpoint at 21 (the last run's) to the head: 21 entries of this team
    assert await audit_watch.verify_since_last_run(pool, signer) - first == 21
    assert await audit_watch.verify_since_last_run(pool, signer) - first == 1  # 41, 42 (was 21)
    conn = psycopg2.connect(database_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SET LOCAL session_replication_role = replica")
            cur.execute("UPDATE audit_logs SET action = 'tampered' WHERE pos = (SELECT pos FROM "
                        "audit_seals WHERE chain_id = %s AND seq = 42)", (team_id,))
    finally:
        conn.close()
    await audit_watch.verify_since_last_run(pool, signer)
    assert any("is broken at seq 42" in r.getMessage() for r in caplog.records)


async def test_the_sealer_reads_only_the_holes_and_what_is_new_while_a_writer_waits(
        client, team_id, database_url, pool):
    """Migration 0025: while a writer's transaction stays open, each call starts past what the
    last one sealed and looks again only at the open entry's position (a hole), not at every
    entry since the mark; the entry is sealed once it commits."""
    app_url = server_url(database_url)
    state = "SELECT sealed_below, scanned_below, holes FROM audit_seal_state"
    early = psycopg2.connect(app_url)
    try:
        with early.cursor() as cur:
            cur.execute("INSERT INTO audit_logs (team_id, action, resource) "
                        "VALUES (%s, 'early', 'x') RETURNING pos", (team_id,))
            held = cur.fetchone()[0]
            for _ in range(3):
                await query(app_url, "INSERT INTO audit_logs (team_id, action, resource) "
                                     "SELECT %s, 'late', 'x' FROM generate_series(1, 10)",
                            (team_id,))
                async with db.cursor(pool) as c:
                    await audit_chain.seal(c)
                top = (await query(database_url, "SELECT max(pos) AS p FROM audit_logs"))[0]["p"]
                row = (await query(database_url, state))[0]
                assert row["sealed_below"] <= held < top
                assert row["scanned_below"] == top + 1 and row["holes"] == [held]
        early.commit()
    finally:
        early.close()
    async with db.cursor(pool) as c:
        assert await audit_chain.seal(c) == 1
        assert await audit_chain.seal(c) == 0
        verdict = await audit_verify.verify_chain(c, client.app[CHECKPOINT_SIGNER],
                                                 uuid.UUID(team_id))
    assert verdict.ok and verdict.checked == 32
    assert (await query(database_url, state))[0]["holes"] == []


async def test_a_boundary_month_mostly_expired_is_compacted_and_both_chains_verify(
        client, team_id, database_url, pool):
    """A month that cannot go whole (another team keeps its entries) but whose entries mostly
    expired: the expired prefix goes by copying what stays into fresh partitions (migration
    0026), not entry by entry; the month keeps the other team's entries, indexes and guard, and
    both chains verify."""
    signer, team = client.app[CHECKPOINT_SIGNER], uuid.UUID(team_id)
    keeper = (await query(database_url, "INSERT INTO teams (slug, name, plan) VALUES "
                                        "('keeper', 'Keeper', 'enterprise') RETURNING id"))[0]["id"]
    await query(database_url, "UPDATE teams SET plan = 'starter' WHERE id = %s", (team_id,))
    await twenty_entries(database_url, pool, team_id)  # seq 2..21 (1 is the team's creation)
    await query(database_url, """INSERT INTO audit_logs (team_id, action, resource, resource_id)
                                 SELECT %s, 'read', 'secret', 'k' || i
                                 FROM generate_series(1, 3) i""", (keeper,))
    async with db.cursor(pool) as cur:
        await audit_chain.seal(cur)
    old = month_start(datetime.now(timezone.utc) - timedelta(days=100))
    await query(database_url, "SELECT cvsm_audit_make_months(%s, %s)", (old, next_month(old)))
    start = datetime(old.year, old.month, 1, tzinfo=timezone.utc)
    await move_and_rechain(database_url, team_id,
                           {seq: start + timedelta(days=1, seconds=seq) for seq in range(1, 16)})
    await move_and_rechain(database_url, str(keeper),
                           {seq: start + timedelta(days=2, seconds=seq) for seq in range(1, 4)})
    part = f"audit_logs_{suffix(old)}"
    oid = (await query(database_url, "SELECT %s::regclass::oid AS o", (part,)))[0]["o"]
    indexes = await query(database_url, "SELECT count(*) AS n FROM pg_indexes WHERE tablename "
                                        "IN (%s, %s)", (part, f"audit_seals_{suffix(old)}"))
    # asked directly, the database refuses a cut no checkpoint covers, and a chain kept for good
    with pytest.raises(psycopg2.errors.RaiseException, match="no checkpoint at its cut"):
        await query(server_url(database_url), "SELECT cvsm_audit_compact_month(%s, %s, %s)",
                    (old, [team], [15]))
    with pytest.raises(psycopg2.errors.RaiseException, match="keeps its entries"):
        await query(server_url(database_url), "SELECT cvsm_audit_compact_month(%s, %s, %s)",
                    (old, [keeper], [1]))

    removed = await audit_chain.purge_expired(pool, signer)  # Starter: 30 days

    assert removed == 15
    assert (await query(database_url, "SELECT %s::regclass::oid AS o", (part,)))[0]["o"] != oid
    left = await query(database_url, f"SELECT a.team_id FROM {part} a")
    assert [r["team_id"] for r in left] == [keeper] * 3
    assert (await query(database_url, "SELECT count(*) AS n FROM pg_indexes WHERE tablename "
                                      "IN (%s, %s)", (part, f"audit_seals_{suffix(old)}"))
            ) == indexes
    marks = await query(database_url, "SELECT seq FROM audit_checkpoints WHERE chain_id = %s "
                                      "AND kind = 'purge'", (team_id,))
    assert [m["seq"] for m in marks] == [15]
    async with db.cursor(pool) as cur:
        await audit.record(cur, None, "after", "test", team_id=team)
        await audit_chain.seal(cur)
        verdict = await audit_verify.verify_chain(cur, signer, team)
        kept = await audit_verify.verify_chain(cur, signer, keeper)
    assert verdict.ok and verdict.checked == 7
    assert kept.ok and kept.checked == 3
    # the month's new partitions have the log's guard (row triggers) and its grants
    with pytest.raises(psycopg2.errors.InsufficientPrivilege):
        await query(server_url(database_url), "DELETE FROM audit_logs WHERE team_id = %s",
                    (keeper,))
    assert await audit_chain.purge_expired(pool, signer) == 0


async def test_the_read_rollups_expired_months_go_by_partition_not_row_by_row(
        client, team_id, database_url, pool):
    """The read rollup is stored by month (migration 0027): a month whose rows are mostly past
    their team's retention is replaced by a copy of the rows that stay (an Enterprise team's),
    one with nothing left is dropped, and the purge's per-team delete is left the rest."""
    signer = client.app[CHECKPOINT_SIGNER]
    keeper = (await query(database_url, "INSERT INTO teams (slug, name, plan) VALUES "
                                        "('keeper', 'Keeper', 'enterprise') RETURNING id"))[0]["id"]
    await query(database_url, "UPDATE teams SET plan = 'starter' WHERE id = %s", (team_id,))
    now = datetime.now(timezone.utc)
    old = month_start(now - timedelta(days=130))
    older = month_start(now - timedelta(days=170))
    await query(database_url, "SELECT cvsm_audit_make_months(%s, %s)", (older, next_month(old)))
    rows = [(team_id, f"s{i}", old + timedelta(days=i)) for i in range(9)]
    rows += [(keeper, "k", old + timedelta(days=2)),
             *[(team_id, f"s{i}", older + timedelta(days=i)) for i in range(3)]]
    for team, secret, day in rows:
        await query(database_url, """INSERT INTO audit_reads (team_id, secret_id, day, user_email,
                                     token_id, reads, last_at) VALUES (%s, md5(%s)::uuid, %s,
                                     '', '00000000-0000-0000-0000-000000000000'::uuid, 1,
                                     now())""", (team, secret, day))
    oid = (await query(database_url, "SELECT %s::regclass::oid AS o",
                       (f"audit_reads_{suffix(old)}",)))[0]["o"]

    await audit_chain.purge_expired(pool, signer)

    left = await query(database_url, "SELECT tableoid::regclass::text AS part, team_id FROM "
                                     "audit_reads")
    assert [(r["part"], r["team_id"]) for r in left] == [(f"audit_reads_{suffix(old)}", keeper)]
    assert not await exists(database_url, f"audit_reads_{suffix(older)}")
    assert (await query(database_url, "SELECT %s::regclass::oid AS o",
                        (f"audit_reads_{suffix(old)}",)))[0]["o"] != oid
    # the month that stays has the rollup's keys: the sealer's upsert still adds to its rows
    await query(database_url, """INSERT INTO audit_reads AS r (team_id, secret_id, day,
                                 user_email, token_id, reads, last_at) VALUES (%s, md5('k')::uuid,
                                 %s, '', '00000000-0000-0000-0000-000000000000'::uuid, 1,
                                 now()) ON CONFLICT (team_id, secret_id, day, user_email,
                                 token_id) DO UPDATE SET reads = r.reads + 1""",
                (keeper, old + timedelta(days=2)))
    assert (await query(database_url, "SELECT reads FROM audit_reads"))[0]["reads"] == 2
    # asked for a month most of which stays, the database leaves it to the per-team delete
    assert (await query(server_url(database_url), "SELECT cvsm_audit_compact_reads(%s) AS n",
                        (old,)))[0]["n"] is None
