"""The audit hash chains (migrations 0010 and 0012, audit/chain.py): every writer's entry is
sealed into its chain after it commits, concurrent appenders and sealers in several connections
and processes keep one gap-free order, signed checkpoints, and verification (API and
`cvsm-server audit verify`) finding an entry edited, deleted or inserted by a superuser with the
triggers off, and still passing after a retention purge."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import psycopg2
import pytest

from cvsm_server.audit import log as audit, chain as audit_chain, verify as audit_verify
from cvsm_server import db
from cvsm_server.crypto.sealing import Keyring
from cvsm_server.web.state import CHECKPOINT_SIGNER, POOL
from conftest import JWT_SECRET, MASTER_KEY, Api, query, server_url

CONSOLE_SCRIPT = Path(sys.executable).with_name("cvsm-server")
ROWS = """SELECT id, chain_id, seq, created_at, user_email, action, resource, resource_id, ip_address,
                 user_agent, metadata::text AS metadata_text,
                 cvsm_audit_prev_hash(chain_id, seq) AS prev_hash, hash, team_id
          FROM audit_chain_entries WHERE chain_id = %s ORDER BY seq"""
# The entries of a chain at seq positions (`AT.format("= 3")`), for tampering statements.
AT = "pos IN (SELECT pos FROM audit_seals WHERE chain_id = %s AND seq {})"
UNSEALED = "NOT EXISTS (SELECT 1 FROM audit_seals s WHERE s.pos = audit_logs.pos)"


async def sealed_rows(database_url: str, chain_id) -> list[dict]:
    """Seal (`audit_chain.seal`, as the server's role), then the chain's entries in order."""
    pool = await db.create_pool(server_url(database_url), maxsize=1)
    try:
        async with db.cursor(pool) as cur:
            await audit_chain.seal(cur)
    finally:
        pool.close()
        await pool.wait_closed()
    return await query(database_url, ROWS, (chain_id,))


async def as_superuser(database_url: str, *statements: tuple[str, tuple]) -> None:
    """Run statements as the owner with the triggers off (`session_replication_role = replica`),
    as someone tampering with the log would."""
    conn = psycopg2.connect(database_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SET LOCAL session_replication_role = replica")
            for sql, args in statements:
                cur.execute(sql, args)
    finally:
        conn.close()


async def verify(client, api: Api, user, team_id: str) -> dict:
    resp = await client.get(f"/api/v1/teams/{team_id}/audit/verify", headers=api.auth(user["token"]))
    assert resp.status == 200
    return await resp.json()


async def busy_team(client, api: Api, owner, team_id: str, reads: int = 3) -> None:
    h = api.auth(owner["token"])
    sid = await api.secret(owner, team_id, f"S_{uuid.uuid4().hex[:8]}", "v")
    for _ in range(reads):
        assert (await client.get(f"/api/v1/teams/{team_id}/secrets/{sid}", headers=h)).status == 200
    await seal_now(client)


async def seal_now(client) -> int:
    """What the server's sealing job does, now, on the app's own pool."""
    async with db.cursor(client.app[POOL]) as cur:
        return await audit_chain.seal(cur)


async def test_every_writer_links_its_entry_and_python_recomputes_each_hash(client, api: Api, owner,
                                                                            team_id, database_url):
    h = {**api.auth(owner["token"]), "User-Agent": 'ua "quoted" \\ \t end'}
    sid = await api.secret(owner, team_id, "A", "v")
    await client.get(f"/api/v1/teams/{team_id}/secrets/{sid}", headers=h)  # the inline INSERT
    await client.put(f"/api/v1/teams/{team_id}/secrets/{sid}", headers=h, json={"value": "w"})
    # Text the API cannot bring (non-ASCII, control characters) still hashes alike.
    await query(server_url(database_url), """INSERT INTO audit_logs (team_id, action, resource,
        user_agent, metadata) VALUES (%s, 'x', 'x', %s, %s::jsonb)""",
        (team_id, 'é 😀 \x01 \x1f "q" \\ \n\r\b\f/', '{"b": [1.50, 2e3, "é\\u0001"], "a": null}'))
    unsealed = await query(database_url, "SELECT count(*) AS n FROM audit_logs WHERE team_id = %s "
                                         f"AND {UNSEALED}", (team_id,))
    assert unsealed[0]["n"] == 5  # committed, not yet in the chain
    rows = await sealed_rows(database_url, team_id)
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1)) and len(rows) == 5
    assert bytes(rows[0]["prev_hash"]) == audit_chain.GENESIS
    for before, row in zip(rows, rows[1:]):
        assert bytes(row["prev_hash"]) == bytes(before["hash"])
    for row in rows:
        assert audit_chain.entry_hash(row) == bytes(row["hash"])
        sql = await query(database_url, """SELECT cvsm_audit_canonical(chain_id, seq, id, created_at,
            user_email, action, resource, resource_id, ip_address, user_agent, metadata,
            cvsm_audit_prev_hash(chain_id, seq)) AS c FROM audit_chain_entries WHERE id = %s""",
            (row["id"],))
        assert sql[0]["c"].encode() == audit_chain.canonical(row)
    # Entries without a team (sign-in) form the account chain.
    await client.post("/api/v1/auth/login", json={"identifier": owner["email"], "password": "nope"})
    await client.post("/api/v1/me/logout-all", headers=api.auth(owner["token"]))
    account = await sealed_rows(database_url, audit_chain.ACCOUNT_CHAIN)
    assert len(account) >= 1 and [r["seq"] for r in account] == list(range(1, len(account) + 1))
    assert all(r["team_id"] is None for r in account)


async def test_concurrent_appenders_and_sealers_keep_one_gap_free_order(client, api: Api, owner,
                                                                       team_id, database_url):
    async def append(n: int) -> None:
        pool = await db.create_pool(server_url(database_url), maxsize=1)
        try:
            for i in range(n):
                async with db.pool_transaction(pool) as cur:
                    await audit.record(cur, None, "test", "test", team_id=uuid.UUID(team_id),
                                       metadata={"i": i})
                if i % 5 == 4:  # each appender also seals now and then, as every server does
                    await audit_chain.seal_pending(pool)
        finally:
            pool.close()
            await pool.wait_closed()

    await asyncio.gather(*(append(25) for _ in range(6)))
    rows = await sealed_rows(database_url, team_id)
    assert [r["seq"] for r in rows] == list(range(1, 152))
    body = await verify(client, api, owner, team_id)
    assert body == {"ok": True, "checked": 151, "first_broken": None, "checkpoint": None}


async def test_two_processes_appending_to_one_chain_keep_one_order(client, api: Api, owner, team_id,
                                                                   database_url):
    script = textwrap.dedent("""
        import sys, psycopg2
        conn = psycopg2.connect(sys.argv[1])
        conn.autocommit = True
        cur = conn.cursor()
        for i in range(150):
            cur.execute("INSERT INTO audit_logs (team_id, action, resource) VALUES (%s, 'p', 'p')",
                        (sys.argv[2],))
            if i % 10 == 9:
                cur.execute("SELECT cvsm_audit_seal(5000, false)")
        conn.close()
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, server_url(database_url), team_id])
             for _ in range(2)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    rows = await sealed_rows(database_url, team_id)
    assert [r["seq"] for r in rows] == list(range(1, 302))
    assert (await verify(client, api, owner, team_id))["ok"] is True


async def test_a_rolled_back_entry_leaves_no_gap(client, api: Api, owner, team_id, database_url):
    conn = psycopg2.connect(server_url(database_url))
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO audit_logs (team_id, action, resource) VALUES (%s, 'x', 'x')",
                        (team_id,))
        conn.rollback()
    finally:
        conn.close()
    await query(server_url(database_url),
                "INSERT INTO audit_logs (team_id, action, resource) VALUES (%s, 'y', 'y')", (team_id,))
    rows = await sealed_rows(database_url, team_id)
    assert [(r["seq"], r["action"]) for r in rows] == [(1, "team_create"), (2, "y")]


async def test_the_server_role_cannot_forge_chain_fields_or_touch_checkpoints(client, api: Api, owner,
                                                                              team_id, database_url):
    app_url = server_url(database_url)
    for column, value in (("pos", 1), ("id", uuid.uuid4()), ("created_at", "2020-01-01")):
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            await query(app_url, f"""INSERT INTO audit_logs (team_id, action, resource, {column})
                                     VALUES (%s, 'forged', 'x', %s)""", (team_id, value))
    with pytest.raises(psycopg2.errors.InsufficientPrivilege):  # the chain fields are the sealer's
        await query(app_url, """INSERT INTO audit_seals (pos, chain_id, seq, hash)
                                 VALUES (99, %s, 99, '\\x00')""", (team_id,))
    await query(app_url, "INSERT INTO audit_logs (team_id, action, resource) VALUES (%s, 'y', 'x')",
                (team_id,))
    resp = await client.post(f"/api/v1/teams/{team_id}/audit/checkpoints",
                             headers=api.auth(owner["token"]))
    assert resp.status == 201 and (await resp.json())["checkpoint"]["seq"] == 2
    for sql in ("UPDATE audit_checkpoints SET seq = 1", "DELETE FROM audit_checkpoints",
                "UPDATE audit_seals SET seq = 7", "DELETE FROM audit_seals",
                "UPDATE audit_logs SET pos = 7", "DELETE FROM audit_logs"):
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            await query(app_url, sql)
    # Even the owner cannot re-seal a sealed entry or unseal it, with the triggers on.
    for sql in ("DELETE FROM audit_seals", "UPDATE audit_seals SET seq = seq + 10"):
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            await query(database_url, sql + " WHERE chain_id = %s", (team_id,))


async def test_verify_reports_an_edited_entry_at_its_seq(client, api: Api, owner, team_id, database_url):
    await busy_team(client, api, owner, team_id)
    assert (await verify(client, api, owner, team_id))["ok"] is True
    await as_superuser(database_url, ("UPDATE audit_logs SET ip_address = '10.6.6.6' "
                                      "WHERE " + AT.format("= 3"), (team_id,)))
    body = await verify(client, api, owner, team_id)
    assert body["ok"] is False and body["first_broken"]["seq"] == 3
    assert "edited" in body["first_broken"]["reason"] and body["checked"] == 2


async def test_verify_reports_a_deleted_entry_at_its_seq(client, api: Api, owner, team_id, database_url):
    await busy_team(client, api, owner, team_id)
    await as_superuser(database_url, ("DELETE FROM audit_logs WHERE " + AT.format("= 4"),
                                      (team_id,)))
    body = await verify(client, api, owner, team_id)
    assert body["first_broken"] == {"seq": 4, "reason": "entry 4 is missing"}


async def test_verify_reports_a_deleted_tail_covered_by_a_checkpoint(client, api: Api, owner, team_id,
                                                                     database_url):
    await busy_team(client, api, owner, team_id)  # seq 1..5
    h = api.auth(owner["token"])
    assert (await client.post(f"/api/v1/teams/{team_id}/audit/checkpoints", headers=h)).status == 201
    await as_superuser(database_url, ("DELETE FROM audit_logs WHERE " + AT.format(">= 4"),
                                      (team_id,)))
    body = await verify(client, api, owner, team_id)
    assert body["ok"] is False and body["first_broken"]["seq"] == 4


async def test_verify_reports_an_inserted_entry_at_its_seq(client, api: Api, owner, team_id,
                                                           database_url):
    await busy_team(client, api, owner, team_id)  # seq 1..5
    rows = await sealed_rows(database_url, team_id)
    # A row slipped in after seq 3 (seq 4 and 5 renumbered), hashed correctly on its own.
    forged = {**rows[3], "id": uuid.uuid4(), "action": "read", "seq": 4,
              "prev_hash": bytes(rows[2]["hash"]), "user_email": "ghost@example.com"}
    forged["hash"] = audit_chain.entry_hash(forged)
    await as_superuser(
        database_url,
        ("UPDATE audit_seals SET seq = -seq WHERE chain_id = %s AND seq >= 4", (team_id,)),
        ("UPDATE audit_seals SET seq = 1 - seq WHERE chain_id = %s AND seq < 0", (team_id,)),
        ("""INSERT INTO audit_logs (id, team_id, user_email, action, resource, resource_id,
                                    ip_address, user_agent, metadata, created_at)
            VALUES (%s, %s, %s, 'read', %s, %s, %s, %s, %s::jsonb, %s)""",
         (str(forged["id"]), team_id, forged["user_email"], forged["resource"],
          forged["resource_id"], forged["ip_address"], forged["user_agent"],
          forged["metadata_text"], forged["created_at"])),
        ("""INSERT INTO audit_seals (pos, chain_id, seq, hash, created_at)
            SELECT pos, %s, 4, %s, created_at FROM audit_logs WHERE id = %s""",
         (team_id, forged["hash"], str(forged["id"]))),
    )
    body = await verify(client, api, owner, team_id)
    assert body["ok"] is False and body["first_broken"]["seq"] == 5
    assert body["checked"] == 4


async def test_verify_passes_after_a_retention_purge_and_chain_goes_on(client, api: Api, owner,
                                                                       team_id, database_url):
    await busy_team(client, api, owner, team_id)  # seq 1..5
    # The first three entries are 100 days old (moved back with the triggers off, as a test),
    # past the professional plan's 90 days of retention.
    await as_superuser(database_url, ("UPDATE audit_logs SET created_at = created_at - interval '100 days'"
                                      " WHERE " + AT.format("<= 3"), (team_id,)))
    pool = await db.create_pool(server_url(database_url), maxsize=1)
    try:
        assert await audit.purge_expired(pool, client.app[CHECKPOINT_SIGNER]) == 3
    finally:
        pool.close()
        await pool.wait_closed()
    body = await verify(client, api, owner, team_id)
    assert body["ok"] is True and body["checked"] == 2
    assert body["checkpoint"]["seq"] == 3 and body["checkpoint"]["kind"] == "purge"
    await busy_team(client, api, owner, team_id, reads=0)  # seq 6 links to 5
    assert (await verify(client, api, owner, team_id))["checked"] == 3
    # Deleting the new first entry is still caught, though a checkpoint precedes the gap.
    await as_superuser(database_url, ("DELETE FROM audit_logs WHERE " + AT.format("= 4"),
                                      (team_id,)))
    assert (await verify(client, api, owner, team_id))["first_broken"]["seq"] == 4


async def test_a_forged_checkpoint_is_refused(client, api: Api, owner, team_id, database_url):
    await busy_team(client, api, owner, team_id, reads=0)
    h = api.auth(owner["token"])
    assert (await client.post(f"/api/v1/teams/{team_id}/audit/checkpoints", headers=h)).status == 201
    await as_superuser(database_url, ("UPDATE audit_checkpoints SET signed_at = signed_at - interval '1 s'",
                                      ()))
    body = await verify(client, api, owner, team_id)
    assert body["ok"] is False and "signature" in body["first_broken"]["reason"]


async def test_verify_and_checkpoint_need_admin(client, api: Api, owner, team_id):
    member = await api.register()
    await api.add_member(owner, team_id, member, "Member")
    h = api.auth(member["token"])
    assert (await client.get(f"/api/v1/teams/{team_id}/audit/verify", headers=h)).status == 403
    assert (await client.post(f"/api/v1/teams/{team_id}/audit/checkpoints", headers=h)).status == 403


async def test_checkpoint_job_signs_only_chains_that_grew(client, api: Api, owner, team_id, database_url):
    signer = client.app[CHECKPOINT_SIGNER]
    pool = await db.create_pool(server_url(database_url), maxsize=1)
    try:
        first = await audit_chain.checkpoint_grown_chains(pool, signer)
        assert first >= 1
        assert await audit_chain.checkpoint_grown_chains(pool, signer) == 0
        await busy_team(client, api, owner, team_id, reads=0)
        assert await audit_chain.checkpoint_grown_chains(pool, signer) == 1
    finally:
        pool.close()
        await pool.wait_closed()
    marks = await query(database_url, "SELECT seq, kind FROM audit_checkpoints WHERE chain_id = %s "
                                      "ORDER BY seq", (team_id,))
    assert [(m["seq"], m["kind"]) for m in marks] == [(1, "periodic"), (2, "periodic")]


def run_verify(database_url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
    env.update({"CVSM_DATABASE_URL": server_url(database_url),
                "CVSM_MIGRATION_DATABASE_URL": database_url, "CVSM_DATA_DIR": str(tmp_path / "cli"),
                "CVSM_MASTER_KEY": MASTER_KEY, "CVSM_JWT_SECRET": JWT_SECRET})
    return subprocess.run([str(CONSOLE_SCRIPT), "audit", "verify", *args], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


async def test_cli_audit_verify_exits_0_when_intact_and_1_at_the_first_broken_link(
        client, api: Api, owner, team_id, database_url, tmp_path):
    await busy_team(client, api, owner, team_id)
    slug = (await query(database_url, "SELECT slug FROM teams WHERE id = %s", (team_id,)))[0]["slug"]
    ok = await asyncio.to_thread(run_verify, database_url, tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert f"team {slug}: intact, 5 entries" in ok.stdout
    await as_superuser(database_url, ("UPDATE audit_logs SET action = 'nothing' "
                                      "WHERE " + AT.format("= 2"), (team_id,)))
    bad = await asyncio.to_thread(run_verify, database_url, tmp_path, "--team", slug)
    assert bad.returncode == 1
    lines = [line for line in bad.stderr.splitlines() if line.startswith("cvsm-server:")]
    assert lines == [f"cvsm-server: audit chain of team {slug} is broken at seq 2: its content "
                     "does not match its hash (edited)"]
    assert "Traceback" not in bad.stderr
    unknown = await asyncio.to_thread(run_verify, database_url, tmp_path, "--team", "no-such-team")
    assert unknown.returncode == 1 and "no team with the slug" in unknown.stderr


async def test_cli_audit_verify_seals_what_was_committed_before_it(client, api: Api, owner, team_id,
                                                                   database_url, tmp_path):
    await query(server_url(database_url),
                "INSERT INTO audit_logs (team_id, action, resource) VALUES (%s, 'x', 'x')", (team_id,))
    ok = await asyncio.to_thread(run_verify, database_url, tmp_path, "--team", "acme")
    assert ok.returncode == 0, ok.stderr
    assert "team acme: intact, 2 entries" in ok.stdout


async def test_quota_locks_and_audit_entries_never_deadlock(client, api, owner, team_id) -> None:
    """A create holds the team row (the quota check) and then writes its entry; a bulk call
    writes its entry first, whose foreign key needs a share of the same team row. The quota lock
    is FOR NO KEY UPDATE, which that share does not wait for: no deadlock, no 503."""
    headers = api.auth(owner["token"])

    async def create(i: int) -> int:
        resp = await client.post(f"/api/v1/teams/{team_id}/secrets", headers=headers,
                                 json={"name": f"RACE_{i}", "value": "v", "environment": "production"})
        return resp.status

    async def bulk() -> int:
        resp = await client.post(f"/api/v1/teams/{team_id}/secrets/bulk/move-env", headers=headers,
                                 json={"ids": [], "environment": "production"})
        return resp.status

    statuses = []
    for round_ in range(6):
        statuses += await asyncio.gather(*(create(round_ * 4 + i) for i in range(4)),
                                         *(bulk() for _ in range(4)))
    assert set(statuses) <= {200, 201}, statuses


async def test_an_open_transactions_entry_joins_the_chain_after_it_commits(client, api: Api, owner,
                                                                          team_id, database_url):
    """The sealer sees only committed entries: one still open waits for a later batch, and the
    chain has no gap either way (seq 1 is the team's creation)."""
    conn = psycopg2.connect(server_url(database_url))
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO audit_logs (team_id, action, resource) VALUES (%s, 'early', 'x')",
                        (team_id,))
            await query(server_url(database_url),
                        "INSERT INTO audit_logs (team_id, action, resource) VALUES (%s, 'late', 'x')",
                        (team_id,))
            assert await seal_now(client) >= 2  # the team's creation and 'late'; not 'early'
        conn.commit()
    finally:
        conn.close()
    body = await verify(client, api, owner, team_id)  # seals 'early' first
    assert body["ok"] is True and body["checked"] == 3
    rows = await query(database_url, ROWS, (team_id,))
    assert [(r["seq"], r["action"]) for r in rows] == [(1, "team_create"), (2, "late"), (3, "early")]


async def test_entries_of_a_team_deleted_before_they_are_sealed_stay_in_its_chain(
        client, api: Api, owner, team_id, database_url):
    await busy_team(client, api, owner, team_id, reads=0)  # sealed: seq 1, 2
    sid = (await query(database_url, "SELECT id FROM secrets WHERE team_id = %s", (team_id,)))[0]["id"]
    h = api.auth(owner["token"])
    assert (await client.get(f"/api/v1/teams/{team_id}/secrets/{sid}", headers=h)).status == 200
    pending = await query(database_url, f"SELECT team_id FROM audit_logs WHERE {UNSEALED}")
    assert [str(p["team_id"]) for p in pending] == [team_id]  # the read, committed, not sealed
    assert (await client.delete(f"/api/v1/teams/{team_id}", headers=h)).status in (200, 204)
    # The team's deletion sealed it into the team's chain before nulling its team.
    rows = await query(database_url, ROWS, (team_id,))
    assert [r["seq"] for r in rows] == [1, 2, 3] and rows[2]["action"] == "read"
    assert all(r["team_id"] is None for r in rows)
    account = await query(database_url, ROWS, (audit_chain.ACCOUNT_CHAIN,))
    assert "read" not in {r["action"] for r in account}
    async with db.cursor(client.app[POOL]) as cur:
        assert (await audit_verify.verify_chain(cur, client.app[CHECKPOINT_SIGNER],
                                               uuid.UUID(team_id))).ok


async def test_every_server_process_seals_in_the_background(start_client, make_settings,
                                                            database_url):
    client = await start_client(make_settings(background_jobs="on", audit_seal_seconds="0.1"))
    api = Api(client)
    user = await api.register()
    team = await api.team(user)
    for _ in range(50):
        rows = await query(database_url, "SELECT s.seq FROM audit_logs a LEFT JOIN audit_seals s "
                                         "ON s.pos = a.pos WHERE a.team_id = %s", (team,))
        if rows and all(r["seq"] is not None for r in rows):
            break
        await asyncio.sleep(0.1)
    assert [r["seq"] for r in rows] == [1]


async def test_entries_chained_before_0012_stay_and_new_ones_are_sealed_after_them(fresh_database):
    """An upgrade: the 0010 trigger chained the entries already there; after 0012 the next ones
    are sealed after them, and the whole chain verifies."""
    url = fresh_database(empty=True)
    team = uuid.uuid4()
    pool = await db.create_pool(url, maxsize=2)
    try:
        assert await db.migrate(pool, upto=11) == list(range(1, 12))
        async with db.cursor(pool) as cur:
            await cur.execute("INSERT INTO teams (id, slug, name) VALUES (%s, 'old', 'Old')", (team,))
            for i in range(3):
                await audit.record(cur, None, "before", "test", team_id=team, metadata={"i": i})
        assert await db.migrate(pool) == [n for n, _, _ in db.migration_files() if n > 11]
        async with db.cursor(pool) as cur:
            for i in range(2):
                await audit.record(cur, None, "after", "test", team_id=team, metadata={"i": i})
            assert await audit_chain.seal(cur) == 2
            signer = audit_chain.CheckpointSigner(Keyring(bytes(32)))
            verdict = await audit_verify.verify_chain(cur, signer, team)
    finally:
        pool.close()
        await pool.wait_closed()
    assert verdict.ok and verdict.checked == 5
    rows = await query(url, ROWS, (team,))
    assert [(r["seq"], r["action"]) for r in rows] == [
        (1, "before"), (2, "before"), (3, "before"), (4, "after"), (5, "after")]
