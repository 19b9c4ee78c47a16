"""`cvsm-server serve` failing to start: the real console script says why in one line on stderr
(no traceback), exits 1, and leaves no embedded PostgreSQL running."""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest


CONSOLE_SCRIPT = Path(sys.executable).with_name("cvsm-server")
# The format `cvsm-server` configures for its log records; every other stderr line is a message.
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ \S+: ")


def serve(data_dir: Path, port: int) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
    env["CVSM_DATA_DIR"] = str(data_dir)
    return subprocess.run([str(CONSOLE_SCRIPT), "serve", "--port", str(port)], env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)


def messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip() and not LOG_RECORD.match(line)]


def running_postgres(pgdata: Path) -> list[int]:
    """Running (not zombie) `postgres` processes working in `pgdata`: postmaster and children."""
    real = os.path.realpath(pgdata)
    found = []
    for proc in psutil.process_iter(["name", "cwd", "status"], ad_value=None):
        if (proc.info["name"] == "postgres" and proc.info["status"] != psutil.STATUS_ZOMBIE
                and proc.info["cwd"] and os.path.realpath(proc.info["cwd"]) == real):
            found.append(proc.pid)
    return found


def test_serve_on_a_port_in_use_says_so_in_one_line_and_stops_the_embedded_postgres(home):
    pgdata = home / "data" / "pg"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result = serve(home / "data", port)
    assert "Traceback" not in result.stderr
    assert messages(result.stderr) == [f"cvsm-server: cannot listen on 127.0.0.1:{port}: address already in use"]
    assert result.returncode == 1
    assert not (pgdata / "postmaster.pid").exists()
    assert running_postgres(pgdata) == []


def test_serve_with_an_embedded_postgres_that_cannot_start_says_so_in_one_line(home):
    pgdata = home / "data" / "pg"
    pgdata.mkdir(parents=True)
    (pgdata / "PG_VERSION").write_text("18\n")  # a cluster with nothing in it
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = serve(home / "data", port)
    assert "Traceback" not in result.stderr
    [line] = messages(result.stderr)
    assert line.startswith(f"cvsm-server: cannot start the embedded PostgreSQL in {pgdata}: "), line
    assert result.returncode == 1
    assert running_postgres(pgdata) == []


def parsers(parser: argparse.ArgumentParser, name: str = "cvsm-server"):
    """Every parser of the command line (the top one, each command, each subcommand), by name."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")


def test_every_command_and_option_has_help_and_help_names_the_variables_and_the_readme() -> None:
    from cvsm_server.runtime import cli

    missing = [f"{name}: {action.dest}" for name, parser in parsers(cli.build_parser())
               for action in parser._actions
               if not isinstance(action, argparse._SubParsersAction) and not (action.help or "").strip()]
    assert missing == []
    commands = dict(parsers(cli.build_parser()))
    assert {"cvsm-server serve", "cvsm-server mail show", "cvsm-server team set-plan"} <= set(commands)

    top = subprocess.run([str(CONSOLE_SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert top.returncode == 0
    for variable in ("CVSM_DATA_DIR", "CVSM_DATABASE_URL", "CVSM_MASTER_KEY", "CVSM_APP_URL",
                     "CVSM_SMTP_URL", "CVSM_DEFAULT_PLAN"):
        assert variable in top.stdout
    assert '"Configuration"' in top.stdout and "docs/server.md" in top.stdout
    doc = (Path(__file__).resolve().parents[2] / "docs" / "server.md").read_text()
    assert "\n## Configuration\n" in doc  # where it points

    serve_help = subprocess.run([str(CONSOLE_SCRIPT), "serve", "--help"], capture_output=True,
                                text=True, timeout=60).stdout
    assert re.search(r"--host H +address to listen on \(default 127\.0\.0\.1", serve_help)
    assert re.search(r"--port P +TCP port \(default 8080", serve_help)
    assert "CVSM_DATABASE_URL" in serve_help and '"Configuration"' in serve_help
