"""Reading a request: bounded JSON bodies, the pages' forms and query strings, path ids, query
parameters, the actor and a database connection. Every malformed input becomes a 400 (413 for a
body over its limit, 404 for a malformed id) with an Indonesian message, never a 500.
"""

from __future__ import annotations

import io
import uuid
from contextlib import AbstractAsyncContextManager
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import BodyPartReader, hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from multidict import MultiDict, MultiDictProxy

from .. import db
from ..teams import service as teams
from ..core.actor import Actor
from ..core.errors import BadRequest, NotFound, PayloadTooLarge
from ..core.inputs import bounded_int, check_text
from . import jsonbody
from .policy import policy_of
from .state import ACTOR, APP_URL, POOL, SETTINGS

NOT_OBJECT = "Isi permintaan harus berupa objek JSON"

FORM_TOO_LARGE = "Formulir terlalu besar"
FORM_INVALID = "Isi formulir tidak valid"
FORM_NOT_UTF8 = "Formulir harus dikirim dalam UTF-8"
FORM_TYPE = "Formulir harus application/x-www-form-urlencoded atau multipart/form-data"
QUERY_INVALID = "Parameter URL tidak valid"
MAX_FORM_FIELDS = 1000
_UTF8 = ("utf-8", "utf8")


def app_url(request: web.Request) -> str:
    """Base URL of the pages this server hands out (share links): `CVSM_APP_URL` when set, else
    the address `cvsm-server serve` listens on, else (an app started without the CLI, as in the
    tests) the origin this request came to."""
    return (request.app[SETTINGS].app_url or request.app.get(APP_URL)
            or str(request.url.origin()))


async def read_bytes(request: web.Request) -> bytes:
    """The body as bytes, read at most the route's cap (413 beyond, whatever its declared
    length says): for a body that must be checked as sent (a signed webhook)."""
    max_bytes = policy_of(request).body
    length = request.content_length
    if length is not None and length > max_bytes:
        raise PayloadTooLarge()
    chunks, size = [], 0
    while chunk := await request.content.read(64 * 1024):
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge()
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: web.Request, *, optional: bool = False) -> dict[str, Any]:
    """The body as a JSON object, read at most the route's cap (its `body` in `web.routes`;
    413 beyond, never buffered whole) and parsed a step at a time (`web.jsonbody`).

    With `optional`, an empty body is an empty object."""
    max_bytes = policy_of(request).body
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
    del chunks
    if not raw and optional:
        return {}
    if not raw.strip():
        raise BadRequest(NOT_OBJECT)
    body = await jsonbody.loads(raw, cap=max_bytes)
    if not isinstance(body, dict):
        raise BadRequest(NOT_OBJECT)
    return body


FormValue = str | bytes | web.FileField


async def read_form(request: web.Request, *, max_bytes: int,
                    too_large: str = FORM_TOO_LARGE) -> MultiDictProxy[FormValue]:
    """The posted form of a page, read at most `max_bytes` (400 `too_large` beyond).

    URL-encoded or multipart, in UTF-8 only: invalid UTF-8 (raw or %-escaped), another or an
    unknown charset, multipart without a boundary or broken, and any text with a NUL character
    (PostgreSQL cannot store one) are each a 400 with a message, as the JSON API answers such
    a body. Text fields are `str`; a multipart file is a `web.FileField`, another non-text part
    `bytes`. An empty body is an empty form."""
    max_bytes = min(max_bytes, policy_of(request).body)  # never above the route's cap
    length = request.content_length
    if length is not None and length > max_bytes:
        raise BadRequest(too_large)
    if request.charset is not None and request.charset.lower() not in _UTF8:
        raise BadRequest(FORM_NOT_UTF8)
    content_type = request.content_type
    if content_type == "multipart/form-data":
        form = await _read_multipart(request, max_bytes, too_large)
    else:
        raw = await _read_bounded(request, max_bytes, too_large)
        if not raw.strip():
            form = MultiDict()
        elif content_type != "application/x-www-form-urlencoded":
            raise BadRequest(FORM_TYPE)
        else:
            form = _parse_urlencoded(raw)
    for name, value in form.items():
        if isinstance(value, str):
            check_text(name, value)
    return MultiDictProxy(form)


async def _read_bounded(request: web.Request, max_bytes: int, too_large: str) -> bytes:
    chunks, size = [], 0
    while chunk := await request.content.read(64 * 1024):
        size += len(chunk)
        if size > max_bytes:
            raise BadRequest(too_large)
        chunks.append(chunk)
    return b"".join(chunks)


def _parse_urlencoded(raw: bytes) -> MultiDict[FormValue]:
    try:
        pairs = parse_qsl(raw.decode("utf-8").rstrip(), keep_blank_values=True, encoding="utf-8",
                          errors="strict", max_num_fields=MAX_FORM_FIELDS)
    except UnicodeDecodeError:
        raise BadRequest(FORM_NOT_UTF8) from None
    except ValueError:  # more fields than MAX_FORM_FIELDS
        raise BadRequest(FORM_INVALID) from None
    for name, _ in pairs:
        _check_field_name(name)
    return MultiDict(pairs)


def _check_field_name(name: str) -> None:
    # Never echoed back: the message names no field. A multipart part's name is read from its
    # header, where bytes that are not UTF-8 come as lone surrogates.
    if "\x00" in name or not name.isascii() and not _encodes(name):
        raise BadRequest(FORM_INVALID)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def _read_multipart(request: web.Request, max_bytes: int,
                          too_large: str) -> MultiDict[FormValue]:
    """Each part read in chunks, the whole body (headers included) bounded by `max_bytes`."""
    form: MultiDict[FormValue] = MultiDict()
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader) or part.name is None \
                    or hdrs.CONTENT_ENCODING in part.headers or len(form) >= MAX_FORM_FIELDS:
                raise BadRequest(FORM_INVALID)
            _check_field_name(part.name)
            data = bytearray()
            while chunk := await part.read_chunk():
                data.extend(chunk)
                if request.content.total_bytes > max_bytes:
                    raise BadRequest(too_large)
            value = b"".join([d async for d in part.decode_iter(bytes(data))])
            part_type = part.headers.get(hdrs.CONTENT_TYPE)
            if part.filename:
                form.add(part.name, web.FileField(part.name, part.filename, io.BytesIO(value),
                                                  part_type or "application/octet-stream",
                                                  part.headers))
            elif part_type is None or part_type.startswith("text/"):
                if part.get_charset(default="utf-8").lower() not in _UTF8:
                    raise BadRequest(FORM_NOT_UTF8)
                form.add(part.name, value.decode("utf-8"))
            else:
                form.add(part.name, value)
        if request.content.total_bytes > max_bytes:
            raise BadRequest(too_large)
    except UnicodeDecodeError:
        raise BadRequest(FORM_NOT_UTF8) from None
    except (ValueError, AssertionError, RuntimeError, LookupError, HttpProcessingError):
        # No boundary, a broken boundary or part header (`InvalidHeader`, an HTTP parser
        # error), a nested multipart, an unknown transfer encoding: aiohttp's reader says so
        # with these.
        raise BadRequest(FORM_INVALID) from None
    return form


def check_query(request: web.Request) -> None:
    """400 for a query string a page cannot use: invalid UTF-8 in its %-escapes or a NUL
    character in any parameter (yarl would hand these on as U+FFFD and NUL)."""
    raw = request.rel_url.raw_query_string
    if not raw:
        return
    try:
        pairs = parse_qsl(raw, keep_blank_values=True, encoding="utf-8", errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise BadRequest(QUERY_INVALID) from None
    if any("\x00" in name or "\x00" in value for name, value in pairs):
        raise BadRequest(QUERY_INVALID)


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
