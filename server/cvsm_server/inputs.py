"""Request input: bounded JSON bodies, typed fields, path ids and query numbers.

Every malformed input becomes a 400 (or 413 for a body over its limit, or 404 for a malformed
id) with an Indonesian message naming the field, never a 500.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from aiohttp import web

from .errors import BadRequest, NotFound, PayloadTooLarge

DEFAULT_BODY_LIMIT = 1024 * 1024  # 1 MiB: a 65,536-byte value even fully \u-escaped fits


async def read_json(request: web.Request, *, max_bytes: int = DEFAULT_BODY_LIMIT) -> dict[str, Any]:
    """The request body as a JSON object, read at most `max_bytes` (413 beyond, never buffered)."""
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
    if not raw.strip():
        raise BadRequest("Isi permintaan harus berupa objek JSON")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("Isi permintaan bukan JSON yang valid") from None
    if not isinstance(body, dict):
        raise BadRequest("Isi permintaan harus berupa objek JSON")
    return body


_MISSING = object()


def check_text(name: str, value: str, *, allow_nul: bool = False) -> str:
    """400 for text PostgreSQL cannot store or UTF-8 cannot encode: NUL characters (unless the
    text is only ever stored encrypted) and unpaired surrogates (JSON allows `\ud800`)."""
    if not allow_nul and "\x00" in value:
        raise BadRequest(f"Kolom '{name}' berisi karakter yang tidak valid")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"Kolom '{name}' berisi karakter yang tidak valid") from None
    return value


def field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], *, required: bool = True,
          default: Any = None, allow_nul: bool = False) -> Any:
    """`body[name]` checked against `kind`; 400 when missing (if required) or of the wrong type.

    Text is also checked with `check_text`: `allow_nul` is for values stored only encrypted."""
    value = body.get(name, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise BadRequest(f"Kolom '{name}' wajib diisi")
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int in Python; JSON true is never a number here.
    if isinstance(value, bool) and bool not in kinds:
        raise BadRequest(f"Kolom '{name}' memiliki tipe yang salah")
    if not isinstance(value, kinds):
        raise BadRequest(f"Kolom '{name}' memiliki tipe yang salah")
    if isinstance(value, str):
        check_text(name, value, allow_nul=allow_nul)
    return value


def string_list(body: dict[str, Any], name: str, *, required: bool = True, max_items: int = 500) -> list[str]:
    items = field(body, name, list, required=required, default=[])
    if len(items) > max_items:
        raise BadRequest(f"Kolom '{name}' berisi lebih dari {max_items} item")
    if not all(isinstance(i, str) for i in items):
        raise BadRequest(f"Kolom '{name}' harus berupa daftar teks")
    for item in items:
        check_text(name, item)
    return items


def query_text(request: web.Request, name: str) -> str | None:
    """A text query parameter, checked like body text."""
    value = request.query.get(name)
    return None if value is None else check_text(name, value)


def path_uuid(request: web.Request, name: str) -> uuid.UUID:
    """A UUID path parameter; anything else is a 404 (the resource cannot exist)."""
    try:
        return uuid.UUID(request.match_info[name])
    except (ValueError, KeyError):
        raise NotFound() from None


def parse_uuid(value: Any) -> uuid.UUID | None:
    if not isinstance(value, str):
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def query_int(request: web.Request, name: str, *, default: int | None, minimum: int = 0,
              maximum: int | None = None) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"Parameter '{name}' harus berupa bilangan bulat") from None
    if value < minimum:
        raise BadRequest(f"Parameter '{name}' minimal {minimum}")
    if maximum is not None and value > maximum:
        value = maximum
    return value
