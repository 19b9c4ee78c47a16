"""docs/API.md is true: its `sh` blocks run as printed, in order, in one `bash -euo pipefail`
script against a real `cvsm-server serve`, and each block followed by an output block (a fence
tagged `json` or untagged) prints exactly that output."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from serving import served

DOC = Path(__file__).resolve().parents[2] / "docs" / "API.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
MARK = "::cvsm-doc-block {}::"


def blocks() -> list[tuple[str, str | None]]:
    """Each `sh` block with the output block that follows it, if any."""
    fences = [(m.group(1), m.group(2)) for m in FENCE.finditer(DOC.read_text())]
    found = []
    for i, (lang, text) in enumerate(fences):
        if lang == "sh":
            after = fences[i + 1] if i + 1 < len(fences) else None
            found.append((text, after[1] if after and after[0] in ("", "json") else None))
    return found


def require_tools() -> None:
    missing = [tool for tool in ("curl", "jq") if shutil.which(tool) is None]
    if not missing and "--fail-with-body" not in subprocess.run(
            ["curl", "--help", "all"], capture_output=True, text=True).stdout:
        missing = ["curl 7.76+ (--fail-with-body)"]
    if missing:
        reason = f"docs/API.md walk-through needs {', '.join(missing)}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + " (CI=true: .ci/run installs them)")
        pytest.skip(reason)


def test_the_doc_has_the_walk_through_steps():
    text = "\n".join(code for code, _ in blocks())
    assert text.lstrip().startswith(': "${CVSM:=http://127.0.0.1:8080/api/v1}"')
    for path in ("/auth/register", "/teams", "/secrets", "/tokens", "/export?format=dotenv",
                 "/export?format=json", "/shares", "/public/share/", "/audit", "/me/logout-all"):
        assert path in text, path


def test_the_walk_through_runs_as_printed(database_url, tmp_path):
    require_tools()
    steps = blocks()
    script = "set -euo pipefail\n" + "".join(
        f"echo '{MARK.format(n)}'\n{code}" for n, (code, _) in enumerate(steps))
    (tmp_path / "walk-through.sh").write_text(script)
    with served(database_url, tmp_path, CVSM_APP_URL="", CVSM_DEFAULT_PLAN="professional") as server:
        env = {**os.environ, "CVSM": f"{server.url}/api/v1"}
        run = subprocess.run(["bash", str(tmp_path / "walk-through.sh")], env=env,
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.stderr == ""
    printed = re.split(r"^::cvsm-doc-block (\d+)::\n", run.stdout, flags=re.M)[1:]
    outputs = {int(n): out.replace("\r", "") for n, out in zip(printed[::2], printed[1::2])}
    assert sorted(outputs) == list(range(len(steps)))
    for n, (code, expected) in enumerate(steps):
        if expected is not None:
            assert outputs[n].strip() == expected.strip(), f"block {n}:\n{code}"
    # the share link is on the server the walk-through talked to
    assert f"{server.url}/share/shr_" in run.stdout
