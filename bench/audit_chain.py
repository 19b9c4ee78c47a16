"""Audit rows appended per second with the hash chain (migrations 0010, 0012, 0017) over without
it, in one run.

Starts an embedded PostgreSQL in a temporary directory with two migrated databases: `chained`
(as shipped) and `plain`, a scratch copy without the sealer's position column and its index
(the seals table stays empty: the log as it was before 0010). In each, WRITERS connections
append entries through `audit.record` (the server's one writer), one transaction per entry,
first spread over TEAMS teams, then all into one team. In `chained` the server's sealing job (`audit_chain.seal_pending`,
at the server's default interval) runs beside the writers, and a run ends only when every entry
is sealed into its chain: the time includes sealing the last ones. The databases are measured
alternately, ROUNDS times, and the median rate is used. Prints rows/s for each and the ratio
chained / plain (goal >= 0.8). Nothing is asserted about time; the chained database's chains are
verified afterwards.

    .venv/bin/python bench/audit_chain.py
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from cvsm_server.audit import log as audit, chain as audit_chain  # noqa: E402
from cvsm_server import db  # noqa: E402
from cvsm_server.core.config import Settings  # noqa: E402

WRITERS = 4
PER_WRITER = 1500
TEAMS = 8
ROUNDS = 3


def admin(url: str, sql: str) -> None:
    conn = psycopg2.connect(url)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


async def seal_every(pool: db.Pool, interval: float) -> None:
    """What the server's `audit_seal` job (`jobs.JOBS`) does: seal, every `interval` seconds."""
    while True:
        await asyncio.sleep(interval)
        await audit_chain.seal_pending(pool)


async def make_database(postgres_url: str, name: str, *, chained: bool) -> str:
    admin(postgres_url, f"CREATE DATABASE {name}")
    url = postgres_url.replace("/postgres?", f"/{name}?")
    pool = await db.create_pool(url, maxsize=2)
    try:
        await db.migrate(pool)
        async with db.cursor(pool) as cur:
            if not chained:
                # The chain fields are in audit_seals (0017): the log itself loses only `pos`
                # (with its index and sequence), which only the sealer needs.
                await cur.execute("ALTER TABLE audit_logs DROP COLUMN pos CASCADE")  # and the view
                # No chain columns to compare: a guard that refuses every update and delete.
                await cur.execute("""CREATE OR REPLACE FUNCTION cvsm_audit_guard() RETURNS trigger
                                     LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$""")
            for _ in range(TEAMS):
                await cur.execute("INSERT INTO teams (slug, name) VALUES (%s, 'bench')",
                                  (f"b-{uuid.uuid4().hex[:12]}",))
    finally:
        pool.close()
        await pool.wait_closed()
    return url


async def teams_of(url: str) -> list[uuid.UUID]:
    pool = await db.create_pool(url, maxsize=1)
    try:
        async with db.cursor(pool) as cur:
            return [r["id"] for r in await db.fetchall(cur, "SELECT id FROM teams ORDER BY id")]
    finally:
        pool.close()
        await pool.wait_closed()


async def append_rate(url: str, teams: list[uuid.UUID], *, sealed: bool) -> float:
    """Entries per second from WRITERS concurrent connections, writer i on teams[i % len]; with
    `sealed`, the server's sealing job runs meanwhile and the time ends when all are sealed."""
    pool = await db.create_pool(url, maxsize=WRITERS + 1)
    try:
        async def writer(i: int) -> None:
            team = teams[i % len(teams)]
            async with pool.acquire() as conn:
                for n in range(PER_WRITER):
                    async with db.transaction(conn) as cur:
                        await audit.record(cur, None, "bench", "test", team_id=team,
                                           resource_id=n, metadata={"writer": i, "n": n})

        started = time.perf_counter()
        sealer = asyncio.create_task(seal_every(pool, Settings.audit_seal_seconds)) \
            if sealed else None
        await asyncio.gather(*(writer(i) for i in range(WRITERS)))
        if sealer is not None:
            sealer.cancel()
            await asyncio.gather(sealer, return_exceptions=True)
            async with db.cursor(pool) as cur:
                await audit_chain.seal(cur)  # the entries the job has not reached
        return WRITERS * PER_WRITER / (time.perf_counter() - started)
    finally:
        pool.close()
        await pool.wait_closed()


async def main() -> int:
    home = Path(tempfile.mkdtemp(prefix="cvsm-bench-chain-"))
    server = db.EmbeddedPostgres(home)
    postgres_url = server.start(database="postgres")
    try:
        urls = {"chained": await make_database(postgres_url, "chained", chained=True),
                "plain": await make_database(postgres_url, "plain", chained=False)}
        teams = {k: await teams_of(u) for k, u in urls.items()}
        print(f"{WRITERS} writers x {PER_WRITER} entries, one transaction each; median of {ROUNDS}; "
              f"chained: sealed every {Settings.audit_seal_seconds:g} s, and the rest at the end")
        for label, pick in (("spread over teams", lambda t: t[:TEAMS]), ("one team", lambda t: t[:1])):
            rates: dict[str, list[float]] = {"chained": [], "plain": []}
            await append_rate(urls["chained"], pick(teams["chained"]), sealed=True)  # warm-up
            await append_rate(urls["plain"], pick(teams["plain"]), sealed=False)
            for _ in range(ROUNDS):
                for kind in ("plain", "chained"):
                    rates[kind].append(await append_rate(urls[kind], pick(teams[kind]),
                                                         sealed=kind == "chained"))
            chained, plain = (statistics.median(rates[k]) for k in ("chained", "plain"))
            print(f"{label:>18}: chained {chained:8.0f} rows/s, plain {plain:8.0f} rows/s, "
                  f"ratio {chained / plain:.2f} (goal >= 0.8)")
        # The chained database's chains are intact.
        pool = await db.create_pool(urls["chained"], maxsize=1)
        try:
            from cvsm_server.crypto.sealing import Keyring
            signer = audit_chain.CheckpointSigner(Keyring(bytes(32)))
            async with db.cursor(pool) as cur:
                for team in teams["chained"]:
                    verdict = await audit_chain.verify_chain(cur, signer, team)
                    if not verdict.ok:
                        print(f"chain of {team} broken: {verdict.first_broken}")
                        return 1
        finally:
            pool.close()
            await pool.wait_closed()
        print("chained database: every chain verified")
        return 0
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
