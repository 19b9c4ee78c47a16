"""`cvsm-server serve --workers N` and `--tls-cert/--tls-key`, with the real console script: N
worker processes answer on one port, a worker that dies is replaced while the others serve,
SIGTERM to the parent stops every worker and then the embedded PostgreSQL, and HTTPS serves a
certificate that a client trusting its CA accepts.

Which process answered a request is read from the access log: every log record of a multi-worker
server names its process id, and the access line names the request id the test sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiopg
import httpx
import psutil
import psycopg2
import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from conftest import JWT_SECRET, MASTER_KEY, admin_execute, running_postgres, server_url
from cvsm_server import db
from cvsm_server.runtime import tls

CONSOLE_SCRIPT = Path(sys.executable).with_name("cvsm-server")
LISTENING = re.compile(r"cvsm-server \S+ listening on (https?://\S+) \(share links: \S+/share/…\)")
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ \S+: ")


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def workers(self) -> list[int]:
        """The worker processes (multiprocessing's `spawn` also starts a resource tracker)."""
        return sorted(child.pid for child in psutil.Process(self.proc.pid).children()
                      if "spawn_main" in " ".join(child.cmdline()))

    def helpers(self) -> list[int]:
        return [child.pid for child in psutil.Process(self.proc.pid).children(recursive=True)]

    def answering_pid(self, path: str = "/api/v1/health", **client: object) -> int:
        """Send one request on a new connection; the pid of the worker whose access line has it."""
        request_id = f"probe-{uuid.uuid4().hex[:12]}"  # a long hex run is redacted
        resp = httpx.get(self.url + path, headers={"X-Request-Id": request_id}, timeout=30, **client)
        assert resp.status_code == 200, resp.text
        line = re.compile(rf"aiohttp\.access\[(\d+)\]: .* {request_id}$", re.MULTILINE)
        deadline = time.monotonic() + 10
        while not (found := line.search(self.output())):
            assert time.monotonic() < deadline, f"no access line for {request_id}:\n{self.output()}"
            time.sleep(0.05)
        return int(found.group(1))


def environment(data_dir: Path, **env: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
    environ.update({"CVSM_DATA_DIR": str(data_dir), "CVSM_MASTER_KEY": MASTER_KEY,
                    "CVSM_JWT_SECRET": JWT_SECRET})
    environ.update(env)
    return environ


@contextlib.contextmanager
def serving(args: list[str], environ: dict[str, str], log: Path) -> Iterator[Server]:
    """`cvsm-server serve --port 0 ARGS`, until its start-up line; SIGTERM (then SIGKILL) after."""
    with log.open("wb") as sink:
        proc = subprocess.Popen([str(CONSOLE_SCRIPT), "serve", "--port", "0", *args], env=environ,
                                stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (found := LISTENING.search(log.read_text(errors="replace"))):
            assert proc.poll() is None, f"cvsm-server exited {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"cvsm-server did not start:\n{log.read_text()}"
            time.sleep(0.1)
        yield Server(proc, found.group(1), log)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                for child in psutil.Process(proc.pid).children(recursive=True):
                    child.kill()
                proc.kill()
                proc.wait()


@pytest.fixture
def on_test_database(database_url: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a server on this test's database of the run's PostgreSQL."""
    return environment(tmp_path / "data", CVSM_DATABASE_URL=server_url(database_url),
                       CVSM_MIGRATION_DATABASE_URL=database_url)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def processes(pids: list[int]) -> list[psutil.Process]:
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            found.append(psutil.Process(pid))
    return found


def test_three_workers_answer_on_one_port_from_three_processes(on_test_database, tmp_path):
    with serving(["--workers", "3"], on_test_database, tmp_path / "serve.log") as server:
        workers = server.workers()
        assert len(workers) == 3 and server.proc.pid not in workers
        seen = set()
        for _ in range(300):
            seen.add(server.answering_pid())
            if len(seen) == 3:
                break
        assert seen == set(workers)
        assert ", 3 workers" in server.output()
        # uvloop by default: the parent's loop, and each worker's as it says when ready
        assert re.search(r"cvsm\.workers\[\d+\]: event loop: uvloop$", server.output(), re.M)
        ready = re.findall(r"worker \d ready \(pid (\d+)\), event loop (\w+)$", server.output(),
                           re.M)
        assert sorted(int(pid) for pid, _ in ready) == workers
        assert {loop for _, loop in ready} == {"uvloop"}


@pytest.mark.parametrize("workers", ["1", "2"])
def test_cvsm_event_loop_asyncio_serves_on_asyncios_own_loop(on_test_database, tmp_path,
                                                             workers):
    environ = {**on_test_database, "CVSM_EVENT_LOOP": "asyncio"}
    with serving(["--workers", workers], environ, tmp_path / "serve.log") as server:
        assert httpx.get(f"{server.url}/api/v1/health", timeout=30).status_code == 200
        output = server.output()
        assert re.search(r"event loop: asyncio$", output, re.M)
        assert "uvloop" not in output
        if workers == "2":
            assert len(re.findall(r"worker \d ready \(pid \d+\), event loop asyncio$",
                                  output, re.M)) == 2


def test_an_unknown_event_loop_is_refused_in_one_line(tmp_path):
    result = subprocess.run([str(CONSOLE_SCRIPT), "serve", "--port", "0"],
                            env=environment(tmp_path / "data", CVSM_EVENT_LOOP="trio"),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "cvsm-server: CVSM_EVENT_LOOP must be uvloop or asyncio, got 'trio'"


def test_a_request_after_sigterm_of_a_worker_succeeds_and_the_parent_restarts_it(
        on_test_database, tmp_path):
    with serving(["--workers", "3"], on_test_database, tmp_path / "serve.log") as server:
        before = server.workers()
        victim = psutil.Process(before[1])
        victim.terminate()
        victim.wait(timeout=60)
        assert server.answering_pid() in before and server.answering_pid() != victim.pid

        deadline = time.monotonic() + 60
        while len(after := server.workers()) != 3:
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.1)
        [replacement] = set(after) - set(before)
        assert set(after) - {replacement} == set(before) - {victim.pid}
        while f"restarted (pid {replacement})" not in server.output():
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.1)
        assert re.search(rf"worker \d \(pid {victim.pid}\) exited with status 0; restarting in",
                         server.output())
        for _ in range(300):  # the new worker serves too
            if server.answering_pid() == replacement:
                break
        else:
            pytest.fail(f"worker {replacement} never answered")


def test_sigterm_to_the_parent_stops_every_worker_then_the_embedded_postgres_exit_0(home):
    pgdata = home / "data" / "pg"
    environ = environment(home / "data")
    with serving(["--workers", "2"], environ, home / "serve.log") as server:
        workers, helpers = server.workers(), server.helpers()
        assert server.answering_pid() in workers
        # One embedded PostgreSQL, started by the parent alone: no worker uses a handle of its own.
        assert json.loads((pgdata / ".handle_pids.json").read_text()) == [server.proc.pid]
        assert running_postgres(pgdata)
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=90) == 0
        assert set(workers) <= set(helpers)
        # multiprocessing's resource tracker leaves when it reads the end of its pipe, just after
        _, still_running = psutil.wait_procs(processes(helpers), timeout=30)
        assert still_running == []
        assert running_postgres(pgdata) == []
        assert not (pgdata / "postmaster.pid").exists()
        assert "Traceback" not in server.output()


@pytest.mark.parametrize("count", ["0", "65", "-1"])
def test_workers_out_of_range_is_refused_in_one_line(tmp_path, count):
    result = subprocess.run([str(CONSOLE_SCRIPT), "serve", "--workers", count],
                            env=environment(tmp_path / "data"), capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == f"cvsm-server: --workers must be between 1 and 64, not {count}"
    assert not (tmp_path / "data").exists()  # nothing started, nothing generated


# --- TLS ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA(organization_name="cvsm tests")


def write_pair(ca: trustme.CA, directory: Path, name: str) -> tuple[Path, Path]:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    directory.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = directory / f"{name}.crt", directory / f"{name}.key"
    cert_file.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    key_file.write_bytes(cert.private_key_pem.bytes())
    return cert_file, key_file


@pytest.mark.parametrize("workers", ["1", "2"])
def test_https_with_a_trusted_ca_reads_health(on_test_database, tmp_path, ca, workers):
    cert, key = write_pair(ca, tmp_path / "tls", "server")
    args = ["--workers", workers, "--tls-cert", str(cert), "--tls-key", str(key)]
    with serving(args, on_test_database, tmp_path / "serve.log") as server:
        assert server.url.startswith("https://127.0.0.1:")
        client = ssl.create_default_context()
        ca.configure_trust(client)
        resp = httpx.get(f"{server.url}/api/v1/health", verify=client, timeout=30)
        assert resp.status_code == 200 and resp.json()["status"] == "ok"
        assert resp.http_version == "HTTP/1.1"
        with pytest.raises(httpx.ConnectError):  # a client that does not trust the CA refuses
            httpx.get(f"{server.url}/api/v1/health", timeout=30)
        # the share links the server hands out are https too
        assert f"(share links: {server.url}/share/…)" in server.output()
        # TLS on uvloop's transports: the single process says its loop, workers each theirs
        loop_line = "event loop: uvloop" if workers == "1" else "), event loop uvloop"
        assert server.output().count(loop_line) == int(workers)


def test_the_server_context_refuses_anything_older_than_tls_1_2(ca, tmp_path):
    cert, key = write_pair(ca, tmp_path, "server")
    context = tls.server_context(cert, key)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def tls_failure(tmp_path: Path, cert: Path, key: Path, workers: str = "1") -> str:
    result = subprocess.run([str(CONSOLE_SCRIPT), "serve", "--port", "0", "--workers", workers,
                             "--tls-cert", str(cert), "--tls-key", str(key)],
                            env=environment(tmp_path / "data"), capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if not LOG_RECORD.match(line)]
    return line


@pytest.mark.parametrize("workers", ["1", "3"])
def test_a_key_of_another_certificate_is_refused_in_one_line(ca, tmp_path, workers):
    cert, _ = write_pair(ca, tmp_path, "one")
    _, other_key = write_pair(ca, tmp_path, "two")
    assert tls_failure(tmp_path, cert, other_key, workers) == (
        f"cvsm-server: --tls-key {other_key} does not match the certificate in --tls-cert {cert}")


def test_unreadable_and_malformed_tls_files_are_named_in_one_line(ca, tmp_path):
    cert, key = write_pair(ca, tmp_path, "server")
    missing = tmp_path / "missing.pem"
    assert tls_failure(tmp_path, missing, key) == (
        f"cvsm-server: --tls-cert {missing}: cannot read it: no such file or directory")
    assert tls_failure(tmp_path, cert, missing) == (
        f"cvsm-server: --tls-key {missing}: cannot read it: no such file or directory")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    assert tls_failure(tmp_path, garbage, key) == f"cvsm-server: --tls-cert {garbage}: not a PEM certificate"
    assert tls_failure(tmp_path, cert, garbage) == f"cvsm-server: --tls-key {garbage}: not a PEM private key"
    encrypted = tmp_path / "encrypted.key"
    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    encrypted.write_bytes(private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase")))
    assert tls_failure(tmp_path, cert, encrypted) == (
        f"cvsm-server: --tls-key {encrypted}: the key is encrypted with a passphrase; "
        "give the server an unencrypted key (mode 0600)")


def test_tls_cert_without_tls_key_is_refused(tmp_path, ca):
    cert, _ = write_pair(ca, tmp_path, "server")
    result = subprocess.run([str(CONSOLE_SCRIPT), "serve", "--tls-cert", str(cert)],
                            env=environment(tmp_path / "data"), capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "cvsm-server: --tls-cert and --tls-key go together: give both or neither"


def test_workers_on_a_port_in_use_say_so_in_one_line_and_start_nothing(home):
    pgdata = home / "data" / "pg"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result = subprocess.run([str(CONSOLE_SCRIPT), "serve", "--port", str(port), "--workers", "2"],
                                env=environment(home / "data"), capture_output=True, text=True,
                                timeout=120)
    assert result.returncode == 1
    assert [line for line in result.stderr.splitlines() if not LOG_RECORD.match(line)] == [
        f"cvsm-server: cannot listen on 127.0.0.1:{port}: address already in use"]
    assert not pgdata.exists()


def test_a_worker_that_cannot_start_stops_the_server_with_its_reason_in_one_line(database_url, tmp_path):
    # Serving as the database's superuser is refused by each worker's start-up check.
    environ = environment(tmp_path / "data", CVSM_DATABASE_URL=database_url)
    result = subprocess.run([str(CONSOLE_SCRIPT), "serve", "--port", "0", "--workers", "2"],
                            env=environ, capture_output=True, text=True, timeout=240)
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if not LOG_RECORD.match(line)]
    assert line.startswith("cvsm-server: the database role ") and "superuser" in line, line
    assert result.returncode == 2
    assert "listening on" not in result.stderr


def few_slots(home: Path, max_connections: int) -> None:
    """Make the embedded cluster of `home` one with `max_connections` slots (ALTER SYSTEM wins
    over the embedded default) and stop it; `cvsm-server serve` starts it again."""
    embedded = db.EmbeddedPostgres(home / "data")
    url = embedded.start(database="postgres")
    admin_execute(url, f"ALTER SYSTEM SET max_connections = {max_connections}")
    embedded.stop()


def test_more_workers_than_the_connection_slots_allow_is_refused_in_one_line(home):
    few_slots(home, 30)  # 30 - 3 superuser-reserved - 3 headroom = 24: 2 for the jobs, 22 to share
    result = subprocess.run([str(CONSOLE_SCRIPT), "serve", "--port", "0", "--workers", "12"],
                            env=environment(home / "data"), capture_output=True, text=True,
                            timeout=240)
    assert "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if not LOG_RECORD.match(line)] == [
        "cvsm-server: 12 workers need at least 26 database connections and PostgreSQL leaves this "
        "server 24 (max_connections less reserved slots and connection limits): raise "
        "max_connections or run fewer workers"]
    assert result.returncode == 2
    assert "listening on" not in result.stderr
    assert not running_postgres(home / "data" / "pg")


async def _read_concurrently(base: str, count: int) -> list[int]:
    """Arrange an owner, a team, a secret and an API token; then `count` audited reads at once,
    each on its own connection. Their statuses."""
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as http:
        resp = await http.post("/api/v1/auth/register", json={
            "email": "reader@example.com", "username": "reader_one", "password": "correct horse 1",
            "name": "Owner"})
        assert resp.status_code == 201, resp.text
        owner = {"Authorization": f"Bearer {resp.json()['token']}"}
        resp = await http.post("/api/v1/teams", headers=owner,
                               json={"name": "Readers", "slug": "readers"})
        assert resp.status_code == 201, resp.text
        team_id = resp.json()["team"]["id"]
        resp = await http.post(f"/api/v1/teams/{team_id}/secrets", headers=owner,
                               json={"name": "DB_URL", "value": "postgres://x",
                                     "environment": "production"})
        assert resp.status_code == 201, resp.text
        secret_id = resp.json()["secret"]["id"]
        resp = await http.post("/api/v1/tokens", headers=owner, json={"name": "ci"})
        assert resp.status_code == 201, resp.text
        token = {"Authorization": f"Bearer {resp.json()['token']}"}
        read = f"/api/v1/teams/{team_id}/secrets/{secret_id}"
        answers = await asyncio.gather(*(http.get(read, headers=token) for _ in range(count)))
    return [answer.status_code for answer in answers]


def test_four_workers_on_few_connection_slots_answer_200_concurrent_reads_without_a_5xx(
        home, tmp_path):
    # Each worker's pool used to grow to 20: four of them asked a 30-slot cluster for 80
    # connections, and every request past its slots was a 503. Now the pools share what the
    # cluster leaves (5 each) and a busy pool queues its requests.
    few_slots(home, 30)
    environ = environment(home / "data", CVSM_RATELIMIT_API="off", CVSM_RATELIMIT_AUTH="off",
                          CVSM_DEFAULT_PLAN="professional")
    with serving(["--workers", "4"], environ, tmp_path / "serve.log") as server:
        statuses = asyncio.run(_read_concurrently(server.url, 200))
        output = server.output()
    assert statuses == [200] * 200, sorted(set(statuses))
    assert "4 workers, each with up to 5 database connections" in output
    assert "database unavailable" not in output


async def test_a_busy_pool_makes_a_request_wait_for_a_connection_then_503_with_retry_after(
        database_url, monkeypatch):
    from cvsm_server.core.errors import ServiceUnavailable

    pool = await db.create_pool(server_url(database_url), maxsize=1)
    try:
        held = await pool.acquire()

        async def release_soon() -> None:
            await asyncio.sleep(0.2)
            await pool.release(held)

        releasing = asyncio.create_task(release_soon())
        async with db.connection(pool) as conn:  # waits for the one connection
            assert conn is held
            await releasing
            monkeypatch.setattr(db.pool, "POOL_WAIT", 0.2)
            with pytest.raises(ServiceUnavailable) as refused:  # it is never given back in time
                async with db.connection(pool):
                    pass
            assert refused.value.headers["Retry-After"] == "5"
    finally:
        pool.close()
        await pool.wait_closed()


async def test_a_free_connection_is_taken_and_given_back_without_aiopgs_slow_path(
        database_url, monkeypatch):
    """A request's connection (`db.connection`) comes from the free list and goes back to it
    directly; aiopg's acquire (a lock under a timeout, a walk over the free list) and release
    (a task to wake a waiter) are left to the cases that need them."""
    pool = await db.create_pool(server_url(database_url), maxsize=2)
    try:
        async with db.connection(pool) as first:
            pass
        slow = []
        real_acquire, real_release = aiopg.Pool._acquire, aiopg.Pool.release
        monkeypatch.setattr(aiopg.Pool, "_acquire",
                            lambda self: slow.append("acquire") or real_acquire(self))
        monkeypatch.setattr(aiopg.Pool, "release",
                            lambda self, conn: slow.append("release") or real_release(self, conn))
        for _ in range(3):
            async with db.connection(pool) as conn:
                assert conn is first
                async with db.cursor(conn) as cur:
                    assert await db.fetchone(cur, "SELECT 1 AS one") == {"one": 1}
        assert slow == [] and pool.freesize == 1 and pool.size == 1

        first.close()  # a connection that died while free is dropped, and a new one opened
        async with db.connection(pool) as conn:
            assert conn is not first and not conn.closed
        assert pool.size == 1
    finally:
        pool.close()
        await pool.wait_closed()


async def test_a_connection_given_back_goes_to_the_request_waiting_for_it(database_url,
                                                                         monkeypatch):
    pool = await db.create_pool(server_url(database_url), maxsize=1)
    monkeypatch.setattr(db.pool, "POOL_WAIT", 3)
    try:
        holding = asyncio.Event()

        async def hold() -> None:
            async with db.connection(pool):
                holding.set()
                await asyncio.sleep(0.2)

        holder = asyncio.create_task(hold())
        await holding.wait()
        began = time.monotonic()
        async with db.connection(pool) as conn:  # woken when the holder gives it back
            assert not conn.closed
        assert time.monotonic() - began < 2
        await holder
    finally:
        pool.close()
        await pool.wait_closed()


def backends(postgres: str, database: str) -> int:
    with contextlib.closing(psycopg2.connect(postgres)) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,))
        return cur.fetchone()[0]


async def test_after_the_database_drops_every_connection_one_request_fails_not_one_per_connection(
        database_url, postgres):
    """A restart of PostgreSQL (or a failover) closes every pooled connection. The request that
    meets the first dead one is a 503; `db.connection` then lets the pool's idle connections go
    (they were dropped too), so the next request opens a new connection instead of failing on
    the next dead one."""
    pool = await db.create_pool(server_url(database_url), maxsize=4)
    try:
        async def hold() -> None:
            async with db.connection(pool) as conn:
                async with db.cursor(conn) as cur:
                    await cur.execute("SELECT pg_sleep(0.05)")
        await asyncio.gather(*(hold() for _ in range(4)))
        assert pool.freesize == 4
        name = psycopg2.extensions.parse_dsn(database_url)["dbname"]
        admin_execute(postgres, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                f"WHERE datname = '{name}'")
        # as after a restart, every backend has gone (pg_terminate_backend only signals them:
        # one still exiting when the first request fails is not the case this test is about)
        deadline = time.monotonic() + 30
        while backends(postgres, name):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        outcomes = []
        for _ in range(4):
            try:
                async with db.connection(pool) as conn:
                    async with db.cursor(conn) as cur:
                        await cur.execute("SELECT 1")
                outcomes.append("ok")
            except db.UNAVAILABLE:
                outcomes.append("failed")
        assert outcomes[1:] == ["ok", "ok", "ok"]
    finally:
        pool.close()
        await pool.wait_closed()
