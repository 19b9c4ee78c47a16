"""Case files load and validate; the runner's judgements catch what they must."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conformance.cases import CAPABILITIES, CaseFileError, generate_value, load_cases, load_drivers, substitute
from conformance.proxy import RequestRecord
from conformance.runner import CaseRun, StepFailure


def test_every_case_and_driver_file_is_valid() -> None:
    cases = load_cases()
    assert len(cases) >= 40
    assert {d.language for d in load_drivers()} >= {"python", "python-async"}


def test_generated_values_have_exactly_the_bytes_asked() -> None:
    assert len(generate_value("é", 65536).encode()) == 65536
    with pytest.raises(CaseFileError):
        generate_value("é", 3)


def test_unknown_placeholder_is_rejected_at_load(tmp_path: Path) -> None:
    case = {"id": "bad", "title": "t", "steps": [{"op": "get", "args": {"name": "{{secret:NOPE}}"}}]}
    (tmp_path / "bad.json").write_text(json.dumps(case))
    with pytest.raises(CaseFileError, match="NOPE"):
        load_cases(tmp_path)


def test_schema_violation_names_the_place(tmp_path: Path) -> None:
    case = {"id": "bad", "title": "t", "steps": [{"op": "get", "expect": {"ok": False}}]}
    (tmp_path / "bad.json").write_text(json.dumps(case))
    with pytest.raises(CaseFileError, match="steps/0"):
        load_cases(tmp_path)


def test_substitute_reaches_nested_strings() -> None:
    lookup = {("a", None): "1", ("b", "x"): "2"}
    assert substitute({"k{{a}}": ["{{b:x}}-{{a}}", 3]}, lambda n, a: lookup[(n, a)]) == {"k1": ["2-1", 3]}


class _Judge(CaseRun):
    """A CaseRun with nothing behind it: only the judging methods are used."""

    def __init__(self) -> None:  # noqa: D107 - no server, proxy or driver needed
        pass


def _record(kind: str, **headers: str) -> RequestRecord:
    return RequestRecord("GET", "/api/v1/teams", "/api/v1/teams", {"environment": ["production"]},
                         {k.replace("_", "-"): v for k, v in headers.items()}, kind)


@pytest.mark.parametrize(
    ("expect", "response"),
    [
        ({"ok": True, "result": {"value": "a"}}, {"ok": True, "result": {"value": "b"}}),
        ({"ok": True, "result": {"value": "a"}}, {"ok": True, "result": {"value": "a", "extra": 1}}),
        ({"ok": True}, {"ok": False, "error": {"kind": "api", "message": "x"}}),
        ({"ok": False, "error": {"kind": "api"}}, {"ok": True, "result": {}}),
        ({"ok": False, "error": {"kind": "api", "status": 503}}, {"ok": False, "error": {"kind": "api", "status": 500}}),
        ({"ok": False, "error": {"kind": "rate_limited", "retry_after": 7}},
         {"ok": False, "error": {"kind": "rate_limited", "retry_after": None}}),
        ({"ok": False, "error": {"kind": "not_found", "message_contains": ["did you mean"]}},
         {"ok": False, "error": {"kind": "not_found", "message": "secret not found"}}),
        ({"ok": True, "excludes": ["tok"]}, {"ok": True, "result": {"text": "Client(token=tok)"}}),
    ],
)
def test_check_answer_rejects_mismatches(expect: dict[str, Any], response: dict[str, Any]) -> None:
    with pytest.raises(StepFailure):
        _Judge().check_answer(expect, response)


def test_check_answer_accepts_numbers_by_value_and_subsets() -> None:
    _Judge().check_answer({"ok": True, "result_subset": {"config": {"timeout": 10}}},
                          {"ok": True, "result": {"config": {"timeout": 10.0, "team": "x"}}})


@pytest.mark.parametrize(
    ("expect", "seen"),
    [
        ({"count": 1}, []),
        ({"count": {"min": 2}}, [_record("list")]),
        ({"kinds": {"value": 1}}, [_record("list")]),
        ({"each": {"headers": {"user-agent": "cvsm-go/0\\.1\\.0"}}}, [_record("list", user_agent="cvsm-go/0.1.0x")]),
        ({"each": {"headers": {"accept": "application/json"}}}, [_record("list")]),
        ({"sequence": [{"kind": "teams"}, {"kind": "list"}]}, [_record("teams")]),
        ({"sequence": [{"query": {"environment": "staging"}}]}, [_record("list")]),
    ],
)
def test_check_requests_rejects_mismatches(expect: dict[str, Any], seen: list[RequestRecord]) -> None:
    with pytest.raises(StepFailure):
        _Judge().check_requests(expect, seen)


def test_variants_expand_with_their_params(tmp_path: Path) -> None:
    case = {
        "id": "multi", "title": "t",
        "variants": [{"label": "one", "params": {"name": "A", "expect": {"ok": True}}},
                     {"label": "two", "params": {"name": "B", "expect": {"ok": True, "result": {"value": "x"}}}}],
        "client": {"team": "{{team_id}}"},
        "steps": [{"op": "get", "args": {"name": "{{param:name}}_SUFFIX"}, "expect": "{{param:expect}}"}],
    }
    (tmp_path / "multi.json").write_text(json.dumps(case))
    one, two = load_cases(tmp_path)
    assert (one.id, two.id) == ("multi[one]", "multi[two]")
    assert one.steps[0] == {"op": "get", "args": {"name": "A_SUFFIX"}, "expect": {"ok": True}}
    assert two.steps[0]["expect"] == {"ok": True, "result": {"value": "x"}}
    assert one.client == {"team": "{{team_id}}"}


def test_a_variant_missing_a_param_is_rejected(tmp_path: Path) -> None:
    case = {"id": "multi", "title": "t", "variants": [{"label": "one", "params": {}}],
            "steps": [{"op": "get", "args": {"name": "{{param:name}}"}}]}
    (tmp_path / "multi.json").write_text(json.dumps(case))
    with pytest.raises(CaseFileError, match="param 'name'"):
        load_cases(tmp_path)


def test_the_cases_require_only_capabilities_the_protocol_knows() -> None:
    required = {c for case in load_cases() for c in case.requires}
    assert required == {"tls_ca_file", "proxy_env", "live", "refresh"}
    assert required <= CAPABILITIES


class _Sleeper(_Judge):
    """A CaseRun whose proxy log the test writes: for the sleep step's request check."""

    def __init__(self, log: list[RequestRecord]) -> None:  # noqa: D107
        self.proxy = SimpleNamespace(log=log)
        self.op_mark = 0

    def sub(self, value: Any) -> Any:
        return value


def test_a_sleep_step_checks_the_requests_from_the_last_op_on() -> None:
    log = [_record("teams")]
    run = _Sleeper(log)
    run.op_mark = 1  # the last op began after the first request
    log.append(_record("changes"))  # sent by the client on its own, after the op
    asyncio.run(run.run_step({"sleep": 0, "requests": {"count": 1, "kinds": {"changes": 1}}}))
    with pytest.raises(StepFailure):
        asyncio.run(run.run_step({"sleep": 0, "requests": {"kinds": {"changes": 0}}}))
    asyncio.run(run.run_step({"sleep": 0}))  # without "requests" nothing is checked
