"""The audit log at scale (issue 40), on the real database: pages by cursor equal pages by
offset (filtered or not, ties of time included), a page that runs out of time is a 503 with the
reason, the read rollups match a count of the log, verification in one ordered pass from a
trusted checkpoint, and retention in bounded batches."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import datetime, timedelta, timezone
from html import unescape

import psycopg2
import pytest

from conftest import Api, query, server_url
from cvsm_server.audit import log as audit, chain as audit_chain
from cvsm_server.audit import verify as audit_verify
from cvsm_server import db
from cvsm_server.audit import insights
from cvsm_server.core.actor import Actor
from cvsm_server.web.state import CHECKPOINT_SIGNER


def as_actor(user: dict) -> Actor:
    return Actor.anonymous("127.0.0.1").as_user(uuid.UUID(user["id"]), user["email"])


async def fill(database_url: str, team_id: str, n: int, *, same_time_every: int = 3) -> None:
    """`n` entries of the team, several sharing one created_at (ties the cursor must break)."""
    await query(database_url, """
        INSERT INTO audit_logs (team_id, user_email, action, resource, resource_id, metadata,
                                created_at)
        SELECT %s, CASE WHEN i %% 2 = 0 THEN 'even@example.com' ELSE 'Odd@Example.com' END,
               CASE WHEN i %% 4 = 0 THEN 'read' ELSE 'update' END, 'secret',
               CASE WHEN i %% 5 = 0 THEN 'sid-five' ELSE 'sid-other' END,
               jsonb_build_object('name', CASE WHEN i %% 3 = 0 THEN 'THIRD' ELSE 'OTHER' END),
               now() - make_interval(secs => (i / %s)::int)
        FROM generate_series(1, %s) i""", (team_id, same_time_every, n))


async def walk_api(client, h: dict, team_id: str, limit: int) -> list[str]:
    ids, before, seen = [], None, 0
    while True:
        params = {"limit": limit, **({"before": before} if before else {})}
        body = await (await client.get(f"/api/v1/teams/{team_id}/audit", params=params,
                                       headers=h)).json()
        ids += [e["id"] for e in body["logs"]]
        before = body["next_before"]
        seen += 1
        assert seen < 100
        if before is None:
            return ids


async def test_api_pages_by_cursor_equal_pages_by_offset_ties_included(client, api: Api, owner,
                                                                       team_id, database_url):
    await fill(database_url, team_id, 23)
    h = api.auth(owner["token"])
    by_offset = []
    for offset in range(0, 40, 7):
        body = await (await client.get(f"/api/v1/teams/{team_id}/audit",
                                       params={"limit": 7, "offset": offset}, headers=h)).json()
        by_offset += [e["id"] for e in body["logs"]]
        assert body["total"] == 24  # 23 + team_create, counted without reading them
    by_cursor = await walk_api(client, h, team_id, 7)
    assert by_cursor == by_offset and len(set(by_cursor)) == 24
    # A page written meanwhile does not shift the walk: the cursor holds its place.
    first = await (await client.get(f"/api/v1/teams/{team_id}/audit", params={"limit": 5},
                                    headers=h)).json()
    await api.secret(owner, team_id, "NEW", "v")
    second = await (await client.get(f"/api/v1/teams/{team_id}/audit",
                                     params={"limit": 5, "before": first["next_before"]},
                                     headers=h)).json()
    assert [e["id"] for e in second["logs"]] == by_offset[5:10]
    assert second["total"] == 25
    # An empty cursor is the first page (what a shell loop sends on its first turn).
    empty = await (await client.get(f"/api/v1/teams/{team_id}/audit",
                                    params={"limit": 5, "before": ""}, headers=h)).json()
    assert [e["id"] for e in empty["logs"]][1:] == by_offset[:4]
    for bad in ("x", "12", "1_2_3", "-1_2", "1" * 18 + "_1", "1_" + "9" * 19, "²_1"):
        resp = await client.get(f"/api/v1/teams/{team_id}/audit", params={"before": bad},
                                headers=h)
        assert resp.status == 400
        assert "Kursor" in (await resp.json())["error"]


async def test_filtered_pages_by_cursor_walk_every_match_once(client, api: Api, owner, team_id,
                                                              database_url, pool):
    await fill(database_url, team_id, 60)
    actor, team = as_actor(owner), uuid.UUID(team_id)
    cases = [{}, {"action": "read"}, {"person": "odd@example.com"}, {"secret": "sid-five"},
             {"secret": "THIRD"}, {"secret": "sid-five", "action": "read"}]
    for params in cases:
        filters = audit.Filters.parse(params)
        everything = await query(database_url, "SELECT id, created_at, pos FROM audit_logs "
                                               "WHERE team_id = %s ORDER BY created_at DESC, "
                                               "pos DESC", (team_id,))
        async with pool.acquire() as conn:
            full = await audit.list_page(conn, actor, team, limit=200, filters=filters)
            walked, before = [], None
            while True:
                page = await audit.list_page(conn, actor, team, limit=4, before=before,
                                             filters=filters)
                walked += page.entries
                if page.next_before is None:
                    break
                before = page.next_before
            # and back again, newest-ward, from the last entry
            back, after = [], audit.Cursor.of(walked[-1])
            while True:
                page = await audit.list_page(conn, actor, team, limit=4, after=after,
                                             filters=filters)
                back = page.entries + back
                if not page.newer:
                    break
                after = audit.Cursor.of(page.entries[0])
        ids = [r["id"] for r in walked]
        assert ids == [r["id"] for r in full.entries], params
        assert [r["id"] for r in back] == ids[:-1], params
        assert full.total == len(ids), params
        if not params:
            assert ids == [r["id"] for r in everything]
        else:
            assert 0 < len(ids) < len(everything)


async def test_the_dashboard_walks_the_log_by_cursor_and_page_still_works(client, api: Api, owner,
                                                                          team_id, database_url):
    await fill(database_url, team_id, 120)
    client.session.cookie_jar.update_cookies({"cvsm_session": owner["token"]})
    page = f"/app/teams/{team_id}/audit"
    html = unescape(await (await client.get(page)).text())
    assert "121 entri" in html and "Halaman 1 dari 3" in html
    older = re.search(r'<a href="([^"]+)" rel="next">', html)[1]
    assert "before=" in older and "page=2" in older
    html2 = unescape(await (await client.get(older)).text())
    assert "Halaman 2 dari 3" in html2
    by_page = unescape(await (await client.get(f"{page}?page=2")).text())
    rows = re.compile(r"<tr>.*?</tr>", re.S)
    assert rows.findall(html2) == rows.findall(by_page) and len(rows.findall(html2)) == 51  # a header row and 50
    newer = re.search(r'<a href="([^"]+)" rel="prev">', html2)[1]
    assert "after=" in newer
    assert rows.findall(unescape(await (await client.get(newer)).text())) == rows.findall(html)
    # filtered: counted up to a bound, walked by cursor as well
    html = unescape(await (await client.get(f"{page}?action=read")).text())
    assert "30 entri yang cocok dengan filter" in html
    bad = await client.get(f"{page}?before=nope")
    assert bad.status == 400 and "Kursor" in unescape(await bad.text())


async def test_a_page_that_runs_out_of_time_is_a_503_with_the_reason(client, api: Api, owner,
                                                                      team_id, database_url,
                                                                      monkeypatch):
    monkeypatch.setattr(audit, "PAGE_STATEMENT_SECONDS", 0.5)
    blocker = psycopg2.connect(database_url)
    try:
        with blocker.cursor() as cur:  # the page's statements wait for this lock, and time out
            cur.execute("LOCK TABLE audit_logs IN ACCESS EXCLUSIVE MODE")
        resp = await client.get(f"/api/v1/teams/{team_id}/audit",
                                headers=api.auth(owner["token"]))
    finally:
        blocker.rollback()
        blocker.close()
    assert resp.status == 503 and resp.headers["Retry-After"]
    assert "batas waktu (0.5 detik)" in (await resp.json())["error"]
    ok = await client.get(f"/api/v1/teams/{team_id}/audit", headers=api.auth(owner["token"]))
    assert ok.status == 200


async def test_read_rollups_match_a_count_of_the_log_sealed_or_not(client, api: Api, owner,
                                                                   team_id, database_url, pool):
    secret_id = await api.secret(owner, team_id, "DB_URL", "postgres://s3cret")
    token = (await api.api_token(owner, name="ci-runner"))["token"]
    for credential in (owner["token"], token, token):
        resp = await client.get(f"/api/v1/teams/{team_id}/secrets/{secret_id}",
                                headers=api.auth(credential))
        assert resp.status == 200
    # older reads over several days, one past the window
    await query(database_url, """
        INSERT INTO audit_logs (team_id, user_email, action, resource, resource_id, metadata,
                                ip_address, created_at)
        SELECT %s, 'bot@example.com', 'read', 'secret', %s, '{}', '10.0.0.' || i,
               now() - make_interval(days => i %% 35, secs => i)
        FROM generate_series(1, 140) i""", (team_id, secret_id))
    actor, team, sid = as_actor(owner), uuid.UUID(team_id), uuid.UUID(secret_id)

    async def readers() -> list[tuple]:
        async with pool.acquire() as conn:
            return [(r["email"], r["via_token"], r["reads"], r["ip"], r["at"])
                    for r in await insights.secret_readers(conn, actor, team, sid)]

    unsealed = await readers()  # nothing sealed yet: all from the log's tail
    async with pool.acquire() as conn, db.cursor(conn) as cur:
        assert await audit_chain.seal(cur) > 140
    sealed = await readers()  # all from the rollup now
    # the same readers, last reads and addresses; the rollup counts whole UTC days, so the
    # window's first day may add reads a little older than the window (when the test runs
    # just after midnight UTC, the reads of i % 35 == 30 straddle its start)
    assert [r[:2] + r[3:] for r in sealed] == [r[:2] + r[3:] for r in unsealed]
    for (*_, reads, _ip, _at), (*_, exact, _ip2, _at2) in zip(sealed, unsealed):
        assert exact <= reads <= exact + 4
    in_window = await query(database_url, """
        SELECT user_email, metadata->>'via_token' AS via, count(*) AS n, max(created_at) AS at
        FROM audit_logs WHERE action = 'read' AND resource_id = %s
          AND created_at >= now() - interval '30 days'
        GROUP BY 1, 2""", (secret_id,))
    # whole UTC days: the window's first day may add reads a little older than 30 days
    by_reader = {(r[0], r[1]): (r[2], r[4]) for r in sealed}
    for row in in_window:
        reads, at = by_reader[(row["user_email"], row["via"])]
        assert at == row["at"] and row["n"] <= reads <= row["n"] + 4
    assert by_reader[(owner["email"], "ci-runner")][0] == 2
    assert by_reader[(owner["email"], None)][0] == 1
    rolled = await query(database_url, """
        SELECT (SELECT sum(reads) FROM audit_reads) AS rolled,
               (SELECT count(*) FROM audit_logs WHERE action = 'read') AS logged""")
    assert rolled[0]["rolled"] == rolled[0]["logged"] == 143
    # one more read, not sealed: seen at once, counted once
    await client.get(f"/api/v1/teams/{team_id}/secrets/{secret_id}", headers=api.auth(token))
    after = {(r[0], r[1]): r[2] for r in await readers()}
    assert after[(owner["email"], "ci-runner")] == 3


async def tamper(database_url: str, sql: str, args: tuple) -> None:
    """As the owner with the triggers off, as someone tampering with the log would."""
    conn = psycopg2.connect(database_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SET LOCAL session_replication_role = replica")
            cur.execute(sql, args)
    finally:
        conn.close()


async def test_verification_is_one_ordered_pass_and_resumes_from_a_trusted_checkpoint(
        client, api: Api, owner, team_id, database_url, pool, monkeypatch):
    monkeypatch.setattr(audit_verify, "VERIFY_PAGE", 1000)
    await fill(database_url, team_id, 2600)  # three pages of audit_verify.VERIFY_PAGE
    signer, team = client.app[CHECKPOINT_SIGNER], uuid.UUID(team_id)
    seen: list[tuple[int, int]] = []
    async with pool.acquire() as conn, db.cursor(conn) as cur:
        await audit_chain.seal(cur)
        verdict = await audit_verify.verify_chain(cur, signer, team,
                                                 progress=lambda c, t: seen.append((c, t)))
        assert verdict.ok and verdict.checked == 2601
        assert seen == [(1000, 2601), (2000, 2601), (2601, 2601)]
        mark = await audit_chain.checkpoint_now(cur, signer, team)
        assert mark["seq"] == 2601
    await fill(database_url, team_id, 10)
    # an edit before the trusted checkpoint: the full pass finds it, the resumed one starts after
    await tamper(database_url, "UPDATE audit_logs SET action = 'x' WHERE pos = (SELECT pos FROM "
                               "audit_seals WHERE chain_id = %s AND seq = 100)", (team_id,))
    async with pool.acquire() as conn, db.cursor(conn) as cur:
        await audit_chain.seal(cur)
        full = await audit_verify.verify_chain(cur, signer, team)
        assert full.first_broken["seq"] == 100 and full.checked == 99
        since = await audit_verify.latest_checkpoint(cur, signer, team)
        assert since["seq"] == 2601
        resumed = await audit_verify.verify_chain(cur, signer, team, since=since)
        assert resumed.ok and resumed.checked == 11
    # an edit after it: the resumed pass finds it at its seq
    await tamper(database_url, "UPDATE audit_logs SET ip_address = '10.6.6.6' WHERE pos = "
                               "(SELECT pos FROM audit_seals WHERE chain_id = %s AND seq = 2605)",
                 (team_id,))
    async with pool.acquire() as conn, db.cursor(conn) as cur:
        resumed = await audit_verify.verify_chain(cur, signer, team, since=since)
        assert resumed.first_broken["seq"] == 2605 and "edited" in resumed.first_broken["reason"]
        # the checkpoint's own entry is checked against the signed head
        await tamper(database_url, "UPDATE audit_logs SET action = 'y' WHERE pos = (SELECT pos "
                                   "FROM audit_seals WHERE chain_id = %s AND seq = 2601)",
                     (team_id,))
        resumed = await audit_verify.verify_chain(cur, signer, team, since=since)
        assert resumed.first_broken["seq"] == 2601


async def test_chains_and_heads_are_found_by_index(client, api: Api, owner, team_id, pool):
    other = await api.team(owner, "other-team")
    signer = client.app[CHECKPOINT_SIGNER]
    assert await audit_chain.checkpoint_grown_chains(pool, signer) >= 2  # and account entries
    await api.secret(owner, other, "X", "v")
    assert await audit_chain.checkpoint_grown_chains(pool, signer) == 1
    assert await audit_chain.checkpoint_grown_chains(pool, signer) == 0
    async with pool.acquire() as conn, db.cursor(conn) as cur:
        everything = await audit_verify.chains(cur)
        assert {c["slug"] for c in everything} - {None} == {"acme", "other-team"}
        mine = await audit_verify.chains(cur, team=uuid.UUID(other))
        assert [c["slug"] for c in mine] == ["other-team"]
        # the job's checkpoints (one statement for every chain) are each signed over its head
        for chain in everything:
            verdict = await audit_verify.verify_chain(cur, signer, chain["chain_id"])
            assert verdict.ok and verdict.checkpoint["kind"] == "periodic", chain


async def test_a_sealer_batch_probes_its_entries_months_never_scans_the_log(database_url):
    """The sealer's candidates are probed in their month's seals, and the read rollup's trigger
    joins the sealed batch to the log by probes, never by a hash or merge join over a scan of
    every month (a batch of 1,000 took 1.8 s at 200k entries; migration 0037)."""
    rows = await query(database_url, """
        SELECT p.proname, p.proconfig, p.provolatile, pg_get_functiondef(p.oid) AS body
        FROM pg_proc p
        WHERE p.proname IN ('cvsm_audit_roll_reads', 'cvsm_audit_seal', 'cvsm_audit_hash',
                            'cvsm_audit_canonical')""")
    by_name = {r["proname"]: r for r in rows}
    settings = by_name["cvsm_audit_roll_reads"]["proconfig"]
    assert "enable_hashjoin=off" in settings and "enable_mergejoin=off" in settings
    body = by_name["cvsm_audit_seal"]["body"]
    assert body.count("WHERE s.pos = a.pos AND s.created_at = a.created_at") == 2
    # inlined into the sealer's expression, not run as two SQL functions per entry
    assert by_name["cvsm_audit_hash"]["provolatile"] == "s"
    assert by_name["cvsm_audit_canonical"]["provolatile"] == "s"


async def test_retention_removes_every_expired_entry_in_bounded_batches(
        client, api: Api, owner, team_id, database_url, pool):
    await fill(database_url, team_id, 29)
    signer, team = client.app[CHECKPOINT_SIGNER], uuid.UUID(team_id)
    async with pool.acquire() as conn, db.cursor(conn) as cur:
        await audit_chain.seal(cur)
    # 30 entries; the first 23 past Starter's 30 days (re-chained as if written then)
    await query(database_url, "UPDATE teams SET plan = 'starter' WHERE id = %s", (team_id,))
    before = await query(database_url, "SELECT count(*) AS n FROM audit_logs")
    await backdate_and_rechain(database_url, team_id, 40, 23)
    await query(database_url, """INSERT INTO audit_reads (team_id, secret_id, day, user_email,
                                     token_id, reads, last_at)
                                 SELECT %s, md5('old')::uuid,
                                        (now() - make_interval(days => d))::date, '',
                                        '00000000-0000-0000-0000-000000000000'::uuid, 1,
                                        now() - make_interval(days => d)
                                 FROM unnest(ARRAY[45, 31, 29]) d""", (team_id,))
    removed = await audit_chain.purge_expired(pool, signer, batch=5)
    assert removed == 23
    days = await query(database_url, "SELECT (now()::date - day) AS age FROM audit_reads "
                                     "WHERE secret_id = md5('old')::uuid")
    assert [r["age"] for r in days] == [29]  # the rollup's days past Starter's 30 went too
    left = await query(database_url, "SELECT min(seq) AS first, count(*) AS n FROM audit_seals "
                                     "WHERE chain_id = %s", (team_id,))
    assert left[0]["first"] == 24 and left[0]["n"] == 7
    assert (await query(database_url, "SELECT count(*) AS n FROM audit_logs"))[0]["n"] == \
        before[0]["n"] - 23
    # five purge checkpoints were signed (one a batch); the thinning kept the anchor only
    marks = await query(database_url, "SELECT seq, kind FROM audit_checkpoints "
                                      "WHERE chain_id = %s", (team_id,))
    assert marks == [{"seq": 23, "kind": "purge"}]
    async with pool.acquire() as conn, db.cursor(conn) as cur:
        verdict = await audit_verify.verify_chain(cur, signer, team)
    assert verdict.ok and verdict.checked == 7
    assert await audit_chain.purge_expired(pool, signer, batch=5) == 0


async def backdate_and_rechain(database_url: str, team_id: str, days: int, upto: int) -> None:
    """Move the chain's first `upto` entries `days` into the past and re-seal the whole chain
    with the database's own hash function, as if they had been written then."""
    await tamper(database_url, """
        UPDATE audit_logs SET created_at = created_at - make_interval(days => %s)
        WHERE pos IN (SELECT pos FROM audit_seals WHERE chain_id = %s AND seq <= %s)""",
                 (days, team_id, upto))
    await tamper(database_url, """
        UPDATE audit_seals SET created_at = created_at - make_interval(days => %s)
        WHERE chain_id = %s AND seq <= %s""", (days, team_id, upto))  # the seal's copy (0024)
    rows = await query(database_url, """
        SELECT s.pos, s.seq, a.id, a.created_at, a.user_email, a.action, a.resource,
               a.resource_id, a.ip_address, a.user_agent, a.metadata::text AS metadata_text,
               s.chain_id
        FROM audit_seals s JOIN audit_logs a ON a.pos = s.pos
        WHERE s.chain_id = %s ORDER BY s.seq""", (team_id,))
    prev = audit_chain.GENESIS
    updates = []
    for row in rows:
        row["prev_hash"] = prev
        digest = audit_chain.entry_hash(row)
        updates.append((digest, row["pos"]))
        prev = digest
    conn = psycopg2.connect(database_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SET LOCAL session_replication_role = replica")
            cur.executemany("UPDATE audit_seals SET hash = %s WHERE pos = %s", updates)
    finally:
        conn.close()


async def test_checkpoints_are_thinned_as_they_age_and_verification_still_holds(
        client, api: Api, owner, team_id, database_url, pool):
    signer, team = client.app[CHECKPOINT_SIGNER], uuid.UUID(team_id)
    await fill(database_url, team_id, 9)
    async with pool.acquire() as conn, db.cursor(conn) as cur:
        await audit_chain.seal(cur)
        heads = await db.fetchall(cur, "SELECT seq, hash FROM audit_seals WHERE chain_id = %s "
                                       "ORDER BY seq", (team,))
    # a checkpoint at every entry: 1-5 signed 3 days ago, 6-8 two days ago, 9-10 today
    now = datetime.now(timezone.utc)
    rows = []
    for head in heads:
        at = now - timedelta(days=3 if head["seq"] <= 5 else 2 if head["seq"] <= 8 else 0)
        message = audit_chain.checkpoint_message(team, head["seq"], bytes(head["hash"]),
                                                 "periodic", at)
        rows.append((team_id, team_id, head["seq"], bytes(head["hash"]), "periodic", at,
                     signer.key_id, signer.public_key, signer.sign(message)))
    conn = psycopg2.connect(database_url)
    try:
        with conn, conn.cursor() as cur:
            cur.executemany("""INSERT INTO audit_checkpoints (chain_id, team_id, seq, head_hash,
                               kind, signed_at, key_id, public_key, signature)
                               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)""", rows)
    finally:
        conn.close()
    async with pool.acquire() as conn, db.cursor(conn) as cur:
        assert await audit_chain.thin_checkpoints(cur) == 6
        kept = [r["seq"] for r in await db.fetchall(
            cur, "SELECT seq FROM audit_checkpoints ORDER BY seq")]
        verdict = await audit_verify.verify_chain(cur, signer, team)
    # the last of each past day, and every one of the kept span (today)
    assert kept == [5, 8, 9, 10] and verdict.ok and verdict.checked == 10
    with pytest.raises(psycopg2.errors.InsufficientPrivilege):
        await query(server_url(database_url), "DELETE FROM audit_checkpoints")


async def test_the_walks_canonical_text_is_the_canonical_one(client, team_id, database_url,
                                                             pool):
    """The verification walk's canonical text, written out by the database (built-in functions
    only), is `canonical` of the same entry byte for byte: escapes, control characters,
    non-ASCII, nulls, a time given outside UTC; the chain of such entries verifies, and an edit
    of one of them does not."""
    signer, team = client.app[CHECKPOINT_SIGNER], uuid.UUID(team_id)
    await query(database_url, """
        INSERT INTO audit_logs (team_id, user_email, action, resource, resource_id, ip_address,
                                user_agent, metadata, created_at)
        VALUES (%s, 'dï"na\\@example.com', 'read', 'secret', NULL, NULL, %s,
                '{"name": "Ω", "q": "\\"x\\"", "t": "a\\tb\\u0002"}',
                '2026-03-02 06:00:00.999999+07'),
               (%s, NULL, 'update', 'secret', 'sid', '10.0.0.1', NULL, '{}',
                '2026-03-01 23:59:59.000005+00')""",
                (team_id, "ua\n\t\u0001\u007f/1 \u2028", team_id))
    async with pool.acquire() as conn, db.cursor(conn) as cur:
        await audit_chain.seal(cur)
        rows = await db.fetchall(cur, f"""
            SELECT {audit_verify._CANONICAL_SQL.replace("PREV", "p.prev_hash")} AS text, a.*,
                   a.metadata::text AS metadata_text, s.chain_id, s.seq, p.prev_hash, s.hash
            FROM audit_seals s JOIN audit_logs a ON a.pos = s.pos
            CROSS JOIN LATERAL (SELECT cvsm_audit_prev_hash(s.chain_id, s.seq) AS prev_hash) p
            WHERE s.chain_id = %s AND a.resource = 'secret' ORDER BY s.seq""", (team,))
        assert len(rows) == 2
        for row in rows:
            assert row["text"].encode() == audit_chain.canonical(row)
            assert bytes(row["hash"]) == audit_chain.entry_hash(row)
        assert (await audit_verify.verify_chain(cur, signer, team)).ok
    await tamper(database_url, "UPDATE audit_logs SET user_agent = 'ua' WHERE pos = %s",
                 (rows[0]["pos"],))
    async with pool.acquire() as conn, db.cursor(conn) as cur:
        verdict = await audit_verify.verify_chain(cur, signer, team)
    assert verdict.first_broken == {"seq": rows[0]["seq"],
                                    "reason": "its content does not match its hash (edited)"}


async def test_cli_verify_resumes_from_a_checkpoint_and_reports_progress(
        client, api: Api, owner, team_id, database_url, pool, tmp_path):
    from test_audit_chain import run_verify

    await fill(database_url, team_id, 30)
    async with pool.acquire() as conn, db.cursor(conn) as cur:
        await audit_chain.seal(cur)
        await audit_chain.checkpoint_now(cur, client.app[CHECKPOINT_SIGNER], uuid.UUID(team_id))
    await fill(database_url, team_id, 4)
    whole = await asyncio.to_thread(run_verify, database_url, tmp_path, "--team", "acme",
                                    "--progress")
    assert whole.returncode == 0, whole.stderr
    assert "team acme: intact, 35 entries, signed checkpoint at seq 31" in whole.stdout
    assert "team acme: 35 of 35 entries checked" in whole.stderr
    resumed = await asyncio.to_thread(run_verify, database_url, tmp_path, "--team", "acme",
                                      "--from-checkpoint")
    assert resumed.returncode == 0, resumed.stderr
    assert "team acme: intact, 5 entries from the checkpoint at seq 31" in resumed.stdout


async def test_a_verification_page_probes_the_entries_of_its_seals_never_scans_the_log(
        client, team_id, database_url):
    """Each page of the walk is a nested loop: the seals' key from the cursor, then one probe
    per seal of its entry's month; never a join over a scan of the log, whatever the costs the
    planner sees (index probes made dear here, as many partitions make them: a page then read
    the whole log, a chain's verification quadratic, 256 s for 2M entries)."""
    await fill(database_url, team_id, 50)
    await query(database_url, "SELECT cvsm_audit_seal(5000, true)")
    conn = psycopg2.connect(database_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SET LOCAL random_page_cost = 1000")
            cur.execute("EXPLAIN (FORMAT JSON) " + audit_verify._ROWS,
                        {"chain": team_id, "seq": 0, "pos": -1, "page": 5000})
            plans = [cur.fetchone()[0][0]["Plan"]]
            # the page the database checks, likewise
            cur.execute("EXPLAIN (FORMAT JSON) " + audit_verify._CHECK,
                        {"chain": team_id, "lo": 1, "hi": 20001, "pos": None, "cap": 20002,
                         "marks": [5, 9]})
            plans.append(cur.fetchone()[0][0]["Plan"])
    finally:
        conn.close()
    for plan in plans:
        nodes = []

        def walk(node: dict) -> None:
            nodes.append(node["Node Type"])
            for child in node.get("Plans", ()):
                walk(child)

        walk(plan)
        assert "Nested Loop" in nodes and "Hash Join" not in nodes and "Merge Join" not in nodes


async def test_pages_checked_by_the_database_give_the_walks_verdicts(
        client, team_id, database_url, pool, monkeypatch):
    """Whole-chain verification checks pages in the database, several at once, and walks a page
    row by row only where something is off: its verdict is the row-by-row walk's, whatever is
    broken and wherever (a page's first, middle or last entry, a seq twice, a checkpoint's head,
    a tail, a start after a purge, from a trusted checkpoint)."""
    monkeypatch.setattr(audit_verify, "VERIFY_PAGE", 10)
    signer = client.app[CHECKPOINT_SIGNER]
    owner_pool = await db.create_pool(database_url, maxsize=1)

    async def sign(chain: uuid.UUID, seq: int, head: bytes, kind: str) -> None:
        async with db.cursor(owner_pool) as cur:
            await audit_chain.write_checkpoint(cur, signer, chain, seq, head, kind)

    async def hash_at(chain: uuid.UUID, seq: int) -> bytes:
        return bytes((await query(database_url, "SELECT hash FROM audit_seals WHERE chain_id = %s "
                                                "AND seq = %s", (chain, seq)))[0]["hash"])

    at = "pos IN (SELECT pos FROM audit_seals WHERE chain_id = %s AND seq {})"

    def twice(seq: int) -> list[tuple[str]]:
        """Entry `seq` moved to another month with the seq before it (each month's key is
        unique, not the whole table's)."""
        return [(f"UPDATE audit_logs SET created_at = created_at - interval '40 days' WHERE "
                 + at.format(f"= {seq}"),),
                (f"UPDATE audit_seals SET seq = {seq - 1}, created_at = created_at - "
                 f"interval '40 days' WHERE chain_id = %s AND seq = {seq}",)]

    def on(sql: str, seqs: str) -> list[tuple[str]]:
        return [(f"{sql} WHERE {at.format(seqs)}",)]

    def seals(sql: str) -> tuple[str]:
        return (f"UPDATE audit_seals SET {sql}",)

    cases = {
        "intact": [],
        "edited, a page's middle": on("UPDATE audit_logs SET action = 'x'", "= 25"),
        "edited, a page's first": on("UPDATE audit_logs SET action = 'x'", "= 21"),
        "edited, a page's last": on("UPDATE audit_logs SET metadata = '{}'", "= 30"),
        "edited, the last": on("UPDATE audit_logs SET user_agent = 'u'", "= 63"),
        "deleted, a page's first": on("DELETE FROM audit_logs", "= 31"),
        "deleted, a page's last": on("DELETE FROM audit_logs", "= 40"),
        "deleted, a whole page": on("DELETE FROM audit_logs", "BETWEEN 31 AND 52"),
        "deleted, the tail past a checkpoint": on("DELETE FROM audit_logs", ">= 44"),
        "deleted, the first": on("DELETE FROM audit_logs", "= 1"),
        "a hash rewritten": [seals("hash = sha256(hash) WHERE chain_id = %s AND seq = 41")],
        "a seq twice": twice(21),
        "a seq twice, at a page's end": twice(11),
        "reordered": [seals("seq = -seq WHERE chain_id = %s AND seq IN (33, 34)"),
                      seals("seq = 67 + seq WHERE chain_id = %s AND seq IN (-33, -34)")],
    }
    for number, (name, statements) in enumerate([*cases.items(), ("a checkpoint's head", []),
                                                  ("after a purge", []), ("since", [])]):
        chain = (await query(database_url, "INSERT INTO teams (slug, name) VALUES (%s, 'T') "
                                           "RETURNING id", (f"case-{number}",)))[0]["id"]
        await fill(database_url, str(chain), 20)
        async with db.cursor(pool) as cur:
            await audit_chain.seal(cur)
            await audit_chain.checkpoint_now(cur, signer, chain)  # a head at seq 20
        await fill(database_url, str(chain), 43)
        async with db.cursor(pool) as cur:
            await audit_chain.seal(cur)
            await audit_chain.checkpoint_now(cur, signer, chain)  # and at seq 63
        since = None
        if name == "a checkpoint's head":
            await sign(chain, 35, await hash_at(chain, 36), "demand")
        elif name == "after a purge":
            await sign(chain, 12, await hash_at(chain, 12), "purge")
            await tamper(database_url, "DELETE FROM audit_logs WHERE " + at.format("<= 12"),
                         (chain,))
        elif name == "since":
            async with db.cursor(pool) as cur:
                since = (await db.fetchall(cur, "SELECT * FROM audit_checkpoints WHERE "
                                                "chain_id = %s AND seq = 20", (chain,)))[0]
            await tamper(database_url, "UPDATE audit_logs SET action = 'x' WHERE "
                                       + at.format("= 48"), (chain,))
        for statement in statements:
            await tamper(database_url, statement[0], (chain,))
        verdicts = []
        for walked in (False, True):
            if walked:  # the reference: no page checked by the database, all walked
                monkeypatch.setattr(audit_verify, "_CHECK", "SELECT NULL WHERE false")
            seen: list[tuple[int, int]] = []
            async with pool.acquire() as conn, db.cursor(conn) as cur:
                verdict = await audit_verify.verify_chain(
                    cur, signer, chain, since=since, pool=None if walked else pool, workers=3,
                    progress=lambda c, t: seen.append((c, t)))
            verdicts.append((verdict.as_json(), seen[-1] if seen else None))
            monkeypatch.undo()
            monkeypatch.setattr(audit_verify, "VERIFY_PAGE", 10)
        assert verdicts[0] == verdicts[1], name
        if name == "deleted, a page's last":
            assert verdicts[0][0]["first_broken"] == {"seq": 40, "reason": "entry 40 is missing"}
        assert verdicts[0][0]["ok"] is (name == "intact" or name == "after a purge"), name
    owner_pool.close()
    await owner_pool.wait_closed()


async def test_an_entry_gone_at_a_pages_end_does_not_end_the_walk(client, team_id, database_url,
                                                                   pool, monkeypatch):
    """A seal whose entry is gone, the last of a page of the row-by-row walk: the walk goes on
    and finds the entry missing (it used to take the short page for the chain's end: intact)."""
    monkeypatch.setattr(audit_verify, "VERIFY_PAGE", 10)
    monkeypatch.setattr(audit_verify, "_CHECK", "SELECT NULL WHERE false",  # the walk alone
                        raising=False)
    await fill(database_url, team_id, 25)
    async with db.cursor(pool) as cur:
        await audit_chain.seal(cur)
    await tamper(database_url, "DELETE FROM audit_logs WHERE pos = (SELECT pos FROM audit_seals "
                               "WHERE chain_id = %s AND seq = 10)", (team_id,))
    async with db.cursor(pool) as cur:
        verdict = await audit_verify.verify_chain(cur, client.app[CHECKPOINT_SIGNER],
                                                  uuid.UUID(team_id))
    assert verdict.first_broken == {"seq": 10, "reason": "entry 10 is missing"}
    assert verdict.checked == 9
