"""`cvsm-server backup FILE` / `restore FILE` with real processes on embedded PostgreSQL data dirs:
values written through the API come back through the API of a server on a fresh data dir, a
restore refuses a database that is not empty unless `--force`, and a wrong master key stops
start-up."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from conftest import JWT_SECRET, MASTER_KEY
from serving import CONSOLE_SCRIPT, served
from test_cli import running_postgres

EMBEDDED = {"CVSM_DATABASE_URL": "", "CVSM_MIGRATION_DATABASE_URL": "",
            "CVSM_RATELIMIT_AUTH": "off", "CVSM_RATELIMIT_API": "off"}


def cvsm(data_dir: Path, *args: str, master_key: str = MASTER_KEY) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
    env.update(CVSM_DATA_DIR=str(data_dir), CVSM_MASTER_KEY=master_key, CVSM_JWT_SECRET=JWT_SECRET)
    return subprocess.run([str(CONSOLE_SCRIPT), *args], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=240)


def serve_on(home: Path, name: str, **env: str):
    (home / f"{name}-log").mkdir(exist_ok=True)
    return served("", home / f"{name}-log", CVSM_DATA_DIR=str(home / name), **EMBEDDED, **env)


def test_backup_then_restore_into_a_fresh_data_dir_reads_the_values_back(home):
    backup = home / "cvsm.dump"
    with serve_on(home, "a") as server, httpx.Client(base_url=server.url, timeout=30) as http:
        resp = http.post("/api/v1/auth/register", json={
            "email": "backup@example.com", "username": "backup_user",
            "password": "correct horse 1", "name": "B"})
        assert resp.status_code == 201, resp.text
        http.headers["Authorization"] = f"Bearer {resp.json()['token']}"
        token = http.post("/api/v1/tokens", json={"name": "ci"}).json()["token"]
        team = http.post("/api/v1/teams", json={"name": "T", "slug": "backed-up"}).json()["team"]["id"]
        for i in range(5):
            resp = http.post(f"/api/v1/teams/{team}/secrets", json={
                "name": f"KEY_{i}", "value": f"value {i}", "environment": "production"})
            assert resp.status_code == 201, resp.text
        # Taken while the server runs (it joins the running embedded PostgreSQL).
        made = cvsm(home / "a", "backup", str(backup))
        assert made.returncode == 0, made.stderr
        assert "master key" in made.stdout
        # Restoring over a database a server is serving is refused, --force or not.
        busy = cvsm(home / "a", "restore", "--force", str(backup))
        assert busy.returncode == 1, busy.stderr
        assert "the database is in use (" in busy.stderr and "stop the servers" in busy.stderr
        assert "Traceback" not in busy.stderr
        assert http.get(f"/api/v1/teams/{team}/secrets").status_code == 200  # still served
    assert backup.stat().st_size > 0 and backup.stat().st_mode & 0o077 == 0

    restored = cvsm(home / "b", "restore", str(backup))
    assert restored.returncode == 0, restored.stderr
    with serve_on(home, "b") as server:
        with httpx.Client(base_url=server.url, timeout=30,
                          headers={"Authorization": f"Bearer {token}"}) as http:
            resp = http.get(f"/api/v1/teams/{team}/secrets/export", params={"format": "json"})
            assert resp.status_code == 200, resp.text
            assert resp.json() == {f"KEY_{i}": f"value {i}" for i in range(5)}

    # A database that is not empty is refused, unless --force, which replaces it.
    again = cvsm(home / "b", "restore", str(backup))
    assert again.returncode == 1 and "not empty" in again.stderr and "--force" in again.stderr
    assert "Traceback" not in again.stderr
    forced = cvsm(home / "b", "restore", "--force", str(backup))
    assert forced.returncode == 0, forced.stderr
    with serve_on(home, "b") as server:
        resp = httpx.get(f"{server.url}/api/v1/teams/{team}/secrets/export",
                         params={"format": "json"}, headers={"Authorization": f"Bearer {token}"},
                         timeout=30)
        assert resp.json()["KEY_3"] == "value 3"

    # Restored under another master key, the data cannot be read: start-up says so.
    assert cvsm(home / "c", "restore", str(backup)).returncode == 0
    wrong = base64.b64encode(b"\x07" * 32).decode()
    refused = cvsm(home / "c", "serve", "--port", "0", master_key=wrong)
    assert refused.returncode == 3, refused.stderr
    assert "does not match" in refused.stderr and "Traceback" not in refused.stderr


def test_restore_of_a_file_that_is_not_a_backup_says_so_in_one_line(home):
    bogus = home / "not-a-dump"
    bogus.write_text("hello\n")
    result = cvsm(home / "d", "restore", str(bogus))
    assert result.returncode == 1
    assert "pg_restore failed" in result.stderr and "Traceback" not in result.stderr
    missing = cvsm(home / "d", "restore", str(home / "nowhere"))
    assert missing.returncode == 1 and "no such file" in missing.stderr


@pytest.mark.parametrize("command", [["backup", "x.dump"], ["rotate-key"], ["audit", "verify"],
                                     ["admin", "grant", "a@example.com"]])
def test_commands_refuse_a_data_dir_with_no_database_instead_of_making_one(home, command):
    """A wrong or missing CVSM_DATA_DIR once gave an empty backup of a new database, exit 0."""
    data = home / "empty"
    args = [str(home / a) if a.endswith(".dump") else a for a in command]
    result = cvsm(data, *args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"cvsm-server: no database in {data} (CVSM_DATA_DIR), and "
                                    f"`{command[0]}` does not make one")
    assert not (data / "pg").exists() and not (home / "x.dump").exists()


def other_user() -> str:
    if os.geteuid() != 0:
        pytest.skip("runs as root: a data dir another user owns, and that user")
    return "nobody"


def python_for(user: str) -> tuple[str, str]:
    """(a Python that `user` can run, the PYTHONPATH that gives it this run's packages and
    server): the venv's, or the system's of the same version when the venv's interpreter is out
    of that user's reach (under /root)."""
    path = ":".join([str(Path(__file__).resolve().parents[1]),
                     *[p for p in sys.path if p.endswith("site-packages")]])
    for python in (sys.executable, "/usr/bin/python3"):
        probe = subprocess.run(["runuser", "-u", user, "--", python, "-c",
                                "import sys; print(tuple(sys.version_info[:2]))"],
                               capture_output=True, text=True, timeout=60)
        if probe.returncode == 0 and probe.stdout.strip() == str(tuple(sys.version_info[:2])):
            return python, path
    pytest.skip(f"no Python {sys.version_info[0]}.{sys.version_info[1]} that {user} can run")


def test_root_refuses_a_data_dir_another_user_owns(home):
    user = other_user()
    data = home / "service"
    data.mkdir()
    shutil.chown(data, user)
    result = cvsm(data, "backup", str(home / "x.dump"))
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"cvsm-server: {data} (CVSM_DATA_DIR) belongs to {user}, and this runs as root: the files "
        f"it made there would stop the server from starting. Run it as {user}: runuser -u {user} "
        f"-- cvsm-server backup ... (docs/operations.md)\n")
    assert list(data.iterdir()) == []


def docs_operator_function(user: str, env_file: Path, program: Path) -> str:
    """docs/deploy.md's `cvsm_server()` shell function (not `cvsm`: that is the people's command),
    with the service's user, env file and program replaced (printed)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    [line] = re.findall(r"^cvsm_server\(\) \{.*\}$", text, re.M)
    edits = [("runuser -u cvsm ", f"runuser -u {user} "), ("/etc/cvsm/cvsm.env", str(env_file)),
             ("/opt/cvsm/venv/bin/cvsm-server", str(program))]
    for old, new in edits:
        assert line.count(old) == 1, old
        line = line.replace(old, new)
    print(f"docs/deploy.md's cvsm_server(), with {edits}:\n{line}")
    return line


def test_a_non_root_user_after_root_through_the_docs_operator_function(home):
    """Root has run the embedded PostgreSQL (this test run has, or the setup here), leaving a
    root-owned /tmp/.lockfile; the service's user then runs commands on its own data dir, the
    way docs/deploy.md says (its `cvsm_server` function, in bash and in dash): they work, with no
    traceback, and leave everything owned by that user."""
    user = other_user()
    python, path = python_for(user)
    if not Path("/tmp/.lockfile").exists():
        Path("/tmp/.lockfile").touch(mode=0o644)  # what the package makes as root
    home.chmod(0o755)
    data = home / "service"
    data.mkdir(mode=0o700)
    shutil.chown(data, user)
    env_file = home / "cvsm.env"
    env_file.write_text(f"CVSM_DATA_DIR={data}\nCVSM_MASTER_KEY={MASTER_KEY}\n"
                        f"CVSM_JWT_SECRET={JWT_SECRET}\n"
                        "CVSM_MAIL_FROM='cvsm <no-reply@example.com>'\n")
    # The installed console script, where the venv's own Python is out of the user's reach.
    program = home / "cvsm-server"
    program.write_text(f"#!/bin/sh\nPYTHONPATH={path} exec {python} -m cvsm_server.runtime.cli \"$@\"\n")
    program.chmod(0o755)
    function = docs_operator_function(user, env_file, program)
    dump = data / "cvsm.dump"
    for shell, command in (("bash", "cvsm_server migrate"), ("dash", f"cvsm_server backup {dump}"),
                           ("bash", f"cvsm_server restore --force {dump}")):
        result = subprocess.run([shell, "-c", f"{function}\n{command}"], capture_output=True,
                                text=True, timeout=240, cwd="/")
        assert result.returncode == 0, (command, result.stderr)
        assert "Traceback" not in result.stderr
    owner = data.stat().st_uid
    assert dump.stat().st_uid == (data / "pg").stat().st_uid == (data / ".pg.lock").stat().st_uid == owner


def _schema_at(data_dir: Path) -> int:
    from cvsm_server.db.embedded import EmbeddedPostgres
    import psycopg2

    server = EmbeddedPostgres(data_dir)
    try:
        conn = psycopg2.connect(server.start())
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT max(version) FROM schema_migrations")
                return cur.fetchone()[0]
        finally:
            conn.close()
    finally:
        server.stop()


def test_the_way_back_after_an_upgrade_works_as_docs_operations_prints_it(home):
    """docs/operations.md: back up before the upgrade, upgrade, then go back to the previous
    version's database with the command it prints (here: a database left at migration 0003,
    as the previous version had it)."""
    import asyncio
    import re

    from cvsm_server import db
    from cvsm_server.db.embedded import EmbeddedPostgres

    data = home / "data"
    server = EmbeddedPostgres(data)

    async def migrate_to_0003() -> None:
        pool = await db.create_pool(url, maxsize=2)
        try:
            await db.migrate(pool, upto=3)
        finally:
            pool.close()
            await pool.wait_closed()

    url = server.start()
    try:
        asyncio.run(migrate_to_0003())
    finally:
        server.stop()
    docs = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    printed = re.findall(r"^\s*(cvsm-server (?:backup|restore) [^\n]*cvsm-before-0\.4\.0\.dump)$",
                         docs, re.MULTILINE)
    backup_line, *restores = printed
    way_back = [line for line in restores if "--no-migrate" in line]
    assert backup_line.startswith("cvsm-server backup") and len(way_back) == 1, printed
    dump = home / "backups" / "cvsm-before-0.4.0.dump"
    dump.parent.mkdir()

    def run(line: str) -> subprocess.CompletedProcess:
        args = line.replace("/backups/cvsm-before-0.4.0.dump", str(dump)).split()[1:]
        return cvsm(data, *args)

    taken = run(backup_line)
    assert taken.returncode == 0, taken.stderr
    upgraded = cvsm(data, "migrate")
    assert upgraded.returncode == 0, upgraded.stderr
    assert _schema_at(data) == max(n for n, _, _ in db.migration_files())
    back = run(way_back[0])
    assert back.returncode == 0, back.stderr
    assert "no migration applied (--no-migrate): the schema is at migration 0003" in back.stdout
    assert _schema_at(data) == 3
