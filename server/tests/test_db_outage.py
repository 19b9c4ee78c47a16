"""A database that goes away under load: every request in flight or arriving meanwhile is
answered at once, 2xx or 503 with Retry-After, never a 500, never a hang until a statement limit;
the server logs the outage in one line (and one when the database is back), with no traceback,
and recovers by itself.

The server runs on its own embedded PostgreSQL (not the shared test cluster), whose postmaster is
killed ten times while threads read, write and check health.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from pathlib import Path

import httpx
import psutil
import psycopg2
import psycopg2.extensions
import pytest

from cvsm_server import db
from cvsm_server.db.pool import SOCKET_CHECK
from test_workers import environment, running_postgres, serving

KILLS = 10
THREADS = 6
# No answer may take longer than this (the statement limit was 30 s).
SLOWEST = 5.0


class Load:
    """Threads that each read a secret by name, update it, and check health, in a loop; every
    answer is kept: (when it started, how long it took, its status, its Retry-After)."""

    def __init__(self, url: str, token: str, team: str, secret: str) -> None:
        self.url, self.secret_url = url, f"{url}/api/v1/teams/{team}/secrets"
        self.headers = {"Authorization": f"Bearer {token}"}
        self.secret = secret
        self.answers: list[tuple[float, float, int, str | None, str]] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(n,), daemon=True)
                        for n in range(THREADS)]

    def _one(self, client: httpx.Client, method: str, url: str, **kw: object) -> None:
        began = time.monotonic()
        try:
            resp = client.request(method, url, headers=self.headers, **kw)
            status, retry = resp.status_code, resp.headers.get("Retry-After")
        except httpx.HTTPError as exc:  # never expected: the server keeps answering
            status, retry = 0, type(exc).__name__
        with self.lock:
            self.answers.append((began, time.monotonic() - began, status, retry,
                                 f"{method} {url.rsplit('/', 1)[-1]}"))

    def _run(self, n: int) -> None:
        with httpx.Client(timeout=60) as client:
            i = 0
            while not self.done.is_set():
                i += 1
                self._one(client, "GET", f"{self.secret_url}/by-name/OUTAGE_KEY")
                self._one(client, "PUT", f"{self.secret_url}/{self.secret}",
                          json={"value": f"v-{n}-{i}"})
                self._one(client, "GET", f"{self.url}/api/v1/health")

    def ok_since(self, moment: float) -> int:
        with self.lock:
            return sum(1 for began, _, status, _, _ in self.answers
                       if began > moment and 200 <= status < 300)

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join(timeout=90)


def test_killing_the_postmaster_under_load_ten_times_gives_only_2xx_or_503_and_no_hang(home):
    pgdata = home / "data" / "pg"
    environ = environment(home / "data", CVSM_RATELIMIT_API="off", CVSM_RATELIMIT_AUTH="off",
                          CVSM_AUDIT_SEAL_SECONDS="0.2")
    with serving([], environ, home / "serve.log") as server:
        name = f"o_{uuid.uuid4().hex[:10]}"
        resp = httpx.post(server.url + "/api/v1/auth/register", timeout=30, json={
            "email": f"{name}@example.com", "username": name, "name": "Outage",
            "password": "correct horse 1"})
        token = resp.json()["token"]
        auth = {"Authorization": f"Bearer {token}"}
        team = httpx.post(server.url + "/api/v1/teams", headers=auth, timeout=30, json={
            "name": "Outage", "slug": name.replace("_", "-")}).json()["team"]["id"]
        resp = httpx.post(f"{server.url}/api/v1/teams/{team}/secrets", headers=auth, timeout=30,
                          json={"name": "OUTAGE_KEY", "value": "v0", "environment": "production"})
        assert resp.status_code == 201, resp.text
        secret = resp.json()["secret"]["id"]
        with Load(server.url, token, team, secret) as load:
            for kill in range(KILLS):
                started = time.monotonic()
                # recovered: requests served again, and the supervisor done with its restart (the
                # pool reconnects as soon as the new postmaster accepts, before `pg_ctl` returns:
                # a kill in that window is a second crash during the start, not this test's)
                while load.ok_since(started) < 30 or \
                        server.output().count("embedded PostgreSQL running again") < kill:
                    assert time.monotonic() < started + 60, \
                        f"no recovery after kill {kill}:\n{server.output()[-5000:]}"
                    time.sleep(0.05)
                postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
                psutil.Process(postmaster).kill()
            started = time.monotonic()
            while load.ok_since(started) < 30:
                assert time.monotonic() < started + 60, server.output()[-5000:]
                time.sleep(0.05)
        log = server.output()
    answers = load.answers
    statuses = {}
    for _, _, status, _, _ in answers:
        statuses[status] = statuses.get(status, 0) + 1
    slowest = max(answers, key=lambda a: a[1])
    print(f"\n{KILLS} postmaster kills under load: {len(answers)} answers {statuses}; slowest "
          f"{slowest[1]:.2f} s ({slowest[4]} -> {slowest[2]})")
    wrong = [a for a in answers if not (200 <= a[2] < 300 or (a[2] == 503 and a[3]))]
    assert not wrong, (wrong[:10], log[-5000:])
    assert statuses.get(503, 0) > 0  # the kills were felt
    assert slowest[1] < SLOWEST, (slowest, log[-5000:])
    assert "Traceback" not in log, log[-8000:]
    assert log.count("has stopped; starting it again") == KILLS, log[-5000:]


# --- the pieces, on the shared test cluster ---------------------------------------------------

def test_a_statement_that_got_no_answer_in_time_is_answered_503_with_one_line(caplog):
    """aiopg's statement limit (db.StatementTimeout) is the database being away, not a bug:
    503 with Retry-After, one warning for the outage, no traceback; the next good answer logs
    that it is back."""
    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    from cvsm_server.web import middleware
    from cvsm_server.web.outage import RequestOutage
    from cvsm_server.web.state import REQUEST_OUTAGE

    app = web.Application()
    app[REQUEST_OUTAGE] = RequestOutage()

    async def run() -> list[web.StreamResponse]:
        async def times_out(request: web.Request) -> web.Response:
            raise db.StatementTimeout("no answer from the database within 30 s")

        async def fine(request: web.Request) -> web.Response:
            return web.json_response({"ok": True})

        answers = []
        for handler in (times_out, times_out, fine):
            request = make_mocked_request("GET", "/api/v1/health", app=app)
            answers.append(await middleware.error_middleware(request, handler))
        return answers

    first, second, back = asyncio.run(run())
    for answer in (first, second):
        assert answer.status == 503 and answer.headers["Retry-After"] == "5"
    assert back.status == 200
    assert caplog.text.count("the database is unavailable (StatementTimeout: no answer from the "
                             "database within 30 s on GET") == 1, caplog.text
    assert caplog.text.count("the database is back: 2 request(s) answered 503") == 1
    assert not [r for r in caplog.records if r.exc_info]


async def test_a_statement_still_times_out_at_the_pools_limit(database_url):
    """The connection's own watch of its socket keeps aiopg's statement limit, and closes the
    connection at it, as aiopg does."""
    pool = await db.create_pool(database_url, maxsize=1)
    try:
        pool._timeout = 0.3  # the connections opened from now on
        await pool.clear()
        async with pool.acquire() as conn:
            cur = await conn.cursor()
            began = time.monotonic()
            with pytest.raises(db.StatementTimeout):
                await cur.execute("SELECT pg_sleep(3)")
            assert 0.25 < time.monotonic() - began < 1.5
            assert conn.closed
        async with db.cursor(pool) as cur:  # a new connection serves
            await cur.execute("SELECT 1 AS one")
            assert (await cur.fetchone())["one"] == 1
    finally:
        pool.close()
        await pool.wait_closed()


def test_the_connection_string_asks_for_tcp_keepalives():
    params = psycopg2.extensions.parse_dsn(db.with_keepalives("postgresql://u@db.example/cvsm"))
    assert params["keepalives"] == "1"
    assert int(params["keepalives_idle"]) <= 10
    assert int(params["keepalives_interval"]) <= 5
    assert int(params["keepalives_count"]) <= 3
    # The caller's own settings win.
    params = psycopg2.extensions.parse_dsn(
        db.with_keepalives("postgresql://u@db.example/cvsm?keepalives_idle=60"))
    assert params["keepalives_idle"] == "60"


async def test_a_connection_made_through_a_multi_host_url_is_watched_on_its_own_socket(
        database_url):
    """libpq tries a multi-host URL's hosts in turn, each on a new socket (high availability,
    test_failover): the connection is watched on the socket it ended on, so its statements
    are answered at once, not at the half-second look at the socket (`db.pool.SOCKET_CHECK`)."""
    params = psycopg2.extensions.parse_dsn(database_url)
    with socket.socket() as sock:  # a port nobody listens on: the first host refuses
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    params["host"] = f"127.0.0.1,{params['host']}"
    params["port"] = f"{dead},{params.get('port', '5432')}"
    params["target_session_attrs"] = "read-write"
    pool = await db.create_pool(psycopg2.extensions.make_dsn(**params), maxsize=1)
    try:
        async with pool.acquire() as conn:
            cur = await conn.cursor()
            began = time.monotonic()
            for _ in range(10):
                await cur.execute("SELECT 1 AS one")
                assert (await cur.fetchone())["one"] == 1
            took = time.monotonic() - began
            cur.close()
    finally:
        pool.close()
        await pool.wait_closed()
    assert took < SOCKET_CHECK * 2, f"10 statements took {took:.2f} s"
