"""The real `cvsm-server serve` in a subprocess, on a test database of the run's embedded
PostgreSQL, for tests that talk to it over a socket (curl, the walk-through in docs/API.md)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from conftest import JWT_SECRET, MASTER_KEY, server_url

CONSOLE_SCRIPT = Path(sys.executable).with_name("cvsm-server")
LISTENING = re.compile(r"cvsm-server \S+ listening on (http://\S+) \(share links: (\S+)/share/…\)")


@dataclass
class Served:
    url: str  # the address it printed, e.g. http://127.0.0.1:41234
    share_base: str  # the base of share links it printed
    log: Path  # its stdout and stderr

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def served(database_url: str, tmp_path: Path, *, port: int = 0, **env: str) -> Iterator[Served]:
    """Run `cvsm-server serve --port PORT` (0: a free port, read back from its start-up line) on
    the database `database_url` (its owner migrates; the server serves as `cvsm_app`); `env`
    adds or, with an empty value, removes `CVSM_*` variables. Stops it (SIGTERM) on exit."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
    environ.update({
        "CVSM_DATABASE_URL": server_url(database_url),
        "CVSM_MIGRATION_DATABASE_URL": database_url,
        "CVSM_DATA_DIR": str(tmp_path / "serve-data"),
        "CVSM_MASTER_KEY": MASTER_KEY,
        "CVSM_JWT_SECRET": JWT_SECRET,
        "CVSM_BACKGROUND_JOBS": "off",
    })
    for name, value in env.items():
        environ.pop(name, None)
        if value:
            environ[name] = value
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen([str(CONSOLE_SCRIPT), "serve", "--port", str(port)], env=environ,
                                stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while not (found := LISTENING.search(log.read_text(errors="replace"))):
            assert proc.poll() is None, f"cvsm-server exited {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"cvsm-server did not start:\n{log.read_text()}"
            time.sleep(0.1)
        server = Served(found.group(1), found.group(2), log)
        with urllib.request.urlopen(f"{server.url}/api/v1/health", timeout=10) as resp:
            assert resp.status == 200
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
