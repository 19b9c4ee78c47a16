"""Start-up: any number of `serve` and `migrate` processes started at once on one data dir, fresh
or existing, all come up (every one-time statement runs once, under a lock); a database that a
newer version migrated is refused with one line naming both versions; and as root the embedded
PostgreSQL changes the mode of no folder it did not make (HOME stays 0700).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from conftest import TEMPLATE, admin_execute, database_url_for, server_url
from cvsm_server import __version__, db
from cvsm_server.core.config import make_data_dir
from cvsm_server.db.embedded import EmbeddedPostgres
from cvsm_server.db.postmaster import EmbeddedStartError
from test_workers import CONSOLE_SCRIPT, LISTENING, environment, running_postgres

ROUNDS = int(os.environ.get("CVSM_TEST_STARTUP_ROUNDS", "10"))
SERVERS = 1  # `serve` processes per start, beside MIGRATORS `migrate` ones (lighter: no app)
MIGRATORS = 2


def _start_together(data_dir: Path, logs: Path, tag: str) -> list[str]:
    """SERVERS `serve` and MIGRATORS `migrate` processes started at once on `data_dir`; each
    `serve` must answer /health with 200 and each `migrate` exit 0. Returns the problems."""
    environ = environment(data_dir, CVSM_BACKGROUND_JOBS="off")
    procs = []
    for n in range(SERVERS + MIGRATORS):
        command = ["serve", "--port", "0"] if n < SERVERS else ["migrate"]
        log = logs / f"{tag}-{n}.log"
        with log.open("wb") as sink:
            procs.append((command[0], log, subprocess.Popen(
                [str(CONSOLE_SCRIPT), *command], env=environ, stdin=subprocess.DEVNULL,
                stdout=sink, stderr=subprocess.STDOUT)))
    problems = []
    try:
        deadline = time.monotonic() + 90
        for command, log, proc in procs:
            if command == "migrate":
                try:
                    code = proc.wait(timeout=max(1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    code = None
                if code != 0:
                    problems.append(f"{tag} migrate exited {code}:\n{log.read_text()}")
                continue
            while not (found := LISTENING.search(log.read_text(errors="replace"))):
                if proc.poll() is not None or time.monotonic() > deadline:
                    problems.append(f"{tag} serve did not come up ({proc.poll()}):\n"
                                    f"{log.read_text()}")
                    break
                time.sleep(0.1)
            else:
                resp = httpx.get(found.group(1) + "/api/v1/health", timeout=30)
                if resp.status_code != 200:
                    problems.append(f"{tag} serve answers /health {resp.status_code}")
    finally:
        for _, _, proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for _, log, proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            text = log.read_text(errors="replace")
            if "Traceback" in text:
                problems.append(f"{tag}: a traceback:\n{text}")
    return problems


def test_serve_and_migrate_started_together_all_come_up_on_a_fresh_and_an_existing_dir(home):
    began = time.monotonic()
    problems = []
    for round_ in range(ROUNDS):
        data_dir = home / f"data-{round_}"
        problems += _start_together(data_dir, home, f"round {round_} fresh")
        problems += _start_together(data_dir, home, f"round {round_} existing")
        assert not running_postgres(data_dir / "pg")  # the last one out stopped it
        shutil.rmtree(data_dir, ignore_errors=True)
        assert not problems, "\n\n".join(problems)
    print(f"\n{ROUNDS} rounds of {SERVERS} serve + {MIGRATORS} migrate at once, on a fresh and "
          f"on an existing data dir: all came up ({time.monotonic() - began:.0f} s)")


def test_processes_generating_the_keys_together_all_get_the_one_written(tmp_path):
    """A fresh data dir and no CVSM_MASTER_KEY/CVSM_JWT_SECRET: starts that generate them at
    once all read the same keys, whole (each was written beside and linked into place)."""
    script = ("import sys, base64; from pathlib import Path; from cvsm_server.crypto import keys; "
              "from cvsm_server.core.config import Settings; "
              "s = Settings.from_env(); sys.stdout.write(base64.b64encode("
              "keys.load_master_key(s)).decode() + ' ' + keys.load_jwt_secret(s))")
    environ = {k: v for k, v in environment(tmp_path / "data").items()
               if k not in ("CVSM_MASTER_KEY", "CVSM_JWT_SECRET")}
    for attempt in range(3):
        environ["CVSM_DATA_DIR"] = str(tmp_path / f"data-{attempt}")
        procs = [subprocess.Popen([sys.executable, "-c", script], env=environ, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(5)]
        results = [proc.communicate(timeout=60) for proc in procs]
        assert all(proc.returncode == 0 for proc in procs), [err for _, err in results]
        assert len({out for out, _ in results}) == 1, results
        data_dir = tmp_path / f"data-{attempt}"
        assert sorted(p.name for p in data_dir.iterdir()) == ["jwt.secret", "master.key"]
        assert mode(data_dir) == 0o700 and mode(data_dir / "master.key") == 0o600


# --- a schema newer than the code ---------------------------------------------------------------


@pytest.fixture
def future_database(postgres: str) -> Iterator[str]:
    """A migrated database on which a newer version applied a migration this one lacks."""
    name = f"t_future_{uuid.uuid4().hex[:8]}"
    admin_execute(postgres, f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    url = database_url_for(postgres, name)
    newest = max(n for n, _, _ in db.migration_files())
    admin_execute(url, f"INSERT INTO schema_migrations (version, name) VALUES "
                       f"({newest + 1}, 'from_the_future'), ({newest + 2}, 'and_another')")
    yield url
    admin_execute(postgres, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def test_migrate_refuses_a_schema_newer_than_the_code(future_database):
    newest = max(n for n, _, _ in db.migration_files())
    pool = await db.create_pool(future_database, maxsize=2)
    try:
        with pytest.raises(db.SchemaTooNew) as refused:
            await db.migrate(pool)
    finally:
        pool.close()
        await pool.wait_closed()
    message = str(refused.value)
    assert "\n" not in message
    assert f"at migration {newest + 2:04d}" in message
    assert f"cvsm-server {__version__} knows (up to {newest:04d}" in message


@pytest.mark.parametrize("command", [["migrate"], ["serve", "--port", "0"]])
def test_serve_and_migrate_refuse_a_schema_newer_than_the_code_in_one_line(
        future_database, tmp_path, command):
    environ = environment(tmp_path / "data", CVSM_DATABASE_URL=server_url(future_database),
                          CVSM_MIGRATION_DATABASE_URL=future_database,
                          CVSM_BACKGROUND_JOBS="off")
    done = subprocess.run([str(CONSOLE_SCRIPT), *command], env=environ, capture_output=True,
                          text=True, timeout=120)
    newest = max(n for n, _, _ in db.migration_files())
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("cvsm-server:")]
    assert len(lines) == 1, done.stderr
    assert re.search(rf"schema is at migration {newest + 2:04d}, newer than this cvsm-server "
                     rf"{re.escape(__version__)} knows \(up to {newest:04d}", lines[0]), lines
    assert "Traceback" not in done.stderr
    assert "listening on" not in done.stdout + done.stderr


# --- as root: no folder's mode widened -------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_data_dir_cvsm_makes_is_0700(tmp_path):
    make_data_dir(tmp_path / "a" / "data")
    assert mode(tmp_path / "a" / "data") == 0o700
    (tmp_path / "b").mkdir(mode=0o750)
    make_data_dir(tmp_path / "b")  # an existing one is left as it is
    assert mode(tmp_path / "b") == 0o750


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the embedded PostgreSQL's root path")


@root_only
def test_as_root_a_0700_home_is_not_widened_and_the_refusal_names_it(home):
    user_home = home / "root-home"
    user_home.mkdir(mode=0o700)
    data_dir = user_home / ".local" / "share" / "cvsm"
    server = EmbeddedPostgres(data_dir)
    with pytest.raises(EmbeddedStartError) as refused:
        server.start()
    assert mode(user_home) == 0o700
    message = str(refused.value)
    assert "\n" not in message
    assert f"cannot enter {user_home} (mode 0700)" in message
    assert "CVSM_DATA_DIR" in message
    assert not running_postgres(data_dir / "pg")


@root_only
def test_as_root_the_folders_above_the_data_dir_keep_their_modes(home):
    above = home / "srv"
    above.mkdir()
    above.chmod(0o711)  # others may pass, not list: enough, and the old code made it 0755
    before = {p: mode(p) for p in [home, *home.parents]}
    data_dir = above / "cvsm"
    server = EmbeddedPostgres(data_dir)
    try:
        url = server.start()
        admin_execute(url, "SELECT 1")
    finally:
        server.stop()
    assert mode(above) == 0o711
    assert {p: mode(p) for p in [home, *home.parents]} == before
    # Its own data dir: the system user's group may pass (no read), nobody else anything.
    info = data_dir.stat()
    import grp

    assert grp.getgrgid(info.st_gid).gr_name == "pgserver"
    assert mode(data_dir) == 0o710
    assert mode(data_dir / "pg") == 0o700


@root_only
def test_as_root_postgres_runs_with_its_own_group_not_roots(home):
    server = EmbeddedPostgres(home / "data")
    try:
        server.start()
        postmaster = psutil.Process(server.pid)
        import pwd

        assert postmaster.gids().real == pwd.getpwnam("pgserver").pw_gid
        groups = Path(f"/proc/{server.pid}/status").read_text()
        line = next(l for l in groups.splitlines() if l.startswith("Groups:"))
        assert "0" not in line.split()[1:], line
    finally:
        server.stop()
