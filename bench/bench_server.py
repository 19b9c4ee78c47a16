"""Server benchmarks, each printed as a ratio measured in this one run (no absolute targets).

1. API-token request throughput against JWT request throughput (GET /me).
2. Login time for an unknown user against a known user with a wrong password (close to 1.0
   means response time does not reveal whether an account exists).

The server runs as `cvsm-server serve` in its own process on an embedded PostgreSQL in a
temporary data dir; the load comes from this process. Audited reads against a bare aiohttp
endpoint are measured under `wrk` by `bench_reads.py`.
Usage: python bench/bench_server.py [--seconds 3] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_ready(session: aiohttp.ClientSession, url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            async with session.get(url) as resp:
                if resp.status < 500:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


async def throughput(session, url: str, headers: dict, seconds: float, concurrency: int) -> float:
    """Requests per second completed by `concurrency` workers looping for `seconds`."""
    done = 0
    failures = 0
    stop = time.monotonic() + seconds

    async def worker():
        nonlocal done, failures
        while time.monotonic() < stop:
            async with session.get(url, headers=headers) as resp:
                await resp.read()
                if resp.status == 200:
                    done += 1
                else:
                    failures += 1

    start = time.monotonic()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    elapsed = time.monotonic() - start
    if failures:
        raise RuntimeError(f"{url}: {failures} non-200 answers")
    return done / elapsed


async def login_times(session, base: str, identifier: str, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        async with session.post(f"{base}/auth/login", json={"identifier": identifier, "password": "wrong-password"}) as r:
            await r.read()
            assert r.status == 401
        times.append(time.perf_counter() - t0)
    return times


async def run(seconds: float, concurrency: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="cvsm-bench-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
    env.update({"CVSM_DATA_DIR": str(data_dir), "CVSM_RATELIMIT_AUTH": "off", "CVSM_RATELIMIT_API": "off",
                "CVSM_RATELIMIT_PUBLIC": "off", "CVSM_RATELIMIT_FAILED_AUTH": "off"})
    server = subprocess.Popen([sys.executable, "-m", "cvsm_server.runtime.cli", "serve", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/api/v1"
    try:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            await wait_ready(session, f"{base}/health")
            async with session.post(f"{base}/auth/register", json={
                    "email": "bench@example.com", "username": "bench", "password": "bench-password",
                    "name": "Bench"}) as r:
                jwt = (await r.json())["token"]
            auth = {"Authorization": f"Bearer {jwt}"}
            async with session.post(f"{base}/tokens", json={"name": "bench"}, headers=auth) as r:
                api_token = (await r.json())["token"]
            token_auth = {"Authorization": f"Bearer {api_token}"}

            await throughput(session, f"{base}/me", auth, 0.5, concurrency)  # warm-up
            jwt_rps = await throughput(session, f"{base}/me", auth, seconds, concurrency)
            token_rps = await throughput(session, f"{base}/me", token_auth, seconds, concurrency)

            rounds = 30
            unknown, known = [], []
            for _ in range(3):  # interleave to share any drift in machine load
                unknown += await login_times(session, base, "nobody_here", rounds // 3)
                known += await login_times(session, base, "bench", rounds // 3)
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(data_dir, ignore_errors=True)

    print(f"cvsm server benchmarks ({seconds:.0f} s per measurement, {concurrency} concurrent clients, "
          f"{os.cpu_count()} cores)")
    print(f"  GET /me with API token:             {token_rps:8.0f} req/s")
    print(f"  GET /me with JWT:                   {jwt_rps:8.0f} req/s")
    print(f"  ratio API token / JWT:              {token_rps / jwt_rps:8.3f}")
    mu, mk = statistics.median(unknown), statistics.median(known)
    print(f"  login, unknown user (median):       {mu * 1000:8.1f} ms")
    print(f"  login, known user, wrong password:  {mk * 1000:8.1f} ms")
    print(f"  ratio unknown / known:              {mu / mk:8.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    asyncio.run(run(args.seconds, args.concurrency))


if __name__ == "__main__":
    main()
