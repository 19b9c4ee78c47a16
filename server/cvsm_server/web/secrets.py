"""Secret, bulk and export routes: parse, call `secrets` / `bulk`, shape the answer."""

from __future__ import annotations

from aiohttp import web

from ..secrets import bulk, dotenv, service as secrets, shell_export
from ..secrets import inputs as secret_inputs
from ..core.errors import BadRequest
from ..core.inputs import field, string_list
from ..core.timeutil import iso
from .schema import (BULK_ANSWER, ENVIRONMENT, ID_LIST, INT, OK, SECRET_NAME, SECRET_TYPE,
                     SECRET_VALUE, STRING, TIME, UUID, answer, obj, or_empty, query, ref)
from .request import actor, connection, path_id, team_of, query_int, query_text, read_json
from .state import KEYRING, RATE_CHARGE

# A JSON string escapes one byte to at most six (\u0000), so a body over this cannot carry
# content within the .env limit.
MAX_DOTENV_BODY = 6 * bulk.MAX_DOTENV_BYTES + 64 * 1024
MAX_IDS_BODY = 1024 * 1024


async def list_secrets(request: web.Request) -> web.Response:
    environment = query_text(request, "environment")
    search = query_text(request, "search")
    limit = query_int(request, "limit", default=None, minimum=1, maximum=1000)
    offset = query_int(request, "offset", default=0, minimum=0)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        rows, total = await secrets.list_secrets(conn, actor(request), team_id,
                                                 environment=environment, search=search,
                                                 limit=limit, offset=offset)
    return web.json_response({"secrets": [secrets.secret_json(r) for r in rows], "total": total})


async def read_secret(request: web.Request) -> web.Response:
    secret_id = path_id(request, "secret_id")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row, value = await secrets.read_secret(conn, actor(request), request.app[KEYRING],
                                               team_id, secret_id,
                                               charge=request.get(RATE_CHARGE))
    return _read_answer(row, value)


async def read_secret_by_name(request: web.Request) -> web.Response:
    environment = query_text(request, "environment") or "production"
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row, value = await secrets.read_secret_by_name(
            conn, actor(request), request.app[KEYRING], team_id, request.match_info["name"],
            environment, charge=request.get(RATE_CHARGE))
    return _read_answer(row, value)


def _read_answer(row: dict, value: str) -> web.Response:
    """A read's answer: the secret and its value; `e2e` (also in the secret) says the value is an
    end-to-end team's envelope, which the client opens."""
    secret = secrets.secret_json(row)
    return web.json_response({"secret": secret, "value": value, "e2e": secret["e2e"]})


async def create_secret(request: web.Request) -> web.Response:
    body = await read_json(request)
    item = secret_inputs.SecretInput.checked(
        name=field(body, "name", str),
        value=field(body, "value", str, allow_nul=True),
        environment=field(body, "environment", str),
        type=field(body, "type", str, required=False, default="credential"),
        description=field(body, "description", str, required=False, default=""),
        id=field(body, "id", str, required=False),
    )
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row = await secrets.create_secret(conn, actor(request), request.app[KEYRING], team_id, item)
    return web.json_response({"secret": secrets.secret_json(row)}, status=201)


async def update_secret(request: web.Request) -> web.Response:
    secret_id = path_id(request, "secret_id")
    body = await read_json(request)
    if "name" in body:
        raise BadRequest("Nama secret tidak dapat diubah")
    update = secret_inputs.SecretUpdate.checked(
        value=field(body, "value", str, required=False, allow_nul=True),
        type=field(body, "type", str, required=False),
        environment=field(body, "environment", str, required=False),
        description=field(body, "description", str, required=False),
    )
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row = await secrets.update_secret(conn, actor(request), request.app[KEYRING], team_id,
                                          secret_id, update)
    return web.json_response({"secret": secrets.secret_json(row)})


async def delete_secret(request: web.Request) -> web.Response:
    secret_id = path_id(request, "secret_id")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        await secrets.delete_secret(conn, actor(request), team_id, secret_id)
    return web.json_response({"ok": True})


async def read_version(request: web.Request) -> web.Response:
    secret_id = path_id(request, "secret_id")
    version = int(request.match_info["version"])  # the route's pattern: 1 to 10 digits
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row, values = await secrets.read_versions(conn, actor(request), request.app[KEYRING],
                                                  team_id, secret_id, [version])
    secret = secrets.secret_json(row)
    return web.json_response({"secret": secret, "version": version, "value": values[version],
                              "e2e": secret["e2e"]})


async def list_versions(request: web.Request) -> web.Response:
    secret_id = path_id(request, "secret_id")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        current, rows = await secrets.list_versions(conn, actor(request), team_id, secret_id)
    return web.json_response({
        "current_version": current,
        "versions": [{"version": r["version"], "created_at": iso(r["created_at"])} for r in rows],
    })


async def rollback(request: web.Request) -> web.Response:
    secret_id = path_id(request, "secret_id")
    body = await read_json(request)
    version = field(body, "version", int)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row = await secrets.rollback(conn, actor(request), request.app[KEYRING], team_id,
                                     secret_id, version)
    return web.json_response({"secret": secrets.secret_json(row)})


TEXT_EXPORTS = {"dotenv": dotenv.render, "shell": shell_export.render}
# On the JSON export of an end-to-end team, whose values are envelopes: `{NAME: value}` has no
# room for the `e2e` mark a read carries, and a client without the key must not take them as values.
E2E_HEADER = "Cvsm-E2E"


async def export(request: web.Request) -> web.StreamResponse:
    fmt = secret_inputs.check_export_format(request.query.get("format", "dotenv"))
    environment = query_text(request, "environment")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        values, end_to_end = await secrets.export_marked(conn, actor(request),
                                                         request.app[KEYRING], team_id,
                                                         environment=environment, fmt=fmt)
    if fmt == "json":
        return web.json_response(values, headers={E2E_HEADER: "1"} if end_to_end else None)
    return web.Response(text=TEXT_EXPORTS[fmt](values), content_type="text/plain", charset="utf-8")


def _bulk_answer(results: list[dict], summary: dict, **extra: object) -> web.Response:
    return web.json_response({**extra, "results": results, "summary": summary})


async def bulk_create(request: web.Request) -> web.Response:
    body = await read_json(request)
    items = field(body, "items", list)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        results, summary = await bulk.bulk_create(conn, actor(request), request.app[KEYRING],
                                                  team_id, items)
    return _bulk_answer(results, summary)


async def import_dotenv(request: web.Request) -> web.Response:
    body = await read_json(request)
    content = field(body, "content", str, allow_nul=True)  # values are stored encrypted
    environment = field(body, "environment", str)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        parsed, results, summary = await bulk.import_dotenv(
            conn, actor(request), request.app[KEYRING], team_id, content, environment)
    return _bulk_answer(results, summary, parsed=parsed)


async def bulk_delete(request: web.Request) -> web.Response:
    body = await read_json(request)
    ids = string_list(body, "ids", max_items=bulk.MAX_ITEMS)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        deleted = await bulk.bulk_delete(conn, actor(request), team_id, ids)
    return web.json_response({"deleted": deleted})


async def move_env(request: web.Request) -> web.Response:
    body = await read_json(request)
    ids = string_list(body, "ids", max_items=bulk.MAX_ITEMS)
    environment = field(body, "environment", str)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        results, summary = await bulk.move_env(conn, actor(request), team_id, ids, environment)
    return _bulk_answer(results, summary)


# --- OpenAPI: the operations above (`web.schema`), for `web.apidoc` ------------------------------

_SECRET = answer({"secret": ref("Secret")})
_READ = answer({"secret": ref("Secret"), "value": STRING,
                "e2e": {"type": "boolean", "description": "`value` is an envelope (docs/e2e.md)."}})
_ITEM = obj({"name": SECRET_NAME, "value": SECRET_VALUE, "environment": ENVIRONMENT,
             "type": {**SECRET_TYPE, "default": "credential"},
             "description": {"type": "string", "maxLength": secret_inputs.MAX_DESCRIPTION,
                             "default": ""},
             "id": {**UUID, "description": "End-to-end teams only, where it is required: the "
                                           "secret's id, chosen by the client, which sealed "
                                           "`value` for it (version 1)."}},
            ("name", "value", "environment"))
_E2E_READ = (" For an end-to-end team (`secret.e2e`), `value` is the envelope as stored "
             "(docs/e2e.md), which the client opens.")

_PLAN_QUOTAS = ("403 when the team's plan is full: `max_secrets` live secrets, or (Starter) a "
                "secret in a second active environment, one that holds none of the team's live "
                "secrets yet.")

OPENAPI = {
    "list_secrets": {
        "summary": "The team's secrets (never their values), one page.",
        "tags": ["secrets"],
        "query": [
            query("environment", ENVIRONMENT),
            query("search", STRING, "Names containing this text."),
            query("limit", {"type": "integer", "minimum": 1},
                  "Page size; above 1000 counts as 1000. Without it, every secret."),
            query("offset", {"type": "integer", "minimum": 0, "default": 0}),
        ],
        "responses": {200: answer({"secrets": {"type": "array", "items": ref("Secret")},
                                   "total": INT})},
    },
    "create_secret": {
        "summary": "Create a secret (Member); names are unique per environment.",
        "description": _PLAN_QUOTAS + " An end-to-end team takes the client's `id` and its "
                       "envelope as `value`, sealed for version 1 under the team's current key "
                       "version (409 otherwise); an `id` that any secret already has is a 409 of "
                       "its own (choose a new random id), the same whichever team holds it.",
        "tags": ["secrets"],
        "body": _ITEM,
        "responses": {201: _SECRET},
        "errors": [409],
    },
    "read_secret": {
        "summary": "A secret and its current value (audited as a read).",
        "description": _E2E_READ.strip(),
        "tags": ["secrets"],
        "responses": {200: _READ},
    },
    "read_secret_by_name": {
        "summary": "A secret and its current value, by exact name and environment.",
        "description": _E2E_READ.strip(),
        "tags": ["secrets"],
        "query": [query("environment", or_empty({**ENVIRONMENT, "default": "production"}))],
        "responses": {200: _READ},
    },
    "update_secret": {
        "summary": "Change a secret's value, type, environment or description (Member); a new "
                   "value makes a new version. The name cannot change.",
        "description": "A move to another environment obeys the plan's active environments "
                       "(403). An end-to-end team takes an envelope sealed for the next version "
                       "under the current key version (409 otherwise), and a move needs one "
                       "(the value is bound to its environment; 400 without).",
        "tags": ["secrets"],
        "body": obj({"value": SECRET_VALUE, "type": SECRET_TYPE, "environment": ENVIRONMENT,
                     "description": {"type": "string", "maxLength": secret_inputs.MAX_DESCRIPTION}}),
        "responses": {200: _SECRET},
        "errors": [409],
    },
    "delete_secret": {"summary": "Delete a secret (Admin).", "tags": ["secrets"],
                      "responses": {200: OK}},
    "read_version": {
        "summary": "One version's value of a secret, the current one or an earlier one "
                   "(audited as a read).",
        "description": "For an end-to-end team `value` is that version's envelope, under the key "
                       "version it names (docs/e2e.md): the client opens it, and rolls back by "
                       "saving it again as a new version. 404 for a version that does not exist.",
        "tags": ["secrets"],
        "responses": {200: answer({"secret": ref("Secret"), "version": INT, "value": STRING,
                                   "e2e": {"type": "boolean",
                                           "description": "`value` is an envelope."}})},
    },
    "list_versions": {
        "summary": "A secret's versions (never their values).",
        "tags": ["secrets"],
        "responses": {200: answer({
            "current_version": INT,
            "versions": {"type": "array",
                         "items": answer({"version": INT, "created_at": TIME})},
        })},
    },
    "rollback": {
        "summary": "Make an earlier version's value current again, as a new version (Member).",
        "description": "Refused for an end-to-end team (400): the client reads the old version "
                       "and saves it again as a new value.",
        "tags": ["secrets"],
        "body": obj({"version": {"type": "integer", "minimum": 1,
                                 "maximum": secret_inputs.MAX_VERSION}}, ("version",)),
        "responses": {200: _SECRET},
    },
    "export": {
        "summary": "Every value of the team or of one environment (audited).",
        "description": "Without an environment, a name present in several takes its production,"
                       " then staging, then development value. An end-to-end team exports JSON "
                       "only (its envelopes, by name; 400 for `dotenv` and `shell`, which the "
                       "client writes), and says so in the header `Cvsm-E2E: 1` (absent for a "
                       "plain team): a client without the team's key must not take the "
                       "envelopes for values.",
        "tags": ["secrets"],
        "query": [query("format", {"type": "string", "enum": list(secret_inputs.EXPORT_FORMATS),
                                   "default": "dotenv"},
                        "`dotenv`: a .env file, one `NAME='value'` or `NAME=\"value\"` line per "
                        "secret (a line break in a value is written `\\n`), for dotenv libraries; "
                        "a line-based reader finds one variable per line. `shell`: one "
                        "`export NAME=$'value'` line per secret, exact when sourced or evaluated "
                        "by bash or zsh. `json`: one object of names to values, for programs."),
                  query("environment", ENVIRONMENT)],
        "responses": {200: ("The values: a .env file, shell lines or a JSON object.", {"content": {
            "text/plain": {"schema": STRING},
            "application/json": {"schema": {"type": "object",
                                            "additionalProperties": STRING}},
        }, "headers": {E2E_HEADER: {
            "description": "`1` on the JSON export of an end-to-end team (its values are "
                           "envelopes); absent for a plain team.",
            "schema": {"type": "string", "enum": ["1"]}}}})},
    },
    "bulk_create": {
        "summary": f"Create up to {bulk.MAX_ITEMS} secrets, each on its own (Member).",
        "description": _PLAN_QUOTAS + " The whole request is refused; nothing is created.",
        "tags": ["bulk"],
        "body": obj({"items": {"type": "array", "maxItems": bulk.MAX_ITEMS, "items": {
            "description": "A secret to create, as the body of `POST .../secrets`; "
                           "an item that is not one fails alone, in `results` (`ok` false)."}}},
            ("items",)),
        "responses": {200: BULK_ANSWER},
    },
    "bulk_delete": {
        "summary": "Delete the listed secrets of the team (Admin).",
        "tags": ["bulk"],
        "body": obj({"ids": ID_LIST}, ("ids",)),
        "responses": {200: answer({"deleted": INT})},
    },
    "import_dotenv": {
        "summary": "Create secrets from a .env file's content (Member).",
        "description": _PLAN_QUOTAS + " The whole request is refused; nothing is created. "
                       "Refused for an end-to-end team (400): the client imports.",
        "tags": ["bulk"],
        "body": obj({"content": {"type": "string", "description":
                                 f"At most {bulk.MAX_DOTENV_BYTES} bytes in UTF-8."},
                     "environment": ENVIRONMENT}, ("content", "environment")),
        "responses": {200: answer({"parsed": INT, **BULK_ANSWER["properties"]})},
    },
    "move_env": {
        "summary": "Move the listed secrets to another environment (Member).",
        "description": "A move that would open an environment past the plan's active "
                       "environments (Starter: one) is refused whole (403). Refused for an "
                       "end-to-end team (400): each move needs a value sealed for its new "
                       "environment (`PUT` the secret).",
        "tags": ["bulk"],
        "body": obj({"ids": ID_LIST, "environment": ENVIRONMENT}, ("ids", "environment")),
        "responses": {200: BULK_ANSWER},
    },
}
