"""Migrations are not requests: a slow one (a large audit log rewritten into partitions) and a
process that waits for another's migration are not cut off by the pool's limit per statement."""

from __future__ import annotations

import asyncio

import aiopg
import psycopg2.extras

from cvsm_server import db
from cvsm_server.db.migrations import MIGRATION_LOCK_ID, migration_lock


async def test_a_start_up_waits_out_another_process_migrating_longer_than_the_statement_limit(
        fresh_database) -> None:
    url = fresh_database(empty=True)
    # The pool of a starting process, with a statement limit of 1 s instead of 30 s.
    pool = await aiopg.create_pool(url, minsize=1, maxsize=2, timeout=1,
                                   cursor_factory=psycopg2.extras.RealDictCursor)
    other = await aiopg.connect(url)  # another process, migrating for 3 s
    try:
        async with other.cursor() as cur:
            await cur.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_ID,))
        start = asyncio.get_running_loop().time()
        migrating = asyncio.ensure_future(db.migrate(pool))
        await asyncio.sleep(3)
        assert not migrating.done(), migrating  # waiting for the lock, not failed after 1 s
        async with other.cursor() as cur:
            await cur.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))
        applied = await asyncio.wait_for(migrating, 600)
        assert applied == [n for n, _, _ in db.migration_files()]
        assert asyncio.get_running_loop().time() - start > 3
        # A statement of a migration may outlast the limit too (here 2 s of a 1 s limit).
        async with migration_lock(pool) as cur:
            await cur.execute("SELECT pg_sleep(2)")
    finally:
        other.close()
        pool.close()
        await pool.wait_closed()
