"""The audited reads, the rate limit's leases and the credential revocations with PgBouncer
between the server and PostgreSQL, in session mode, the mode docs/deploy.md documents: the
server prepares its hot statements on its connections and the mail and webhook senders LISTEN,
which a transaction-mode pooler would break.

The tests are the same functions as in their own modules, collected here again with the server's
URL (`conftest.server_url`, and the name each module imported) pointing at a PgBouncer in front
of the run's PostgreSQL; the owner's URL (migrations, inspection) stays direct.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import psycopg2.extensions
import pytest

import conftest
import test_credentials
import test_secrets
from conftest import postgres_home
from cvsm_server import db
from test_credentials import (test_an_expired_token_fails_on_a_process_that_cached_it,  # noqa: F401
                              test_revocations_on_one_process_fail_at_once_on_another)
from test_ratelimit import (  # noqa: F401
    test_two_processes_reading_at_once_admit_exactly_the_limit_together)
from test_secrets import (test_deleted_secret_is_gone_from_every_read_path,  # noqa: F401
                          test_each_read_writes_an_audit_entry_with_ip_and_user_agent,
                          test_export_is_audited,
                          test_read_fails_closed_when_the_audit_write_fails,
                          test_the_audited_read_is_prepared_once_per_connection_and_runs_a_generic_plan)

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
# PgBouncer refuses to run as root; the embedded PostgreSQL runs as this user then.
SYSTEM_USER = "pgserver"

pytestmark = pytest.mark.skipif(not os.access(PGBOUNCER, os.X_OK),
                                reason="needs Debian's pgbouncer (.ci/run installs it)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def pgbouncer(postgres: str) -> Iterator[int]:
    """A PgBouncer in session mode on 127.0.0.1 in front of the run's PostgreSQL (any database);
    yields its port."""
    socket_dir = psycopg2.extensions.parse_dsn(postgres)["host"]
    home = postgres_home()
    port = _free_port()
    (home / "userlist.txt").write_text('"cvsm_app" ""\n"postgres" ""\n')
    (home / "pgbouncer.ini").write_text(f"""[databases]
* = host={socket_dir}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {home}/userlist.txt
pool_mode = session
max_client_conn = 500
default_pool_size = 40
ignore_startup_parameters = options
logfile = {home}/pgbouncer.log
pidfile = {home}/pgbouncer.pid
""")
    command = [PGBOUNCER, str(home / "pgbouncer.ini")]
    if os.geteuid() == 0:
        user = pwd.getpwnam(SYSTEM_USER)
        os.chown(home, user.pw_uid, user.pw_gid)
        for path in home.iterdir():
            os.chown(path, user.pw_uid, user.pw_gid)
        command[1:1] = ["-u", SYSTEM_USER]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, (home / "pgbouncer.log").read_text(errors="replace")
                assert time.monotonic() < deadline, "pgbouncer did not start"
                time.sleep(0.1)
        yield port
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(autouse=True)
def through_pgbouncer(pgbouncer: int, monkeypatch: pytest.MonkeyPatch) -> None:
    def via_pgbouncer(owner_url: str) -> str:
        params = psycopg2.extensions.parse_dsn(owner_url)
        params.update(host="127.0.0.1", port=str(pgbouncer), user=db.APP_ROLE)
        params.pop("password", None)
        return psycopg2.extensions.make_dsn(**params)

    for module in (conftest, test_credentials, test_secrets):
        monkeypatch.setattr(module, "server_url", via_pgbouncer)


def test_the_server_connects_through_pgbouncer(database_url: str) -> None:
    # The run's PostgreSQL listens on a unix socket only: a connection to 127.0.0.1 is PgBouncer's.
    url = conftest.server_url(database_url)
    assert psycopg2.extensions.parse_dsn(url)["host"] == "127.0.0.1"
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT current_user, current_setting('listen_addresses')")
            assert cur.fetchone() == (db.APP_ROLE, "")
    finally:
        conn.close()
