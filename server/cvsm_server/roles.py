"""Team roles and the membership check every team-scoped domain function starts with.

Role matrix (contract): Viewer lists, reads values and exports; Member adds create, update,
rollback, bulk create, import, move-env and shares; Admin adds delete, bulk delete, audit and
managing Members and Viewers; Owner adds granting Admin or Owner and deleting the team.
A team the caller is not in answers exactly like a team that does not exist (404).
"""

from __future__ import annotations

import uuid

from . import db
from .actor import Actor
from .errors import Forbidden, NotFound

VIEWER, MEMBER, ADMIN, OWNER = "Viewer", "Member", "Admin", "Owner"
RANK = {VIEWER: 0, MEMBER: 1, ADMIN: 2, OWNER: 3}

TEAM_NOT_FOUND = "Tim tidak ditemukan"
ROLE_TOO_LOW = "Peran Anda di tim ini tidak cukup untuk tindakan ini"


async def role_of(cur: db.Cursor, team_id: uuid.UUID, user_id: uuid.UUID | None) -> str | None:
    if user_id is None:
        return None
    row = await db.fetchone(
        cur, "SELECT role FROM team_members WHERE team_id = %s AND user_id = %s", (team_id, user_id)
    )
    return row["role"] if row else None


def check_rank(role: str | None, minimum: str) -> str:
    """`role` when it reaches `minimum`; 404 for no role (not a member), 403 when below."""
    if role is None:
        raise NotFound(TEAM_NOT_FOUND)
    if RANK[role] < RANK[minimum]:
        raise Forbidden(ROLE_TOO_LOW)
    return role


async def require(cur: db.Cursor, team_id: uuid.UUID, actor: Actor, minimum: str) -> str:
    """The actor's role in the team; 404 when not a member, 403 when below `minimum`."""
    return check_rank(await role_of(cur, team_id, actor.user_id), minimum)
