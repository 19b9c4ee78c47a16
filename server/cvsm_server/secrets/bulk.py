"""Bulk secret operations: bulk create, `.env` import, bulk delete and bulk move-env.

Create and import (Member or above) share one shape: at most 500 items; the plan quota is
checked first against the number of items, and a request that would pass `max_secrets`, or
put secrets into more environments than the plan allows, inserts nothing (403); then each item
succeeds or fails on its own, answered as `results[{index, name, ok, id | error}]` with
`summary{total, ok, failed}`. The whole operation is one transaction holding the team row lock
(`secret_queries.check_quota`), so concurrent creates never pass the quota, and its audit entry (counts
only, never values) commits with the inserts.
Items are checked by the same rule as a single create (`secret_inputs.SecretInput`). An end-to-end
team's items carry their client-chosen `id` and envelope, as a single create does; `.env` import
and move-env need the plaintext there, so they are refused (400) and done in the client.

Bulk delete (Admin or above) and move-env (Member or above) take ids; an id of another team, an
unknown id and a string that is not a UUID are all treated alike: skipped by delete, an item
error ("Secret tidak ditemukan") for move-env. A move that would open an environment past the
plan's limit moves nothing (403).
"""

from __future__ import annotations

import uuid
from typing import Any

from ..core.actor import Actor
from ..core.errors import BadRequest, DomainError, PayloadTooLarge
from ..core.inputs import field, parse_uuid
from ..crypto.sealing import Keyring
from ..audit import log as audit
from ..e2e import service as e2e
from ..teams import roles, service as teams
from .. import db
from . import dotenv, service as secrets, queries as secret_queries, inputs as secret_inputs

MAX_ITEMS = 500
MAX_DOTENV_BYTES = 200 * 1024

TOO_MANY_ITEMS = f"Maksimal {MAX_ITEMS} item per permintaan"
ITEM_NOT_OBJECT = "Item harus berupa objek JSON"
DOTENV_TOO_LARGE = f"Isi file .env maksimal {MAX_DOTENV_BYTES // 1024} KB"


def summary_of(results: list[dict]) -> dict:
    ok = sum(1 for r in results if r["ok"])
    return {"total": len(results), "ok": ok, "failed": len(results) - ok}


def _item_error(index: int, name: object, message: str, **extra: Any) -> dict:
    return {"index": index, "name": name if isinstance(name, str) else None, "ok": False,
            "error": message, **extra}


def item_input(item: object) -> secret_inputs.SecretInput:
    """One bulk item as a SecretInput; raises BadRequest (reported as that item's error)."""
    if not isinstance(item, dict):
        raise BadRequest(ITEM_NOT_OBJECT)
    return secret_inputs.SecretInput.checked(
        name=field(item, "name", str),
        value=field(item, "value", str, allow_nul=True),
        environment=field(item, "environment", str),
        type=field(item, "type", str, required=False, default="credential"),
        description=field(item, "description", str, required=False, default=""),
        id=field(item, "id", str, required=False),
    )


async def _insert(cur: db.Cursor, actor: Actor, keyring: Keyring, team: dict,
                  index: int, item: secret_inputs.SecretInput, **extra: Any) -> dict:
    """Insert one item; a duplicate name (or a refused envelope) becomes the item's error."""
    try:
        row = await secret_queries.insert_secret(cur, actor, keyring, team, item)
    except DomainError as exc:
        return _item_error(index, item.name, exc.message, **extra)
    return {"index": index, "id": str(row["id"]), "name": row["name"], "ok": True, **extra}


async def bulk_create(conn: db.Connection, actor: Actor, keyring: Keyring, team_id: uuid.UUID,
                      items: list[object]) -> tuple[list[dict], dict]:
    """Create each of `items` ({name, value, environment, type?, description?}) on its own."""
    if len(items) > MAX_ITEMS:
        raise BadRequest(TOO_MANY_ITEMS)
    checked: list[secret_inputs.SecretInput | DomainError] = []
    for raw in items:
        try:
            checked.append(item_input(raw))
        except DomainError as exc:
            checked.append(exc)
    results: list[dict] = []
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.MEMBER)
        for raw in items:  # a scoped token writes only inside its environments: all or nothing
            if isinstance(raw, dict) and isinstance(raw.get("environment"), str):
                roles.check_environment_write(actor, raw["environment"])
        team = await secret_queries.check_quota(cur, team_id, len(items), {
            item.environment for item in checked if isinstance(item, secret_inputs.SecretInput)})
        for index, (raw, item) in enumerate(zip(items, checked)):
            if isinstance(item, DomainError):
                results.append(_item_error(index, raw.get("name") if isinstance(raw, dict)
                                           else None, item.message))
                continue
            results.append(await _insert(cur, actor, keyring, team, index, item))
        summary = summary_of(results)
        await audit.record(cur, actor, "bulk_create", "secret", team_id=team_id, metadata=summary)
    return results, summary


async def import_dotenv(conn: db.Connection, actor: Actor, keyring: Keyring, team_id: uuid.UUID,
                        content: str, environment: str) -> tuple[int, list[dict], dict]:
    """Bulk create from `.env` text: every entry that is not imported is an item error naming its
    line; `parsed` counts the KEY=VALUE entries, and the quota is checked against that count."""
    environment = secret_inputs.check_environment(environment)
    roles.check_environment_write(actor, environment)
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
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.MEMBER)
        if await e2e.key_version_of(cur, team_id) is not None:
            raise BadRequest(secret_inputs.E2E_IMPORT)
        team = await secret_queries.check_quota(cur, team_id, parsed, [environment] if parsed else [])
        for index, entry in enumerate(entries):
            if not entry.ok:
                results.append(_item_error(index, entry.name, entry.error, line=entry.line))
                continue
            try:
                item = secret_inputs.SecretInput.checked(name=entry.name, value=entry.value,
                                                   environment=environment)
            except DomainError as exc:
                results.append(_item_error(index, entry.name, exc.message, line=entry.line))
                continue
            results.append(await _insert(cur, actor, keyring, team, index, item,
                                         line=entry.line))
        summary = summary_of(results)
        await audit.record(cur, actor, "import", "secret", team_id=team_id,
                           metadata={"format": "dotenv", "environment": environment,
                                     "parsed": parsed, **summary})
    return parsed, results, summary


def _uuids(raw_ids: list[str]) -> list[uuid.UUID | None]:
    """Each id as a UUID; an entry that is not a UUID becomes None."""
    if len(raw_ids) > MAX_ITEMS:
        raise BadRequest(TOO_MANY_ITEMS)
    return [parse_uuid(i) for i in raw_ids]


async def _lock_live(cur: db.Cursor, team_id: uuid.UUID, ids: list[uuid.UUID | None]) -> dict:
    """The team's live secrets among `ids`, locked in id order (so concurrent bulk calls cannot
    deadlock), keyed by id. Ids of other teams simply are not found."""
    wanted = sorted({str(i) for i in ids if i is not None})
    if not wanted:
        return {}
    rows = await db.fetchall(
        cur,
        """SELECT id, name, environment, admin_credential FROM secrets
           WHERE id = ANY(%s::uuid[]) AND team_id = %s AND deleted_at IS NULL
           ORDER BY id FOR UPDATE""",
        (wanted, team_id),
    )
    return {row["id"]: row for row in rows}


async def bulk_delete(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                      raw_ids: list[str]) -> int:
    """Soft-delete the team's secrets among `raw_ids` (Admin or above); returns how many."""
    ids = _uuids(raw_ids)
    async with db.transaction(conn) as cur:
        role = await roles.require(cur, team_id, actor, roles.ADMIN)
        live = await _lock_live(cur, team_id, ids)
        for row in live.values():
            roles.check_environment_write(actor, row["environment"])
            await secrets.check_admin_credential(cur, actor, team_id, row, role)
        if live:
            await secret_queries.soft_delete(cur, list(live))
        await audit.record(cur, actor, "bulk_delete", "secret", team_id=team_id,
                           metadata={"requested": len(ids), "deleted": len(live)})
    return len(live)


async def move_env(conn: db.Connection, actor: Actor, team_id: uuid.UUID, raw_ids: list[str],
                   environment: str) -> tuple[list[dict], dict]:
    """Move each secret to `environment` (Member or above). A name that already exists there is
    that item's error; the rest move. An item already there succeeds without change."""
    ids = _uuids(raw_ids)
    target = secret_inputs.check_environment(environment)
    roles.check_environment_write(actor, target)
    results: list[dict] = []
    async with db.transaction(conn) as cur:
        role = await roles.require(cur, team_id, actor, roles.MEMBER)
        team = await teams.lock_team(cur, team_id)  # the team before its secrets, as ever
        if team["e2e"]:
            raise BadRequest(secret_inputs.E2E_MOVE)
        live = await _lock_live(cur, team_id, ids)
        for row in live.values():
            roles.check_environment_write(actor, row["environment"])
            await secrets.check_admin_credential(cur, actor, team_id, row, role)
        moving = [i for i, row in live.items() if row["environment"] != target]
        if moving:  # all or nothing: the plan's active environments
            await secret_queries.check_environments(cur, team, [target], leaving=moving)
        for index, secret_id in enumerate(ids):
            row = live.get(secret_id) if secret_id is not None else None
            if row is None:
                results.append({"index": index, "id": raw_ids[index], "name": None, "ok": False,
                                "error": secret_queries.SECRET_NOT_FOUND})
                continue
            result = {"index": index, "id": str(secret_id), "name": row["name"]}
            if row["environment"] != target:
                try:
                    async with db.unique_as_conflict(cur, secret_queries.SECRET_EXISTS, savepoint="move_env"):
                        await cur.execute(
                            "UPDATE secrets SET environment = %s, updated_at = now() WHERE id = %s",
                            (target, secret_id),
                        )
                except DomainError as exc:
                    results.append({**result, "ok": False, "error": exc.message})
                    continue
                row["environment"] = target
            results.append({**result, "ok": True})
        summary = summary_of(results)
        await audit.record(cur, actor, "move_env", "secret", team_id=team_id,
                           metadata={"environment": target, **summary})
    return results, summary
