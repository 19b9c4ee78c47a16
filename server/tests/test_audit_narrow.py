"""Fewer bytes per audit entry (issue 40, item 3; migration 0038): the read rollup keeps secret
and token ids as uuids. A rollup of 0037 is converted (rows kept, the session reads' '' token
the nil uuid, a row no uuid names left out), and the sealer, the secret page's readers and the
unread secrets go on from it."""

from __future__ import annotations

import uuid

from conftest import query
from cvsm_server import db
from cvsm_server.audit import chain as audit_chain, log as audit
from cvsm_server.core.actor import Actor

NIL = uuid.UUID(int=0)


async def test_the_rollup_of_0037_is_converted_by_0038_and_rolls_on(fresh_database):
    url = fresh_database(empty=True)
    team, secret, token = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    pool = await db.create_pool(url, maxsize=2)
    try:
        assert 37 in await db.migrate(pool, upto=37)
        async with db.cursor(pool) as cur:
            await cur.execute("INSERT INTO teams (id, slug, name) VALUES (%s, 't', 'T')", (team,))
            await cur.execute("SELECT cvsm_audit_make_months(now()::date, now()::date + 1)")
            reader = Actor(user_id=None, email="a@example.com", ip="10.0.0.1", user_agent="ua")
            for meta in ({}, {"via_token": "ci", "token_id": str(token)}):
                await audit.record(cur, reader, "read", "secret", team_id=team,
                                   resource_id=secret, metadata=meta)
            # a hand-written entry naming no uuid: never rolled up, and it stops nothing
            await audit.record(cur, reader, "read", "secret", team_id=team,
                               resource_id="not-a-uuid")
            await audit_chain.seal(cur)
            # a month of the rollup the log has no partition of any more
            await cur.execute("SELECT cvsm_audit_make_reads_month('2020-01-01')")
            await cur.execute("""INSERT INTO audit_reads (team_id, secret_id, day, user_email,
                                   token_id, reads, last_at) VALUES (%s, %s, '2020-01-02', '',
                                   '', 5, '2020-01-02')""", (team, str(secret)))
            before = await db.fetchall(cur, "SELECT secret_id, token_id, reads FROM audit_reads "
                                            "ORDER BY token_id")
        assert sorted((r["secret_id"], r["token_id"], r["reads"]) for r in before) == sorted([
            (str(secret), "", 1), (str(secret), str(token), 1), ("not-a-uuid", "", 1),
            (str(secret), "", 5)])
        assert 38 in await db.migrate(pool)
        async with db.cursor(pool) as cur:
            await audit.record(cur, reader, "read", "secret", team_id=team, resource_id=secret)
            assert await audit_chain.seal(cur) == 1
            rows = await db.fetchall(cur, "SELECT secret_id, token_id, via_token, reads, "
                                          "tableoid::regclass::text AS part FROM audit_reads "
                                          "ORDER BY day, token_id")
            types = await db.fetchall(cur, """
                SELECT attname, format_type(atttypid, atttypmod) AS t FROM pg_attribute
                WHERE attrelid = 'audit_reads'::regclass AND attname IN ('secret_id', 'token_id')
                ORDER BY attname""")
    finally:
        pool.close()
        await pool.wait_closed()
    assert [(r["secret_id"], r["token_id"], r["via_token"], r["reads"]) for r in rows] == [
        (secret, NIL, None, 5), (secret, NIL, None, 2), (secret, token, "ci", 1)]
    # each in its month's partition, none in the default one
    assert rows[0]["part"] == "audit_reads_y2020m01"
    assert all(r["part"].startswith("audit_reads_y") for r in rows)
    assert [t["t"] for t in types] == ["uuid", "uuid"]


async def test_the_api_s_reads_are_rolled_up_by_uuid(
        client, api, owner, team_id, database_url, pool):
    auth_headers = api.auth(owner["token"])
    secret_id = await api.secret(owner, team_id, "DB_URL", "postgres://x")
    for _ in range(2):
        resp = await client.get(f"/api/v1/teams/{team_id}/secrets/{secret_id}",
                                headers=auth_headers)
        assert resp.status == 200
    # two reads sealed (in the rollup), the third in the log's unsealed tail
    async with db.cursor(pool) as cur:
        await audit_chain.seal(cur)
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/{secret_id}",
                            headers=auth_headers)
    assert resp.status == 200
    rolled = await query(database_url, "SELECT secret_id, token_id, reads FROM audit_reads")
    assert [(r["secret_id"], r["token_id"], r["reads"]) for r in rolled] == [
        (uuid.UUID(secret_id), NIL, 2)]
