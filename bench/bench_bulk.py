"""Bulk vs single requests, measured in one run on one server.

Starts the app in-process (`create_app` + `AppRunner` on 127.0.0.1, embedded PostgreSQL in a
temporary data dir, rate limits off) and times, over real HTTP:

- 500 single creates (`POST /secrets`) and 500 single reads (`GET /secrets/:id`);
- importing a 500-line `.env` file (`POST /secrets/bulk/import-dotenv`);
- exporting 500 secrets as `.env` (`GET /secrets/export`).

It prints the times and the ratios import / 500 creates and export / 500 reads. The single
bulk requests are each run three times (fresh teams for imports) and the median is used.
Nothing is asserted about time; only that every operation did what it should.

    .venv/bin/python bench/bench_bulk.py
"""

from __future__ import annotations

import asyncio
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from cvsm_server import db  # noqa: E402
from cvsm_server.runtime.app import create_app  # noqa: E402
from cvsm_server.core.config import Settings  # noqa: E402
from cvsm_server.secrets.dotenv import quote  # noqa: E402
from cvsm_server.web.state import POOL  # noqa: E402

N = 500
REPEATS = 3


def sample_value(i: int) -> str:
    # Realistic secrets, with characters the .env format must escape now and then.
    extra = ' "quoted" \\path\nnext' if i % 10 == 0 else ""
    return f"{secrets.token_urlsafe(24)}-{i}{extra}"


async def timed(coro) -> tuple[float, object]:
    start = time.perf_counter()
    result = await coro
    return time.perf_counter() - start, result


class Bench:
    def __init__(self, session: aiohttp.ClientSession, base: str, app: web.Application) -> None:
        self.http = session
        self.base = base
        self.app = app
        self.headers: dict[str, str] = {}

    async def call(self, method: str, path: str, *, expect: int = 200, **kw):
        async with self.http.request(method, self.base + path, headers=self.headers, **kw) as resp:
            if resp.status != expect:
                raise RuntimeError(f"{method} {path}: {resp.status} {await resp.text()}")
            return await (resp.json() if resp.content_type == "application/json" else resp.text())

    async def login(self) -> None:
        body = await self.call("POST", "/auth/register", expect=201, json={
            "email": "bench@example.com", "username": "bench_user",
            "password": "bench password 1", "name": "Bench"})
        self.headers = {"Authorization": f"Bearer {body['token']}"}

    async def team(self, slug: str) -> str:
        team_id = (await self.call("POST", "/teams", expect=201,
                                   json={"name": slug, "slug": slug}))["team"]["id"]
        async with db.cursor(self.app[POOL]) as cur:  # no quota: the plan form is not in the API
            await cur.execute("UPDATE teams SET plan = 'enterprise', max_secrets = NULL, "
                              "max_members = NULL WHERE id = %s", (team_id,))
        return team_id

    async def single_creates(self, team_id: str, values: dict[str, str]) -> list[str]:
        ids = []
        for name, value in values.items():
            body = await self.call("POST", f"/teams/{team_id}/secrets", expect=201,
                                   json={"name": name, "value": value, "environment": "production"})
            ids.append(body["secret"]["id"])
        return ids

    async def single_reads(self, team_id: str, ids: list[str]) -> dict[str, str]:
        values = {}
        for secret_id in ids:
            body = await self.call("GET", f"/teams/{team_id}/secrets/{secret_id}")
            values[body["secret"]["name"]] = body["value"]
        return values

    async def import_dotenv(self, team_id: str, content: str) -> dict:
        return await self.call("POST", f"/teams/{team_id}/secrets/bulk/import-dotenv",
                               json={"content": content, "environment": "production"})

    async def export(self, team_id: str) -> str:
        return await self.call("GET", f"/teams/{team_id}/secrets/export",
                               params={"environment": "production"})


async def run(data_dir: Path) -> None:
    settings = Settings(data_dir=data_dir, master_key=os.urandom(32), jwt_secret="b" * 48,
                        rate_limits={"auth": None, "api": None, "public": None, "newsletter": None},
                        background_jobs=False)
    app = create_app(settings)
    runner = web.AppRunner(app, access_log=None)
    started = time.perf_counter()
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    print(f"server up on 127.0.0.1:{port} (embedded PostgreSQL) in {time.perf_counter() - started:.1f} s")
    try:
        async with aiohttp.ClientSession() as session:
            bench = Bench(session, f"http://127.0.0.1:{port}/api/v1", app)
            await bench.login()
            values = {f"SECRET_{i:03d}": sample_value(i) for i in range(N)}
            dotenv_text = "".join(f"{name}={quote(v)}\n" for name, v in values.items())
            assert dotenv_text.count("\n") == N

            # warm up the pool and the code paths
            warm = await bench.team("bench-warm")
            warm_ids = await bench.single_creates(warm, {f"W{i}": "w" for i in range(20)})
            await bench.single_reads(warm, warm_ids)
            await bench.import_dotenv(warm, "WW=1\n")
            await bench.export(warm)

            singles = await bench.team("bench-singles")
            create_time, ids = await timed(bench.single_creates(singles, values))
            read_time, read_back = await timed(bench.single_reads(singles, ids))
            assert read_back == values

            import_times = []
            for n in range(REPEATS):
                team_id = await bench.team(f"bench-import-{n}")
                seconds, result = await timed(bench.import_dotenv(team_id, dotenv_text))
                assert result["parsed"] == N and result["summary"]["ok"] == N, result["summary"]
                import_times.append(seconds)

            export_times = []
            for _ in range(REPEATS):
                seconds, text = await timed(bench.export(singles))
                assert text.count("\n") == N
                export_times.append(seconds)
    finally:
        await runner.cleanup()

    import_time = statistics.median(import_times)
    export_time = statistics.median(export_times)
    print(f"{N} single creates      {create_time * 1000:8.0f} ms  ({create_time / N * 1000:.2f} ms each)")
    print(f"{N} single reads        {read_time * 1000:8.0f} ms  ({read_time / N * 1000:.2f} ms each)")
    print(f"import {N}-line .env    {import_time * 1000:8.0f} ms  (median of {REPEATS})")
    print(f"export {N} secrets      {export_time * 1000:8.0f} ms  (median of {REPEATS})")
    print(f"ratio import / {N} creates = {import_time / create_time:.3f}  "
          f"(import is {create_time / import_time:.1f}x faster)")
    print(f"ratio export / {N} reads   = {export_time / read_time:.3f}  "
          f"(export is {read_time / export_time:.1f}x faster)")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cvsm-bench-") as tmp:
        asyncio.run(run(Path(tmp)))


if __name__ == "__main__":
    main()
