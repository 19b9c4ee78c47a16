"""A primary that fails (issue 40, item 4): PostgreSQL's own streaming replication, a primary and
a synchronous standby (Debian's PostgreSQL; .ci/run installs it), and the real `cvsm-server
serve` on a multi-host URL (`target_session_attrs=read-write`), as docs/operations.md ("High
availability") tells an operator to run it.

Clients write secrets and read them (each read audited) while the primary's postmaster is
killed (SIGKILL) and the standby promoted (`pg_ctl promote`). The server is not restarted:
every answer is a 2xx or a 503 with Retry-After (never a 500, never a hang), it serves again
within RECOVERY seconds of the promotion, every write that got a 2xx is on the new primary with
its audit entry, and the audit chain verifies (`cvsm-server audit verify`); `cvsm-server backup`
works on the same URL.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import psycopg2
import pytest

from conftest import postgres_home
from cvsm_server import db
from cvsm_server.db import embedded
from cvsm_server.db.embedded import wheel_bin_dir
from test_workers import CONSOLE_SCRIPT, environment, serving

THREADS = 4
# The outage before the promotion (an operator's or Patroni's reaction time, shortened).
OUTAGE = 1.5
# From the promotion to the first answered request, without restarting the server.
RECOVERY = 10.0
# No answer may take longer than this (a request must not wait for aiopg's 30 s limit).
SLOWEST = 8.0
SUPERUSER = "postgres"
STANDBY_NAME = "standby1"


def _debian_bin() -> Path | None:
    """The newest Debian PostgreSQL's programs (`postgresql` package), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_basebackup"),
                   key=lambda p: int(Path(p).parent.parent.name))
    return Path(found[-1]).parent if found else None


# Debian's PostgreSQL, which .ci/run installs; without it (a developer's machine), the embedded
# wheel's programs, which have the same replication tools: the test runs either way.
PG_BIN = _debian_bin() or wheel_bin_dir()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Node:
    """One PostgreSQL cluster (primary or standby) under `home`, listening on 127.0.0.1."""

    def __init__(self, home: Path, name: str, user: str | None) -> None:
        self.home, self.name, self.user = home, name, user
        self.pgdata = home / name
        self.port = _free_port()

    def run(self, program: str, *args: str, timeout: float = 60) -> None:
        proc = subprocess.run([str(PG_BIN / program), *args], user=self.user, cwd=self.home,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        assert proc.returncode == 0, f"{program} failed:\n{proc.stdout.decode(errors='replace')}"

    def configure(self, text: str) -> None:
        with (self.pgdata / "postgresql.auto.conf").open("a") as conf:
            conf.write(text)

    def start(self) -> None:
        self.run("pg_ctl", "-D", str(self.pgdata), "-w", "-t", "60",
                 "-l", str(self.home / f"{self.name}.log"),
                 "-o", f"-p {self.port} -h 127.0.0.1 -k {self.home}", "start")

    def postmaster(self) -> int:
        return int((self.pgdata / "postmaster.pid").read_text().split()[0])

    def url(self, database: str = "postgres", user: str = SUPERUSER) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def query(self, sql: str, args: tuple = (), database: str = "postgres") -> list[tuple]:
        conn = psycopg2.connect(self.url(database), connect_timeout=5)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def log(self) -> str:
        path = self.home / f"{self.name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture
def pair() -> Iterator[tuple[Node, Node]]:
    """A primary with a migrated `cvsm` database and a synchronous standby streaming from it."""
    home = postgres_home()
    user = None
    if os.geteuid() == 0:  # initdb refuses root: run as the embedded server's system user
        user = embedded._system_user(embedded._package()).pw_name
        shutil.chown(home, user)
    primary, standby = Node(home, "primary", user), Node(home, "standby", user)
    try:
        primary.run("initdb", "-D", str(primary.pgdata), "-U", SUPERUSER, "--auth=trust",
                    "--encoding=utf8", "--no-sync")
        # fsync off: the test kills processes, not the machine, so what was written is in the
        # OS's cache either way; a commit still waits for the standby (synchronous_commit).
        primary.configure(f"""
wal_level = replica
max_wal_senders = 4
max_connections = 100
shared_buffers = 32MB
fsync = off
synchronous_commit = on
""")
        primary.start()
        primary.query("CREATE DATABASE cvsm")
        owner_url = primary.url("cvsm")

        async def migrate() -> None:
            pool = await db.create_pool(owner_url, maxsize=2)
            try:
                await db.migrate(pool)
            finally:
                pool.close()
                await pool.wait_closed()

        asyncio.run(migrate())
        primary.query(f"ALTER ROLE {db.APP_ROLE} LOGIN")
        primary.run("pg_basebackup", "-D", str(standby.pgdata), "-R", "-X", "stream", "-c",
                    "fast", "--no-sync", "-d",
                    f"host=127.0.0.1 port={primary.port} user={SUPERUSER} "
                    f"application_name={STANDBY_NAME}")
        # Once promoted, the standby is a primary with no standby of its own: it must not wait
        # for one (docs/operations.md: the operator attaches a new standby, then turns
        # synchronous replication on again).
        standby.configure("synchronous_standby_names = ''\n")
        standby.start()
        # Synchronous from here on (before it, a commit would wait for a standby not yet there).
        primary.query(f"ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 ({STANDBY_NAME})'")
        primary.query("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 30
        while primary.query("SELECT 1 FROM pg_stat_replication WHERE application_name = %s "
                            "AND sync_state = 'sync'", (STANDBY_NAME,)) == []:
            assert time.monotonic() < deadline, standby.log()[-3000:]
            time.sleep(0.1)
        yield primary, standby
    finally:
        for node in (primary, standby):
            pid_file = node.pgdata / "postmaster.pid"
            if pid_file.exists():
                try:
                    node.run("pg_ctl", "-D", str(node.pgdata), "-m", "immediate", "-w", "stop")
                except (AssertionError, subprocess.SubprocessError):
                    pass
            for proc in psutil.process_iter(["name", "cwd"], ad_value=None):
                if (proc.info["name"] == "postgres" and proc.info["cwd"]
                        and os.path.realpath(proc.info["cwd"]) == os.path.realpath(node.pgdata)):
                    proc.kill()
        shutil.rmtree(home, ignore_errors=True)


class Load:
    """Threads that each create a secret and, once created, read it back (an audited read), each
    request with its own User-Agent so that its audit entry can be found; every answer is kept:
    (started, took, status, Retry-After, kind, user agent, secret name)."""

    def __init__(self, url: str, token: str, team: str) -> None:
        self.secrets = f"{url}/api/v1/teams/{team}/secrets"
        self.token = token
        self.answers: list[tuple[float, float, int, str | None, str, str, str]] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(n,), daemon=True)
                        for n in range(THREADS)]

    def _one(self, client: httpx.Client, kind: str, agent: str, name: str, method: str,
             url: str, **kw: object) -> int:
        headers = {"Authorization": f"Bearer {self.token}", "User-Agent": agent}
        began = time.monotonic()
        try:
            resp = client.request(method, url, headers=headers, **kw)
            status, retry = resp.status_code, resp.headers.get("Retry-After")
        except httpx.HTTPError as exc:  # never expected: the server keeps answering
            status, retry = 0, type(exc).__name__
        with self.lock:
            self.answers.append((began, time.monotonic() - began, status, retry, kind, agent,
                                 name))
        if status == 503:
            time.sleep(0.05)  # as a client honouring Retry-After would, only sooner
        return status

    def _run(self, n: int) -> None:
        with httpx.Client(timeout=60) as client:
            i = 0
            while not self.done.is_set():
                i += 1
                name = f"FAILOVER_{n}_{i}"
                created = self._one(client, "create", f"failover-create-{n}-{i}", name, "POST",
                                    self.secrets, json={"name": name, "value": f"v-{n}-{i}",
                                                        "environment": "production"})
                if created == 201:
                    self._one(client, "read", f"failover-read-{n}-{i}", name, "GET",
                              f"{self.secrets}/by-name/{name}")

    def ok_since(self, moment: float) -> int:
        with self.lock:
            return sum(1 for a in self.answers if a[0] > moment and 200 <= a[2] < 300)

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join(timeout=90)


def _multi_host(primary: Node, standby: Node, user: str) -> str:
    return (f"postgresql://{user}@/cvsm?host=127.0.0.1,127.0.0.1"
            f"&port={primary.port},{standby.port}&target_session_attrs=read-write")


def test_killing_the_primary_and_promoting_the_standby_loses_no_acknowledged_write(pair, tmp_path):
    primary, standby = pair
    environ = environment(
        tmp_path / "data",
        CVSM_DATABASE_URL=_multi_host(primary, standby, db.APP_ROLE),
        CVSM_MIGRATION_DATABASE_URL=_multi_host(primary, standby, SUPERUSER),
        CVSM_RATELIMIT_API="off", CVSM_RATELIMIT_AUTH="off", CVSM_DEFAULT_PLAN="enterprise",
        CVSM_AUDIT_SEAL_SECONDS="0.2")
    with serving([], environ, tmp_path / "serve.log") as server:
        name = f"f_{uuid.uuid4().hex[:10]}"
        resp = httpx.post(server.url + "/api/v1/auth/register", timeout=30, json={
            "email": f"{name}@example.com", "username": name, "name": "Failover",
            "password": "correct horse 1"})
        assert resp.status_code == 201, resp.text
        token = resp.json()["token"]
        auth = {"Authorization": f"Bearer {token}"}
        resp = httpx.post(server.url + "/api/v1/teams", headers=auth, timeout=30, json={
            "name": "Failover", "slug": name.replace("_", "-")})
        assert resp.status_code == 201, resp.text
        team = resp.json()["team"]["id"]
        with Load(server.url, token, team) as load:
            started = time.monotonic()
            while load.ok_since(started) < 40:
                assert time.monotonic() < started + 60, server.output()[-5000:]
                time.sleep(0.05)
            killed = time.monotonic()
            os.kill(primary.postmaster(), signal.SIGKILL)
            time.sleep(OUTAGE)
            standby.run("pg_ctl", "-D", str(standby.pgdata), "-w", "-t", "60", "promote")
            promoted = time.monotonic()
            while load.ok_since(promoted) < 40:
                assert time.monotonic() < promoted + RECOVERY + 20, \
                    f"no recovery after the promotion:\n{server.output()[-5000:]}"
                time.sleep(0.05)
        assert server.proc.poll() is None  # the same server, never restarted
        # Every entry the server wrote is on the new primary: export them (sealed first).
        resp = httpx.get(f"{server.url}/api/v1/teams/{team}/audit/export",
                         params={"format": "jsonl"}, headers=auth, timeout=60)
        assert resp.status_code == 200, resp.text
        exported = resp.text
        stored = {row[0] for row in standby.query(
            "SELECT name FROM secrets WHERE team_id = %s", (team,), database="cvsm")}
        log = server.output()

    answers = load.answers
    statuses: dict[int, int] = {}
    for answer in answers:
        statuses[answer[2]] = statuses.get(answer[2], 0) + 1
    recovered = min(a[0] + a[1] for a in answers if a[0] > promoted and 200 <= a[2] < 300)
    slowest = max(answers, key=lambda a: a[1])
    acked = [a for a in answers if 200 <= a[2] < 300]
    print(f"\nfailover under load: {len(answers)} answers {statuses}; serving again "
          f"{recovered - promoted:.2f} s after the promotion ({recovered - killed:.2f} s after "
          f"the kill); slowest {slowest[1]:.2f} s ({slowest[4]} -> {slowest[2]}); "
          f"{len(acked)} acknowledged")

    wrong = [a for a in answers if not (200 <= a[2] < 300 or (a[2] == 503 and a[3]))]
    assert not wrong, (wrong[:10], log[-5000:])
    assert statuses.get(503, 0) > 0  # the outage was felt
    assert recovered - promoted < RECOVERY, log[-5000:]
    assert slowest[1] < SLOWEST, (slowest, log[-5000:])
    # No acknowledged write or audit entry is lost.
    created = {a[6] for a in acked if a[4] == "create"}
    assert created and not created - stored, sorted(created - stored)[:10]
    missing = [a for a in acked if f'"user_agent": "{a[5]}"' not in exported
               and f'"user_agent":"{a[5]}"' not in exported]
    assert not missing, missing[:10]
    assert "Traceback" not in log, log[-8000:]

    verify = subprocess.run([str(CONSOLE_SCRIPT), "audit", "verify"], env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    out = verify.stdout.decode(errors="replace")
    assert verify.returncode == 0, out
    assert "chain(s) intact" in out, out
    # The operator's commands take the same URL (pg_dump is a libpq program).
    backup = subprocess.run([str(CONSOLE_SCRIPT), "backup", str(tmp_path / "after.dump")],
                            env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            timeout=120)
    assert backup.returncode == 0, backup.stdout.decode(errors="replace")
