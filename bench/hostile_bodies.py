"""/health's latency while hostile bodies arrive, over its latency idle, measured in one run on
one server (issue 36).

Starts the app in-process (`create_app` + `AppRunner` on 127.0.0.1, embedded PostgreSQL in a
temporary data dir, rate limits off) and times SAMPLES `GET /api/v1/health` requests:

- idle;
- while a client without credentials streams 400 MiB (ten times the largest cap) to
  `POST /teams/<random>/e2e/rekey`, chunked, as fast as the server takes it (it answers 401
  without reading and closes);
- while a signed-in account of no team does the same (404 unread: not a member);
- while a member posts 30 MiB of `{}` to `POST /secrets/bulk` (parsed a step at a time, refused
  with a 413 past the value budget).

Prints the median and worst latency of each and the ratio worst busy / median idle, and the
process's resident memory before and after. Nothing is asserted about time.

    .venv/bin/python bench/hostile_bodies.py
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from cvsm_server.runtime.app import create_app  # noqa: E402
from cvsm_server.core.config import Settings  # noqa: E402

SAMPLES = 20
STREAM = 400 * 1024 * 1024


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def health(session: aiohttp.ClientSession, base: str) -> list[float]:
    times = []
    for _ in range(SAMPLES):
        started = time.perf_counter()
        async with session.get(f"{base}/health") as resp:
            await resp.read()
        times.append(time.perf_counter() - started)
        await asyncio.sleep(0.005)
    return times


async def stream(port: int, path: str, token: str | None) -> bytes:
    """Send STREAM bytes chunked to `path`; the answer's status line."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    credential = f"Authorization: Bearer {token}\r\n" if token else ""
    writer.write(f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                 f"{credential}Transfer-Encoding: chunked\r\n\r\n".encode())
    block = b"{}," * (1 << 18)

    async def write() -> None:
        sent = 0
        try:
            while sent < STREAM:
                writer.write(b"%x\r\n%s\r\n" % (len(block), block))
                await writer.drain()
                sent += len(block)
        except (ConnectionError, OSError):
            pass

    writing = asyncio.create_task(write())
    try:
        return await reader.readline()
    finally:
        writing.cancel()
        writer.close()


async def during(session: aiohttp.ClientSession, base: str, load) -> tuple[list[float], object]:
    task = asyncio.create_task(load)
    await asyncio.sleep(0.05)
    times = await health(session, base)
    return times, await task


def show(name: str, times: list[float], idle: float) -> None:
    print(f"{name:<46} median {statistics.median(times) * 1000:6.1f} ms, "
          f"worst {max(times) * 1000:6.1f} ms, worst / idle median {max(times) / idle:5.1f}")


async def run(data_dir: Path) -> None:
    settings = Settings(data_dir=data_dir, master_key=os.urandom(32), jwt_secret="b" * 48,
                        rate_limits={"auth": None, "api": None, "public": None, "newsletter": None},
                        background_jobs=False)
    runner = web.AppRunner(create_app(settings), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    base = f"http://127.0.0.1:{port}/api/v1"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{base}/auth/register", json={
                    "email": "bench@example.com", "username": "bench_user",
                    "password": "bench password 1", "name": "Bench"}) as resp:
                token = (await resp.json())["token"]
            headers = {"Authorization": f"Bearer {token}"}
            async with session.post(f"{base}/teams", headers=headers,
                                    json={"name": "b", "slug": "bench"}) as resp:
                team = (await resp.json())["team"]["id"]
            async with session.post(f"{base}/auth/register", json={
                    "email": "other@example.com", "username": "other_user",
                    "password": "bench password 1", "name": "Other"}) as resp:
                stranger = (await resp.json())["token"]
            await health(session, base)  # warm up
            before = rss_mib()
            idle_times = await health(session, base)
            idle = statistics.median(idle_times)
            show("idle", idle_times, idle)
            rekey = f"/api/v1/teams/{uuid.uuid4()}/e2e/rekey"
            for name, who in (("400 MiB to rekey, no credential", None),
                              ("400 MiB to rekey, not a member", stranger)):
                times, answer = await during(session, base, stream(port, rekey, who))
                show(f"{name} ({answer.decode().split(' ', 2)[1]})", times, idle)
            body = b'{"items":[' + b"{}," * (10 << 20) + b"{}]}"

            async def member() -> int:
                async with session.post(f"{base}/teams/{team}/secrets/bulk", headers={
                        **headers, "Content-Type": "application/json"},
                        data=aiohttp.BytesPayload(body)) as resp:
                    return resp.status
            times, status = await during(session, base, member())
            show(f"30 MiB of {{}} to bulk, a member ({status})", times, idle)
            print(f"resident memory: {before:.0f} MiB before, {rss_mib():.0f} MiB after")
    finally:
        await runner.cleanup()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cvsm-bench-") as tmp:
        asyncio.run(run(Path(tmp)))


if __name__ == "__main__":
    main()
