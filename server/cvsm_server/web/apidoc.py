"""The OpenAPI 3.1 document, generated from the route table and the schemas kept beside the
handlers.

Each handler module (`web.accounts`, `web.teams`, `web.secrets`, `web.shares`) ends with an
`OPENAPI` dict keyed by handler name: the operation's summary, query parameters, request body
and success answers. `document()` walks `routes.ROUTES` and, for every route whose handler is not
a page (outside `/api/`, or `UNDOCUMENTED`), takes that entry and adds what every operation shares: path parameters
(taken from the route's own pattern), the bearer credential on private routes, the error answers
(`{"error": string}`, 429 and 503 with `Retry-After`) and the `X-Request-Id` header. A route
whose handler has no entry is an error here, and the tests compare the document's paths with the
route table both ways, so the document cannot drift from what the server serves.

Entries for handlers that are not (yet) in the route table are allowed: only routes present in
`ROUTES` become paths.
"""

from __future__ import annotations

import copy
import re
import sys
from typing import Any

from .. import __version__, bulk, secrets, shares, teams, users
from ..inputs import CONTROL_CHARACTERS, INT64_MAX
from ..passwords import MAX_LENGTH as PASSWORD_MAX, MIN_LENGTH as PASSWORD_MIN

# The page routes (HTML and static files) and the docs page are not part of the JSON API.
# Routes outside /api (the share page, assets, the dashboard) are pages, never in the document.
UNDOCUMENTED = frozenset({"docs_page"})

UUID_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
SLUG_PATTERN = "^" + teams.SLUG_RE.pattern.removesuffix(r"\Z") + "$"
NAME_PATTERN = "^" + secrets.NAME_RE.pattern.removesuffix(r"\Z") + "$"
USERNAME_PATTERN = "^" + users.USERNAME_RE.pattern.removesuffix(r"\Z") + "$"
TEAM_REF_PATTERN = (f"^(?:{UUID_PATTERN.strip('^$')}|{SLUG_PATTERN.strip('^$')})$")

_PARAM_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::[^{}]*(?:\{[^{}]*\}[^{}]*)*)?\}")

# --- schema building blocks, used by the handler modules' OPENAPI dicts --------------------


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: dict[str, Any], required: tuple[str, ...] | list[str] = (), **extra: Any) -> dict:
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = list(required)
    out.update(extra)
    return out


def answer(properties: dict[str, Any]) -> dict:
    """A success body whose every listed property is always present."""
    return obj(properties, tuple(properties))


def nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def _char_class(chars: str) -> str:
    """`chars` as the inside of a regular-expression class, in runs (`\\x1c-\\x1f`)."""
    codes, out = sorted(map(ord, chars)), []
    while codes:
        first = last = codes.pop(0)
        while codes and codes[0] == last + 1:
            last = codes.pop(0)
        out.append(f"\\u{first:04x}" + (f"-\\u{last:04x}" if last > first else ""))
    return "".join(out)


# What Python's str.strip() removes (U+3000 is the last), spelled out: JSON Schema patterns are
# ECMA-262, whose \s is another set (it lacks U+0085 and has U+FEFF).
STRIPPED = _char_class("".join(chr(c) for c in range(0x3001) if chr(c).isspace()))


def trimmed(max_length: int, *, one_line: bool = False) -> dict:
    """Text the server trims before it checks it: 1 to `max_length` characters once the
    whitespace around it is gone; with `one_line`, no control character either
    (`inputs.check_line`)."""
    refused = CONTROL_CHARACTERS if one_line else "\\x00"
    inner, edge = f"[^{refused}]", f"[^{STRIPPED}{refused}]"
    rule = ", on one line (no control character, line or paragraph separator)" if one_line else ""
    return {"type": "string",
            "pattern": f"^[{STRIPPED}]*{edge}(?:{inner}{{0,{max_length - 2}}}{edge})?[{STRIPPED}]*$",
            "description": f"1 to {max_length} characters once trimmed{rule}."}


def one_line(max_length: int) -> dict:
    """A name kept on one line (`inputs.check_line`), trimmed first."""
    return trimmed(max_length, one_line=True)


def _accepts_null(schema: dict) -> bool:
    if schema.get("type") == "null" or "null" in (schema.get("type") or ()):
        return True
    return any(_accepts_null(s) for s in schema.get("anyOf", ()))


def _null_as_absent(prop: dict) -> dict:
    """`prop` accepting null too: an optional body field given as null is left out
    (`inputs.field`)."""
    if _accepts_null(prop):
        return prop
    if isinstance(prop.get("type"), str) and not {"$ref", "const", "anyOf", "oneOf", "format"} & set(prop):
        out = {**prop, "type": [prop["type"], "null"]}
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    return nullable(prop)


def request_body(schema: dict) -> dict:
    """A body schema as the server reads it: its optional properties also take null."""
    if schema.get("type") != "object" or "properties" not in schema:
        return schema
    keep = set(schema.get("required", ()))
    for alternative in schema.get("anyOf", ()):  # fields one of which is required
        keep |= set(alternative.get("required", ()))
    props = {name: prop if name in keep else _null_as_absent(prop)
             for name, prop in schema["properties"].items()}
    return {**schema, "properties": props}


STRING = {"type": "string"}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}
UUID = {"type": "string", "format": "uuid"}
TIME = {"type": "string", "format": "date-time"}
OK = answer({"ok": {"const": True}})
ENVIRONMENT = {"type": "string", "enum": list(secrets.ENVIRONMENTS)}
SECRET_TYPE = {"type": "string", "enum": list(secrets.TYPES)}
ROLE = {"type": "string", "enum": list(teams.RANK)}
SECRET_VALUE = {"type": "string", "maxLength": secrets.MAX_VALUE_BYTES,
                "description": f"At most {secrets.MAX_VALUE_BYTES} bytes in UTF-8."}
SECRET_NAME = {"type": "string", "pattern": NAME_PATTERN}
ID_LIST = {"type": "array", "items": STRING, "maxItems": bulk.MAX_ITEMS}


def or_empty(schema: dict) -> dict:
    """A query parameter that, given empty (`?to=`), is the same as left out."""
    return {"anyOf": [schema, {"type": "string", "maxLength": 0}],
            "description": "Empty is the same as left out."}


def query(name: str, schema: dict, description: str = "") -> dict:
    if schema.get("type") == "integer" and "maximum" not in schema:
        schema = {**schema, "maximum": INT64_MAX}  # `query_int` reads at most 64 bits
    out = {"name": name, "in": "query", "required": False, "schema": schema}
    if description:
        out["description"] = description
    return out


COMPONENTS: dict[str, dict] = {
    "Error": obj({"error": {"type": "string", "description": "An Indonesian message."}},
                 ("error",)),
    "User": answer({"id": UUID, "email": STRING, "username": STRING, "name": STRING}),
    "Team": obj({"id": UUID, "slug": STRING, "name": STRING, "plan": STRING,
                 "max_secrets": nullable(INT), "max_members": nullable(INT),
                 "max_environments": nullable(INT), "role": ROLE},
                ("id", "slug", "name", "plan", "max_secrets", "max_members", "max_environments")),
    "Member": answer({"user_id": UUID, "email": STRING, "username": STRING, "name": STRING,
                      "role": ROLE}),
    "Secret": answer({"id": UUID, "name": STRING, "type": SECRET_TYPE,
                      "environment": ENVIRONMENT, "description": STRING,
                      "version": {"type": "integer", "minimum": 1}, "created_at": TIME,
                      "updated_at": TIME}),
    "ApiToken": obj({
        "id": UUID, "name": STRING,
        "token_prefix": STRING,
        "expires_at": nullable(TIME),
        "allowed_ips": {"type": "array", "items": STRING},
        "failed_auth_count": INT,
        "locked_until": nullable(TIME),
        "last_ip": nullable(STRING),
        "last_user_agent": nullable(STRING),
        "last_used_at": nullable(TIME),
        "revoked_at": nullable(TIME),
        "created_at": TIME,
        # scoped tokens (0.4)
        "team_id": nullable(STRING),
        "environments": nullable({"type": "array", "items": ENVIRONMENT}),
        "read_only": BOOL,
    }, ("id", "name", "token_prefix", "expires_at", "allowed_ips", "failed_auth_count",
        "locked_until", "last_ip", "last_user_agent", "last_used_at", "revoked_at", "created_at")),
    "Share": answer({"id": UUID, "secret_id": UUID,
                     "max_views": {"type": "integer", "minimum": shares.MAX_VIEWS[0],
                                   "maximum": shares.MAX_VIEWS[1]},
                     "view_count": INT, "expires_at": TIME, "revoked_at": nullable(TIME),
                     "created_at": TIME}),
    "AuditEntry": answer({"id": UUID, "action": STRING, "resource": STRING,
                          "resource_id": nullable(STRING), "user_email": nullable(STRING),
                          "ip_address": nullable(STRING), "user_agent": nullable(STRING),
                          "metadata": {"type": "object"}, "created_at": TIME}),
    "BulkResult": obj({"index": INT, "id": STRING, "line": INT, "name": nullable(STRING), "ok": BOOL,
                       "error": STRING}, ("index", "ok")),
    "BulkSummary": answer({"total": INT, "ok": INT, "failed": INT}),
}

BULK_ANSWER = answer({"results": {"type": "array", "items": ref("BulkResult")},
                      "summary": ref("BulkSummary")})

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
    return out


def operation(method: str, path: str, handler_name: str, spec: dict) -> dict:
    from .middleware import OPEN_ROUTES, is_private_path

    _, path_params = openapi_path(path)
    private = is_private_path(path)
    op: dict[str, Any] = {"operationId": handler_name, "summary": spec["summary"]}
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
    if path not in OPEN_ROUTES:
        errors |= {429, 503}
    for status in sorted(errors):
        responses.setdefault(str(status), _error(status))
    op["responses"] = dict(sorted(responses.items()))
    return op


def specs() -> dict[str, dict]:
    """Every handler module's `OPENAPI` entries, keyed by (module, handler name): the modules
    of the route table's handlers, so a new module of routes needs no entry here."""
    from .routes import ROUTES
    modules = dict.fromkeys(sys.modules[r.handler.__module__] for r in ROUTES)
    out: dict[str, dict] = {}
    for module in modules:
        for name, spec in getattr(module, "OPENAPI", {}).items():
            out[f"{module.__name__}.{name}"] = spec
    return out


def documented_routes() -> list[tuple[str, str, Any]]:
    """(method, route pattern, handler) of every route the document describes."""
    from .routes import ROUTES
    return [(r.method, r.path, r.handler) for r in ROUTES
            if r.path.startswith("/api/") and r.handler.__name__ not in UNDOCUMENTED]


def document() -> dict:
    known = specs()
    paths: dict[str, dict] = {}
    for method, pattern, handler in documented_routes():
        key = f"{handler.__module__}.{handler.__name__}"
        if key not in known:
            raise LookupError(f"route {method} {pattern} ({key}) has no OPENAPI entry")
        path, _ = openapi_path(pattern)
        paths.setdefault(path, {})[method.lower()] = operation(method, pattern,
                                                               handler.__name__, known[key])
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


async def openapi_json(request: Any) -> Any:
    from aiohttp import web
    import json
    if "doc" not in _CACHE:
        _CACHE["doc"] = json.dumps(document()).encode()
    return web.Response(body=_CACHE["doc"], content_type="application/json",
                        headers={"Cache-Control": "no-cache"})


OPENAPI = {
    "openapi_json": {
        "summary": "This OpenAPI 3.1 document.",
        "tags": ["meta"],
        "responses": {200: {"type": "object", "required": ["openapi", "info", "paths"]}},
    },
}

# Password rule, for the accounts module's entries.
PASSWORD = {"type": "string", "minLength": PASSWORD_MIN, "maxLength": PASSWORD_MAX}
