"""Teams, membership and roles: who may do what in which team.

Role matrix (contract): Viewer lists, reads values and exports; Member adds create, update,
rollback, bulk create, import, move-env and shares; Admin adds delete, bulk delete, audit and
managing Members and Viewers; Owner adds granting Admin or Owner and deleting the team.
A team the caller is not in answers exactly like a team that does not exist (404).
"""

from __future__ import annotations

import re
import uuid

from aiohttp import web

from . import audit, db
from .errors import BadRequest, Conflict, Forbidden, NotFound
from .inputs import field, path_uuid, read_json
from .state import POOL, principal

VIEWER, MEMBER, ADMIN, OWNER = "Viewer", "Member", "Admin", "Owner"
RANK = {VIEWER: 0, MEMBER: 1, ADMIN: 2, OWNER: 3}
SLUG_RE = re.compile(r"[a-z0-9-]{3,50}\Z")

# Plan table (spec): quotas enforced per team; None means unlimited.
PLANS = {
    "starter": {"max_secrets": 50, "max_members": 5, "audit_retention_days": 30},
    "professional": {"max_secrets": 500, "max_members": 25, "audit_retention_days": 90},
    "enterprise": {"max_secrets": None, "max_members": None, "audit_retention_days": None},
}

TEAM_NOT_FOUND = "Tim tidak ditemukan"
ROLE_TOO_LOW = "Peran Anda di tim ini tidak cukup untuk tindakan ini"
MEMBER_QUOTA = "Kuota anggota tim untuk paket ini sudah penuh"


async def role_of(cur: db.Cursor, team_id: uuid.UUID, user_id: uuid.UUID) -> str | None:
    row = await db.fetchone(
        cur, "SELECT role FROM team_members WHERE team_id = %s AND user_id = %s", (team_id, user_id)
    )
    return row["role"] if row else None


async def require_role(cur: db.Cursor, team_id: uuid.UUID, user_id: uuid.UUID, minimum: str) -> str:
    """The caller's role in the team; 404 when not a member, 403 when below `minimum`."""
    role = await role_of(cur, team_id, user_id)
    if role is None:
        raise NotFound(TEAM_NOT_FOUND)
    if RANK[role] < RANK[minimum]:
        raise Forbidden(ROLE_TOO_LOW)
    return role


async def lock_team(cur: db.Cursor, team_id: uuid.UUID) -> dict:
    """Lock the team row (serialises quota checks) and return it."""
    row = await db.fetchone(cur, "SELECT * FROM teams WHERE id = %s FOR UPDATE", (team_id,))
    if row is None:
        raise NotFound(TEAM_NOT_FOUND)
    return row


def team_json(row: dict, role: str | None = None) -> dict:
    out = {"id": str(row["id"]), "slug": row["slug"], "name": row["name"], "plan": row["plan"],
           "max_secrets": row["max_secrets"], "max_members": row["max_members"]}
    if role is not None:
        out["role"] = role
    return out


def parse_role(body: dict) -> str:
    role = field(body, "role", str)
    if role not in RANK:
        raise BadRequest("Peran harus salah satu dari Owner, Admin, Member, Viewer")
    return role


async def list_teams(request: web.Request) -> web.Response:
    who = principal(request)
    async with db.cursor(request.app[POOL]) as cur:
        rows = await db.fetchall(
            cur,
            """SELECT t.*, m.role FROM teams t JOIN team_members m ON m.team_id = t.id
               WHERE m.user_id = %s ORDER BY t.name, t.slug""",
            (who.user_id,),
        )
    return web.json_response({"teams": [team_json(r, r["role"]) for r in rows]})


async def create_team(request: web.Request) -> web.Response:
    who = principal(request)
    body = await read_json(request, max_bytes=16 * 1024)
    name = field(body, "name", str).strip()
    slug = field(body, "slug", str).strip()
    if not 1 <= len(name) <= 100:
        raise BadRequest("Kolom 'name' harus 1 sampai 100 karakter")
    if not SLUG_RE.match(slug):
        raise BadRequest("Slug harus 3-50 karakter: huruf kecil, angka, dan tanda hubung")
    plan = PLANS["starter"]
    async with db.transaction(request.app[POOL]) as cur:
        try:
            team = await db.fetchone(
                cur,
                """INSERT INTO teams (slug, name, plan, max_secrets, max_members)
                   VALUES (%s, %s, 'starter', %s, %s) RETURNING *""",
                (slug, name, plan["max_secrets"], plan["max_members"]),
            )
        except Exception as exc:
            if db.is_unique_violation(exc):
                raise Conflict("Slug tim sudah digunakan") from None
            raise
        await cur.execute(
            "INSERT INTO team_members (team_id, user_id, role) VALUES (%s, %s, %s)",
            (team["id"], who.user_id, OWNER),
        )
        await audit.record(cur, request, "team_create", "team", team_id=team["id"],
                           resource_id=team["id"], metadata={"slug": slug})
    return web.json_response({"team": team_json(team, OWNER)}, status=201)


async def get_team(request: web.Request) -> web.Response:
    team_id = path_uuid(request, "team_id")
    async with db.cursor(request.app[POOL]) as cur:
        role = await require_role(cur, team_id, principal(request).user_id, VIEWER)
        team = await db.fetchone(cur, "SELECT * FROM teams WHERE id = %s", (team_id,))
    return web.json_response({"team": team_json(team, role)})


async def delete_team(request: web.Request) -> web.Response:
    """DELETE /teams/:teamId — Owner only; secrets go with it, audit entries stay (team nulled)."""
    team_id = path_uuid(request, "team_id")
    async with db.transaction(request.app[POOL]) as cur:
        await require_role(cur, team_id, principal(request).user_id, OWNER)
        team = await lock_team(cur, team_id)
        await audit.record(cur, request, "team_delete", "team", team_id=None, resource_id=team_id,
                           metadata={"slug": team["slug"]})
        await cur.execute("DELETE FROM teams WHERE id = %s", (team_id,))
    return web.json_response({"ok": True})


def _member_json(row: dict) -> dict:
    return {"user_id": str(row["user_id"]), "email": row["email"], "username": row["username"],
            "name": row["name"], "role": row["role"]}


_MEMBER_SQL = """SELECT m.user_id, m.role, u.email, u.username, u.name
                 FROM team_members m JOIN users u ON u.id = m.user_id"""


async def list_members(request: web.Request) -> web.Response:
    team_id = path_uuid(request, "team_id")
    async with db.cursor(request.app[POOL]) as cur:
        await require_role(cur, team_id, principal(request).user_id, VIEWER)
        rows = await db.fetchall(
            cur, _MEMBER_SQL + " WHERE m.team_id = %s ORDER BY u.username", (team_id,)
        )
    return web.json_response({"members": [_member_json(r) for r in rows]})


def _check_grant(caller_role: str, role: str) -> None:
    if RANK[role] >= RANK[ADMIN] and caller_role != OWNER:
        raise Forbidden("Hanya Owner yang dapat memberikan peran Admin atau Owner")


async def add_member(request: web.Request) -> web.Response:
    team_id = path_uuid(request, "team_id")
    body = await read_json(request, max_bytes=16 * 1024)
    identifier = field(body, "identifier", str).strip()
    role = parse_role(body)
    column = "email" if "@" in identifier else "username"
    async with db.transaction(request.app[POOL]) as cur:
        caller_role = await require_role(cur, team_id, principal(request).user_id, ADMIN)
        _check_grant(caller_role, role)
        team = await lock_team(cur, team_id)
        user = await db.fetchone(
            cur, f"SELECT id FROM users WHERE lower({column}) = lower(%s)", (identifier,)
        )
        if user is None:
            raise NotFound("Pengguna tidak ditemukan")
        if await role_of(cur, team_id, user["id"]) is not None:
            raise Conflict("Pengguna sudah menjadi anggota tim ini")
        count = await db.fetchone(
            cur, "SELECT count(*) AS n FROM team_members WHERE team_id = %s", (team_id,)
        )
        if team["max_members"] is not None and count["n"] >= team["max_members"]:
            raise Forbidden(MEMBER_QUOTA)
        await cur.execute(
            "INSERT INTO team_members (team_id, user_id, role) VALUES (%s, %s, %s)",
            (team_id, user["id"], role),
        )
        row = await db.fetchone(
            cur, _MEMBER_SQL + " WHERE m.team_id = %s AND m.user_id = %s", (team_id, user["id"])
        )
        await audit.record(cur, request, "member_add", "member", team_id=team_id,
                           resource_id=user["id"], metadata={"role": role})
    return web.json_response({"member": _member_json(row)}, status=201)


async def _target(cur: db.Cursor, request: web.Request, team_id: uuid.UUID) -> tuple[str, dict]:
    user_id = path_uuid(request, "user_id")
    caller = principal(request).user_id
    caller_role = await require_role(cur, team_id, caller, VIEWER)
    await lock_team(cur, team_id)
    row = await db.fetchone(
        cur, _MEMBER_SQL + " WHERE m.team_id = %s AND m.user_id = %s", (team_id, user_id)
    )
    if row is None:
        raise NotFound("Anggota tidak ditemukan")
    return caller_role, row


async def _owner_count(cur: db.Cursor, team_id: uuid.UUID) -> int:
    row = await db.fetchone(
        cur, "SELECT count(*) AS n FROM team_members WHERE team_id = %s AND role = 'Owner'", (team_id,)
    )
    return row["n"]


async def update_member(request: web.Request) -> web.Response:
    team_id = path_uuid(request, "team_id")
    body = await read_json(request, max_bytes=16 * 1024)
    role = parse_role(body)
    async with db.transaction(request.app[POOL]) as cur:
        caller_role, member = await _target(cur, request, team_id)
        if RANK[caller_role] < RANK[ADMIN]:
            raise Forbidden(ROLE_TOO_LOW)
        _check_grant(caller_role, role)
        if RANK[member["role"]] >= RANK[ADMIN] and caller_role != OWNER:
            raise Forbidden("Hanya Owner yang dapat mengubah peran Admin atau Owner")
        if member["role"] == OWNER and role != OWNER and await _owner_count(cur, team_id) <= 1:
            raise Conflict("Tim harus memiliki setidaknya satu Owner")
        await cur.execute(
            "UPDATE team_members SET role = %s WHERE team_id = %s AND user_id = %s",
            (role, team_id, member["user_id"]),
        )
        await audit.record(cur, request, "member_update", "member", team_id=team_id,
                           resource_id=member["user_id"],
                           metadata={"from": member["role"], "to": role})
    member["role"] = role
    return web.json_response({"member": _member_json(member)})


async def remove_member(request: web.Request) -> web.Response:
    team_id = path_uuid(request, "team_id")
    async with db.transaction(request.app[POOL]) as cur:
        caller_role, member = await _target(cur, request, team_id)
        leaving = member["user_id"] == principal(request).user_id
        if not leaving:
            if RANK[caller_role] < RANK[ADMIN]:
                raise Forbidden(ROLE_TOO_LOW)
            if RANK[member["role"]] >= RANK[ADMIN] and caller_role != OWNER:
                raise Forbidden("Hanya Owner yang dapat mengeluarkan Admin atau Owner")
        if member["role"] == OWNER and await _owner_count(cur, team_id) <= 1:
            raise Conflict("Tim harus memiliki setidaknya satu Owner")
        await cur.execute(
            "DELETE FROM team_members WHERE team_id = %s AND user_id = %s",
            (team_id, member["user_id"]),
        )
        await audit.record(cur, request, "member_remove", "member", team_id=team_id,
                           resource_id=member["user_id"], metadata={"role": member["role"]})
    return web.json_response({"ok": True})


def setup_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/teams", list_teams)
    app.router.add_post("/api/v1/teams", create_team)
    app.router.add_get("/api/v1/teams/{team_id}", get_team)
    app.router.add_delete("/api/v1/teams/{team_id}", delete_team)
    app.router.add_get("/api/v1/teams/{team_id}/members", list_members)
    app.router.add_post("/api/v1/teams/{team_id}/members", add_member)
    app.router.add_patch("/api/v1/teams/{team_id}/members/{user_id}", update_member)
    app.router.add_delete("/api/v1/teams/{team_id}/members/{user_id}", remove_member)
