"""The API lock: the live OpenAPI document against the release's, `docs/openapi-0.4.json`
(`server/tests/apilock.py`). A breaking change fails here; an addition passes. A change that is
meant is recorded with `PYTHONPATH=server python server/tests/apilock.py --write` (and said in
the CHANGELOG)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import apilock
from cvsm_server.web import apidoc
from cvsm_server.web.routes import ROUTES

SECRETS = "/api/v1/teams/{team_id}/secrets"
SECRET = "/api/v1/teams/{team_id}/secrets/{secret_id}"


def test_the_live_document_breaks_nothing_in_the_release_lock() -> None:
    changes = apilock.breaking_changes(apilock.read_lock(), apidoc.document(ROUTES))
    assert changes == [], ("breaking changes against docs/openapi-0.4.json (if meant, see "
                           "server/tests/apilock.py for the command that records them):\n"
                           + "\n".join(changes))


def test_the_lock_file_is_normalised() -> None:
    text = apilock.LOCK_FILE.read_text(encoding="utf-8")
    assert text == apilock.normalised(apilock.read_lock())


@pytest.fixture
def doc() -> dict[str, Any]:
    return apidoc.document(ROUTES)


def changed(doc: dict[str, Any], edit: Any) -> list[str]:
    live = copy.deepcopy(doc)
    edit(live)
    return apilock.breaking_changes(doc, live)


def body(doc: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    return doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]


def answer(doc: dict[str, Any], path: str, method: str, status: str) -> dict[str, Any]:
    return doc["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]


def test_the_same_document_has_no_breaking_change(doc: dict[str, Any]) -> None:
    assert apilock.breaking_changes(doc, copy.deepcopy(doc)) == []


def test_a_removed_operation_is_caught(doc: dict[str, Any]) -> None:
    assert changed(doc, lambda d: d["paths"][SECRET].pop("delete")) == [
        f"DELETE {SECRET}: operation removed"]


def test_a_removed_response_field_is_caught_and_an_added_one_passes(doc: dict[str, Any]) -> None:
    def remove(d: dict) -> None:
        d["components"]["schemas"]["Secret"]["properties"].pop("description")
        d["components"]["schemas"]["Secret"]["required"].remove("description")
    changes = changed(doc, remove)
    assert f"GET {SECRET} 200 body.secret: response field 'description' removed" in changes

    def add(d: dict) -> None:
        d["components"]["schemas"]["Secret"]["properties"]["labels"] = {"type": "array"}
        answer(d, "/api/v1/me", "get", "200")["properties"]["locale"] = {"type": "string"}
    assert changed(doc, add) == []


def test_a_response_field_no_longer_always_present_is_caught(doc: dict[str, Any]) -> None:
    changes = changed(doc, lambda d: d["components"]["schemas"]["Secret"]["required"]
                      .remove("version"))
    assert f"GET {SECRET} 200 body.secret: response field 'version' no longer always present" \
        in changes


def test_a_removed_enum_value_is_caught_and_an_added_one_passes(doc: dict[str, Any]) -> None:
    def narrow(d: dict) -> None:
        body(d, SECRETS, "post")["properties"]["environment"]["enum"].remove("staging")
    assert f"POST {SECRETS} body.environment: enum narrowed (no longer \"staging\")" \
        in changed(doc, narrow)

    def widen(d: dict) -> None:
        body(d, SECRETS, "post")["properties"]["environment"]["enum"].append("qa")
    assert changed(doc, widen) == []


def test_a_new_required_request_field_is_caught_and_an_optional_one_passes(
        doc: dict[str, Any]) -> None:
    def require(d: dict) -> None:
        schema = body(d, "/api/v1/teams", "post")
        schema["properties"]["region"] = {"type": "string"}
        schema["required"].append("region")
    assert changed(doc, require) == ["POST /api/v1/teams body: new required field 'region'"]

    def offer(d: dict) -> None:
        body(d, "/api/v1/teams", "post")["properties"]["region"] = {"type": "string"}
    assert changed(doc, offer) == []


def test_a_new_required_parameter_is_caught_and_an_optional_one_passes(
        doc: dict[str, Any]) -> None:
    def param(required: bool) -> Any:
        def edit(d: dict) -> None:
            d["paths"][SECRETS]["get"]["parameters"].append(
                {"name": "label", "in": "query", "required": required, "schema": {"type": "string"}})
        return edit
    assert changed(doc, param(True)) == [
        f"GET {SECRETS} query parameter 'label': new and required"]
    assert changed(doc, param(False)) == []


def test_a_changed_type_is_caught_both_ways(doc: dict[str, Any]) -> None:
    def request(d: dict) -> None:
        body(d, SECRETS, "post")["properties"]["value"] = {"type": "object"}
    assert changed(doc, request) == [
        f"POST {SECRETS} body.value: type changed from ['string'] to ['object']"]

    def response(d: dict) -> None:
        d["components"]["schemas"]["Secret"]["properties"]["version"] = {"type": "string"}
    assert f"GET {SECRET} 200 body.secret.version: type changed from ['integer'] to ['string']" \
        in changed(doc, response)


def test_narrower_bounds_are_caught_and_wider_ones_pass(doc: dict[str, Any]) -> None:
    def bound(size: int) -> Any:
        def edit(d: dict) -> None:
            body(d, SECRETS, "post")["properties"]["value"]["maxLength"] = size
        return edit
    assert changed(doc, bound(100)) == [f"POST {SECRETS} body.value: maxLength narrowed to 100"]
    assert changed(doc, bound(10**6)) == []


def test_null_accepted_where_it_was_passes_and_refused_is_caught(doc: dict[str, Any]) -> None:
    def refuse_null(d: dict) -> None:
        props = body(d, "/api/v1/auth/register", "post")["properties"]
        props["newsletter_opt_in"] = {"type": "boolean"}
    assert changed(doc, refuse_null) == [
        "POST /api/v1/auth/register body.newsletter_opt_in: type changed from "
        "['boolean', 'null'] to ['boolean']"]


def test_a_public_operation_that_needs_a_credential_is_caught(doc: dict[str, Any]) -> None:
    def guard(d: dict) -> None:
        d["paths"]["/api/v1/health"]["get"]["security"] = [{"bearerAuth": []}]
    assert changed(doc, guard) == ["GET /api/v1/health: now needs a credential"]


def test_a_removed_success_answer_is_caught(doc: dict[str, Any]) -> None:
    assert changed(doc, lambda d: d["paths"]["/api/v1/me"]["get"]["responses"].pop("200")) == [
        "GET /api/v1/me 200: success answer removed"]
