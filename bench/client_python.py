"""bench/client_python.py: what the Python client costs over the plainest alternative.

Measured in one run against the in-process reference server (embedded PostgreSQL):

- requests per cold ``Client.get``, counted on the wire by an ``http_client`` of the bench's own
  (the goal is 1: the read by name);
- a cached ``Client.get`` against a plain dict lookup of the same value (the goal is 3x or less);
- an uncached ``Client.get`` (``cache_ttl=0``) against the same HTTP request (the read by name)
  made with a bare ``httpx.Client``.

It prints figures and ratios only; nothing is asserted about time. Run from the repository root:
``.venv/bin/python bench/client_python.py``.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))

import httpx  # noqa: E402

import cvsm  # noqa: E402
from conformance.server import ReferenceServer  # noqa: E402

CACHED_CALLS = 50_000
CACHED_ROUNDS = 15  # many short interleaved rounds: a busy neighbour spoils few of them
COLD_GETS = 50
HTTP_CALLS = 200
ROUNDS = 3
NAME = "BENCH_SECRET"
VALUE = "postgres://bench:bench@db.example:5432/app"


class ServerThread:
    """ServerThread runs the reference server on an event loop of its own thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server = ReferenceServer()

    def __enter__(self) -> ServerThread:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(timeout=300)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(timeout=120)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def seed(api: str) -> tuple[str, str]:
    """seed registers a user and a team holding one secret; returns (API token, team id)."""
    suffix = str(time.time_ns())[-9:]
    with httpx.Client(base_url=api, timeout=30) as http:
        jwt = http.post("/auth/register", json={
            "email": f"bench-{suffix}@example.test", "username": f"bench_{suffix}",
            "password": "bench-password-1", "name": "Bench",
        }).raise_for_status().json()["token"]
        headers = {"Authorization": f"Bearer {jwt}"}
        team = http.post("/teams", json={"name": "Bench", "slug": f"bench-{suffix}"}, headers=headers)
        team_id = team.raise_for_status().json()["team"]["id"]
        http.post(f"/teams/{team_id}/secrets", headers=headers,
                  json={"name": NAME, "value": VALUE, "environment": "production"}).raise_for_status()
        token = http.post("/tokens", json={"name": "bench"}, headers=headers).raise_for_status().json()["token"]
    return token, team_id


def per_call(first: Callable[[], object], second: Callable[[], object], calls: int,
             rounds: int = ROUNDS) -> tuple[float, float]:
    """per_call is the best mean seconds per call of each, over ROUNDS interleaved rounds.

    Interleaving keeps slow drift (a growing audit table, a busy neighbour) out of the ratio.
    """
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for index, fn in enumerate((first, second)):
            started = time.perf_counter()
            for _ in range(calls):
                fn()
            best[index] = min(best[index], (time.perf_counter() - started) / calls)
    return best[0], best[1]


def main() -> int:
    with ServerThread() as running:
        api = running.server.url + "/api/v1"
        token, team_id = seed(api)
        options = {"token": token, "base_url": api, "team": team_id}

        with cvsm.Client(**options) as cached, cvsm.Client(cache_ttl=0, **options) as uncached, \
                httpx.Client(timeout=10, headers={
                    "Authorization": f"Bearer {token}", "Accept": "application/json",
                    "User-Agent": cvsm.USER_AGENT}) as raw:
            plain = {NAME: VALUE}

            def raw_get() -> str:
                answer = raw.get(f"{api}/teams/{team_id}/secrets/by-name/{NAME}", params={"environment": "production"})
                return str(answer.json()["value"])

            assert cached.get(NAME) == uncached.get(NAME) == raw_get() == plain[NAME] == VALUE
            for _ in range(20):  # warm connections and the server's caches
                uncached.get(NAME)
                raw_get()

            dict_s, cached_s = per_call(lambda: plain[NAME], lambda: cached.get(NAME), CACHED_CALLS,
                                        CACHED_ROUNDS)
            raw_s, uncached_s = per_call(raw_get, lambda: uncached.get(NAME), HTTP_CALLS)

        sent: list[str] = []
        with httpx.Client(event_hooks={"request": [lambda request: sent.append(request.url.path)]}) as counting, \
                cvsm.Client(http_client=counting, **options) as cold:
            for _ in range(COLD_GETS):
                cold.clear_cache()
                cold.get(NAME)

    print(f"requests per cold Client.get: {len(sent) / COLD_GETS:.2f} (goal 1; {sent[0]})")
    print(f"cached Client.get:        {cached_s * 1e9:10.0f} ns/call  dict lookup {dict_s * 1e9:8.1f} ns/call"
          f"  ratio {cached_s / dict_s:8.1f}x (goal 3x or less)")
    print(f"uncached Client.get:      {uncached_s * 1e6:10.0f} us/call  raw httpx   {raw_s * 1e6:8.0f} us/call"
          f"  ratio {uncached_s / raw_s:8.2f}x (same one request)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
