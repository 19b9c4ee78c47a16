"""Reading a request: bounded JSON bodies, path ids, query parameters, the actor and a
database connection. Every malformed input becomes a 400 (413 for a body over its limit, 404 for
a malformed id) with an Indonesian message, never a 500.
"""

from __future__ import annotations

import json
import uuid
from contextlib import AbstractAsyncContextManager
from typing import Any

from aiohttp import web

from .. import db, teams
from ..actor import Actor
from ..errors import BadRequest, NotFound, PayloadTooLarge
from ..inputs import bounded_int, check_text
from .state import ACTOR, APP_URL, POOL, SETTINGS

DEFAULT_BODY_LIMIT = 1024 * 1024  # 1 MiB: a 65,536-byte value even fully \u-escaped fits

NOT_JSON = "Isi permintaan bukan JSON yang valid"
NOT_OBJECT = "Isi permintaan harus berupa objek JSON"


def app_url(request: web.Request) -> str:
    """Base URL of the pages this server hands out (share links): `CVSM_APP_URL` when set, else
    the address `cvsm-server serve` listens on, else (an app started without the CLI, as in the
    tests) the origin this request came to."""
    return (request.app[SETTINGS].app_url or request.app.get(APP_URL)
            or str(request.url.origin()))


async def read_json(request: web.Request, *, max_bytes: int = DEFAULT_BODY_LIMIT,
                    optional: bool = False) -> dict[str, Any]:
    """The body as a JSON object, read at most `max_bytes` (413 beyond, never buffered whole).

    With `optional`, an empty body is an empty object."""
    length = request.content_length
    if length is not None and length > max_bytes:
        raise PayloadTooLarge()
    chunks, size = [], 0
    while True:
        chunk = await request.content.read(64 * 1024)
        if not chunk:
            break
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge()
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw and optional:
        return {}
    if not raw.strip():
        raise BadRequest(NOT_OBJECT)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: nesting deep enough to exhaust the parser is not JSON we accept.
        raise BadRequest(NOT_JSON) from None
    if not isinstance(body, dict):
        raise BadRequest(NOT_OBJECT)
    return body


def path_id(request: web.Request, name: str) -> uuid.UUID:
    """A UUID path parameter; anything else is a 404 (the resource cannot exist)."""
    try:
        return uuid.UUID(request.match_info[name])
    except (ValueError, KeyError):
        raise NotFound() from None


async def team_of(request: web.Request, conn: db.Connection) -> uuid.UUID:
    """The team named in the path by its id or its slug (404 for neither)."""
    return await teams.resolve(conn, request.match_info["team_id"])


def query_text(request: web.Request, name: str) -> str | None:
    """A text query parameter, checked like body text."""
    value = request.query.get(name)
    return None if value is None else check_text(name, value)


def query_int(request: web.Request, name: str, *, default: int | None, minimum: int = 0,
              maximum: int | None = None) -> int | None:
    """A whole-number query parameter (64-bit), clamped to `maximum`."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    return bounded_int(name, raw, minimum=minimum, maximum=maximum)


def actor(request: web.Request) -> Actor:
    return request[ACTOR]


def connection(request: web.Request) -> AbstractAsyncContextManager[db.Connection]:
    """A database connection for this request (503 when the database is unreachable)."""
    return db.connection(request.app[POOL])
