"""The README's first hour, followed as a newcomer follows it (issue 28's "Done when"): from a
fresh start, with nothing but what the README and the pages it links to print, a verified
account, the server's first admin, a team with secrets in two environments, a read-only token for
one team and environment, and that secret read by each SDK's first example, without one hand edit.

The newcomer's machine is a temporary `HOME` (so the data dir is the default
`~/.local/share/cvsm`, empty) and a checkout whose `.venv` is the one running these tests. The
server is started with the Makefile's `make serve` recipe on a free port (make itself would
install); its one-time admin setup link is read from its terminal. The commands the docs print
run as printed in one bash session (`Terminal`), as typed in a terminal: docs/API.md's blocks
(sign-up, the team, the service token), the README's mail step and the operator command that the
quota refusal names. What the docs describe rather than print is done as described: the mail
link confirmed through the API with the session's JWT, the setup link opened in a browser (a
cookie-keeping HTTP client) that signs in and presses the button, the second environment asked for
as docs/API.md asks. Then each SDK's README runs as printed with `CVSM_TOKEN`, `CVSM_BASE_URL`
and `CVSM_TEAM` (test_sdk_readmes.py's and test_client_readmes.py's helpers; Go's and the `cvsm`
command's lines as readme_test.go runs them); the toolchains keep their own caches (the real
`HOME`'s), since those steps run offline.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import test_api_doc
import test_client_readmes
import test_sdk_readmes
from conftest import postgres_home
from serving import CONSOLE_SCRIPT, LISTENING
from test_client_readmes import blocks, require, root_install, run
from test_outbox import readme_mail_step

ROOT = Path(__file__).resolve().parents[2]
SETUP_LINK = re.compile(r"^ +(http://\S+/setup\?token=[A-Za-z0-9_-]+)$", re.M)
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
# What docs/API.md's section 3 stores: two environments of one name, and one more in production.
PRODUCTION = {"DATABASE_URL": "postgres://db.prod/acme", "STRIPE_KEY": "sk_live_123"}
STAGING = {"DATABASE_URL": "postgres://db.staging/acme"}


class Terminal:
    """One bash session, fed the docs' blocks one after another (so their variables carry over),
    with `set -euo pipefail`: a failing block ends the session and fails the test."""

    def __init__(self, cwd: Path, env: dict[str, str], errors: Path) -> None:
        self.errors = errors
        with errors.open("wb") as sink:
            self.proc = subprocess.Popen(["bash", "--noprofile", "--norc", "-euo", "pipefail"], cwd=cwd,
                                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=sink, start_new_session=True)

    def type(self, block: str, timeout: float = 120) -> str:
        """Run `block` as typed; what it printed on stdout."""
        done = f"\n::block done {uuid.uuid4().hex}::\n".encode()
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(f"{block.rstrip()}\nprintf '%s' '{done.decode()}'\n".encode())
        self.proc.stdin.flush()
        out = b""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as watch:
            watch.register(self.proc.stdout, selectors.EVENT_READ)
            while done not in out:
                assert watch.select(max(0.0, deadline - time.monotonic())), \
                    f"no end of block after {timeout} s:\n{block}\n{out.decode()}{self.stderr()}"
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                assert chunk, f"the block ended the shell ({self.proc.wait()}):\n{block}\n" \
                              f"stdout: {out.decode()}\nstderr: {self.stderr()}"
                out += chunk
        printed, rest = out.split(done, 1)
        assert not rest, rest
        return printed.decode()

    def value(self, name: str) -> str:
        return self.type(f"printf '%s\\n' \"${name}\"").strip()

    def stderr(self) -> str:
        return self.errors.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@dataclass
class FirstHour:
    """Where the newcomer stands at the end of the hour."""
    base: str  # the API root, $CVSM
    jwt: str  # the session from docs/API.md's sign-up
    team: dict[str, Any]  # GET /teams/acme
    me: dict[str, Any]  # GET /me
    reader: dict[str, str]  # CVSM_TOKEN (the service token), CVSM_BASE_URL, CVSM_TEAM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_serve(port: int) -> str:
    """The Makefile's `serve` recipe with its variables put in, `PORT` given as on make's command
    line (`make serve PORT=...`, as the README says)."""
    makefile = (ROOT / "Makefile").read_text()
    [recipe] = re.findall(r"^serve: .*\n\t(.*)$", makefile, re.M)
    values = dict(re.findall(r"^([A-Z]+) +[?:]?= +(\S+)$", makefile, re.M)) | {"PORT": str(port)}
    command = re.sub(r"\$\(([A-Z]+)\)", lambda m: values[m.group(1)], recipe)
    assert command == f".venv/bin/cvsm-server serve --host 127.0.0.1 --port {port}", command
    return command


def api_doc_block(marker: str) -> tuple[str, str | None]:
    """docs/API.md's one `sh` block that holds `marker`, with the output it shows."""
    [found] = [(code, out) for code, out in test_api_doc.blocks() if marker in code]
    return found


def type_doc_block(terminal: Terminal, marker: str) -> str:
    code, shown = api_doc_block(marker)
    out = terminal.type(code)
    if shown is not None:
        assert out.strip() == shown.strip(), f"docs/API.md's block printed {out!r}, it shows {shown!r}"
    return out


def readme_setup_announcement() -> str:
    """The README's copy of what the server prints at the first start of an empty install."""
    section = (ROOT / "README.md").read_text().split("**The first admin.**", 1)[1]
    return re.search(r"^```\n(.*?)^```$", section, re.S | re.M).group(1)


def readme_activate() -> str:
    """The line the README gives to put the checkout's `cvsm-server` on PATH."""
    [line] = re.findall(r"`(\. \.venv/bin/activate)`", (ROOT / "README.md").read_text())
    return line


def wait_for(found: Callable[[], list[Any]], log: Path, timeout: float = 60) -> list[Any]:
    """What `found` returns once it is not empty, polled; the server's `log` when it never is."""
    deadline = time.monotonic() + timeout
    while not (result := found()):
        assert time.monotonic() < deadline, f"waited {timeout} s in vain; the server's log:\n{log.read_text()}"
        time.sleep(0.1)
    return result


@contextlib.contextmanager
def serving(command: str, checkout: Path, env: dict[str, str], log: Path) -> Iterator[Path]:
    """`command` run in `checkout` until the block ends (SIGTERM), once it printed its start-up
    line; yields the file that gets its stdout and stderr."""
    with log.open("wb") as sink:
        proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=checkout, env=env,
                                stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not LISTENING.search(log.read_text(errors="replace")):
            assert proc.poll() is None, f"{command} exited {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"{command} did not start:\n{log.read_text()}"
            time.sleep(0.1)
        yield log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def become_admin(base_url: str, setup_link: str, identifier: str, password: str) -> str:
    """In a browser: open the setup link, sign in from its page, press its button; the page it
    lands on."""
    with httpx.Client(base_url=base_url, timeout=30, follow_redirects=True) as browser:
        page = browser.get(setup_link)
        assert page.status_code == 200 and "Jadikan akun ini admin" not in page.text
        [signin] = re.findall(r'href="(/signin\?[^"]+)"', page.text)
        page = browser.get(html.unescape(signin))
        [next_path] = re.findall(r'name="next" value="([^"]*)"', page.text)
        page = browser.post("/signin", data={
            "csrf": CSRF.search(page.text).group(1), "identifier": identifier, "password": password,
            "next": html.unescape(next_path)})
        assert page.status_code == 200 and "Jadikan akun ini admin" in page.text, page.text
        [token] = re.findall(r'name="token" value="([^"]+)"', page.text)
        page = browser.post("/setup", data={"csrf": CSRF.search(page.text).group(1), "token": token})
        assert page.status_code == 200, page.text
        return page.text


def readme_mail_step_output(terminal: Terminal) -> tuple[str, str]:
    """The README's mail step, typed: the outbox's one message and the verification link."""
    listed, *links = terminal.type(readme_mail_step()).splitlines()
    [link] = links
    return listed, link


@pytest.fixture(scope="module")
def first_hour(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FirstHour]:
    require("bash"), require("curl"), require("jq")
    test_api_doc.require_tools()
    assert CONSOLE_SCRIPT.is_file(), "the tests run from the checkout's virtualenv"
    home = postgres_home()  # the data dir under it must stay reachable for PostgreSQL (conftest)
    work = tmp_path_factory.mktemp("first-hour")
    checkout = work / "cvsm"
    checkout.mkdir()
    (checkout / ".venv").symlink_to(CONSOLE_SCRIPT.parent.parent)  # what `make serve` installed
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")
           and k.lower() not in {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}}
    env["HOME"] = str(home)
    port = free_port()
    terminal = None
    try:
        with serving(make_serve(port), checkout, env, work / "serve.log") as log:
            [setup_link] = wait_for(lambda: SETUP_LINK.findall(log.read_text(errors="replace")), log)
            base = f"http://127.0.0.1:{port}/api/v1"
            # What the README shows the terminal print, on this port and with this token.
            shown = readme_setup_announcement().replace("127.0.0.1:8080", f"127.0.0.1:{port}")
            assert shown.replace("…", setup_link.split("token=", 1)[1]) in log.read_text()
            # docs/API.md: "a CVSM already in your environment wins ... after make serve PORT=..."
            terminal = Terminal(checkout, {**env, "CVSM": base}, work / "terminal.err")

            # Sign up as docs/API.md does, then the README's mail step for the verification link.
            type_doc_block(terminal, ': "${CVSM:=')
            register, _ = api_doc_block("/auth/register")
            account = json.loads(re.search(r"-d '(\{.*?\})'", register).group(1))
            type_doc_block(terminal, "/auth/register")
            jwt = terminal.value("TOKEN")
            outbox = home / ".local" / "share" / "cvsm" / "outbox"  # the README's default data dir
            wait_for(lambda: list(outbox.glob("*.eml")), log)  # sent by the background sender
            listed, link = readme_mail_step_output(terminal)
            assert f"  {account['email']}  " in listed, listed
            assert link.startswith(f"http://127.0.0.1:{port}/verify-email?token="), link
            auth = {"Authorization": f"Bearer {jwt}"}
            with httpx.Client(base_url=base, timeout=30) as http:
                # "the session JWT sent along as Authorization: Bearer with POST
                # /api/v1/auth/verify-email": this session stays, the next steps use it.
                verified = http.post("/auth/verify-email", json={"token": link.split("token=", 1)[1]},
                                     headers=auth)
                assert verified.status_code == 200, verified.text

                landed = become_admin(f"http://127.0.0.1:{port}", setup_link, account["username"],
                                      account["password"])
                assert "Akun Anda sekarang admin server ini." in landed

                type_doc_block(terminal, '"slug": "acme"')
                assert http.get("/teams/acme", headers=auth).json()["team"]["plan"] == "starter"
                # docs/API.md's section 3 on the default plan: the second environment is refused,
                # and the refusal names what lifts it; the operator runs that, and it is accepted.
                first = http.post("/teams/acme/secrets", headers=auth, json={
                    "name": "DATABASE_URL", "value": PRODUCTION["DATABASE_URL"], "environment": "production"})
                assert first.status_code == 201, first.text
                second = {"name": "DATABASE_URL", "value": STAGING["DATABASE_URL"], "environment": "staging"}
                refused = http.post("/teams/acme/secrets", headers=auth, json=second)
                assert refused.status_code == 403, refused.text
                message = refused.json()["error"]
                assert "/app/admin/teams" in message, message
                [command] = re.findall(r"`(cvsm-server team set-plan [^`]+)`", message)
                assert command == "cvsm-server team set-plan acme professional", message
                terminal.type(readme_activate())
                terminal.type(command)
                accepted = http.post("/teams/acme/secrets", headers=auth, json=second)
                assert accepted.status_code == 201, accepted.text
                stripe = http.post("/teams/acme/secrets", headers=auth, json={
                    "name": "STRIPE_KEY", "value": PRODUCTION["STRIPE_KEY"], "environment": "production",
                    "type": "api_key"})
                assert stripe.status_code == 201, stripe.text

                # The service token as docs/API.md makes it (its block reads DATABASE_URL with it).
                type_doc_block(terminal, "SERVICE_TOKEN=")
                service_token = terminal.value("SERVICE_TOKEN")
                assert re.fullmatch(r"cvsm_[0-9a-f]{64}", service_token)
                yield FirstHour(
                    base=base, jwt=jwt,
                    team=http.get("/teams/acme", headers=auth).json()["team"],
                    me=http.get("/me", headers=auth).json(),
                    reader={"CVSM_TOKEN": service_token, "CVSM_BASE_URL": base, "CVSM_TEAM": "acme"})
    finally:
        if terminal is not None:
            terminal.close()
        shutil.rmtree(home, ignore_errors=True)


def test_the_first_hour_reaches_a_verified_admin_and_a_team_with_two_environments(first_hour: FirstHour) -> None:
    assert first_hour.me["email_verified"] is True and first_hour.me["is_admin"] is True
    assert (first_hour.team["plan"], first_hour.team["max_environments"]) == ("professional", None)
    with httpx.Client(timeout=30) as http:
        listed = http.get(f"{first_hour.base}/teams/acme/secrets",
                          headers={"Authorization": f"Bearer {first_hour.jwt}"}).json()
        assert sorted((s["name"], s["environment"]) for s in listed["secrets"]) == [
            ("DATABASE_URL", "production"), ("DATABASE_URL", "staging"), ("STRIPE_KEY", "production")]
        # The token reads one team's production and nothing more.
        token = {"Authorization": f"Bearer {first_hour.reader['CVSM_TOKEN']}"}
        staging = http.get(f"{first_hour.base}/teams/acme/secrets/by-name/DATABASE_URL",
                           params={"environment": "staging"}, headers=token)
        assert staging.status_code == 404
        write = http.post(f"{first_hour.base}/teams/acme/secrets", headers=token,
                          json={"name": "X", "value": "y", "environment": "production"})
        assert write.status_code == 403


def go_modules_cached() -> None:
    """The Go client's modules in the module cache (once; through the Go proxy), so the README's
    lines can then run offline (GOPROXY=off) whatever ran before: in `make test` this half may
    start before the Go client's own build has fetched them."""
    subprocess.run(["go", "mod", "download"], cwd=ROOT / "clients" / "go", check=True,
                   capture_output=True, timeout=600)


async def go_readme(tmp_path: Path, env: dict[str, str], production: dict[str, str]) -> None:
    """The Go README's install lines and first example in a new module, as readme_test.go runs
    them: offline (golang.org/x/net from the module cache)."""
    require("go")
    go_modules_cached()
    readme = ROOT / "clients" / "go" / "README.md"
    app = test_client_readmes.project(tmp_path)
    env = {**env, "GOPROXY": "off", "GOSUMDB": "off", "GOWORK": "off", "GOFLAGS": "-buildvcs=false"}
    await run(["go", "mod", "init", "example.com/app"], app, env)
    install, then = blocks(readme, "sh", "## Installation")[:2]
    for line in command_lines(install):
        await run(["sh", "-c", line], app, env)
    (app / "main.go").write_text(blocks(readme, "go")[0])
    *before, last = command_lines(then)
    assert last == "go run .", then
    for line in before:
        await run(["sh", "-c", line], app, env)
    out = await run(["sh", "-c", last], app, env, timeout=600)
    assert out == (f"DATABASE_URL has {len(production['DATABASE_URL'])} bytes; {len(production)} secrets; "
                   f"injected [{' '.join(sorted(production))}]\n")


async def cvsm_command_readme(tmp_path: Path, env: dict[str, str], production: dict[str, str]) -> None:
    """The root README's install line of the `cvsm` command, then the first example of the Go
    README's list of its commands, in one shell whose PATH lacks Go's bin folder (a fresh HOME:
    `go install` puts it in $(go env GOPATH)/bin, which the printed line adds)."""
    require("go")
    go_modules_cached()
    readme = ROOT / "clients" / "go" / "README.md"
    app = test_client_readmes.project(tmp_path)
    modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True,
                              check=True).stdout.strip()  # offline: the real module cache
    gopath = tmp_path / "go"
    env = {**env, "GOPROXY": "off", "GOSUMDB": "off", "GOWORK": "off", "GOFLAGS": "-buildvcs=false",
           "GOPATH": str(gopath), "GOMODCACHE": modcache}
    env.pop("GOBIN", None)
    assert shutil.which("cvsm", path=env["PATH"]) is None, "a cvsm on PATH would hide the snag"
    install = root_install("`cvsm` command")
    first = command_lines(blocks(readme, "sh", "## The cvsm command")[2])[0]
    assert first == "cvsm get DATABASE_URL", first
    assert await run(["sh", "-c", f"{install} && {first}"], app, env) == production["DATABASE_URL"]
    assert (gopath / "bin" / "cvsm").is_file()


def command_lines(block: str) -> list[str]:
    """A sh block's commands: no comments, blank lines or the clone (../cvsm is a link here)."""
    lines = (line.split(" #", 1)[0].strip() for line in block.splitlines())
    return [line for line in lines if line and not line.startswith(("#", "git clone "))]


SDKS = {
    "python": test_sdk_readmes.python_readme,
    "node": test_sdk_readmes.node_readme,
    "ruby": test_sdk_readmes.ruby_readme,
    "php": test_sdk_readmes.php_readme,
    "go": go_readme,
    "rust": test_client_readmes.rust_readme,
    "shell": test_client_readmes.shell_readme,
    "cvsm-command": cvsm_command_readme,
}


@pytest.mark.parametrize("sdk", list(SDKS))
async def test_each_sdks_first_example_reads_the_secret_with_the_newcomers_token(
        first_hour: FirstHour, sdk: str, tmp_path: Path) -> None:
    if sdk in {"python", "node", "ruby", "php"}:
        env = first_hour.reader  # these helpers build the rest of the environment themselves
    else:
        env = test_client_readmes.reader_env(first_hour.reader, PRODUCTION)
    await SDKS[sdk](tmp_path, env, PRODUCTION)
