"""The SDK READMEs as a newcomer follows them (issue 28): for the Python, Node, Ruby and PHP
clients, the README's install lines run exactly as printed in a new, empty project folder next to
a clone (`../cvsm`), then its first example, saved as a file of that project, runs as printed
against the real server with `CVSM_TOKEN` (a read-only token for one team and environment),
`CVSM_BASE_URL` and `CVSM_TEAM`, and reads the secrets the test stored.

The team's slug is made up for the run, so an example that names its team (`acme`) finds
nothing. The clone is a copy of the client's folder (`../cvsm/clients/<lang>`), so that nothing an
install builds there (a gem, a wheel) lands in this checkout. Registries: Python's lines install
`httpx` and `attrs` from PyPI (or pip's cache) and Node's `undici` from npm (or its cache);
Packagist cannot be reached here, so for PHP a stand-in made of Debian's copies of the PSR
interfaces is offered to Composer through its global configuration, and the printed lines stay
as they are. A missing toolchain skips its
language, except under `CI=true`.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from collections.abc import Iterable
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATABASE_URL = "postgres://app:pw@db.internal/app"
API_KEY = "k-" + "7" * 30
# What an install leaves in a client's folder that a clone does not have.
NOT_IN_A_CLONE = shutil.ignore_patterns("node_modules", "vendor", ".venv", "*.egg-info", "build", "dist",
                                        "*.gem", "__pycache__", ".pytest_cache", "composer.lock")


def require(*tools: str) -> None:
    """Skip the test (fail it under CI=true) when a tool it needs is not on PATH."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        why = f"not installed: {', '.join(missing)}"
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(f"{why} (CI=true: .ci/run installs them)")
        pytest.skip(why)


def readme(lang: str) -> str:
    return (ROOT / "clients" / lang / "README.md").read_text(encoding="utf-8")


def first_block(text: str, language: str) -> str:
    found = re.search(rf"^```{language}\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
    assert found, f"no {language} block"
    return found.group(1)


def install_block(lang: str) -> str:
    """The first sh block of the README's Installation section."""
    section = readme(lang).split("\n## Installation\n", 1)[1].split("\n## ", 1)[0]
    return first_block(section, "sh")


def project(tmp_path: Path, lang: str) -> Path:
    """An empty project folder next to a clone at ../cvsm holding the client's folder."""
    shutil.copytree(ROOT / "clients" / lang, tmp_path / "cvsm" / "clients" / lang, ignore=NOT_IN_A_CLONE)
    app = tmp_path / "app"
    app.mkdir()
    return app


def child_env(injected: Iterable[str] = ("DATABASE_URL", "API_KEY"), **extra: str) -> dict[str, str]:
    """This process's environment without CVSM_* variables, proxies or the names the example
    injects, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CVSM_", "VIRTUAL_ENV", "PYTHON", "npm_", "COMPOSER"))
           and k.lower() not in {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
           and k not in set(injected)}
    env.update(extra)
    return env


async def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    """Run a command off the event loop (which serves the app meanwhile); its stdout, or a
    failure that shows both streams."""
    done = await asyncio.to_thread(subprocess.run, args, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                   capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
async def reader(api: Any, client: Any) -> dict[str, str]:
    """A team with a made-up slug holding DATABASE_URL and API_KEY in production (and one more in
    staging), and the variables an application gets: a read-only production token, the API root
    and the team's slug."""
    owner = await api.register()
    slug = f"readme-{uuid.uuid4().hex[:8]}"
    team_id = await api.team(owner, slug)
    await api.secret(owner, team_id, "DATABASE_URL", DATABASE_URL)
    await api.secret(owner, team_id, "API_KEY", API_KEY)
    await api.secret(owner, team_id, "STAGING_ONLY", "not for production", environment="staging")
    token = await api.api_token(owner, name="readme app", team_id=slug, environments=["production"], read_only=True)
    return {"CVSM_TOKEN": token["token"], "CVSM_BASE_URL": str(client.make_url("/api/v1")), "CVSM_TEAM": slug}


PRODUCTION = {"DATABASE_URL": DATABASE_URL, "API_KEY": API_KEY}


async def test_the_python_readme_installs_and_its_first_example_reads_the_real_server(tmp_path: Path, reader: dict[str, str]) -> None:
    await python_readme(tmp_path, reader, PRODUCTION)


async def test_the_node_readme_installs_and_its_first_example_reads_the_real_server(tmp_path: Path, reader: dict[str, str]) -> None:
    await node_readme(tmp_path, reader, PRODUCTION)


async def test_the_ruby_readme_installs_and_its_first_example_reads_the_real_server(tmp_path: Path, reader: dict[str, str]) -> None:
    await ruby_readme(tmp_path, reader, PRODUCTION)


async def test_the_php_readme_installs_and_its_first_example_reads_the_real_server(tmp_path: Path, reader: dict[str, str]) -> None:
    await php_readme(tmp_path, reader, PRODUCTION)


# Each README, run as printed against the server `reader` names (CVSM_TOKEN, CVSM_BASE_URL,
# CVSM_TEAM), whose token reads exactly the secrets `production` (names to values, DATABASE_URL
# among them). test_first_hour.py runs them too, on the server a newcomer set up.

async def python_readme(tmp_path: Path, reader: dict[str, str], production: dict[str, str]) -> None:
    require("python3")
    app = project(tmp_path, "python")
    block = install_block("python")
    assert "pip install ../cvsm/clients/python" in block
    await run(["bash", "-euo", "pipefail", "-c", block], app, child_env(PIP_DISABLE_PIP_VERSION_CHECK="1"))
    (app / "app.py").write_text(first_block(readme("python"), "python"))

    # The example as printed; then what it left: the value it read and the variables it set.
    check = ("import json, os, runpy, sys, cvsm; ns = runpy.run_path('app.py'); print(cvsm.__file__); "
             "print(json.dumps([ns['database_url'], {k: os.environ.get(k) for k in sys.argv[1:]}]))")
    out = await run([str(app / ".venv" / "bin" / "python"), "-c", check, *production], app,
                    child_env(production, **reader))

    loaded, installed, values = out.splitlines()
    assert loaded == f"loaded {', '.join(sorted(production))}"  # what it prints: names, no value
    assert installed.startswith(str(app / ".venv")), "cvsm came from the project's environment"
    assert json.loads(values) == [production["DATABASE_URL"], production]


async def node_readme(tmp_path: Path, reader: dict[str, str], production: dict[str, str]) -> None:
    require("node", "npm")
    app = project(tmp_path, "node")
    block = install_block("node")
    # npm's own settings, not the printed line, keep it quiet and use its cache first.
    await run(["bash", "-euo", "pipefail", "-c", block], app,
              child_env(npm_config_prefer_offline="true", npm_config_audit="false", npm_config_fund="false"))
    assert (app / "package.json").is_file(), "npm wrote the project's package.json"
    assert not (app / "node_modules" / "cvsm").is_symlink(), "a copy, not a link into the clone"
    (app / "app.mjs").write_text(first_block(readme("node"), "js"))
    # Preloaded beside the example, unchanged: it reports what inject() put in process.env.
    (app / "report.cjs").write_text(
        f"const names = {json.dumps(sorted(production))};\n"
        "process.on('exit', () => process.stdout.write(JSON.stringify("
        "Object.fromEntries(names.map((name) => [name, process.env[name]])))));\n")

    out = await run(["node", "--require", "./report.cjs", "app.mjs"], app, child_env(production, **reader),
                    timeout=60)

    loaded, report = out.split("\n", 1)
    assert loaded == f"loaded {', '.join(sorted(production))}"  # what it prints: names, no value
    assert json.loads(report) == production


async def ruby_readme(tmp_path: Path, reader: dict[str, str], production: dict[str, str]) -> None:
    require("ruby", "gem")
    app = project(tmp_path, "ruby")
    gems = {"GEM_HOME": str(tmp_path / "gems"), "GEM_PATH": str(tmp_path / "gems")}
    await run(["sh", "-ec", install_block("ruby")], app, child_env(**gems))
    (app / "app.rb").write_text(first_block(readme("ruby"), "ruby"))

    out = await run(["ruby", "app.rb"], app, child_env(production, **gems, **reader), timeout=60)

    assert out == f"loaded {', '.join(sorted(production))}\n"


async def php_readme(tmp_path: Path, reader: dict[str, str], production: dict[str, str]) -> None:
    require("php", "composer")
    app = project(tmp_path, "php")
    composer = {"COMPOSER_HOME": str(tmp_path / "composer-home"), "COMPOSER_NO_INTERACTION": "1",
                "COMPOSER_NO_AUDIT": "1"}
    packagist_stand_in(tmp_path, Path(composer["COMPOSER_HOME"]))
    block = install_block("php")
    assert block.startswith("composer init"), "the lines make the composer.json an empty folder lacks"
    await run(["sh", "-ec", block], app, child_env(**composer))
    (app / "quickstart.php").write_text(first_block(readme("php"), "php"))

    out = await run(["php", "quickstart.php"], app, child_env(production, **reader), timeout=60)

    assert out == (f"DATABASE_URL has {len(production['DATABASE_URL'])} bytes; {len(production)} secrets; "
                   f"injected {', '.join(sorted(production))}\n")


def packagist_stand_in(tmp_path: Path, home: Path) -> None:
    """Composer's global configuration in `home`: Packagist off, and a path repository for each
    PSR package clients/php/composer.json requires, made of Debian's copy of its interfaces
    (php-psr-log, php-psr-http-client, php-psr-http-message, php-psr-http-factory)."""
    message = "/usr/share/php/Psr/Http/Message"
    packages = {
        "psr/log": ("1.1.4", "Psr\\Log\\", [f for f in glob.glob("/usr/share/php/Psr/Log/*.php")
                                            if not f.endswith("/autoload.php")]),
        "psr/http-client": ("1.0.1", "Psr\\Http\\Client\\", glob.glob("/usr/share/php/Psr/Http/Client/*Interface.php")),
        "psr/http-message": ("1.0.1", "Psr\\Http\\Message\\", [f for f in glob.glob(f"{message}/*Interface.php")
                                                                if not f.endswith("FactoryInterface.php")]),
        "psr/http-factory": ("1.0.1", "Psr\\Http\\Message\\", glob.glob(f"{message}/*FactoryInterface.php")),
    }
    required = json.loads((ROOT / "clients" / "php" / "composer.json").read_text())["require"]
    assert {name for name in required if name.startswith("psr/")} == set(packages)
    repositories: list[dict[str, Any]] = [{"packagist.org": False}]
    for name, (version, namespace, files) in packages.items():
        if not files:
            require(f"the Debian package php-{name.replace('/', '-')}")
        folder = tmp_path / "packagist-stand-in" / name.replace("/", "-")
        folder.mkdir(parents=True)
        for file in files:
            shutil.copy(file, folder)
        (folder / "composer.json").write_text(json.dumps(
            {"name": name, "version": version, "autoload": {"psr-4": {namespace: ""}}}))
        repositories.append({"type": "path", "url": str(folder), "options": {"symlink": False}})
    home.mkdir(parents=True)
    (home / "config.json").write_text(json.dumps({"repositories": repositories}))
