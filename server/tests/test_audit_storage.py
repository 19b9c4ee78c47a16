"""Fewer bytes per audit entry (issue 40, migration 0035): the page indexes key the team and the
filtered value by 4-byte hashes, and the pages stay exact where two teams or two values share a
hash (found by the index, kept or left by the values themselves). The log's and the seals' keys
are on `pos` alone (migration 0043)."""

from __future__ import annotations

import uuid
from datetime import date, datetime, timedelta, timezone

import psycopg2
import pytest

from conftest import Api, query
from cvsm_server import db
from cvsm_server.audit import chain as audit_chain, listing, log as audit
from cvsm_server.audit import verify as audit_verify
from cvsm_server.core.actor import Actor

PAGE_INDEXES = ("team_time", "team_actor", "team_secret", "team_sname")


def as_actor(user: dict) -> Actor:
    return Actor.anonymous("127.0.0.1").as_user(uuid.UUID(user["id"]), user["email"])


async def colliding(database_url: str, expression: str, values: str) -> tuple:
    """Two different values of `values` (SQL yielding column v) whose `expression` (of v) is
    equal: a birthday search among 200,000 of them finds a few."""
    rows = await query(database_url, f"""
        SELECT (array_agg(v ORDER BY v))[1] AS a, (array_agg(v ORDER BY v))[2] AS b
        FROM ({values}) s GROUP BY {expression} HAVING count(*) > 1 LIMIT 1""")
    assert rows, "no collision found"
    return rows[0]["a"], rows[0]["b"]


async def test_each_page_index_holds_an_entry_in_at_most_40_bytes(database_url, team_id):
    # long values (a secret id as text is 36 characters): the index keys stay 4 bytes each
    await query(database_url, """
        INSERT INTO audit_logs (team_id, user_email, action, resource, resource_id, metadata)
        SELECT %s, 'someone.with.a.long.address' || (i %% 7) || '@example.com',
               'secret_rotation_scheduled', 'secret', gen_random_uuid()::text,
               jsonb_build_object('name', 'A_RATHER_LONG_SECRET_NAME_' || (i %% 50))
        FROM generate_series(1, 20000) i""", (team_id,))
    await query(database_url, "REINDEX TABLE audit_logs")
    for name in PAGE_INDEXES:
        rows = await query(database_url, """
            SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0) AS bytes
            FROM pg_index i JOIN pg_inherits h ON h.inhrelid = i.indexrelid
            WHERE h.inhparent = %s::regclass""", (f"audit_logs_{name}_idx",))
        assert rows[0]["bytes"] / 20000 <= 40, (name, rows[0]["bytes"] / 20000)


async def index_bytes(database_url: str, name: str) -> int:
    rows = await query(database_url, """
        SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0) AS bytes
        FROM pg_index i JOIN pg_inherits h ON h.inhrelid = i.indexrelid
        WHERE h.inhparent = %s::regclass""", (f"audit_logs_{name}_idx",))
    return rows[0]["bytes"]


async def test_reads_are_in_neither_the_action_nor_the_name_index(database_url, team_id):
    # migration 0040: a read (the log's bulk) writes two page-index entries fewer; the action
    # index keys the action itself (its statistics are the column's), for the other entries only
    await query(database_url, """
        INSERT INTO audit_logs (team_id, user_email, action, resource, resource_id, metadata)
        SELECT %s, 'reader@example.com', 'read', 'secret', gen_random_uuid()::text,
               jsonb_build_object('name', 'A_RATHER_LONG_SECRET_NAME_' || (i %% 50))
        FROM generate_series(1, 20000) i""", (team_id,))
    await query(database_url, "REINDEX TABLE audit_logs")
    assert await index_bytes(database_url, "team_time") / 20000 >= 24  # the reads are indexed
    for name in ("team_action", "team_sname"):
        assert await index_bytes(database_url, name) / 20000 < 4, name  # empty pages only
    await query(database_url, """
        INSERT INTO audit_logs (team_id, user_email, action, resource, resource_id, metadata)
        SELECT %s, 'writer@example.com', 'secret_rotation_scheduled', 'secret',
               gen_random_uuid()::text, '{}' FROM generate_series(1, 20000) i""", (team_id,))
    await query(database_url, "REINDEX TABLE audit_logs")
    assert 24 <= await index_bytes(database_url, "team_action") / 20000 <= 64


async def test_pages_and_counts_stay_exact_where_teams_or_values_share_a_hash(
        api: Api, owner, team_id, database_url, pool):
    # two actions sharing hashtext(), both in the team: the filter by one shows only its own
    one, other = await colliding(database_url, "hashtext(v)",
                                 "SELECT 'act_' || i AS v FROM generate_series(1, 200000) i")
    await query(database_url, """
        INSERT INTO audit_logs (team_id, user_email, action, resource, metadata)
        SELECT %s, 'p' || (i %% 2) || '@example.com',
               CASE WHEN i %% 3 = 0 THEN %s ELSE %s END, 'test', '{}'
        FROM generate_series(1, 30) i""", (team_id, one, other))
    # a team whose id shares uuid_hash() with another team's that has entries
    mine, theirs = await colliding(
        database_url, "uuid_hash(v)",
        "SELECT md5(i::text)::uuid AS v FROM generate_series(1, 200000) i")
    await query(database_url, "INSERT INTO teams (id, slug, name, plan) VALUES "
                              "(%s, 'twin', 'Twin', 'professional')", (mine,))
    await query(database_url, "INSERT INTO team_members (team_id, user_id, role) "
                              "VALUES (%s, %s, 'Owner')", (mine, owner["id"]))
    await query(database_url, """
        INSERT INTO audit_logs (team_id, user_email, action, resource, metadata)
        SELECT t, 'p@example.com', %s, 'test', '{}'
        FROM unnest(ARRAY[%s::uuid, %s::uuid]) t, generate_series(1, 7) i""",
                (one, mine, theirs))
    actor = as_actor(owner)
    async with pool.acquire() as conn:
        for action, n in ((one, 10), (other, 20)):
            page = await audit.list_page(conn, actor, uuid.UUID(team_id), limit=50,
                                         filters=audit.Filters(action=action))
            assert [e["action"] for e in page.entries] == [action] * n
            assert page.total == n
            walked, before = [], None
            while True:
                page = await audit.list_page(conn, actor, uuid.UUID(team_id), limit=3,
                                             before=before, filters=audit.Filters(action=action))
                walked += page.entries
                if page.next_before is None:
                    break
                before = page.next_before
            assert len(walked) == n and {e["team_id"] for e in walked} == {uuid.UUID(team_id)}
        choices = await audit.filter_choices(conn, actor, uuid.UUID(team_id))
        assert set(choices["actions"]) & {one, other}  # one of the two (they share a hash)
        for filters, n in ((audit.Filters(), 7), (audit.Filters(action=one), 7),
                           (audit.Filters(person="p@example.com"), 7)):
            page = await audit.list_page(conn, actor, uuid.UUID(str(mine)), limit=50,
                                         filters=filters)
            assert len(page.entries) == n
            assert {e["team_id"] for e in page.entries} == {uuid.UUID(str(mine))}
            if filters != audit.Filters():
                assert page.total == n
        choices = await audit.filter_choices(conn, actor, uuid.UUID(str(mine)))
        assert choices == {"actions": [one], "people": ["p@example.com"]}


async def test_pages_by_offset_and_by_cursor_agree_across_months_and_the_default_partition(
        owner, team_id, database_url, pool, monkeypatch):
    # three past months with partitions of their own, and entries no month covers (the default
    # partition): a page reads month by month, an offset skips whole months by counting them
    await query(database_url, "SELECT cvsm_audit_make_months((now() - interval '3 months')::date,"
                              " now()::date)")
    await query(database_url, """
        INSERT INTO audit_logs (team_id, user_email, action, resource, metadata, created_at)
        SELECT %s, 'p@example.com', CASE WHEN i %% 4 = 0 THEN 'read' ELSE 'update' END, 'test',
               '{}', now() - make_interval(days => i)
        FROM generate_series(1, 80) i""", (team_id,))
    monkeypatch.setattr(listing, "_months_cache", None)
    actor, team = as_actor(owner), uuid.UUID(team_id)
    for filters in (audit.Filters(), audit.Filters(action="read")):
        expected = [r["id"] for r in await query(database_url, f"""
            SELECT id FROM audit_logs WHERE team_id = %s
              {"AND action = 'read'" if filters.action else ""}
            ORDER BY created_at DESC, pos DESC""", (team_id,))]
        async with pool.acquire() as conn:
            for outside in (False, True):
                if outside:  # and now entries in the default partition too
                    await query(database_url, """
                        INSERT INTO audit_logs (team_id, action, resource, created_at)
                        SELECT %s, 'read', 'test', now() - make_interval(years => 5, days => i)
                        FROM generate_series(1, 3) i""", (team_id,))
                    expected = [r["id"] for r in await query(database_url, f"""
                        SELECT id FROM audit_logs WHERE team_id = %s
                          {"AND action = 'read'" if filters.action else ""}
                        ORDER BY created_at DESC, pos DESC""", (team_id,))]
                by_offset = []
                for offset in range(0, len(expected) + 9, 9):
                    page = await audit.list_page(conn, actor, team, limit=9, offset=offset,
                                                 filters=filters)
                    by_offset += [e["id"] for e in page.entries]
                by_cursor, before = [], None
                while True:
                    page = await audit.list_page(conn, actor, team, limit=9, before=before,
                                                 filters=filters)
                    by_cursor += [e["id"] for e in page.entries]
                    if page.next_before is None:
                        break
                    before = page.next_before
                assert by_offset == by_cursor == expected, (filters, outside)
                # the largest offset the API takes is an empty page, never a bigint overflow
                page = await audit.list_page(conn, actor, team, limit=9, offset=2**63 - 1,
                                             filters=filters)
                assert page.entries == [], (filters, outside)


async def test_filter_choices_come_from_sealed_values_within_retention_and_the_unsealed_tail(
        owner, team_id, database_url, pool):
    await query(database_url, "UPDATE teams SET plan = 'professional' WHERE id = %s", (team_id,))
    await query(database_url, """
        INSERT INTO audit_logs (team_id, user_email, action, resource, created_at)
        VALUES (%s, 'Old@Example.com', 'long_ago', 'test', now() - interval '100 days'),
               (%s, 'Recent@Example.com', 'lately', 'test', now() - interval '80 days')""",
                (team_id, team_id))
    async with pool.acquire() as conn, db.cursor(conn) as cur:
        await audit_chain.seal(cur)
    await query(database_url, """
        INSERT INTO audit_logs (team_id, user_email, action, resource)
        VALUES (%s, 'fresh@example.com', 'just_now', 'test')""", (team_id,))
    actor = as_actor(owner)
    async with pool.acquire() as conn:
        choices = await audit.filter_choices(conn, actor, uuid.UUID(team_id))
    # past the team's 90 days (not purged yet): not offered; the unsealed entry: offered
    assert "long_ago" not in choices["actions"] and "old@example.com" not in choices["people"]
    assert {"lately", "just_now", "team_create"} <= set(choices["actions"])
    assert {"recent@example.com", "fresh@example.com", owner["email"].lower()} \
        <= set(choices["people"])
    stored = await query(database_url, "SELECT kind, value FROM audit_choices WHERE team_id = %s",
                         (team_id,))
    assert ("action", "long_ago") in {(r["kind"], r["value"]) for r in stored}
    assert ("action", "just_now") not in {(r["kind"], r["value"]) for r in stored}


async def test_a_deleted_teams_filter_choices_go_with_it_and_its_entries_stay_found(
        team_id, database_url, pool):
    async with pool.acquire() as conn, db.cursor(conn) as cur:
        await audit_chain.seal(cur)
    assert await query(database_url, "SELECT 1 FROM audit_choices WHERE team_id = %s",
                       (team_id,))
    await query(database_url, "DELETE FROM teams WHERE id = %s", (team_id,))
    assert not await query(database_url, "SELECT 1 FROM audit_choices WHERE team_id = %s",
                           (team_id,))
    # the entries' team nulled (by the team's hash, an index probe), their chain kept
    rows = await query(database_url, """
        SELECT a.team_id, s.chain_id FROM audit_logs a JOIN audit_seals s ON s.pos = a.pos
        WHERE s.chain_id = %s""", (team_id,))
    assert rows and all(r["team_id"] is None for r in rows)


async def test_seals_are_written_in_the_entries_order_into_full_pages(database_url):
    # migration 0041: a batch's seals go in by `pos` (the key's right edge), and every index
    # of a month partition fills its pages: ~28.5 B an entry for the seals' key (41-48 B when a
    # batch went in chain by chain, 31.5 at the default fill); ~21 B since the key is on (pos)
    # alone (0043)
    teams = [uuid.uuid4() for _ in range(50)]
    await query(database_url, """
        INSERT INTO audit_logs (team_id, action, resource)
        SELECT (%s::uuid[])[1 + i %% 50], 'read', 'secret' FROM generate_series(1, 20000) i""",
                (teams,))
    while (await query(database_url, "SELECT cvsm_audit_seal(5000, true) AS n"))[0]["n"] == 5000:
        pass
    rows = await query(database_url, """
        SELECT p.part, (SELECT count(*) FROM audit_seals s WHERE s.tableoid = p.part) AS seals,
               (SELECT pg_relation_size(i.indexrelid) FROM pg_index i
                WHERE i.indrelid = p.part AND i.indexrelid::regclass::text ~ '_pos$') AS key_bytes
        FROM (SELECT DISTINCT tableoid AS part FROM audit_seals WHERE chain_id = ANY(%s::uuid[])) p
        """, (teams,))
    assert len(rows) == 1  # this month's partition
    assert rows[0]["seals"] >= 20000
    assert rows[0]["key_bytes"] / rows[0]["seals"] <= 23, rows[0]["key_bytes"] / rows[0]["seals"]
    options = await query(database_url, """
        SELECT DISTINCT c.reloptions FROM pg_inherits p JOIN pg_index i ON i.indrelid = p.inhrelid
        JOIN pg_class c ON c.oid = i.indexrelid
        WHERE p.inhparent IN ('audit_logs'::regclass, 'audit_seals'::regclass)
          AND p.inhrelid::regclass::text ~ '_y[0-9]{4}m[0-9]{2}$'""")
    assert [r["reloptions"] for r in options] == [["fillfactor=100"]]


async def pos_indexes(database_url: str, parent: str) -> list[dict]:
    """Each partition of `parent` with its indexes on (pos) alone: name, unique, fillfactor."""
    return await query(database_url, """
        SELECT h.inhrelid::regclass::text AS part,
               array_agg(i.indexrelid::regclass::text ORDER BY 1)
                   FILTER (WHERE i.indnatts = 1 AND a.attname = 'pos') AS names,
               bool_and(i.indisunique) FILTER (WHERE i.indnatts = 1 AND a.attname = 'pos')
                   AS is_unique,
               bool_or(i.indisprimary) AS has_primary,
               array_agg(DISTINCT array_to_string(c.reloptions, ',')) AS options
        FROM pg_inherits h JOIN pg_index i ON i.indrelid = h.inhrelid
        JOIN pg_class c ON c.oid = i.indexrelid
        LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
        WHERE h.inhparent = %s::regclass GROUP BY 1 ORDER BY 1""", (parent,))


async def second_seal(database_url: str, pos: int) -> None:
    """A copy of the seal of the entry at `pos`, at another seq of its chain."""
    await query(database_url, """
        INSERT INTO audit_seals
        SELECT (jsonb_populate_record(s, jsonb_build_object('seq', s.seq + 1000000))).*
        FROM audit_seals s WHERE s.pos = %s""", (pos,))


async def test_the_keys_are_on_pos_alone_and_an_entry_is_sealed_once_in_every_partition(
        database_url):
    # migration 0043: no (pos, created_at) primary key (24 B of key an entry each); the log's
    # (pos) index and the seals' unique (pos) on every partition: the default, a month made
    # after the migration and one compacted
    now = datetime.now(timezone.utc)
    old = date(now.year - 1, now.month, 1)
    await query(database_url, "SELECT cvsm_audit_make_months(%s, %s)",
                (old, date(old.year + (old.month == 12), old.month % 12 + 1, 1)))
    at = datetime(old.year, old.month, 3, tzinfo=timezone.utc)
    suffix = f"y{old.year:04d}m{old.month:02d}"
    await query(database_url, """
        INSERT INTO audit_logs (action, resource, created_at)
        SELECT 'update', 'test', t FROM unnest(%s::timestamptz[]) t""",
                ([at, at + timedelta(hours=1), now - timedelta(days=36500)],))
    await query(database_url, "SELECT cvsm_audit_seal(1000, true)")
    placed = {r["part"]: r["pos"] for r in await query(database_url, """
        SELECT s.tableoid::regclass::text AS part, max(s.pos) AS pos FROM audit_seals s
        WHERE s.created_at < now() - interval '300 days' GROUP BY 1""")}
    assert set(placed) == {f"audit_seals_{suffix}", "audit_seals_default"}
    for part, pos in placed.items():
        with pytest.raises(psycopg2.errors.UniqueViolation, match=f"{part}_pos"):
            await second_seal(database_url, pos)
    # the month rebuilt by a compaction (nothing cut: everything copied) keeps both
    await query(database_url, "SELECT cvsm_audit_compact_month(%s, '{}', '{}')", (old,))
    with pytest.raises(psycopg2.errors.UniqueViolation, match=f"audit_seals_{suffix}_pos"):
        await second_seal(database_url, placed[f"audit_seals_{suffix}"])
    assert (await query(database_url, f"SELECT count(*) AS n FROM audit_seals_{suffix}"))[0]["n"] \
        == 2
    for parent, unique in (("audit_logs", False), ("audit_seals", True)):
        parts = await pos_indexes(database_url, parent)
        assert {r["part"] for r in parts} >= {f"{parent}_{suffix}", f"{parent}_default"}
        for r in parts:
            assert len(r["names"] or []) == 1 and r["is_unique"] is unique, (parent, r)
            assert not r["has_primary"], (parent, r)
            if r["part"] != f"{parent}_default":  # every index of a month packed (0041)
                assert r["options"] == ["fillfactor=100"], (parent, r)
    names = {r["part"]: r["names"][0] for r in await pos_indexes(database_url, "audit_seals")}
    assert names[f"audit_seals_{suffix}"] == f"audit_seals_{suffix}_pos"
    assert not await query(database_url, """
        SELECT 1 FROM pg_constraint WHERE conrelid IN ('audit_logs'::regclass,
                                                       'audit_seals'::regclass)
          AND contype IN ('p', 'u')""")


async def test_an_upgraded_log_with_a_compacted_month_keeps_its_chain_and_gets_the_pos_keys(
        fresh_database):
    # the primary keys (a compacted month's were its own, attached) go on every partition; the
    # chain written before verifies after, and a second seal is refused in each month
    from cvsm_server.crypto.sealing import Keyring

    url = fresh_database(empty=True)
    team = uuid.uuid4()
    signer = audit_chain.CheckpointSigner(Keyring(bytes(32)))
    now = datetime.now(timezone.utc)
    old = date(now.year - 1, now.month, 1)
    suffix = f"y{old.year:04d}m{old.month:02d}"
    pool = await db.create_pool(url, maxsize=2)
    try:
        assert 41 in await db.migrate(pool, upto=42)  # 0042 too, where it ships
        await query(url, "SELECT cvsm_audit_make_months(%s, %s)",
                    (old, date(old.year + (old.month == 12), old.month % 12 + 1, 1)))
        async with db.cursor(pool) as cur:
            await cur.execute("INSERT INTO teams (id, slug, name) VALUES (%s, 't', 'T')", (team,))
            await cur.execute("""
                INSERT INTO audit_logs (team_id, action, resource, created_at)
                SELECT %s, 'update', 'test', %s + make_interval(mins => i)
                FROM generate_series(1, 3) i""",
                              (team, datetime(old.year, old.month, 2, tzinfo=timezone.utc)))
            for i in range(3):
                await audit.record(cur, None, "before", "test", team_id=team, metadata={"i": i})
            await audit_chain.seal(cur)
        await query(url, "SELECT cvsm_audit_compact_month(%s, '{}', '{}')", (old,))
        assert 43 in await db.migrate(pool)
        async with db.cursor(pool) as cur:
            await audit.record(cur, None, "after", "test", team_id=team)
            assert await audit_chain.seal(cur) == 1
            verdict = await audit_verify.verify_chain(cur, signer, team)
    finally:
        pool.close()
        await pool.wait_closed()
    assert verdict.ok and verdict.checked == 7
    seals = await query(url, "SELECT tableoid::regclass::text AS part, min(pos) AS pos "
                             "FROM audit_seals WHERE chain_id = %s GROUP BY 1", (team,))
    assert len(seals) == 2 and f"audit_seals_{suffix}" in {r["part"] for r in seals}
    for r in seals:
        with pytest.raises(psycopg2.errors.UniqueViolation, match=f"{r['part']}_pos"):
            await second_seal(url, r["pos"])
    for parent, unique in (("audit_logs", False), ("audit_seals", True)):
        for r in await pos_indexes(url, parent):
            assert len(r["names"] or []) == 1 and r["is_unique"] is unique, (parent, r)
            assert not r["has_primary"] and r["options"] == ["fillfactor=100"], (parent, r)


async def test_the_seals_chain_key_fills_its_pages_while_chains_interleave(database_url):
    # migration 0044: the chains' seals interleave, each chain growing at its own place in the
    # key; PostgreSQL keeps a split page full there only for keys of up to 16 B: the chain's
    # 64-bit hash and its seq (28 B a tuple; 36 B an entry here, each chain's last page part
    # full), not its uuid and seq (65 B an entry here: half pages)
    teams = [uuid.uuid4() for _ in range(50)]
    await query(database_url, """
        INSERT INTO audit_logs (team_id, action, resource)
        SELECT (%s::uuid[])[1 + i %% 50], 'read', 'secret' FROM generate_series(1, 40000) i""",
                (teams,))
    while (await query(database_url, "SELECT cvsm_audit_seal(1000, true) AS n"))[0]["n"] == 1000:
        pass
    rows = await query(database_url, """
        SELECT p.part, (SELECT count(*) FROM audit_seals s WHERE s.tableoid = p.part) AS seals,
               (SELECT pg_relation_size(i.indexrelid) FROM pg_index i
                WHERE i.indrelid = p.part AND pg_get_indexdef(i.indexrelid) ~ 'uuid_hash_extended')
               AS key_bytes
        FROM (SELECT DISTINCT tableoid AS part FROM audit_seals WHERE chain_id = ANY(%s::uuid[])) p
        """, (teams,))
    assert len(rows) == 1 and rows[0]["seals"] >= 40000
    assert rows[0]["key_bytes"] / rows[0]["seals"] <= 40, rows[0]["key_bytes"] / rows[0]["seals"]
    # every chain that has a seal is in the registry the pages and jobs list chains from
    listed = await query(database_url, "SELECT count(*) AS n FROM audit_chains "
                                       "WHERE chain_id = ANY(%s::uuid[])", (teams,))
    assert listed[0]["n"] == 50
    # and a chain's seals are found through the key, never by reading the others'
    plan = await query(database_url, """
        EXPLAIN SELECT seq FROM audit_seals
        WHERE uuid_hash_extended(chain_id, 0) = uuid_hash_extended(%(c)s::uuid, 0)
          AND chain_id = %(c)s::uuid ORDER BY seq DESC LIMIT 1""", {"c": teams[0]})
    text = "\n".join(r["QUERY PLAN"] for r in plan)
    assert "Index Scan Backward" in text and "Seq Scan" not in text, text


async def test_every_statement_finds_a_chains_seals_by_the_chain_key(database_url, team_id):
    # migration 0044: a statement naming a chain without its hash would read every seal of
    # every chain (a sequential scan of the seals, seconds at millions); with scans off, the
    # planner still shows one where no index can serve the statement
    from cvsm_server.audit import archive, months, verify
    from datetime import datetime, timezone
    lo, hi = datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 2, 1, tzinfo=timezone.utc)
    args = {"chain": team_id, "chain_id": team_id, "team": team_id, "seq": 1, "pos": -1,
            "page": 100, "lo": 1, "hi": 101, "cap": 102, "marks": [], "after": 0, "last": 100,
            "mark": 0, "start": None, "end": None, "limit": 10}
    statements = {"verify rows": verify._ROWS, "verify check": verify._CHECK,
                  "archive entries": archive._ENTRIES, "export page": audit._EXPORT_PAGE,
                  "list total": audit._TOTAL, "stragglers": months._STRAGGLERS}
    month_statements = {"archive first": archive._FIRST, "month heads": months.HEADS,
                        "month kept": months._KEPT, "month cuts": months._CUTS}
    for name, sql in [*statements.items(), *month_statements.items()]:
        params = {**args, "lo": lo, "hi": hi} if name in month_statements else args
        if name == "stragglers":
            params = {**args, "lo": lo, "hi": hi}
        plan = await query(database_url, "SET enable_seqscan = off; EXPLAIN " + sql, params)
        text = "\n".join(r["QUERY PLAN"] for r in plan)
        assert "Seq Scan on audit_seals" not in text, f"{name}:\n{text}"
