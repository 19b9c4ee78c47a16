"""Audit export (CSV or JSON lines, streamed), chain verification and on-demand checkpoints:
parse, call `audit` / `audit_chain`, shape the answer."""

from __future__ import annotations

import uuid
from datetime import datetime

from aiohttp import web

from ..audit import log as audit, chain as audit_chain
from .. import db
from ..core.actor import Actor
from ..core.timeutil import now
from .schema import BOOL, INT, STRING, answer, nullable, obj, or_empty, query
from .request import actor, connection, team_of
from .state import CHECKPOINT_SIGNER

_CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson; charset=utf-8"}
# Rows gathered before each write to the client.
_CHUNK_ROWS = 200


async def export_audit(request: web.Request) -> web.StreamResponse:
    fmt = audit.check_export_format(request.query.get("format"))
    start, end = audit.parse_export_range(request.query.get("from"), request.query.get("to"))
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        return await stream_export(request, conn, actor(request), team_id, fmt, start, end)


async def stream_export(request: web.Request, conn: db.Connection, caller: Actor,
                        team_id: uuid.UUID, fmt: str, start: datetime | None,
                        end: datetime | None) -> web.StreamResponse:
    """The export as a streamed download (`audit.start_export` checks and records it first):
    the API's route and the dashboard's button (`web.pages.audit`) both answer with it."""
    slug = await audit.start_export(conn, caller, team_id, fmt, start, end)
    response = web.StreamResponse(headers={
        "Content-Type": _CONTENT_TYPES[fmt],
        "Content-Disposition": (f'attachment; filename="cvsm-audit-{slug}-'
                                f'{now().strftime("%Y%m%dT%H%M%SZ")}.{fmt}"'),
        "Cache-Control": "no-store",
    })
    await response.prepare(request)
    line = audit.csv_row if fmt == "csv" else audit.jsonl_row
    chunk: list[str] = [audit.csv_header()] if fmt == "csv" else []
    async for row in audit.export_rows(conn, team_id, start, end):
        chunk.append(line(row))
        if len(chunk) >= _CHUNK_ROWS:
            await response.write("".join(chunk).encode())
            chunk = []
    if chunk:
        await response.write("".join(chunk).encode())
    await response.write_eof()
    return response


async def verify_audit(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        verdict = await audit.verify_team(conn, actor(request), team_id,
                                          request.app[CHECKPOINT_SIGNER])
    return web.json_response(verdict.as_json())


async def create_audit_checkpoint(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row = await audit.checkpoint_team(conn, actor(request), team_id,
                                          request.app[CHECKPOINT_SIGNER])
    return web.json_response(
        {"checkpoint": None if row is None else audit_chain.checkpoint_json(row)}, status=201)


# --- OpenAPI ---------------------------------------------------------------------------------

_CHECKPOINT = nullable(answer({"seq": INT, "hash": STRING, "kind": STRING, "signed_at": STRING,
                               "key_id": STRING, "public_key": STRING}))

OPENAPI = {
    "export_audit": {
        "summary": "The team's audit log as a CSV or JSON-lines download, streamed (Admin; "
                   "audited as `audit_export`).",
        "description": "Entries in chain order (`seq`), each with its chain fields (`seq`, "
                       "`prev_hash`, `hash`); every entry committed before the call is sealed "
                       "into the chain first. CSV cells starting with =, +, -, @, tab or CR "
                       "are prefixed with ' so spreadsheets show them as text.",
        "tags": ["audit"],
        "query": [
            query("format", or_empty({"type": "string", "enum": list(audit.EXPORT_FORMATS),
                                      "default": "csv"})),
            query("from", or_empty({"type": "string", "format": "date-time"}),
                  "Entries at or after this time."),
            query("to", or_empty({"type": "string", "format": "date-time"}),
                  "Entries before this time (after `from`, or 400)."),
        ],
        "responses": {200: ("The entries, as a file download.", {"content": {
            "text/csv": {"schema": STRING},
            "application/x-ndjson": {"schema": STRING},
        }})},
    },
    "verify_audit": {
        "summary": "Verify the team's audit hash chain and its signed checkpoints (Admin).",
        "description": "Every entry committed before the call is sealed into the chain first, "
                       "then the chain is walked from its start.",
        "tags": ["audit"],
        "responses": {200: answer({
            "ok": BOOL, "checked": INT,
            "first_broken": nullable(obj({"seq": INT, "reason": STRING}, ("seq", "reason"))),
            "checkpoint": _CHECKPOINT,
        })},
    },
    "create_audit_checkpoint": {
        "summary": "Sign a checkpoint of the team's audit chain head now (Admin).",
        "tags": ["audit"],
        "responses": {201: answer({"checkpoint": _CHECKPOINT})},
    },
}
