"""Audited secret reads against a bare aiohttp endpoint, with the default rate limits on and off,
measured in one run with `wrk` (a C load generator, not a Python client) as the load.

Prints, for each setting:
- requests per second of audited reads (GET a secret by id with a JWT: credential check, role
  check, rate-limit count, decryption, audit insert, commit) and of a bare aiohttp JSON endpoint
  serving the same body, and their ratio;
- database round trips per audited read, counted exactly by wrapping aiopg's `Cursor.execute`
  in an in-process app over 200 warm reads, and how many of them also counted the rate limit
  (a process leases units of a credential's limit, 32 and then more while it spends them fast,
  in one count riding in a read's own statement: `ratelimit.Leases`), counted after 100 warm-up
  reads so the leases have grown as on a busy server;
- PostgreSQL CPU time and server CPU time per request (from the processes' CPU times, psutil),
  and WAL bytes per request (PostgreSQL's WAL position before and after: the same on any machine);
- with the limits on, reads/s of one API token on 8 connections and of 8 API tokens, one per
  connection (wrk with a thread per connection), and their ratio (one credential must not queue
  on its own rate-limit counter): `--rounds` runs of each, alternating which goes first, and
  the ratio of their medians, with each side's range (on a shared machine one run of each is
  noise: the ratio of single runs swung from 0.84 to 1.41 between two runs of this script).

Each figure issue 25 sets a goal for is printed with it, met or not: PostgreSQL CPU and server
CPU <= 0.30 ms per audited read (limits on; limits off at or below those), 1 round trip per
read, one token's reads/s within 10% of eight tokens'.

"Limits on" counts every request against the API limit in PostgreSQL, as by default, with a
limit high enough never to refuse one (the default 60/min would turn the run into 429s).
The server and the bare endpoint run `--workers` processes each on one port (SO_REUSEPORT), both
without an access log, both on the event loop `--loop` names (uvloop, as `cvsm-server serve`
runs by default, or asyncio). Usage:
    python bench/bench_reads.py [--seconds 5] [--connections 32] [--workers 1] [--rounds 3]
                                [--loop uvloop|asyncio]
Needs `wrk` (Debian: apt-get install wrk).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import aiopg
import psutil
import psycopg2
from aiohttp.test_utils import TestClient, TestServer

from cvsm_server import db
from cvsm_server.runtime.app import create_app
from cvsm_server.core.config import Settings

BARE = """
import asyncio, os, sys
from aiohttp import web
from cvsm_server.runtime import eventloop
BODY = {"secret": {"id": "x", "name": "BENCH", "type": "credential", "environment": "production",
                   "description": "", "version": 1, "created_at": "", "updated_at": ""},
        "value": "v" * 64}
async def handler(request):
    return web.json_response(BODY)
async def main(port):
    app = web.Application()
    app.router.add_get("/bare", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    eventloop.settle()  # as `cvsm-server serve` does once started
    await web.TCPSite(runner, "127.0.0.1", port, reuse_port=True).start()
    await asyncio.Event().wait()
eventloop.run(main(int(sys.argv[1])), os.environ["CVSM_EVENT_LOOP"])
"""

SERVER = """
import asyncio, sys
from aiohttp import web
from cvsm_server.runtime import eventloop
from cvsm_server.runtime.app import create_app
from cvsm_server.core.config import Settings
async def main(port):
    runner = web.AppRunner(create_app(), access_log=None)
    await runner.setup()
    eventloop.settle()  # as `cvsm-server serve` does once started
    await web.TCPSite(runner, "127.0.0.1", port, reuse_port=True).start()
    await asyncio.Event().wait()
eventloop.run(main(int(sys.argv[1])), Settings.from_env().event_loop)
"""

LIMITS = {"off": "off", "on": "999999999/60"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wrk(url: str, seconds: float, connections: int, token: str | None = None) -> tuple[float, int]:
    """(requests/s, requests) from one wrk run; fails on any non-2xx answer."""
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency", url]
    if token:
        cmd[1:1] = ["-H", f"Authorization: Bearer {token}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out:
        raise RuntimeError(f"{url}: non-2xx answers during the run:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    return rps, total


def wal_bytes(url: str) -> float:
    """PostgreSQL's WAL position in bytes (WAL bytes per read: a cost the same on any machine)."""
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')")
            return float(cur.fetchone()[0])
    finally:
        conn.close()


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def postgres_processes(pgdata: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["name"]):
        try:
            if p.info["name"] == "postgres" and Path(p.cwd()) == pgdata:
                found.append(p)
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            pass
    return found


async def wait_ready(url: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url) as resp:
                    if resp.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def start(code: str, port: int, workers: int, env: dict) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", code, str(port)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(workers)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=60)


CREDENTIALS = 8
# wrk: each of its threads sends one of TOKENS (a thread per connection).
SPREAD = """
local tokens = {%s}
local next_token = 1
function setup(thread)
  thread:set("token", tokens[next_token])
  next_token = next_token %% #tokens + 1
end
function init(args)
  wrk.headers["Authorization"] = "Bearer " .. token
end
"""


def wrk_tokens(url: str, seconds: float, tokens: list[str]) -> float:
    """Requests/s from one wrk run with a connection (and a thread) per token in `tokens`."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write(SPREAD % ", ".join(f'"{t}"' for t in tokens))
        script.flush()
        cmd = ["wrk", f"-t{len(tokens)}", f"-c{len(tokens)}", f"-d{max(1, round(seconds))}s",
               "-s", script.name, url]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out:
        raise RuntimeError(f"{url}: non-2xx answers during the run:\n{out}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


async def api_tokens(base: str, jwt: str, count: int) -> list[str]:
    async with aiohttp.ClientSession() as s:
        tokens = []
        for i in range(count):
            async with s.post(f"{base}/tokens", json={"name": f"bench {i}"},
                              headers={"Authorization": f"Bearer {jwt}"}) as r:
                tokens.append((await r.json())["token"])
    return tokens


async def arrange(base: str) -> tuple[str, str]:
    """A user, a team and a secret; returns (JWT, read URL)."""
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{base}/auth/register", json={
                "email": "bench@example.com", "username": "bench", "password": "bench-password",
                "name": "Bench"}) as r:
            jwt = (await r.json())["token"]
        auth = {"Authorization": f"Bearer {jwt}"}
        async with s.post(f"{base}/teams", json={"name": "Bench", "slug": "bench"}, headers=auth) as r:
            team = (await r.json())["team"]["id"]
        async with s.post(f"{base}/teams/{team}/secrets", headers=auth, json={
                "name": "BENCH", "value": "v" * 64, "environment": "production"}) as r:
            secret = (await r.json())["secret"]["id"]
    return jwt, f"{base}/teams/{team}/secrets/{secret}"


async def round_trips_per_read(env: dict, reads: int = 500, warm: int = 100
                               ) -> tuple[float, float]:
    """Statements sent to PostgreSQL per audited read, counted in-process over warm reads, and
    how many of them counted the rate limit (a lease of several units, `ratelimit.Leases`)."""
    count = counted = 0
    original = aiopg.Cursor.execute

    async def counting(self, operation, *args, **kwargs):
        nonlocal count, counted
        count += 1
        counted += "_charged" in operation or "cvsm_rate_lease" in operation
        return await original(self, operation, *args, **kwargs)

    settings = Settings.from_env(env)
    client = TestClient(TestServer(create_app(settings)))
    await client.start_server()
    try:
        base = "/api/v1"
        login = await client.post(f"{base}/auth/login", json={"identifier": "bench",
                                                               "password": "bench-password"})
        auth = {"Authorization": f"Bearer {(await login.json())['token']}"}
        teams = await (await client.get(f"{base}/teams", headers=auth)).json()
        team = teams["teams"][0]["id"]
        listing = await (await client.get(f"{base}/teams/{team}/secrets", headers=auth)).json()
        url = f"{base}/teams/{team}/secrets/{listing['secrets'][0]['id']}"
        for _ in range(warm):  # the credential cache, the prepared statements, the leases
            assert (await client.get(url, headers=auth)).status == 200
        aiopg.Cursor.execute = counting
        try:
            for _ in range(reads):
                resp = await client.get(url, headers=auth)
                assert resp.status == 200, await resp.text()
        finally:
            aiopg.Cursor.execute = original
    finally:
        await client.close()
    return count / reads, counted / reads


def one_and_many(url: str, seconds: float, tokens: list[str], rounds: int
                 ) -> tuple[list[float], list[float]]:
    """reads/s of the first token alone on every connection and of all the tokens, `rounds`
    runs each, alternating which of the two goes first (a load that comes and goes on the
    machine falls on both alike)."""
    one, many = [], []
    for r in range(rounds):
        runs = [(one, tokens[:1] * len(tokens)), (many, tokens)]
        for into, spread in (runs if r % 2 == 0 else runs[::-1]):
            into.append(wrk_tokens(url, seconds, spread))
    return one, many


async def run(seconds: float, connections: int, workers: int, rounds: int, loop: str) -> None:
    if shutil.which("wrk") is None:
        sys.exit("bench_reads: needs wrk (Debian: apt-get install wrk)")
    home = Path(tempfile.mkdtemp(prefix="cvsm-bench-reads-"))
    embedded = db.EmbeddedPostgres(home)
    owner_url = embedded.start()
    try:
        pool = await db.create_pool(owner_url, maxsize=2)
        await db.migrate(pool)
        async with db.cursor(pool) as cur:
            await cur.execute(f"ALTER ROLE {db.APP_ROLE} LOGIN")
        pool.close()
        await pool.wait_closed()
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
        base_env.update({
            "CVSM_DATABASE_URL": db.with_user(owner_url, db.APP_ROLE),
            "CVSM_MIGRATION_DATABASE_URL": owner_url, "CVSM_DATA_DIR": str(home / "data"),
            "CVSM_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
            "CVSM_JWT_SECRET": base64.b64encode(os.urandom(32)).decode(),
            "CVSM_RATELIMIT_AUTH": "off", "CVSM_BACKGROUND_JOBS": "off",
            "CVSM_EVENT_LOOP": loop})
        bare_port = free_port()
        bare = start(BARE, bare_port, workers, base_env)
        await wait_ready(f"http://127.0.0.1:{bare_port}/bare")
        bare_url = f"http://127.0.0.1:{bare_port}/bare"
        wrk(bare_url, 1, connections)  # warm-up
        bare_rps, _ = wrk(bare_url, seconds, connections)
        pgdata = embedded.pgdata
        results = {}
        jwt = read_url = None
        spread: tuple[list[float], list[float]] = ([], [])
        for name, limit in LIMITS.items():
            env = {**base_env, "CVSM_RATELIMIT_API": limit}
            port = free_port()
            servers = start(SERVER, port, workers, env)
            try:
                base = f"http://127.0.0.1:{port}/api/v1"
                await wait_ready(f"{base}/health")
                if jwt is None:
                    jwt, path = await arrange(base)
                    read_url = path.replace(base, "")
                url = base + read_url
                wrk(url, 1, connections, jwt)  # warm-up: connections and credential cache
                pg, srv = postgres_processes(pgdata), [psutil.Process(p.pid) for p in servers]
                pg_before, srv_before = cpu_seconds(pg), cpu_seconds(srv)
                wal_before = wal_bytes(owner_url)
                rps, total = wrk(url, seconds, connections, jwt)
                pg_cpu = cpu_seconds(postgres_processes(pgdata)) - pg_before
                srv_cpu = cpu_seconds(srv) - srv_before
                wal = wal_bytes(owner_url) - wal_before
                if name == "on":  # one credential on 8 connections against 8 credentials
                    tokens = await api_tokens(base, jwt, CREDENTIALS)
                    wrk_tokens(url, 1, tokens)  # warm-up: every token in the cache
                    spread = one_and_many(url, seconds, tokens, rounds)
            finally:
                stop(servers)
            trips, counts = await round_trips_per_read(env)
            results[name] = (rps, pg_cpu / total * 1000, srv_cpu / total * 1000, trips, counts,
                             wal / total)
        stop(bare)
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)

    print(f"audited reads vs bare aiohttp ({seconds:.0f} s per run, wrk with {connections} "
          f"connections, {workers} worker process(es) each on {loop}, {os.cpu_count()} cores "
          "shared by PostgreSQL, the servers and wrk)")
    print(f"  bare aiohttp JSON endpoint:          {bare_rps:9.0f} req/s")
    for name, (rps, pg_ms, srv_ms, trips, counts, wal) in results.items():
        print(f"  rate limits {name:3}: audited reads     {rps:9.0f} req/s   ratio {rps / bare_rps:6.3f}"
              f"   round trips/read {trips:4.2f} (counting the limit {counts:5.3f})"
              f"   PostgreSQL CPU {pg_ms:5.2f} ms/read   server CPU {srv_ms:5.2f} ms/read"
              f"   WAL {wal:4.0f} B/read")
    one, many = spread
    print(f"  rate limits on, {CREDENTIALS} connections ({rounds} alternating runs each, median "
          f"and range): one API token {statistics.median(one):7.0f} reads/s "
          f"({min(one):.0f}-{max(one):.0f}), {CREDENTIALS} API tokens "
          f"{statistics.median(many):7.0f} reads/s ({min(many):.0f}-{max(many):.0f})   ratio "
          f"{statistics.median(one) / statistics.median(many):5.2f}")
    print(goals(results, statistics.median(one) / statistics.median(many)))


# Issue 25's goals: CPU per audited read (ms), round trips per read, one token against eight.
CPU_GOAL = 0.30
ONE_VS_EIGHT_GOAL = 0.90


def goals(results: dict, one_vs_eight: float) -> str:
    """Each figure issue 25 sets a goal for, next to it: met or not met."""
    def line(what: str, figure: str, goal: str, met: bool) -> str:
        return f"    {what:28} {figure:>12}   goal {goal}: {'met' if met else 'NOT MET'}"

    lines = ["  issue 25's goals (this run):"]
    for name in ("on", "off"):
        _, pg_ms, srv_ms, trips, counts, _ = results[name]
        lines += [
            line(f"PostgreSQL CPU, limits {name}", f"{pg_ms:.2f} ms/read", f"<= {CPU_GOAL:.2f} ms",
                 pg_ms <= CPU_GOAL),
            line(f"server CPU, limits {name}", f"{srv_ms:.2f} ms/read", f"<= {CPU_GOAL:.2f} ms",
                 srv_ms <= CPU_GOAL),
            line(f"round trips, limits {name}", f"{trips:.2f}/read",
                 "1 (the lease in a read's own statement"
                 + (f", {counts:.3f} of reads carry one)" if name == "on" else ")"),
                 trips <= 1.005)]
    lines.append(line(f"one token vs {CREDENTIALS}", f"{one_vs_eight:.2f}",
                      f">= {ONE_VS_EIGHT_GOAL:.2f} (within 10%)",
                      one_vs_eight >= ONE_VS_EIGHT_GOAL))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of one token and of 8 tokens each, alternating")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                        help="the servers' event loop (CVSM_EVENT_LOOP; uvloop as served)")
    args = parser.parse_args()
    asyncio.run(run(args.seconds, args.connections, args.workers, max(1, args.rounds), args.loop))


if __name__ == "__main__":
    main()
