"""Administration: users (search, grant or revoke admin, disable), teams (search, plan and
quotas), the plan new teams get, and the instance's numbers. For `is_admin` users through a session JWT (never an API
token), and for the operator's own commands (`Actor.system()`, `cvsm-server admin ...`).

Every change is audited. An admin cannot take their own admin right away or disable themselves,
so an instance never loses its last admin by a slip of the mouse (the operator's command can
always grant one again). Disabling a user makes their sessions and API tokens fail at once on
every process (the credential checks read `users.disabled_at`; the epoch is bumped); enabling
them again restores what has not expired meanwhile.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from ..audit import log as audit
from ..accounts import credentials
from .. import db
from ..accounts import setup_link
from ..core.actor import Actor
from ..core.errors import BadRequest, Forbidden, NotFound
from ..core.i18n import Text
from ..accounts.sessions import require_jwt
from . import settings as instance_settings
from ..teams.service import PLANS, max_environments
from ..core.timeutil import iso

ADMIN_ONLY = "Hanya admin yang dapat mengakses halaman ini"
USER_NOT_FOUND = "Pengguna tidak ditemukan"
TEAM_NOT_FOUND = "Tim tidak ditemukan"
NOT_YOURSELF = "Anda tidak dapat mencabut hak admin atau menonaktifkan akun Anda sendiri"
MAX_QUOTA = 1_000_000

# What a plan change that names no quota applies, and what the admin plan form fills in: the
# plan table's own quotas (`teams.PLANS`, the one source), so a team moved to a plan gets what a
# new team on that plan gets. The spec's sentence on the form (50 and 3 for Starter, 1000 and 20
# for Professional) disagrees with its own plan table; the table wins (docs/server.md, "Administration").
# Enterprise's are None: unlimited, or entered by hand.
PLAN_FORM_DEFAULTS: dict[str, tuple[int | None, int | None]] = {
    name: (plan["max_secrets"], plan["max_members"]) for name, plan in PLANS.items()
}
UNSET = object()


def plan_defaults_text(unlimited: str = "unlimited (null)") -> str:
    """The plans' quotas in words, for the API's description and the command's help: `starter
    50 secrets and 5 members, ...`."""
    def count(value: int | None) -> str:
        return unlimited if value is None else str(value)
    return ", ".join(f"{name} {count(s)} secrets and {count(m)} members"
                     for name, (s, m) in PLAN_FORM_DEFAULTS.items())


def user_json(row: Mapping) -> dict:
    return {"id": str(row["id"]), "email": row["email"], "username": row["username"],
            "name": row["name"], "is_admin": row["is_admin"],
            "email_verified": row["email_verified"], "disabled": row["disabled_at"] is not None,
            "teams": row["teams"], "created_at": iso(row["created_at"])}


def team_json(row: Mapping) -> dict:
    return {"id": str(row["id"]), "slug": row["slug"], "name": row["name"], "plan": row["plan"],
            "max_secrets": row["max_secrets"], "max_members": row["max_members"],
            "max_environments": max_environments(row["plan"]),
            "members": row["members"], "secrets": row["secrets"],
            "created_at": iso(row["created_at"])}


async def check_admin(conn: db.Connection, actor: Actor) -> None:
    """403 unless the actor is a site admin (`require_admin`): what an admin route checks
    before it reads a request's body."""
    async with db.cursor(conn) as cur:
        await require_admin(cur, actor)


async def require_admin(cur: db.Cursor, actor: Actor) -> None:
    """403 unless the actor is the operator or a signed-in (JWT) admin whose account is enabled."""
    if actor.via == "system":
        return
    require_jwt(actor)
    row = await db.fetchone(cur, "SELECT is_admin, disabled_at FROM users WHERE id = %s",
                            (actor.user_id,))
    if row is None or not row["is_admin"] or row["disabled_at"] is not None:
        raise Forbidden(ADMIN_ONLY)


def _pattern(text: str) -> str:
    escaped = text.strip()[:200].replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


_USERS = """
SELECT u.id, u.email, u.username, u.name, u.is_admin, u.email_verified, u.disabled_at,
       u.created_at, (SELECT count(*) FROM team_members m WHERE m.user_id = u.id) AS teams
FROM users u
"""


async def list_users(conn: db.Connection, actor: Actor, *, search: str = "", limit: int = 50,
                     offset: int = 0) -> tuple[list[dict], int]:
    """A page of users whose email, username or name contains `search`, newest first; and the total."""
    async with db.cursor(conn) as cur:
        await require_admin(cur, actor)
        where = """WHERE u.email ILIKE %(p)s OR u.username ILIKE %(p)s OR u.name ILIKE %(p)s"""
        params = {"p": _pattern(search), "limit": limit, "offset": offset}
        rows = await db.fetchall(cur, _USERS + where + """
                                 ORDER BY u.created_at DESC, u.id LIMIT %(limit)s OFFSET %(offset)s""",
                                 params)
        total = await db.fetchone(cur, "SELECT count(*) AS n FROM users u " + where, params)
    return rows, total["n"]


async def update_user(conn: db.Connection, actor: Actor, user_id: uuid.UUID, *,
                      is_admin: bool | None = None, disabled: bool | None = None) -> dict:
    """Grant or revoke admin and disable or enable a user; audited per change."""
    if is_admin is None and disabled is None:
        raise BadRequest("Tidak ada perubahan: kirim 'is_admin' atau 'disabled'")
    if actor.user_id == user_id and (is_admin is False or disabled is True):
        raise BadRequest(NOT_YOURSELF)
    async with db.transaction(conn) as cur:
        await require_admin(cur, actor)
        before = await db.fetchone(cur, "SELECT id, email, is_admin, disabled_at FROM users "
                                        "WHERE id = %s FOR NO KEY UPDATE", (user_id,))
        if before is None:
            raise NotFound(USER_NOT_FOUND)
        if is_admin is not None and is_admin != before["is_admin"]:
            await cur.execute("UPDATE users SET is_admin = %s WHERE id = %s", (is_admin, user_id))
            if is_admin:
                await setup_link.end_all(cur)  # the install has an admin: no setup link works
            await audit.record(cur, actor, "admin_grant" if is_admin else "admin_revoke", "user",
                               resource_id=user_id, metadata={"email": before["email"]})
        if disabled is not None and disabled != (before["disabled_at"] is not None):
            await cur.execute(
                "UPDATE users SET disabled_at = CASE WHEN %s THEN now() END WHERE id = %s",
                (disabled, user_id))
            await credentials.bump(cur)  # every process drops the cached sessions and tokens
            await audit.record(cur, actor, "user_disable" if disabled else "user_enable", "user",
                               resource_id=user_id, metadata={"email": before["email"]})
        return await db.fetchone(cur, _USERS + "WHERE u.id = %s", (user_id,))


async def user_by_email(conn: db.Connection, email: str) -> uuid.UUID:
    async with db.cursor(conn) as cur:
        row = await db.fetchone(cur, "SELECT id FROM users WHERE lower(email) = lower(%s)",
                                (email.strip(),))
    if row is None:
        raise NotFound(USER_NOT_FOUND)
    return row["id"]


_TEAMS = """
SELECT t.id, t.slug, t.name, t.plan, t.max_secrets, t.max_members, t.created_at,
       (SELECT count(*) FROM team_members m WHERE m.team_id = t.id) AS members,
       (SELECT count(*) FROM secrets s WHERE s.team_id = t.id AND s.deleted_at IS NULL) AS secrets
FROM teams t
"""


async def list_teams(conn: db.Connection, actor: Actor, *, search: str = "", limit: int = 50,
                     offset: int = 0) -> tuple[list[dict], int]:
    """A page of teams whose slug or name contains `search`, newest first; and the total."""
    async with db.cursor(conn) as cur:
        await require_admin(cur, actor)
        where = "WHERE t.slug ILIKE %(p)s OR t.name ILIKE %(p)s"
        params = {"p": _pattern(search), "limit": limit, "offset": offset}
        rows = await db.fetchall(cur, _TEAMS + where + """
                                 ORDER BY t.created_at DESC, t.id LIMIT %(limit)s OFFSET %(offset)s""",
                                 params)
        total = await db.fetchone(cur, "SELECT count(*) AS n FROM teams t " + where, params)
    return rows, total["n"]


async def get_team(conn: db.Connection, actor: Actor, team_id: uuid.UUID) -> dict:
    """One team with its plan, quotas and counts (the panel's plan form)."""
    async with db.cursor(conn) as cur:
        await require_admin(cur, actor)
        row = await db.fetchone(cur, _TEAMS + "WHERE t.id = %s", (team_id,))
    if row is None:
        raise NotFound(TEAM_NOT_FOUND)
    return row


def _quota(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_QUOTA:
        raise BadRequest(Text("Kolom '{name}' harus bilangan bulat 0 sampai {n}, atau null "
                              "(tanpa batas)", name=name, n=MAX_QUOTA))
    return value


async def set_plan(conn: db.Connection, actor: Actor, team_ref: uuid.UUID | str, plan: str, *,
                   max_secrets: object = UNSET, max_members: object = UNSET) -> dict:
    """Put a team (id, or slug for the operator's command) on `plan` with its quotas: the ones
    given, else the plan form's defaults (`PLAN_FORM_DEFAULTS`). Lowering a quota below what the
    team holds keeps what exists and refuses more."""
    if plan not in PLANS:
        raise BadRequest("Paket harus salah satu dari starter, professional, enterprise")
    default_secrets, default_members = PLAN_FORM_DEFAULTS[plan]
    secrets_quota = default_secrets if max_secrets is UNSET else _quota("max_secrets", max_secrets)
    members_quota = default_members if max_members is UNSET else _quota("max_members", max_members)
    column = "id" if isinstance(team_ref, uuid.UUID) else "slug"
    async with db.transaction(conn) as cur:
        await require_admin(cur, actor)
        before = await db.fetchone(
            cur, f"SELECT id, slug, plan, max_secrets, max_members FROM teams WHERE {column} = %s "
                 "FOR NO KEY UPDATE", (team_ref,))
        if before is None:
            raise NotFound(TEAM_NOT_FOUND)
        await cur.execute(
            "UPDATE teams SET plan = %s, max_secrets = %s, max_members = %s WHERE id = %s",
            (plan, secrets_quota, members_quota, before["id"]))
        await audit.record(cur, actor, "team_plan_change", "team", team_id=before["id"],
                           resource_id=before["id"], metadata={
                               "from": {"plan": before["plan"], "max_secrets": before["max_secrets"],
                                        "max_members": before["max_members"]},
                               "to": {"plan": plan, "max_secrets": secrets_quota,
                                      "max_members": members_quota}})
        return await db.fetchone(cur, _TEAMS + "WHERE t.id = %s", (before["id"],))


async def new_team_plan(conn: db.Connection, actor: Actor, configured: str | None) -> dict:
    """The plan new teams get (`plan`) and whether it was chosen here (`chosen`: at set-up or in
    the panel) or comes from `configured` (the operator's `CVSM_DEFAULT_PLAN`, else Starter)."""
    async with db.cursor(conn) as cur:
        await require_admin(cur, actor)
        stored = await instance_settings.stored_default_plan(cur)
    return {"plan": stored or configured or instance_settings.STARTER, "chosen": stored is not None}


async def set_new_team_plan(conn: db.Connection, actor: Actor, plan: object) -> None:
    """Choose the plan new teams get from now on (teams that exist keep theirs); audited as
    `default_plan_change`."""
    plan = instance_settings.check_plan(plan)
    async with db.transaction(conn) as cur:
        await require_admin(cur, actor)
        await instance_settings.store_default_plan(cur, actor, plan)


async def stats(conn: db.Connection, actor: Actor) -> dict:
    """Counts across the instance (never a value or a name of a secret)."""
    async with db.cursor(conn) as cur:
        await require_admin(cur, actor)
        row = await db.fetchone(cur, """
            SELECT (SELECT count(*) FROM users) AS users,
                   (SELECT count(*) FROM users WHERE disabled_at IS NOT NULL) AS disabled_users,
                   (SELECT count(*) FROM users WHERE is_admin) AS admins,
                   (SELECT count(*) FROM teams) AS teams,
                   (SELECT count(*) FROM secrets WHERE deleted_at IS NULL) AS secrets,
                   (SELECT count(*) FROM api_tokens
                     WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()))
                     AS active_tokens,
                   (SELECT count(*) FROM audit_logs WHERE created_at > now() - interval '1 day')
                     AS audit_entries_24h""")
        plans = await db.fetchall(cur, "SELECT plan, count(*) AS n FROM teams GROUP BY plan")
    return {**row, "teams_by_plan": {p: 0 for p in PLANS} | {r["plan"]: r["n"] for r in plans}}
