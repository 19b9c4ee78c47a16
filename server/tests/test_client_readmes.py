"""The Rust and shell SDKs' READMEs, run as printed against the real server: their install lines
and first example, each in a new empty project folder next to a "clone" of this repository (a
link named cvsm), reading the team from CVSM_TEAM. (The Go SDK's and the cvsm command's are run by
clients/go/cmd/cvsm/readme_test.go, the other SDKs' by their own tests.)"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DATABASE_URL = "postgres://readme@db.internal/app"
PRODUCTION = {"DATABASE_URL": DATABASE_URL, "README_OTHER": "other value"}


def blocks(readme: Path, language: str, heading: str | None = None) -> list[str]:
    """The fenced blocks of ``language`` in ``readme``, or in its section under ``heading``."""
    text = readme.read_text(encoding="utf-8")
    if heading is not None:
        start = text.index(f"\n{heading}\n") + len(heading) + 2
        end = re.search(r"^## ", text[start:], re.M)
        text = text[start:start + end.start()] if end else text[start:]
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.S | re.M)


def root_install(language: str) -> str:
    """The install line of ``language`` in the root README's table of clients."""
    row = re.search(rf"^\| {language} \| .* \| `([^`]*)` \|$", (REPO / "README.md").read_text(), re.M)
    assert row, f"the root README has no install line for {language}"
    return row.group(1)


def require(tool: str) -> None:
    if shutil.which(tool) is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{tool} is not installed (CI=true)")
        pytest.skip(f"{tool} is not installed")


def project(tmp_path: Path) -> Path:
    """A new empty folder ``app`` beside ``cvsm``, a link to this repository."""
    (tmp_path / "cvsm").symlink_to(REPO)
    app = tmp_path / "app"
    app.mkdir()
    return app


async def run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    """Run ``command`` off the event loop (the server answers meanwhile); fail with its output."""
    done = await asyncio.to_thread(subprocess.run, command, cwd=cwd, env=env, capture_output=True, text=True,
                                   timeout=timeout)
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


async def seeded(client: Any, api: Any) -> dict[str, str]:
    """A team with two production secrets and a read-only token for it: the CVSM_* variables."""
    owner = await api.register()
    team = await api.team(owner, "readme-team")
    for name, value in PRODUCTION.items():
        await api.secret(owner, team, name, value)
    minted = await api.api_token(owner, team_id="readme-team", read_only=True)
    base = str(client.make_url("/api/v1"))
    return reader_env({"CVSM_TOKEN": minted["token"], "CVSM_BASE_URL": base, "CVSM_TEAM": "readme-team"},
                      PRODUCTION)


def reader_env(reader: dict[str, str], production: dict[str, str]) -> dict[str, str]:
    """This process's environment without CVSM_* variables, proxies or the secrets' names, plus
    `reader` (CVSM_TOKEN, CVSM_BASE_URL, CVSM_TEAM)."""
    skipped = {"http_proxy", "https_proxy", "all_proxy", "no_proxy", *(name.lower() for name in production)}
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_") and k.lower() not in skipped}
    return {**environ, **reader}


async def test_the_shell_readmes_install_lines_and_first_example_run_as_printed(
    client: Any, api: Any, tmp_path: Path
) -> None:
    await shell_readme(tmp_path, await seeded(client, api), PRODUCTION)


async def test_the_rust_readmes_install_line_and_first_example_run_as_printed(
    client: Any, api: Any, tmp_path: Path
) -> None:
    await rust_readme(tmp_path, await seeded(client, api), PRODUCTION)


# Each README, run as printed with `env` (reader_env: the server's CVSM_* variables), whose token
# reads exactly the secrets `production` (names to values, DATABASE_URL among them).
# test_first_hour.py runs them too, on the server a newcomer set up.

async def shell_readme(tmp_path: Path, env: dict[str, str], production: dict[str, str]) -> None:
    require("bash"), require("curl"), require("jq")
    database_url = production["DATABASE_URL"]
    readme = REPO / "clients" / "shell" / "README.md"
    # A project folder next to the clone (`git clone ... ../cvsm`), a link here.
    app = tmp_path / "app"
    app.mkdir()
    (tmp_path / "cvsm").symlink_to(REPO)
    install = blocks(readme, "bash", "## Installation")[0].strip()
    assert install.startswith("git clone <this repository> ../cvsm && "), install
    sourced = install.removeprefix("git clone <this repository> ../cvsm && ")
    out = await run(["bash", "-c", f"{sourced} && cvsm_get DATABASE_URL"], app,
                    {**env, "CVSM_CACHE_DIR": str(tmp_path / "cache")})
    assert out == database_url
    # The root README's line, the same clone.
    root_line = root_install("Shell")
    assert root_line == "source ../cvsm/clients/shell/cvsm.sh", root_line
    out = await run(["bash", "-c", f"{root_line} && cvsm_get DATABASE_URL"], app,
                    {**env, "CVSM_CACHE_DIR": str(tmp_path / "cache1")})
    assert out == database_url
    # The first example as printed, in the project folder with nothing but the app: it copies
    # the one file next to the scripts and sources it.
    assert re.search(r"\(`(cp \.\./cvsm/clients/shell/cvsm\.sh \./)`", readme.read_text())
    (app / "my-app").write_text(f'#!/bin/sh\nexec jq -n "env | {{{", ".join(sorted(production))}}}"\n')
    (app / "my-app").chmod(0o755)
    example = blocks(readme, "bash")[0]
    assert "cp ../cvsm/clients/shell/cvsm.sh ./" in example and "exec ./my-app" in example
    assert not (app / "cvsm.sh").exists()
    out = await run(["bash", "-c", example], app, {**env, "CVSM_CACHE_DIR": str(tmp_path / "cache2")})
    assert json.loads(out) == production


async def rust_readme(tmp_path: Path, env: dict[str, str], production: dict[str, str]) -> None:
    require("cargo")
    readme = REPO / "clients" / "rust" / "README.md"
    app = project(tmp_path)
    # Offline: the crates come from cargo's cache; the crate's own build folder is shared, so its
    # dependencies are not compiled again.
    env = {**env, "CARGO_NET_OFFLINE": "true", "CARGO_TARGET_DIR": str(REPO / "clients" / "rust" / "target")}
    await run(["cargo", "init", "--name", "readme_app", "--vcs", "none"], app, env)
    install = blocks(readme, "sh", "## Installation")[0].strip()
    assert install == "cargo add cvsm --path ../cvsm/clients/rust" == root_install("Rust"), install
    await run(["sh", "-c", install], app, env)
    (app / "src" / "main.rs").write_text(blocks(readme, "rust")[0])
    out = await run(["cargo", "run", "--quiet"], app, env, timeout=900)
    injected = ", ".join(f'"{name}"' for name in sorted(production))  # Rust's {:?} of the names
    assert out == f"DATABASE_URL has {len(production['DATABASE_URL'])} characters; injected [{injected}]\n"
