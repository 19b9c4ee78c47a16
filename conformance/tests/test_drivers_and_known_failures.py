"""Drivers report their capabilities when they start; known failures are never passes."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from conformance import report, suite
from conformance.cases import NOT_YET, REPO_ROOT, CaseFileError, DriverSpec, load_cases, load_drivers, load_known_failures
from conformance.driver import DriverFailure, DriverProcess
from conformance.runner import CaseResult

# A driver that answers only what the harness asks at start-up: the capabilities op, with
# whatever the test puts in CVSM_TEST_CAPABILITIES_ANSWER (a JSON response body).
_TINY_DRIVER = """
import json, os, sys
answer = json.loads(os.environ["TEST_CAPABILITIES_ANSWER"])
for line in sys.stdin:
    request = json.loads(line)
    if request["op"] == "capabilities":
        body = answer
    elif request["op"] == "shutdown":
        print(json.dumps({"id": request["id"], "ok": True, "result": {}}), flush=True)
        break
    else:
        body = {"ok": False, "error": {"kind": "unsupported", "message": request["op"]}}
    print(json.dumps({"id": request["id"], **body}), flush=True)
"""


def _spec(tmp_path: Path, **kwargs: object) -> DriverSpec:
    program = tmp_path / "driver.py"
    program.write_text(_TINY_DRIVER)
    fields: dict = {"language": "tiny", "sdk": "tiny", "requires": (), "build": None,
                    "command": (sys.executable, str(program)), "unit_test": None, "path": program}
    fields.update(kwargs)
    return DriverSpec(**fields)


async def _start(tmp_path: Path, answer: dict, monkeypatch: pytest.MonkeyPatch) -> DriverProcess:
    monkeypatch.setenv("TEST_CAPABILITIES_ANSWER", json.dumps(answer))
    driver = DriverProcess(_spec(tmp_path), tmp_path / "stderr.log")
    try:
        await driver.start(timeout=20)
    except BaseException:
        await driver.kill()
        raise
    return driver


async def test_the_capabilities_come_from_the_driver_at_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    driver = await _start(tmp_path, {"ok": True, "result": {"capabilities": ["proxy_env"]}}, monkeypatch)
    try:
        assert driver.capabilities == {"proxy_env"}
    finally:
        assert await driver.stop() == 0


@pytest.mark.parametrize(
    "answer",
    [
        {"ok": False, "error": {"kind": "unsupported", "message": "unknown op"}},  # a driver without the op
        {"ok": True, "result": {}},
        {"ok": True, "result": {"capabilities": "proxy_env"}},
        {"ok": True, "result": {"capabilities": ["proxy_env", "telepathy"]}},
    ],
)
async def test_a_driver_that_does_not_report_its_capabilities_does_not_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: dict
) -> None:
    with pytest.raises(DriverFailure, match="capabilit"):
        await _start(tmp_path, answer, monkeypatch)



async def test_every_driver_that_runs_without_a_build_reports_the_capabilities_the_cases_require(
    tmp_path: Path,
) -> None:
    """The interpreted drivers start as they are (Node's once `npm install` has run); the
    compiled ones (Go, Rust) are checked by a run, which builds them."""
    required = {c for case in load_cases() for c in case.requires}
    interpreted = {"shell", "python", "python-async", "ruby", "php"}
    if (REPO_ROOT / "clients" / "node" / "node_modules").is_dir():
        interpreted.add("node")
    checked = []
    for spec in load_drivers():
        program = spec.command[0]
        if os.sep in program and not os.path.isabs(program):
            program = str(REPO_ROOT / program)
        if spec.language not in interpreted or shutil.which(program) is None:
            continue
        if any(shutil.which(tool) is None for tool in spec.requires):
            continue
        driver = DriverProcess(spec, tmp_path / f"{spec.language}.log")
        try:
            await driver.start(timeout=60)
            not_yet = {capability for capability, languages in NOT_YET.items() if spec.language in languages}
            assert required - not_yet <= driver.capabilities, spec.language
            assert not (not_yet & driver.capabilities), (
                f"{spec.language} reports {sorted(not_yet & driver.capabilities)}: remove it from NOT_YET"
            )
        finally:
            await driver.stop()
        checked.append(spec.language)
    assert checked, "no driver could be started"


def test_no_driver_declares_its_capabilities_in_its_json_file() -> None:
    for language in ("go", "rust", "shell"):
        data = json.loads((REPO_ROOT / "conformance" / "drivers" / f"{language}.json").read_text())
        assert "capabilities" not in data, language


def test_known_failures_name_cases_and_allow_comments(tmp_path: Path) -> None:
    listed = tmp_path / "tiny.txt"
    listed.write_text("# landing case by case\nnot_found\n\nmax_retries_option  # retries next week\n")
    assert load_known_failures(listed, {"not_found", "max_retries_option", "other"}) == {
        "not_found", "max_retries_option"}
    listed.write_text("not_found\nno_such_case\n")
    with pytest.raises(CaseFileError, match=r"tiny.txt:2: no case 'no_such_case'"):
        load_known_failures(listed, {"not_found"})


def test_a_known_failures_file_of_no_language_is_refused(tmp_path: Path) -> None:
    (tmp_path / "klingon.txt").write_text("not_found\n")
    with pytest.raises(CaseFileError, match="klingon"):
        load_drivers(known_failures_dir=tmp_path, cases=load_cases())


def test_the_repository_known_failures_files_are_valid() -> None:
    load_drivers(cases=load_cases())


def test_a_known_failure_is_known_when_it_fails_and_fixed_when_it_passes(tmp_path: Path) -> None:
    spec = _spec(tmp_path, known_failures=frozenset({"not_found", "stale"}))
    failed = suite.judge_known(spec, CaseResult("not_found", "tiny", "failed", message="got 500"))
    assert failed.status == "known" and "got 500" in failed.message
    passed = suite.judge_known(spec, CaseResult("stale[get]", "tiny", "passed"))  # a variant of a listed case
    assert passed.status == "fixed" and "remove" in passed.message
    other = suite.judge_known(spec, CaseResult("other", "tiny", "failed"))
    assert other.status == "failed"
    not_applicable = suite.judge_known(spec, CaseResult("not_found", "tiny", "n/a"))
    assert not_applicable.status == "n/a"


def test_the_report_shows_known_failures_apart_and_never_as_passes() -> None:
    cases = [c for c in load_cases() if c.id in ("not_found", "max_retries_option", "names_are_case_sensitive")]
    results = [
        CaseResult("not_found", "tiny", "known", message="known failure (known-failures/tiny.txt): got 500"),
        CaseResult("max_retries_option", "tiny", "fixed", message="passes now: remove the line"),
        CaseResult("names_are_case_sensitive", "tiny", "passed"),
    ]
    text = report.markdown(cases, ["tiny"], results, {}, [], {"tiny": ["proxy_env"]})
    assert "| `not_found` " in text and "| known |" in text
    assert "**FIXED**" in text and "## Known failures that pass now" in text
    assert "## Known failures\n" in text and "got 500" in text
    assert text.rstrip().endswith("1 passed, 0 failed, 1 known, 1 fixed")
    assert "| tiny | proxy_env |" in text
    junit = report.junit(results, ["tiny"]).getroot()[0]
    assert junit.get("failures") == "1" and junit.get("skipped") == "1"


def test_unit_tests_are_told_the_python_that_imports_the_reference_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CVSM_TOKEN", "from-the-harness-environment")
    env = suite.unit_test_environment()
    assert env["CVSM_SERVER_PYTHON"] == sys.executable
    assert [k for k in env if k.startswith("CVSM_")] == ["CVSM_SERVER_PYTHON"]


def test_the_capabilities_not_yet_ported_are_listed_in_the_protocol() -> None:
    """PROTOCOL.md's table of what each SDK lacks is NOT_YET's, language by language."""
    protocol = (REPO_ROOT / "conformance" / "PROTOCOL.md").read_text(encoding="utf-8")
    languages = {spec.language for spec in load_drivers()}
    for capability, missing in NOT_YET.items():
        assert set(missing) <= languages
        for language in missing:
            assert f"| `{capability}` | `{language}` |" in protocol, (capability, language)
