"""The OpenAPI document (`GET /api/v1/openapi.json`) is generated from the route table: every
API route has its path and method in it and nothing else is there. The HTML pages
(`/share/{token}`, `/static/{name}`) and the docs page (`/api/v1/docs`) are not part of the JSON
API and are deliberately left out; the document describes itself (`/api/v1/openapi.json`)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from cvsm_server import __version__
from cvsm_server.web import apidoc
from cvsm_server.web.routes import ROUTES

PAGES = {"/share/{token}", "/static/{name}", "/api/v1/docs", "/", "/signin", "/app/teams"}


def is_page(path: str) -> bool:
    """A route for a browser (the dashboard, the share page, assets, the docs page)."""
    return not path.startswith("/api/") or path == "/api/v1/docs"


def route_operations() -> set[tuple[str, str]]:
    return {(r.method.lower(), apidoc.openapi_path(r.path)[0]) for r in ROUTES}


def document_operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method, path) for path, item in doc["paths"].items() for method in item}


def test_every_route_and_only_routes_are_documented() -> None:
    doc = apidoc.document(ROUTES)
    routes = {(m, p) for m, p in route_operations() if not is_page(p)}
    assert document_operations(doc) == routes
    assert {p for _, p in route_operations()} & PAGES == PAGES  # the pages exist, undocumented


def test_a_route_without_an_entry_fails_the_document(monkeypatch: pytest.MonkeyPatch) -> None:
    from cvsm_server.web import teams as web_teams
    monkeypatch.delitem(web_teams.OPENAPI, "list_members")
    with pytest.raises(LookupError, match="list_members"):
        apidoc.document(ROUTES)


def test_operation_ids_are_the_handler_names_and_unique() -> None:
    doc = apidoc.document(ROUTES)
    ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))
    handlers = {r.handler.__name__ for r in ROUTES}
    assert set(ids) <= handlers


def test_schemas_are_valid_json_schema_2020_12() -> None:
    doc = apidoc.document(ROUTES)
    for name, schema in doc["components"]["schemas"].items():
        jsonschema.Draft202012Validator.check_schema(schema)
    for item in doc["paths"].values():
        for op in item.values():
            for param in op.get("parameters", []):
                jsonschema.Draft202012Validator.check_schema(param["schema"])


def test_private_routes_need_bearer_and_list_the_error_answers() -> None:
    doc = apidoc.document(ROUTES)
    assert doc["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http", "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearerAuth"]["description"]}
    me = doc["paths"]["/api/v1/me"]["get"]
    assert me["security"] == [{"bearerAuth": []}]
    assert {"401", "403", "429", "500", "503"} <= set(me["responses"])
    assert me["responses"]["429"]["headers"]["Retry-After"]["schema"]["type"] == "integer"
    assert me["responses"]["200"]["headers"]["X-Request-Id"]["required"] is True
    login = doc["paths"]["/api/v1/auth/login"]["post"]
    assert login["security"] == []
    health = doc["paths"]["/api/v1/health"]["get"]
    assert "429" not in health["responses"] and health["security"] == []
    assert me["responses"]["401"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"}


def test_rules_come_from_the_domain_modules() -> None:
    from cvsm_server.e2e import service as e2e
    from cvsm_server.e2e import syntax as e2e_syntax
    from cvsm_server.secrets import service as secrets
    from cvsm_server.secrets import inputs as secret_inputs
    doc = apidoc.document(ROUTES)
    body = doc["paths"]["/api/v1/teams/{team_id}/secrets"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    assert body["required"] is True
    assert set(schema["required"]) == {"name", "value", "environment"}
    props = schema["properties"]
    assert props["name"]["pattern"] == "^[A-Za-z_][A-Za-z0-9_]{0,254}$"
    assert props["environment"]["enum"] == list(secret_inputs.ENVIRONMENTS)
    assert props["type"]["enum"] == [*secret_inputs.TYPES, None]  # optional: null is left out
    # the longest value is an end-to-end team's envelope of a value of MAX_VALUE_BYTES
    assert props["value"]["maxLength"] == e2e_syntax.MAX_ENVELOPE_LENGTH > secret_inputs.MAX_VALUE_BYTES
    team = doc["paths"]["/api/v1/teams/{team_id}"]["get"]["parameters"][0]
    assert team["name"] == "team_id"
    validator = jsonschema.Draft202012Validator(team["schema"])
    assert validator.is_valid("acme-corp")
    assert validator.is_valid("123e4567-e89b-12d3-a456-426614174000")
    assert not validator.is_valid("Acme Corp")


def test_scoped_tokens_and_read_by_name_are_described() -> None:
    from cvsm_server.web import secrets as web_secrets
    doc = apidoc.document(ROUTES)
    create = doc["paths"]["/api/v1/tokens"]["post"]["requestBody"]["content"]["application/json"]
    assert {"team_id", "environments", "read_only"} <= set(create["schema"]["properties"])
    token = doc["components"]["schemas"]["ApiToken"]["properties"]
    assert {"team_id", "environments", "read_only"} <= set(token)
    # documented beside its handler; a path only once the route is in the table
    assert "read_secret_by_name" in web_secrets.OPENAPI
    by_name = "/api/v1/teams/{team_id}/secrets/by-name/{name}"
    assert (by_name in doc["paths"]) == any("by-name" in r.path for r in ROUTES)


async def test_served_publicly_with_the_server_version(make_settings: Any, start_client: Any) -> None:
    client = await start_client(make_settings(ratelimit_api="1/60",
                                              ratelimit_public="1/60"))
    for _ in range(3):  # neither authenticated nor rate limited
        resp = await client.get("/api/v1/openapi.json")
        assert resp.status == 200
        assert resp.content_type == "application/json"
        assert resp.headers["X-Request-Id"]
        doc = await resp.json()
    assert doc["openapi"] == "3.1.0"
    assert doc["info"]["version"] == __version__
    assert doc == apidoc.document(ROUTES)


def test_request_bodies_say_what_the_server_requires_and_accepts() -> None:
    doc = apidoc.document(ROUTES)

    def body(path: str) -> dict:
        return doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    login = body("/api/v1/auth/login")
    assert set(login["required"]) == {"identifier", "password"}
    assert "email" not in login["properties"]  # the 0.3 line's legacy field, gone in 0.4.0
    delete = body("/api/v1/me/delete")
    assert delete["anyOf"] == [{"required": ["password"]}, {"required": ["confirm"]}]
    register = body("/api/v1/auth/register")["properties"]
    assert register["newsletter_opt_in"]["type"] == ["boolean", "null"]  # null: left out
    assert register["email"] == {"type": "string", "maxLength": 254, "format": "email"}  # required
    validator = jsonschema.Draft202012Validator(register["name"])
    assert validator.is_valid("  Dewi Lestari \n") and validator.is_valid("x" * 200)
    for refused in ("", " \u0085 ", "x" * 201, "Dewi\nLestari", "a\u2028b"):
        assert not validator.is_valid(refused), refused


def test_empty_query_values_are_documented_as_left_out() -> None:
    doc = apidoc.document(ROUTES)
    export = {p["name"]: p for p in
              doc["paths"]["/api/v1/teams/{team_id}/audit/export"]["get"]["parameters"]}
    validator = jsonschema.Draft202012Validator(export["to"]["schema"])
    assert validator.is_valid("") and validator.is_valid("2026-01-01T00:00:00Z")
    page = {p["name"]: p for p in doc["paths"]["/api/v1/admin/users"]["get"]["parameters"]}
    assert page["offset"]["schema"]["maximum"] == 2**63 - 1
