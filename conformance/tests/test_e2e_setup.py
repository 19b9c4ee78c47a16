"""End-to-end cases: the harness sets their team up as a member's client would, and judges them.

The seeding is checked against a stub of the API that records what it is sent: what a client
can check, it checks (the token's wrap opens with the token's key part to the team key, every
envelope opens to its value for its name and environment). The vectors stay what the reference
implementation makes (``python -m conformance.e2e_vectors``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cvsm import e2e

from conformance import e2e_vectors
from conformance.cases import REPO_ROOT, CaseFileError, load_cases
from conformance.proxy import request_kind
from conformance.runner import CaseRun, StepFailure
from conformance.server import Seeder

E2E_CASES = {"e2e_get_opens_value", "e2e_get_all_opens_values", "e2e_inject_sets_values",
             "e2e_tampered_value_is_decryption_error", "e2e_token_without_key_is_configuration_error",
             "e2e_forged_team_key_is_decryption_error", "e2e_first_format_token_is_configuration_error",
             "e2e_team_key_outlives_the_cache", "e2e_value_sealed_for_another_environment_does_not_open",
             "e2e_plain_value_is_decryption_error", "e2e_key_request_errors", "e2e_new_key_version_is_fetched_once",
             "e2e_key_request_refused_empties_the_cache", "e2e_key_request_failing_answers_a_kept_value",
             "e2e_team_rolled_back_below_the_pin_is_decryption_error",
             "e2e_older_envelope_opens_through_the_links", "e2e_malformed_key_links_are_decryption_error"}


class StubApi:
    """The part of the API the seeding of an end-to-end case uses, recording every body."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.user_id = str(uuid.uuid4())
        self.values: dict[str, tuple[int, str]] = {}  # secret id: (version, envelope)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/api/v1/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        path = request.path[len("/api/v1"):]
        self.calls.append((request.method, path, body))
        parts = path.strip("/").split("/")
        if (request.method, path) == ("POST", "/auth/register"):
            return web.json_response({"token": "jwt", "user": {"id": self.user_id}}, status=201)
        if (request.method, path) == ("POST", "/tokens"):
            return web.json_response({"api_token": {"id": str(uuid.uuid4())},
                                      "token": "cvsm_" + uuid.uuid4().hex * 2}, status=201)
        if (request.method, path) == ("PUT", "/me/e2e-key"):
            return web.json_response({"e2e_key": {"public_key": body["public_key"]}}, status=201)
        if (request.method, path) == ("POST", "/teams"):
            return web.json_response({"team": {"id": body.get("id") or str(uuid.uuid4())}}, status=201)
        if request.method == "POST" and parts[2:] == ["secrets"]:
            secret_id = body.get("id") or str(uuid.uuid4())
            self.values[secret_id] = (1, body["value"])
            return web.json_response({"secret": {"id": secret_id}}, status=201)
        if parts[2:3] == ["secrets"] and len(parts) == 4:
            version, envelope = self.values[parts[3]]
            if request.method == "PUT":
                self.values[parts[3]] = (e2e.parse_envelope(body["value"]).version, body["value"])
                return web.json_response({"secret": {"id": parts[3]}})
            return web.json_response({"secret": {"id": parts[3], "version": version}, "value": envelope})
        return web.json_response({"error": "tidak ada"}, status=404)

    def bodies(self, method: str, path: str) -> list[Any]:
        return [body for m, p, body in self.calls if (m, p) == (method, path)]


@pytest.fixture
async def stub() -> AsyncIterator[tuple[StubApi, str]]:
    api = StubApi()
    runner = web.AppRunner(api.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield api, f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


def e2e_cases() -> list[Any]:
    return [case for case in load_cases() if case.e2e]


def test_the_end_to_end_cases_are_there_and_the_vectors_are_not_a_case() -> None:
    assert {case.id for case in e2e_cases()} == E2E_CASES
    assert not any("vector" in case.id for case in load_cases())


async def test_an_end_to_end_case_team_is_seeded_as_a_member_client_would(stub: tuple[StubApi, str]) -> None:
    api, url = stub
    cases = [case for case in load_cases() if case.id in ("e2e_get_opens_value", "not_found")]
    async with Seeder(url) as seeder:
        await seeder.seed(cases)
    # The run's user got a key pair, once; the team was created end-to-end, with its id chosen
    # by the client (the wraps are bound to it), only for the end-to-end case.
    (key,) = api.bodies("PUT", "/me/e2e-key")
    assert key["wrapped_private_key"].startswith("cvsm-pass1.600000.")
    assert key["recovery_wrapped_private_key"].startswith("cvsm-rec1.")
    plain, sealed = sorted(api.bodies("POST", "/teams"), key=lambda body: "e2e" in body)
    assert "e2e" not in plain and "id" not in plain
    seed = seeder.teams["e2e_get_opens_value"]
    assert seed.e2e is not None and sealed["id"] == seed.team_id
    assert sealed["e2e"]["wrapped_key"].startswith("cvsm-wrap1.")
    assert seeder.teams["not_found"].e2e is None
    # The token: scoped to the team, read-only, its key part opens the team key it was given.
    (token,) = [b for b in api.bodies("POST", "/tokens") if "e2e" in b]
    assert (token["team_id"], token["read_only"]) == (seed.team_id, True)
    api_token, private_key = e2e.split_token(seed.e2e.token)
    assert private_key is not None and e2e._b64u(e2e.public_key(private_key)) == token["e2e"]["public_key"]
    team_key = e2e.unwrap_team_key(token["e2e"]["wrapped_key"], seed.team_id, 1, private_key)
    assert team_key == seed.e2e.team_key
    # Format 2: the token pins key version 1 and its commitment; each wrap carries its auth.
    parts = e2e.parse_token(seed.e2e.token)
    assert parts is not None and (parts.key_version, parts.commitment) == (1, e2e.commitment(team_key, seed.team_id, 1))
    e2e.check_recipient_auth(token["e2e"]["auth"], team_key, seed.team_id, 1, "token", None, e2e.public_key(private_key))
    e2e.check_recipient_auth(sealed["e2e"]["auth"], team_key, seed.team_id, 1, "user", api.user_id,
                             e2e._unb64u(key["public_key"]))
    # Every secret went as an envelope with the id the client chose, and opens to its value.
    case = next(c for c in cases if c.id == "e2e_get_opens_value")
    posted = api.bodies("POST", f"/teams/{seed.team_id}/secrets")
    assert len(posted) == len(case.secrets)
    for body in posted:
        assert body["value"].startswith(f"cvsm-e2e1.1.{body['id']}.1.")
        opened = e2e.open_value(body["value"], team_key, team_id=seed.team_id,
                                environment=body["environment"], name=body["name"])
        assert opened == case.value_of(body["name"], body["environment"])
        assert opened not in json.dumps(body)


async def test_reseal_writes_the_next_version_sealed_for_the_name_asked(stub: tuple[StubApi, str]) -> None:
    api, url = stub
    cases = [case for case in load_cases() if case.id == "e2e_tampered_value_is_decryption_error"]
    async with Seeder(url) as seeder:
        await seeder.seed(cases)
        seed = seeder.teams[cases[0].id]
        assert seed.e2e is not None
        secret_id = seed.e2e.secret_ids[("E2E_SWAPPED", "production")]
        await seeder.reseal(cases[0].id, "E2E_SWAPPED", "swapped-e2e-value", "E2E_OTHER")
    version, envelope = api.values[secret_id]
    assert version == 2
    with pytest.raises(e2e.E2EError):
        e2e.open_value(envelope, seed.e2e.team_key, team_id=seed.team_id, environment="production",
                       name="E2E_SWAPPED")
    assert e2e.open_value(envelope, seed.e2e.team_key, team_id=seed.team_id, environment="production",
                          name="E2E_OTHER") == "swapped-e2e-value"


class _Seeded(CaseRun):
    """A CaseRun of an end-to-end case with its seed, and no driver or proxy."""

    def __init__(self, case: Any, seeder: Seeder) -> None:  # noqa: D107
        self.case, self.seeder, self.tokens, self.bad_token = case, seeder, {}, "cvsm_" + "0" * 64


async def test_token_is_the_case_teams_token_with_its_key_part_and_it_never_shows(
    stub: tuple[StubApi, str]
) -> None:
    _, url = stub
    case = next(c for c in load_cases() if c.id == "e2e_get_opens_value")
    async with Seeder(url) as seeder:
        await seeder.seed([case])
    run = _Seeded(case, seeder)
    seed = seeder.teams[case.id].e2e
    assert seed is not None
    assert run.lookup("token", None) == seed.token != seeder.token
    key_part = seed.token.partition(".")[2]
    error = {"kind": "decryption", "status": None, "retry_after": None, "request_id": None, "suggestion": None}
    run.check_universal("get", {"ok": False, "error": {**error, "message": 'secret "A" does not open'}})
    for leak in (key_part, e2e._b64u(seed.team_key)):
        with pytest.raises(StepFailure, match="token or value"):
            run.check_universal("get", {"ok": False, "error": {**error, "message": f"bad {leak}"}})
        with pytest.raises(StepFailure, match="describe shows a token"):
            run.check_universal("describe", {"ok": True, "result": {"text": f"<Client {leak}>"}})


async def test_api_token_is_the_token_without_its_key_part_and_it_never_shows(stub: tuple[StubApi, str]) -> None:
    _, url = stub
    case = next(c for c in load_cases() if c.id == "e2e_token_without_key_is_configuration_error")
    async with Seeder(url) as seeder:
        await seeder.seed([case])
    run = _Seeded(case, seeder)
    seed = seeder.teams[case.id].e2e
    assert seed is not None
    api_token, dot, key_part = seed.token.partition(".")
    assert dot and key_part and run.lookup("api_token", None) == api_token != seeder.token
    assert run.sub(case.client["token"]) == api_token
    error = {"kind": "configuration", "status": None, "retry_after": None, "request_id": None, "suggestion": None}
    run.check_universal("get", {"ok": False, "error": {**error, "message": "the token needs its key part"}})
    with pytest.raises(StepFailure, match="token or value"):
        run.check_universal("get", {"ok": False, "error": {**error, "message": f"bad {api_token}"}})


def test_api_token_needs_an_end_to_end_case(tmp_path: Path) -> None:
    plain = {"id": "plain", "title": "t", "client": {"token": "{{api_token}}"},
             "steps": [{"op": "get", "args": {"name": "A"}}]}
    (tmp_path / "plain.json").write_text(json.dumps(plain))
    with pytest.raises(CaseFileError, match=r"\{\{api_token\}\} needs an end-to-end team"):
        load_cases(tmp_path)
    (tmp_path / "plain.json").write_text(json.dumps({**plain, "team": {"e2e": True}}))
    assert [case.id for case in load_cases(tmp_path)] == ["plain"]


async def test_wrapped_key_is_the_tokens_genuine_wrap_of_the_team_key(stub: tuple[StubApi, str]) -> None:
    api, url = stub
    case = next(c for c in load_cases() if c.id == "e2e_malformed_key_links_are_decryption_error")
    async with Seeder(url) as seeder:
        await seeder.seed([case])
    run = _Seeded(case, seeder)
    seed = seeder.teams[case.id]
    assert seed.e2e is not None
    wrapped = run.lookup("wrapped_key", None)
    (token,) = [b for b in api.bodies("POST", "/tokens") if "e2e" in b]
    assert wrapped == token["e2e"]["wrapped_key"]
    _, private_key = e2e.split_token(seed.e2e.token)
    assert private_key is not None
    assert e2e.unwrap_team_key(wrapped, seed.team_id, 1, private_key) == seed.e2e.team_key
    assert "wrapped_key" not in repr(seed.e2e) and wrapped not in repr(seed.e2e)


def test_wrapped_key_needs_an_end_to_end_case(tmp_path: Path) -> None:
    fault = {"match": "e2e_key", "status": 200, "body": {"wrapped_key": "{{wrapped_key}}"}}
    plain = {"id": "plain", "title": "t", "steps": [{"faults": [fault]}]}
    (tmp_path / "plain.json").write_text(json.dumps(plain))
    with pytest.raises(CaseFileError, match=r"\{\{wrapped_key\}\} needs an end-to-end team"):
        load_cases(tmp_path)
    (tmp_path / "plain.json").write_text(json.dumps({**plain, "team": {"e2e": True}}))
    assert [case.id for case in load_cases(tmp_path)] == ["plain"]


def test_reseal_needs_an_end_to_end_case_and_a_seeded_production_secret(tmp_path: Path) -> None:
    step = {"server": "reseal_secret", "secret": "A", "sealed_for": "B"}
    plain = {"id": "plain", "title": "t", "secrets": [{"name": "A", "value": "a"}], "steps": [step]}
    (tmp_path / "plain.json").write_text(json.dumps(plain))
    with pytest.raises(CaseFileError, match="needs an end-to-end team"):
        load_cases(tmp_path)
    (tmp_path / "plain.json").unlink()
    unseeded = {"id": "unseeded", "title": "t", "team": {"e2e": True}, "steps": [{**step, "secret": "NOPE"}]}
    (tmp_path / "unseeded.json").write_text(json.dumps(unseeded))
    with pytest.raises(CaseFileError, match="NOPE"):
        load_cases(tmp_path)


def test_the_decryption_kind_and_the_key_request_are_known_to_the_schema_and_the_proxy() -> None:
    schema = json.loads((REPO_ROOT / "conformance" / "case.schema.json").read_text())
    error_kinds = schema["$defs"]["expect"]["oneOf"][1]["properties"]["error"]["properties"]["kind"]["enum"]
    assert "decryption" in error_kinds
    assert "e2e_key" in schema["$defs"]["fault"]["properties"]["match"]["enum"]
    assert request_kind("/api/v1/teams/t/e2e/key") == "e2e_key"
    protocol = (REPO_ROOT / "conformance" / "PROTOCOL.md").read_text()
    assert "| `decryption` | `DecryptionError` |" in protocol


def test_the_python_driver_reports_a_decryption_error_as_its_kind() -> None:
    sys.path.insert(0, str(REPO_ROOT / "clients" / "python"))
    try:
        import conformance_driver
    finally:
        sys.path.pop(0)
    import cvsm

    body = conformance_driver.error_body(cvsm.DecryptionError('secret "A" does not open'))
    assert (body["kind"], body["status"]) == ("decryption", None)


def test_the_vectors_are_what_the_reference_implementation_makes() -> None:
    vectors = json.loads(e2e_vectors.PATH.read_text(encoding="utf-8"))
    assert e2e_vectors.check(vectors) == []
    vectors["values"][0]["value"] += "!"
    assert e2e_vectors.check(vectors) != []
    done = subprocess.run([sys.executable, "-m", "conformance.e2e_vectors"], cwd=REPO_ROOT, env=os.environ,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
