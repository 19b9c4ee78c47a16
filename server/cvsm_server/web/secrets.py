"""Secret, bulk and export routes: parse, call `secrets` / `bulk`, shape the answer."""

from __future__ import annotations

from aiohttp import web

from .. import bulk, dotenv, secrets
from ..errors import BadRequest
from ..inputs import field, string_list
from ..timeutil import iso
from .middleware import counts_own_rate_limit
from .request import actor, connection, path_id, team_of, query_int, query_text, read_json
from .state import KEYRING, RATE_CHARGE

MAX_BULK_BODY = 40 * 1024 * 1024  # 500 values of 65,536 bytes, JSON-escaped
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


@counts_own_rate_limit
async def read_secret(request: web.Request) -> web.Response:
    secret_id = path_id(request, "secret_id")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row, value = await secrets.read_secret(conn, actor(request), request.app[KEYRING],
                                               team_id, secret_id,
                                               charge=request.get(RATE_CHARGE))
    return web.json_response({"secret": secrets.secret_json(row), "value": value})


@counts_own_rate_limit
async def read_secret_by_name(request: web.Request) -> web.Response:
    environment = query_text(request, "environment") or "production"
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row, value = await secrets.read_secret_by_name(
            conn, actor(request), request.app[KEYRING], team_id, request.match_info["name"],
            environment, charge=request.get(RATE_CHARGE))
    return web.json_response({"secret": secrets.secret_json(row), "value": value})


async def create_secret(request: web.Request) -> web.Response:
    body = await read_json(request)
    item = secrets.SecretInput.checked(
        name=field(body, "name", str),
        value=field(body, "value", str, allow_nul=True),
        environment=field(body, "environment", str),
        type=field(body, "type", str, required=False, default="credential"),
        description=field(body, "description", str, required=False, default=""),
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
    update = secrets.SecretUpdate.checked(
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
    body = await read_json(request, max_bytes=4096)
    version = field(body, "version", int)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row = await secrets.rollback(conn, actor(request), request.app[KEYRING], team_id,
                                     secret_id, version)
    return web.json_response({"secret": secrets.secret_json(row)})


async def export(request: web.Request) -> web.StreamResponse:
    fmt = request.query.get("format", "dotenv")
    if fmt not in ("dotenv", "json"):
        raise BadRequest("Format ekspor harus dotenv atau json")
    environment = query_text(request, "environment")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        values = await secrets.export(conn, actor(request), request.app[KEYRING], team_id,
                                      environment=environment, fmt=fmt)
    if fmt == "json":
        return web.json_response(values)
    return web.Response(text=dotenv.render(values), content_type="text/plain", charset="utf-8")


def _bulk_answer(results: list[dict], summary: dict, **extra: object) -> web.Response:
    return web.json_response({**extra, "results": results, "summary": summary})


async def bulk_create(request: web.Request) -> web.Response:
    body = await read_json(request, max_bytes=MAX_BULK_BODY)
    items = field(body, "items", list)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        results, summary = await bulk.bulk_create(conn, actor(request), request.app[KEYRING],
                                                  team_id, items)
    return _bulk_answer(results, summary)


async def import_dotenv(request: web.Request) -> web.Response:
    body = await read_json(request, max_bytes=MAX_DOTENV_BODY)
    content = field(body, "content", str, allow_nul=True)  # values are stored encrypted
    environment = field(body, "environment", str)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        parsed, results, summary = await bulk.import_dotenv(
            conn, actor(request), request.app[KEYRING], team_id, content, environment)
    return _bulk_answer(results, summary, parsed=parsed)


async def bulk_delete(request: web.Request) -> web.Response:
    body = await read_json(request, max_bytes=MAX_IDS_BODY)
    ids = string_list(body, "ids", max_items=bulk.MAX_ITEMS)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        deleted = await bulk.bulk_delete(conn, actor(request), team_id, ids)
    return web.json_response({"deleted": deleted})


async def move_env(request: web.Request) -> web.Response:
    body = await read_json(request, max_bytes=MAX_IDS_BODY)
    ids = string_list(body, "ids", max_items=bulk.MAX_ITEMS)
    environment = field(body, "environment", str)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        results, summary = await bulk.move_env(conn, actor(request), team_id, ids, environment)
    return _bulk_answer(results, summary)
