"""The OpenAPI 3.1 document, built from the route table's entries and the schemas kept beside
the handlers.

Each handler module (`web.accounts`, `web.teams`, `web.secrets`, ...) ends with an `OPENAPI`
dict keyed by handler name, written in `web.schema`'s vocabulary: the operation's summary, query
parameters, request body and success answers. `document(routes)` walks the table (`web.routes`
hands it over, `openapi_json` reads it from the application) and, for every route that names an
OpenAPI entry (`Route.openapi`), takes that entry and adds what every operation shares: path
parameters (taken from the route's own pattern), the bearer credential where the route's policy
asks for one, the error answers (`{"error": string}`, 429 and 503 with `Retry-After` where the
route is rate limited) and the `X-Request-Id` header. A route whose entry is missing is an error
here, and the tests compare the document's paths with the route table both ways, so the
document cannot drift from what the server serves.

Entries for handlers that are not (yet) in the route table are allowed: only routes present in
the table become paths.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from typing import Any

from aiohttp import web

from .. import __version__
from ..secrets import shares
from .policy import Route
from .schema import (COMPONENTS, SECRET_NAME, STRING, TEAM_REF_PATTERN, UUID_PATTERN, ref,
                     request_body)

# The table the server serves, for `openapi_json` (set by `web.routes.setup_routes`).
ROUTE_TABLE = web.AppKey("route_table", list)

_PARAM_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::[^{}]*(?:\{[^{}]*\}[^{}]*)*)?\}")

# --- the document --------------------------------------------------------------------------

_ERROR_TEXT = {
    400: "Invalid input (a field missing, of the wrong type or outside its rule).",
    401: "No credential, or one that is invalid, expired or revoked.",
    403: "The credential's user may not do this.",
    404: "Not found, or a team the caller is not in.",
    409: "Conflict with existing data.",
    410: "The share link has expired, been used up or revoked.",
    413: "The request body is larger than this route accepts.",
    429: "Too many requests; retry after `Retry-After` seconds.",
    500: "Unexpected server error (no detail is given).",
    503: "The database is unavailable; retry after `Retry-After` seconds.",
}
_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying.",
                                "schema": {"type": "integer", "minimum": 1}}}
_REQUEST_ID = {"X-Request-Id": {"required": True, "description": "The request's id (an incoming sane one is kept)"
                                               " as in the server's log lines.",
                                "schema": STRING}}


def openapi_path(pattern: str) -> tuple[str, list[dict]]:
    """`/teams/{team_id}/secrets/{secret_id:<regex>}` -> the OpenAPI path and its parameters."""
    params = []
    for match in _PARAM_RE.finditer(pattern):
        name = match.group(1)
        if name == "team_id":
            schema = {"type": "string", "pattern": TEAM_REF_PATTERN}
            description = "The team's id or its slug."
        elif name == "name":
            schema, description = SECRET_NAME, "The secret's exact, case-sensitive name."
        elif name == "idp":
            schema, description = {"type": "string", "pattern": "^[a-z0-9]{1,32}$"}, \
                "The identity provider, as configured (`CVSM_OAUTH_<IDP>_*`), e.g. `github`."
        elif name == "version":
            schema, description = {"type": "string", "pattern": "^[1-9][0-9]{0,9}$"}, \
                "A version number of the secret (1 and up)."
        elif name == "token":
            schema, description = {"type": "string", "maxLength": shares.MAX_TOKEN_LENGTH}, \
                "The share token (`shr_...`)."
        else:
            schema, description = {"type": "string", "pattern": UUID_PATTERN}, ""
        param = {"name": name, "in": "path", "required": True, "schema": schema}
        if description:
            param["description"] = description
        params.append(param)
    return _PARAM_RE.sub(lambda m: "{%s}" % m.group(1), pattern), params


def _error(status: int) -> dict:
    out: dict[str, Any] = {"description": _ERROR_TEXT[status],
                           "headers": dict(_REQUEST_ID),
                           "content": {"application/json": {"schema": ref("Error")}}}
    if status in (429, 503):
        out["headers"].update(_RETRY_AFTER)
    return out


def _success(entry: Any) -> dict:
    if isinstance(entry, tuple):
        description, schema = entry
    else:
        description, schema = "Success.", entry
    content = schema if "content" in (schema or {}) else (
        {"application/json": {"schema": schema}} if schema is not None else None)
    out: dict[str, Any] = {"description": description, "headers": dict(_REQUEST_ID)}
    if content:
        out["content"] = content["content"] if "content" in content else content
    if schema and "headers" in schema:  # beside "content": the answer's own headers
        out["headers"].update(copy.deepcopy(schema["headers"]))
    return out


def operation(route: Route, spec: dict) -> dict:
    _, path_params = openapi_path(route.path)
    private = route.policy.needs_bearer
    op: dict[str, Any] = {"operationId": route.handler.__name__, "summary": spec["summary"]}
    if spec.get("description"):
        op["description"] = spec["description"]
    if spec.get("tags"):
        op["tags"] = list(spec["tags"])
    params = path_params + list(spec.get("query", ()))
    if params:
        op["parameters"] = copy.deepcopy(params)
    if "body" in spec:
        op["requestBody"] = {"required": spec.get("body_required", True),
                             "content": {"application/json": {"schema": request_body(spec["body"])}}}
    responses = {str(s): _success(e) for s, e in spec["responses"].items()}
    errors = set(spec.get("errors", ()))
    errors |= {500}
    if "body" in spec or params:
        errors |= {400}
    if "body" in spec:
        errors |= {413}
    if path_params:
        errors |= {404}
    if private:
        errors |= {401, 403}
        op["security"] = [{"bearerAuth": []}]
    else:
        op["security"] = []
    if route.policy.rate is not None:
        errors |= {429, 503}
    for status in sorted(errors):
        responses.setdefault(str(status), _error(status))
    op["responses"] = dict(sorted(responses.items()))
    return op


def specs(routes: list[Route]) -> dict[str, dict]:
    """Every handler module's `OPENAPI` entries, keyed by (module, entry name): the modules of
    the table's handlers, so a new module of routes needs no entry here."""
    modules = dict.fromkeys(sys.modules[r.handler.__module__] for r in routes)
    out: dict[str, dict] = {}
    for module in modules:
        for name, spec in getattr(module, "OPENAPI", {}).items():
            out[f"{module.__name__}.{name}"] = spec
    return out


def documented_routes(routes: list[Route]) -> list[Route]:
    """The routes the document describes: those that name an OpenAPI entry."""
    return [r for r in routes if r.openapi is not None]


def document(routes: list[Route]) -> dict:
    known = specs(routes)
    paths: dict[str, dict] = {}
    for route in documented_routes(routes):
        key = f"{route.handler.__module__}.{route.openapi}"
        if key not in known:
            raise LookupError(f"route {route.method} {route.path} ({key}) has no OPENAPI entry")
        path, _ = openapi_path(route.path)
        paths.setdefault(path, {})[route.method.lower()] = operation(route, known[key])
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "cvsm API",
            "version": __version__,
            "description": "The cvsm team secrets manager's REST API. Every error answer is "
                           "`{\"error\": \"<Indonesian message>\"}`; every answer carries "
                           "`X-Request-Id`. In a request body, an optional field sent as null is "
                           "the same as one left out, a number with a zero fraction (`24.0`) is "
                           "that integer, and fields the document does not list are ignored. Text "
                           "never holds the NUL character (400).",
        },
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": copy.deepcopy(COMPONENTS),
            "securitySchemes": {"bearerAuth": {
                "type": "http", "scheme": "bearer",
                "description": "A session JWT (from register or login) or an API token "
                               "(`cvsm_` and 64 hex digits).",
            }},
        },
    }


_CACHE: dict[str, bytes] = {}


async def openapi_json(request: web.Request) -> web.Response:
    if "doc" not in _CACHE:
        _CACHE["doc"] = json.dumps(document(request.app[ROUTE_TABLE])).encode()
    return web.Response(body=_CACHE["doc"], content_type="application/json",
                        headers={"Cache-Control": "no-cache"})


OPENAPI = {
    "openapi_json": {
        "summary": "This OpenAPI 3.1 document.",
        "tags": ["meta"],
        "responses": {200: {"type": "object", "required": ["openapi", "info", "paths"]}},
    },
}

