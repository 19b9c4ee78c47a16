"""conformance/rules.json, the SDKs' shared constants, and the files generated from it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from conformance import gen_constants

HERE = Path(__file__).resolve().parent.parent


def test_the_data_file_is_valid_against_its_schema() -> None:
    schema = json.loads((HERE / "rules.schema.json").read_text(encoding="utf-8"))
    data = json.loads(gen_constants.RULES.read_text(encoding="utf-8"))
    jsonschema.validate(data, schema)
    assert len(gen_constants.load()) == len(data["constants"])


def test_every_generated_file_agrees_with_the_data_file() -> None:
    assert gen_constants.stale() == []
    done = subprocess.run([sys.executable, "-m", "conformance.gen_constants", "--check"], cwd=HERE.parent,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_a_changed_constant_makes_every_file_stale(tmp_path: Path) -> None:
    data = json.loads(gen_constants.RULES.read_text(encoding="utf-8"))
    for entry in data["constants"]:
        if entry["name"] == "retryable_statuses":
            entry["value"] = [502, 503, 504, 599]
    changed = tmp_path / "rules.json"
    changed.write_text(json.dumps(data), encoding="utf-8")
    stale = gen_constants.stale(rules=changed)
    assert sorted(stale) == sorted([*gen_constants.WRITERS, gen_constants.SHELL_FILE])
    wanted = gen_constants.expected(rules=changed)
    assert "599" in wanted["clients/go/cvsm/rules_gen.go"]
    assert "local _cvsm_r_retryable_statuses='502 503 504 599'" in wanted[gen_constants.SHELL_FILE]


def test_an_edited_generated_file_fails_the_check(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    for path in [*gen_constants.WRITERS, gen_constants.SHELL_FILE]:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(HERE.parent / path, root / path)
    assert gen_constants.stale(root=root) == []
    target = root / "clients/python/src/cvsm/_rules.py"
    target.write_text(target.read_text(encoding="utf-8").replace("= 30", "= 31"), encoding="utf-8")
    assert gen_constants.stale(root=root) == ["clients/python/src/cvsm/_rules.py"]


@pytest.mark.parametrize("bad", [
    {"name": "Bad", "value": 1, "doc": "x"},
    {"name": "neg", "value": -1, "doc": "x"},
    {"name": "mixed", "value": [1, "a"], "doc": "x"},
    {"name": "utf", "value": "caf\u00e9", "doc": "x"},
    {"name": "nodoc", "value": 1, "doc": " "},
])
def test_the_generator_refuses_what_it_cannot_spell_in_every_language(tmp_path: Path, bad: dict) -> None:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"constants": [bad]}), encoding="utf-8")
    with pytest.raises(gen_constants.RulesError):
        gen_constants.load(path)


def test_the_protocol_states_what_the_data_file_holds() -> None:
    """The defaults PROTOCOL.md promises are the data file's (a change to one shows in the other)."""
    values = {c["name"]: c["value"] for c in gen_constants.load()}
    protocol = (HERE / "PROTOCOL.md").read_text(encoding="utf-8")
    assert "502, 503 or 504" in protocol and values["retryable_statuses"] == [502, 503, 504]
    assert f"(default {values['default_cache_ttl_seconds']};" in protocol
    assert f"`max_retries` (default {values['default_max_retries']})" in protocol
    assert re.search(rf"`timeout` seconds per attempt, default {values['default_timeout_seconds']}\b", protocol)
