"""Bulk secret operations: bulk create, `.env` import, bulk delete and bulk move-env.

Create and import (Member or above) share one shape: at most 500 items; the plan quota is
checked first against the number of items, and a request that would pass `max_secrets` inserts
nothing (403); then each item succeeds or fails on its own, answered as
`results[{index, name, ok, id | error}]` with `summary{total, ok, failed}`. The whole request is
one transaction holding the team row lock (`secrets.check_quota`), so concurrent creates never
pass the quota, and its audit entry (counts only, never values) commits with the inserts.

Bulk delete (Admin or above) and move-env (Member or above) take ids; an id of another team, an
unknown id and a string that is not a UUID are all treated alike: skipped by delete, an item
error ("Secret tidak ditemukan") for move-env.
"""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from . import audit, db, dotenv, secrets, teams
from .errors import BadRequest, DomainError, PayloadTooLarge
from .inputs import field, parse_uuid, path_uuid, read_json, string_list
from .state import KEYRING, POOL, principal

MAX_ITEMS = 500
MAX_BULK_BODY = 40 * 1024 * 1024  # 500 values of 65,536 bytes, JSON-escaped
MAX_DOTENV_BYTES = 200 * 1024
# A JSON string escapes one byte to at most six (\u0000), so a body over this cannot carry
# content within MAX_DOTENV_BYTES.
MAX_DOTENV_BODY = 6 * MAX_DOTENV_BYTES + 64 * 1024
MAX_IDS_BODY = 1024 * 1024

TOO_MANY_ITEMS = f"Maksimal {MAX_ITEMS} item per permintaan"
ITEM_NOT_OBJECT = "Item harus berupa objek JSON"
DOTENV_TOO_LARGE = f"Isi file .env maksimal {MAX_DOTENV_BYTES // 1024} KB"


def _summary(results: list[dict]) -> dict:
    ok = sum(1 for r in results if r["ok"])
    return {"total": len(results), "ok": ok, "failed": len(results) - ok}


def _item_error(index: int, name: object, message: str, **extra: Any) -> dict:
    return {"index": index, "name": name if isinstance(name, str) else None, "ok": False,
            "error": message, **extra}


def _validate_item(item: object) -> dict:
    """The fields of one bulk item; raises BadRequest (reported as that item's error)."""
    if not isinstance(item, dict):
        raise BadRequest(ITEM_NOT_OBJECT)
    description = field(item, "description", str, required=False, default="")
    return {
        "name": secrets.check_name(field(item, "name", str)),
        "value": secrets.check_value(field(item, "value", str, allow_nul=True)),
        "environment": secrets.check_environment(field(item, "environment", str)),
        "kind": secrets.check_type(field(item, "type", str, required=False, default="credential")),
        "description": secrets.check_description(description),
    }


async def _insert(cur: db.Cursor, request: web.Request, team_id: uuid.UUID, index: int,
                  fields: dict, **extra: Any) -> dict:
    """Insert one validated item; a duplicate name becomes the item's error."""
    try:
        row = await secrets.insert_secret(cur, request.app[KEYRING], team_id,
                                          created_by=principal(request).user_id, **fields)
    except DomainError as exc:
        return _item_error(index, fields["name"], exc.message, **extra)
    return {"index": index, "id": str(row["id"]), "name": row["name"], "ok": True, **extra}


async def bulk_create(request: web.Request) -> web.Response:
    """POST .../secrets/bulk {items: [{name, value, environment, type?, description?}]}."""
    team_id = path_uuid(request, "team_id")
    body = await read_json(request, max_bytes=MAX_BULK_BODY)
    items = field(body, "items", list)
    if len(items) > MAX_ITEMS:
        raise BadRequest(TOO_MANY_ITEMS)
    results: list[dict] = []
    async with db.transaction(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, principal(request).user_id, teams.MEMBER)
        await secrets.check_quota(cur, team_id, len(items))
        for index, item in enumerate(items):
            try:
                fields = _validate_item(item)
            except DomainError as exc:
                results.append(_item_error(index, item.get("name") if isinstance(item, dict)
                                           else None, exc.message))
                continue
            results.append(await _insert(cur, request, team_id, index, fields))
        summary = _summary(results)
        await audit.record(cur, request, "bulk_create", "secret", team_id=team_id,
                           metadata=summary)
    return web.json_response({"results": results, "summary": summary})


async def import_dotenv(request: web.Request) -> web.Response:
    """POST .../secrets/bulk/import-dotenv {content, environment} — bulk create from `.env` text.

    Every non-blank, non-comment line is one item (see `dotenv`); each result also carries its
    `line`. `parsed` counts the KEY=VALUE lines, and the quota is checked against that count.
    """
    team_id = path_uuid(request, "team_id")
    body = await read_json(request, max_bytes=MAX_DOTENV_BODY)
    content = field(body, "content", str, allow_nul=True)  # values are stored encrypted
    environment = secrets.check_environment(field(body, "environment", str))
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadRequest("Kolom 'content' berisi karakter yang tidak valid") from None
    if size > MAX_DOTENV_BYTES:
        raise PayloadTooLarge(DOTENV_TOO_LARGE)
    entries = dotenv.parse(content)
    if len(entries) > MAX_ITEMS:
        raise BadRequest(TOO_MANY_ITEMS)
    parsed = dotenv.parsed_count(entries)
    results: list[dict] = []
    async with db.transaction(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, principal(request).user_id, teams.MEMBER)
        await secrets.check_quota(cur, team_id, parsed)
        for index, entry in enumerate(entries):
            if not entry.ok:
                results.append(_item_error(index, entry.name, entry.error, line=entry.line))
                continue
            fields = {"name": entry.name, "value": entry.value, "environment": environment,
                      "kind": "credential", "description": ""}
            try:
                secrets.check_value(entry.value)
            except DomainError as exc:
                results.append(_item_error(index, entry.name, exc.message, line=entry.line))
                continue
            results.append(await _insert(cur, request, team_id, index, fields, line=entry.line))
        summary = _summary(results)
        await audit.record(cur, request, "import", "secret", team_id=team_id,
                           metadata={"format": "dotenv", "environment": environment,
                                     "parsed": parsed, **summary})
    return web.json_response({"parsed": parsed, "results": results, "summary": summary})


def _ids(body: dict) -> list[uuid.UUID | None]:
    """The `ids` array (at most 500 strings); an entry that is not a UUID becomes None."""
    return [parse_uuid(i) for i in string_list(body, "ids", max_items=MAX_ITEMS)]


async def _lock_live(cur: db.Cursor, team_id: uuid.UUID, ids: list[uuid.UUID | None]) -> dict:
    """The team's live secrets among `ids`, locked in id order (so concurrent bulk calls cannot
    deadlock), keyed by id. Ids of other teams simply are not found."""
    wanted = sorted({str(i) for i in ids if i is not None})
    if not wanted:
        return {}
    rows = await db.fetchall(
        cur,
        """SELECT id, name, environment FROM secrets
           WHERE id = ANY(%s::uuid[]) AND team_id = %s AND deleted_at IS NULL
           ORDER BY id FOR UPDATE""",
        (wanted, team_id),
    )
    return {row["id"]: row for row in rows}


async def bulk_delete(request: web.Request) -> web.Response:
    """DELETE .../secrets/bulk {ids} -> {deleted: N}; Admin or above; foreign ids are skipped."""
    team_id = path_uuid(request, "team_id")
    body = await read_json(request, max_bytes=MAX_IDS_BODY)
    ids = _ids(body)
    async with db.transaction(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, principal(request).user_id, teams.ADMIN)
        live = await _lock_live(cur, team_id, ids)
        if live:
            await secrets.soft_delete(cur, list(live))
        await audit.record(cur, request, "bulk_delete", "secret", team_id=team_id,
                           metadata={"requested": len(ids), "deleted": len(live)})
    return web.json_response({"deleted": len(live)})


async def bulk_move_env(request: web.Request) -> web.Response:
    """POST .../secrets/bulk/move-env {ids, environment} -> the bulk result shape.

    A name that already exists in the target environment is that item's error; the rest move.
    An item already in the target environment succeeds without change.
    """
    team_id = path_uuid(request, "team_id")
    body = await read_json(request, max_bytes=MAX_IDS_BODY)
    ids = _ids(body)
    target = secrets.check_environment(field(body, "environment", str))
    raw_ids = body["ids"]
    results: list[dict] = []
    async with db.transaction(request.app[POOL]) as cur:
        await teams.require_role(cur, team_id, principal(request).user_id, teams.MEMBER)
        live = await _lock_live(cur, team_id, ids)
        for index, secret_id in enumerate(ids):
            row = live.get(secret_id) if secret_id is not None else None
            if row is None:
                results.append({"index": index, "id": raw_ids[index], "name": None, "ok": False,
                                "error": secrets.SECRET_NOT_FOUND})
                continue
            result = {"index": index, "id": str(secret_id), "name": row["name"]}
            if row["environment"] != target:
                await cur.execute("SAVEPOINT move_env")
                try:
                    await cur.execute(
                        "UPDATE secrets SET environment = %s, updated_at = now() WHERE id = %s",
                        (target, secret_id),
                    )
                except Exception as exc:
                    if not db.is_unique_violation(exc):
                        raise
                    await cur.execute("ROLLBACK TO SAVEPOINT move_env")
                    results.append({**result, "ok": False, "error": secrets.SECRET_EXISTS})
                    continue
                await cur.execute("RELEASE SAVEPOINT move_env")
                row["environment"] = target
            results.append({**result, "ok": True})
        summary = _summary(results)
        await audit.record(cur, request, "move_env", "secret", team_id=team_id,
                           metadata={"environment": target, **summary})
    return web.json_response({"results": results, "summary": summary})


def setup_routes(app: web.Application) -> None:
    """Register before `secrets.setup_routes`: `/secrets/bulk` must not match `/{secret_id}`."""
    base = "/api/v1/teams/{team_id}/secrets/bulk"
    app.router.add_post(base, bulk_create)
    app.router.add_delete(base, bulk_delete)
    app.router.add_post(base + "/import-dotenv", import_dotenv)
    app.router.add_post(base + "/move-env", bulk_move_env)
