"""Audited reads per second with `cvsm-server serve --workers 1`, `2` and `4`, measured in one run,
and each one's ratio to one worker (the goal: at least 0.85 x N, up to the number of cores).

Each setting runs the real console script on the embedded PostgreSQL (one data dir for the whole
run, so the first start seeds it and the others find the data), with every rate limit and the
background jobs off, its log (the access log included) in a file. The first start seeds a user,
a team `bench`, a secret `BENCH` and an API token; the load is audited reads by name with that
token, `GET /api/v1/teams/bench/secrets/by-name/BENCH` (credential check, role check,
decryption, audit insert, commit), for a fixed time after a one-second warm-up, driven by `wrk`
(a C load generator, keep-alive connections) or, where wrk is absent, by an aiohttp client in
this process (which then takes a share of the CPU, and the ratios read lower).

PostgreSQL, the workers and the load generator share the machine's cores, so the ratio can only
approach N while N workers and what they need of PostgreSQL fit on the cores.
Usage: python bench/workers.py [--seconds 5] [--connections 32] [--workers 1,2,4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
import psutil

CONSOLE_SCRIPT = Path(sys.executable).with_name("cvsm-server")
LISTENING = re.compile(r"listening on (http://\S+) ")
READ_PATH = "/api/v1/teams/bench/secrets/by-name/BENCH"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(workers: int, env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    with log.open("wb") as sink:
        proc = subprocess.Popen([str(CONSOLE_SCRIPT), "serve", "--port", str(free_port()),
                                 "--workers", str(workers)], env=env, stdin=subprocess.DEVNULL,
                                stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while not (found := LISTENING.search(log.read_text(errors="replace"))):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit(f"bench/workers: cvsm-server --workers {workers} did not start:\n"
                     f"{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)
    return proc, found.group(1)


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def call(base: str, method: str, path: str, body: dict, token: str | None = None) -> dict:
    request = urllib.request.Request(f"{base}/api/v1{path}", method=method,
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())


def seed(base: str) -> str:
    """A user, the team `bench`, the secret `BENCH` and an API token; returns the token."""
    jwt = call(base, "POST", "/auth/register", {
        "email": "bench@example.com", "username": "bench", "password": "bench-password",
        "name": "Bench"})["token"]
    call(base, "POST", "/teams", {"name": "Bench", "slug": "bench"}, jwt)
    call(base, "POST", "/teams/bench/secrets", {"name": "BENCH", "value": "v" * 64,
                                                "environment": "production"}, jwt)
    return call(base, "POST", "/tokens", {"name": "bench"}, jwt)["token"]


def wrk(url: str, token: str, seconds: float, connections: int) -> float:
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s",
                          "-H", f"Authorization: Bearer {token}", url],
                         capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out:
        raise RuntimeError(f"non-2xx answers during the run:\n{out}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


async def aiohttp_load(url: str, token: str, seconds: float, connections: int) -> float:
    done = 0
    headers = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:
        began = time.monotonic()
        stop_at = began + seconds

        async def loop() -> None:
            nonlocal done
            while time.monotonic() < stop_at:
                async with session.get(url, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"{url}: {resp.status}")
                    done += 1

        await asyncio.gather(*(loop() for _ in range(connections)))
        return done / (time.monotonic() - began)


def cpu_times(proc: subprocess.Popen, pgdata: Path) -> dict[tuple[str, int], float]:
    """CPU seconds so far of the server's processes and of the PostgreSQL processes, by pid."""
    found: dict[tuple[str, int], float] = {}
    try:
        server = psutil.Process(proc.pid)
        tree = [server, *server.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    pg = []
    for p in psutil.process_iter(["name", "cwd"], ad_value=None):
        if p.info["name"] == "postgres" and p.info["cwd"] and Path(p.info["cwd"]) == pgdata:
            pg.append(p)
    for kind, procs in (("server", tree), ("postgres", pg)):
        for p in procs:
            try:
                t = p.cpu_times()
                found[(kind, p.pid)] = t.user + t.system
            except psutil.NoSuchProcess:
                pass
    return found


def cpu_used(before: dict, after: dict, kind: str) -> float:
    return sum(after[key] - before.get(key, 0.0) for key in after if key[0] == kind)


def load(url: str, token: str, seconds: float, connections: int) -> float:
    if shutil.which("wrk"):
        return wrk(url, token, seconds, connections)
    return asyncio.run(aiohttp_load(url, token, seconds, connections))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", default="1,2,4", help="comma list; the first is the base")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    home = Path(tempfile.mkdtemp(prefix="cvsm-bench-workers-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
    env.update({"CVSM_DATA_DIR": str(home / "data"), "CVSM_BACKGROUND_JOBS": "off",
                **{f"CVSM_RATELIMIT_{kind}": "off"
                   for kind in ("AUTH", "API", "PUBLIC", "NEWSLETTER", "FAILED_AUTH")}})
    token = None
    load_before = os.getloadavg()[0]
    results: dict[int, float] = {}
    cpu: dict[int, tuple[float, float]] = {}  # ms of CPU per read: server, PostgreSQL
    pgdata = (home / "data" / "pg").resolve()
    try:
        for count in counts:
            proc, base = start(count, env, home / f"serve-{count}.log")
            try:
                token = token or seed(base)
                load(base + READ_PATH, token, 1, args.connections)  # warm-up: connections, caches
                before = cpu_times(proc, pgdata)
                began = time.monotonic()
                results[count] = load(base + READ_PATH, token, args.seconds, args.connections)
                after = cpu_times(proc, pgdata)
                reads = results[count] * (time.monotonic() - began)
                cpu[count] = (cpu_used(before, after, "server") / reads * 1000,
                              cpu_used(before, after, "postgres") / reads * 1000)
            finally:
                stop(proc)
    finally:
        shutil.rmtree(home, ignore_errors=True)

    cores = os.cpu_count() or 1
    generator = "wrk" if shutil.which("wrk") else "an aiohttp client in this process"
    print(f"audited reads by name with an API token under `serve --workers N` ({args.seconds:g} s "
          f"each, {generator} with {args.connections} connections; {cores} cores shared by "
          f"PostgreSQL, the workers and the load; load average before the run "
          f"{load_before:.2f})")
    base_count = counts[0]
    base_rate = results[base_count]
    for count in counts:
        ratio = results[count] / base_rate
        server_ms, pg_ms = cpu[count]
        line = (f"  workers {count:2}: {results[count]:8.0f} reads/s   CPU per read: server "
                f"{server_ms:4.2f} ms, PostgreSQL {pg_ms:4.2f} ms   ratio to {base_count} {ratio:5.2f}")
        if count != base_count:
            goal = 0.85 * min(count, cores) / min(base_count, cores)
            line += f"   goal >= {goal:4.2f} ({'met' if ratio >= goal else 'not met'})"
        print(line)
    server_ms, pg_ms = cpu[base_count]
    ceiling = cores * 1000 / (server_ms + pg_ms)
    print(f"  the cores alone allow at most {ceiling:.0f} reads/s at {base_count} worker's CPU per "
          f"read ({ceiling / base_rate:.2f} x {base_count} worker), before the load generator's "
          "share and other processes")


if __name__ == "__main__":
    main()
