"""Team roles and the membership check every team-scoped domain function starts with.

Role matrix (contract): Viewer lists, reads values and exports; Member adds create, update,
rollback, bulk create, import, move-env and shares; Admin adds delete, bulk delete, audit and
managing Members and Viewers; Owner adds granting Admin or Owner and deleting the team.
A team the caller is not in answers exactly like a team that does not exist (404).
"""

from __future__ import annotations

import uuid

from .. import db
from ..core.actor import Actor
from ..core.errors import Forbidden, NotFound

VIEWER, MEMBER, ADMIN, OWNER = "Viewer", "Member", "Admin", "Owner"
RANK = {VIEWER: 0, MEMBER: 1, ADMIN: 2, OWNER: 3}

TEAM_NOT_FOUND = "Tim tidak ditemukan"
ROLE_TOO_LOW = "Peran Anda di tim ini tidak cukup untuk tindakan ini"
READ_ONLY = "Token ini hanya boleh membaca"
ENVIRONMENT_OUT_OF_SCOPE = "Token ini tidak berlaku untuk environment tersebut"


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


def check_writable(actor: Actor) -> None:
    """403 for a read-only token: every change needs a credential that may write."""
    if actor.scope is not None and actor.scope.read_only:
        raise Forbidden(READ_ONLY)


def check_environment_write(actor: Actor, environment: str) -> None:
    """403 when a scoped token writes outside its environments."""
    if actor.scope is not None and not actor.scope.allows_environment(environment):
        raise Forbidden(ENVIRONMENT_OUT_OF_SCOPE)


def may(role: str | None, minimum: str) -> bool:
    """Whether `role` reaches `minimum`, as `check_rank` decides: the pages show a control only
    to the roles that may use it (the domain functions keep refusing everyone else)."""
    return role is not None and RANK[role] >= RANK[minimum]


# The least role each of the dashboard's team controls needs, as the domain functions require it.
CONTROLS = {
    "create": MEMBER,   # secrets.create_secret, bulk.import_dotenv
    "edit": MEMBER,     # secrets.update_secret, secrets.rollback
    "share": MEMBER,    # shares.create_share
    "delete": ADMIN,    # secrets.delete_secret
    "audit": ADMIN,     # audit.list_entries, audit.start_export
    "insights": ADMIN,  # insights.secret_readers, unread_secrets, unused_tokens
    "members": ADMIN,   # teams.add_member, update_member, remove_member (of others)
    "rotation": ADMIN,  # rotation.policy.list_policies, set_policy, delete_policy
    "webhooks": ADMIN,  # webhooks.service.list_webhooks, create_webhook, delete_webhook
}


def controls(role: str | None) -> dict[str, bool]:
    """Which of `CONTROLS` `role` may use."""
    return {name: may(role, minimum) for name, minimum in CONTROLS.items()}


async def require(cur: db.Cursor, team_id: uuid.UUID, actor: Actor, minimum: str, *,
                  reading: bool = False) -> str:
    """The actor's role in the team; 404 when not a member (or outside a token's team), 403 when
    below `minimum` or, for anything above Viewer that is not `reading`, when the token is
    read-only."""
    if actor.scope is not None and not actor.scope.allows_team(team_id):
        raise NotFound(TEAM_NOT_FOUND)
    role = check_rank(await role_of(cur, team_id, actor.user_id), minimum)
    if RANK[minimum] > RANK[VIEWER] and not reading:
        check_writable(actor)
    return role
