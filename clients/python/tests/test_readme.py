"""The README's first example runs as printed, and the version lives in one place."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
from pathlib import Path

import pytest

import cvsm

from .conftest import TEAM_SLUG, TOKEN, Stub

ROOT = Path(__file__).resolve().parent.parent


def first_python_example() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^```python\n(.*?)^```$", readme, re.MULTILINE | re.DOTALL)
    assert match, "the README has no python example"
    return match.group(1)


def test_the_first_readme_example_runs_as_printed(stub: Stub, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    stub.add("DATABASE_URL", "postgres://db.internal/app")
    stub.add("README_TEST_OTHER", "other")
    monkeypatch.setenv("CVSM_TOKEN", TOKEN + "\n")  # as read from a mounted file
    monkeypatch.setenv("CVSM_BASE_URL", stub.url)
    monkeypatch.setenv("CVSM_TEAM", TEAM_SLUG)
    for name in ("DATABASE_URL", "README_TEST_OTHER"):
        monkeypatch.setenv(name, "placeholder")  # so that monkeypatch restores the environment
        monkeypatch.delenv(name)
    namespace: dict[str, object] = {}
    exec(compile(first_python_example(), "README.md", "exec"), namespace)
    namespace["client"].close()  # type: ignore[attr-defined]
    assert namespace["database_url"] == "postgres://db.internal/app"
    assert os.environ["README_TEST_OTHER"] == "other"
    assert stub.kinds() == ["by_name", "export"]
    assert capsys.readouterr().out == "loaded DATABASE_URL, README_TEST_OTHER\n"  # names, no value


def test_the_version_has_one_source() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'dynamic = ["version"]' in pyproject
    assert cvsm.__version__ not in pyproject
    assert importlib.metadata.version("cvsm") == cvsm.__version__
    assert cvsm.USER_AGENT == f"cvsm-python/{cvsm.__version__}"


def test_the_service_token_request_is_the_scoped_token_the_api_takes() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Service token", 1)[1].split("\n## ", 1)[0]
    script = re.search(r"^```sh\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert script, "the Service token section has no shell example"
    bodies = [json.loads(body) for body in re.findall(r"-d '(\{.*?\})'", script.group(1))]
    assert bodies == [
        {"identifier": "alice", "password": "correct horse battery"},
        {"name": "app production", "team_id": "acme", "environments": ["production"], "read_only": True},
    ]
    assert '"$CVSM/auth/login"' in script.group(1) and '"$CVSM/tokens"' in script.group(1)
    assert "export CVSM_TOKEN CVSM_BASE_URL=$CVSM CVSM_TEAM=acme" in script.group(1)
