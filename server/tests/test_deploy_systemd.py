"""deploy/cvsm.service and deploy/cvsm.env with systemd's own tools, and the server's readiness
notification (Type=notify) read from a real NOTIFY_SOCKET.

`systemd-analyze verify` wants the ExecStart program to exist: the test runs it on a copy of the
unit whose ExecStart names a stub script it makes (the one substitution, printed). `security
--offline=true` runs on the file as it is. The env file is read by bash, by dash (`set -a; .
FILE`) and by systemd's environment-file parser, which systemd's environment.d generator exposes
(the same parser as EnvironmentFile=; the generator also expands `$NAME`, which the file does
not use): all three must agree.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import JWT_SECRET, MASTER_KEY, server_url
from serving import CONSOLE_SCRIPT

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "cvsm.service"
ENV_FILE = ROOT / "deploy" / "cvsm.env"
EXEC = "/opt/cvsm/venv/bin/cvsm-server"
ENV_GENERATOR = Path("/usr/lib/systemd/user-environment-generators/"
                     "30-systemd-environment-d-generator")
# systemd 252's levels (src/analyze/analyze-security.c): exposure below 5.0 is OK, below 1.0
# SAFE, 0.0 PERFECT; MEDIUM, EXPOSED, UNSAFE and DANGEROUS above.
GOOD_LEVELS = ("OK", "SAFE", "PERFECT")


def require(program: str) -> str:
    found = shutil.which(program)
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail(f"{program} is missing under CI=true (.ci/run installs Debian's systemd)")
    pytest.skip(f"{program} is absent (apt-get install systemd); deploy/cvsm.service is checked "
                "with it")


def unit_values(key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in UNIT.read_text().splitlines()
            if line.startswith(f"{key}=")]


def test_the_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = require("systemd-analyze")
    stub = tmp_path / "cvsm-server"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    text = UNIT.read_text()
    assert text.count(EXEC) == 1
    copy = tmp_path / "cvsm.service"
    copy.write_text(text.replace(EXEC, str(stub)))
    print(f"verify: {EXEC} -> {stub} (a stub), nothing else changed")
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    # verify exits 0 on an unknown key or a bad value too, and says so on stderr.
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr


def test_the_unit_is_rated_ok_by_systemd_analyze_security(tmp_path):
    analyze = require("systemd-analyze")
    result = subprocess.run([analyze, "security", "--offline=true", "--no-pager", str(UNIT)],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    found = re.search(r"Overall exposure level for cvsm\.service: (\d+\.\d) (\w+)", result.stdout)
    assert found, result.stdout
    print(found.group(0))
    assert float(found.group(1)) <= 4.9 and found.group(2) in GOOD_LEVELS, result.stdout


def test_the_unit_does_not_restart_on_configuration_errors():
    # cli.py: 2 a setting is wrong, 3 the master key does not match the data. 1 (the database
    # unreachable, the port taken) may mend and is restarted, within the start limit.
    assert unit_values("RestartPreventExitStatus") == ["2 3"]
    assert unit_values("Restart") == ["on-failure"]
    assert unit_values("StartLimitBurst") and unit_values("StartLimitIntervalSec")
    assert unit_values("Type") == ["notify"]
    # Every setting lives in the env file the operator's commands read too.
    assert unit_values("EnvironmentFile") == ["/etc/cvsm/cvsm.env"]
    assert unit_values("Environment") == []


def shell_environment(shell: str, env_file: Path) -> dict[str, str]:
    result = subprocess.run([shell, "-c", 'set -a; . "$1"; env -0', shell, str(env_file)],
                            env={"PATH": os.environ["PATH"]}, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr
    pairs = (item.decode().split("=", 1) for item in result.stdout.split(b"\0") if item)
    return {k: v for k, v in pairs if k.startswith("CVSM_")}


def systemd_environment(env_file: Path, tmp_path: Path) -> dict[str, str]:
    if not ENV_GENERATOR.exists():
        require("systemd-analyze")  # skips, or fails under CI, when systemd is absent
        pytest.fail(f"{ENV_GENERATOR} is missing though systemd is installed")
    config = tmp_path / "config"
    (config / "environment.d").mkdir(parents=True)
    shutil.copy(env_file, config / "environment.d" / "cvsm.conf")
    result = subprocess.run([str(ENV_GENERATOR)], env={"XDG_CONFIG_HOME": str(config)},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    found = {}
    for line in result.stdout.splitlines():
        name, _, value = line.partition("=")
        if name.startswith("CVSM_"):
            if value.startswith('"'):  # the generator quotes a value with a space
                value = re.sub(r'\\(.)', r"\1", value[1:-1])
            found[name] = value
    return found


def test_the_env_file_reads_the_same_in_systemd_bash_and_dash(tmp_path):
    expected = {}
    for line in ENV_FILE.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            expected[name] = value[1:-1] if value.startswith("'") else value
    assert expected["CVSM_MAIL_FROM"] == "cvsm <no-reply@example.com>"
    assert expected["CVSM_DATA_DIR"] == "/var/lib/cvsm"
    for shell in ("bash", "dash"):
        assert shell_environment(require(shell), ENV_FILE) == expected, shell
    assert systemd_environment(ENV_FILE, tmp_path) == expected


def test_the_docs_print_the_env_file_and_docker_gets_it_without_quotes(tmp_path):
    docs = (ROOT / "docs" / "deploy.md").read_text()
    lines = [line for line in ENV_FILE.read_text().splitlines() if not line.startswith("#")]
    assert "```sh\n" + "\n".join(lines) + "\n```" in docs
    # Docker's --env-file takes values literally: the docs' sed takes the quotes off.
    [sed] = re.findall(r"^sed .* /etc/cvsm/cvsm.env > /etc/cvsm/cvsm.docker.env$", docs, re.M)
    docker_env = tmp_path / "cvsm.docker.env"
    command = sed.replace("/etc/cvsm/cvsm.env", str(ENV_FILE)).replace(
        "/etc/cvsm/cvsm.docker.env", str(docker_env))
    assert subprocess.run(["sh", "-c", command], timeout=30).returncode == 0
    literal = dict(line.split("=", 1) for line in docker_env.read_text().splitlines()
                   if line and not line.startswith("#"))
    assert literal == shell_environment(require("dash"), ENV_FILE)


def test_the_old_unquoted_env_file_was_not_a_shell_file(tmp_path):
    """What the docs printed before: systemd reads it, dash refuses it, bash loses the value."""
    old = tmp_path / "old.env"
    old.write_text("CVSM_MAIL_FROM=cvsm <no-reply@example.com>\n")
    assert systemd_environment(old, tmp_path)["CVSM_MAIL_FROM"] == "cvsm <no-reply@example.com>"
    dash = subprocess.run([require("dash"), "-c", 'set -a; . "$1"', "dash", str(old)],
                          capture_output=True, timeout=30)
    assert dash.returncode != 0


# --- readiness: Type=notify --------------------------------------------------------------------


def serve_notifying(database_url: str, tmp_path: Path, *args: str) -> None:
    """Start `cvsm-server serve ARGS` with a NOTIFY_SOCKET; READY=1 arrives, and by then the port
    answers; STOPPING=1 when it stops."""
    address = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(address)
    listener.settimeout(120)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
    env.update(CVSM_DATABASE_URL=server_url(database_url), CVSM_MIGRATION_DATABASE_URL=database_url,
               CVSM_DATA_DIR=str(tmp_path / "data"), CVSM_MASTER_KEY=MASTER_KEY,
               CVSM_JWT_SECRET=JWT_SECRET, CVSM_BACKGROUND_JOBS="off", NOTIFY_SOCKET=address)
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen([str(CONSOLE_SCRIPT), "serve", "--port", "0", *args], env=env,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        message = listener.recv(4096).decode()
        assert message.startswith("READY=1\nSTATUS=cvsm-server "), message
        port = int(re.search(r"listening on http://127\.0\.0\.1:(\d+)", message).group(1))
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # answering already
        proc.terminate()
        assert listener.recv(4096) == b"STOPPING=1"
        assert proc.wait(timeout=90) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        listener.close()
    print((tmp_path / "serve.log").read_text())


def test_serve_tells_systemd_it_is_ready(database_url, tmp_path):
    serve_notifying(database_url, tmp_path)


def test_serve_with_workers_tells_systemd_it_is_ready_once_a_worker_answers(database_url, tmp_path):
    started = time.monotonic()
    serve_notifying(database_url, tmp_path, "--workers", "2")
    print(f"ready and stopped in {time.monotonic() - started:.1f} s")
