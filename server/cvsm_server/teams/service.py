"""Teams and their members: create, list, show, delete; add, change and remove members.

Roles and the membership check live in `roles`; the plan table and quotas here. A team may be
created end-to-end (docs/e2e.md, `e2e`): the creator's client sends the first team key wrapped to
the creator's public key; a member who leaves or is removed loses every wrap made for them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping

from ..audit import log as audit
from ..accounts import credentials
from .. import db
from ..e2e import service as e2e
from ..e2e import syntax as e2e_syntax
from ..instance import settings as instance_settings
from . import roles
from ..core.actor import Actor
from ..core.environments import ENVIRONMENTS
from ..core.errors import BadRequest, Conflict, Forbidden, NotFound
from ..core.i18n import N_, Text
from ..core.inputs import check_line
from .roles import ADMIN, OWNER, RANK, VIEWER

SLUG_RE = re.compile(r"[a-z0-9-]{3,50}\Z")
UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")

# Plan table (spec); None means unlimited. `max_secrets` and `max_members` are the team's own
# columns (the admin may set them); `max_environments` and the retention follow the plan.
# An environment is *active* while the team holds a live secret in it (`secrets.check_quota`).
PLANS = {
    "starter": {"max_secrets": 50, "max_members": 5, "audit_retention_days": 30,
                "max_environments": 1},
    "professional": {"max_secrets": 500, "max_members": 25, "audit_retention_days": 90,
                     "max_environments": None},
    "enterprise": {"max_secrets": None, "max_members": None, "audit_retention_days": None,
                   "max_environments": None},
}

TEAM_NOT_FOUND = roles.TEAM_NOT_FOUND
MEMBER_QUOTA = "Kuota anggota tim untuk paket ini sudah penuh"
# Said after every quota refusal (API and dashboard): who lifts the limit on this server.
QUOTA_LIFT = N_("Batas ini dinaikkan oleh admin server ini di panel admin (/app/admin/teams), atau "
                "oleh operator server dengan perintah `{command}`")
SLUG_TAKEN = "Slug tim sudah digunakan"
STILL_SUBSCRIBED = ("Tim ini masih berlangganan: batalkan langganannya dulu di portal tagihan "
                    "(halaman Paket), lalu hapus timnya")
TEAM_ID_TAKEN = "Id tim sudah digunakan"
TEAM_ID_REQUIRED = ("Tim end-to-end: kolom 'id' (UUID pilihan klien, yang mengikat kunci tim "
                    "terbungkus) wajib diisi")
TEAM_ID_ONLY_E2E = "Kolom 'id' hanya untuk tim end-to-end"


def team_json(row: Mapping, role: str | None = None) -> dict:
    out = {"id": str(row["id"]), "slug": row["slug"], "name": row["name"], "plan": row["plan"],
           "max_secrets": row["max_secrets"], "max_members": row["max_members"],
           "max_environments": max_environments(row["plan"]),
           "e2e": bool(row.get("e2e")), "key_version": row.get("key_version")}
    if role is not None:
        out["role"] = role
    return out


# A quota's refusal, then what lifts it: one sentence after the other, in either language.
LIFTED = N_("{message}. {lift}")


def quota_message(message: str, slug: str, plan: str, quota: str = "max_secrets") -> str:
    """`message` (a quota refusal), then what lifts the limit (`quota_lift`)."""
    return Text(LIFTED, message=Text(message), lift=quota_lift(slug, plan, quota))


def quota_lift(slug: str, plan: str, quota: str = "max_secrets") -> str:
    """What lifts a quota of the team `slug` on `plan`: the admin panel, or the operator's
    command (`upgrade_command`)."""
    return Text(QUOTA_LIFT, command=upgrade_command(slug, plan, quota))


def upgrade_command(slug: str, plan: str, quota: str = "max_secrets") -> str:
    """The operator's `team set-plan` to the next plan up (on the top plan, with the quota
    `quota` raised)."""
    names = list(PLANS)
    position = names.index(plan) if plan in names else len(names) - 1
    command = f"cvsm-server team set-plan {slug} "
    if position + 1 < len(names):
        return command + names[position + 1]
    return command + f"{plan} --{quota.replace('_', '-')} N"


# A team that pays through billing (docs/billing.md) is told what its subscription did and that
# its Owner lifts the limit on the plan page; `billing_status` is Stripe's (`lock_team`).
BILLING_LIFT = {
    "failed": N_("Pembayaran langganan tim ini gagal, jadi paketnya sekarang {plan}. Owner tim "
                 "memperbarui kartu atau berlangganan lagi di halaman Paket "
                 "(/app/teams/{slug}/plan); semua yang sudah ada tetap dapat dibaca dan diekspor"),
    "ended": N_("Langganan tim ini sudah berakhir, jadi paketnya sekarang {plan}. Owner tim "
                "berlangganan lagi di halaman Paket (/app/teams/{slug}/plan); semua yang sudah ada "
                "tetap dapat dibaca dan diekspor"),
    "paying": N_("Owner tim menaikkan paket di halaman Paket (/app/teams/{slug}/plan)"),
}


def billing_lift(slug: str, plan: str, status: str | None) -> str:
    """What lifts a quota of a team that has a Stripe subscription state (`status`)."""
    kind = ("failed" if status in ("past_due", "unpaid") else
            "ended" if status in ("canceled", "incomplete_expired", "paused") else "paying")
    return Text(BILLING_LIFT[kind], plan=plan, slug=slug)


def quota_refused(message: str, team: Mapping, quota: str = "max_secrets") -> Forbidden:
    """The 403 of a quota check on `team` (a row with `slug` and `plan`; `billing_status` when
    the team has a Stripe customer, from `lock_team`)."""
    if team.get("billing_status") is not None or team.get("billing_customer"):
        return Forbidden(Text(LIFTED, message=Text(message), lift=billing_lift(
            team["slug"], team["plan"], team.get("billing_status"))))
    return Forbidden(quota_message(message, team["slug"], team["plan"], quota))


def max_environments(plan: str) -> int | None:
    """How many environments a team on `plan` may hold live secrets in (None: all of them)."""
    return PLANS[plan]["max_environments"]


def member_json(row: Mapping) -> dict:
    return {"user_id": str(row["user_id"]), "email": row["email"], "username": row["username"],
            "name": row["name"], "role": row["role"]}


def check_role(role: object) -> str:
    if role not in RANK:
        raise BadRequest("Peran harus salah satu dari Owner, Admin, Member, Viewer")
    return role  # type: ignore[return-value]


def check_team_fields(name: str, slug: str) -> tuple[str, str]:
    name, slug = name.strip(), slug.strip()
    if not 1 <= len(name) <= 100:
        raise BadRequest("Kolom 'name' harus 1 sampai 100 karakter")
    check_line("name", name)  # on one line: it is the subject of the team's invitation mails
    if not SLUG_RE.match(slug):
        raise BadRequest("Slug harus 3-50 karakter: huruf kecil, angka, dan tanda hubung")
    if _looks_like_an_id(slug):  # paths take an id or a slug: a slug may never read as an id
        raise BadRequest("Slug tidak boleh berbentuk UUID")
    return name, slug


def _looks_like_an_id(slug: str) -> bool:
    try:
        uuid.UUID(slug)
    except ValueError:
        return False
    return True


async def lock_team(cur: db.Cursor, team_id: uuid.UUID) -> dict:
    """Lock the team row (serialises quota checks) and return it, with its billing state when it
    has a Stripe customer (`billing_status`, `billing_customer`: docs/billing.md)."""
    row = await db.fetchone(
        cur, """SELECT t.*, b.status AS billing_status, b.customer_id IS NOT NULL AS billing_customer
                FROM teams t LEFT JOIN team_billing b ON b.team_id = t.id
                WHERE t.id = %s FOR NO KEY UPDATE OF t""", (team_id,))
    if row is None:
        raise NotFound(TEAM_NOT_FOUND)
    return row


async def list_teams(conn: db.Connection, actor: Actor) -> list[dict]:
    """The actor's teams (a team-bound token's one team), each with the actor's `role`."""
    bound = actor.scope.team_id if actor.scope else None
    async with db.cursor(conn) as cur:
        return await db.fetchall(
            cur,
            """SELECT t.*, m.role FROM teams t JOIN team_members m ON m.team_id = t.id
               WHERE m.user_id = %s AND (%s::uuid IS NULL OR t.id = %s::uuid)
               ORDER BY t.name, t.slug""",
            (actor.user_id, bound, bound),
        )


async def resolve(conn: db.Connection, ref: str) -> uuid.UUID:
    """The id of the team named by `ref`: its id (canonical UUID form) or its slug. An unknown
    slug is a 404 like any team the caller is not in."""
    if UUID_RE.match(ref):
        return uuid.UUID(ref)
    if not SLUG_RE.match(ref):
        raise NotFound(TEAM_NOT_FOUND)
    async with db.cursor(conn) as cur:
        row = await db.fetchone(cur, "SELECT id FROM teams WHERE slug = %s", (ref,))
    if row is None:
        raise NotFound(TEAM_NOT_FOUND)
    return row["id"]


async def require_member(conn: db.Connection, actor: Actor, ref: str) -> uuid.UUID:
    """The id of the team named by `ref` (its id or slug) when the actor is in it (and, for a
    token, within its scope): what a team route checks before it reads a request's body. 404
    otherwise, as for a team that does not exist; the route's own role check follows."""
    team_id = await resolve(conn, ref)
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, VIEWER, reading=True)
    return team_id


async def create_team(conn: db.Connection, actor: Actor, name: str, slug: str, *,
                      plan_name: str | None = None, configured_plan: str | None = None,
                      e2e_wrapped_key: object = None, e2e_auth: object = None,
                      team_id: uuid.UUID | None = None) -> dict:
    """A new team on `plan_name`, by default the instance's plan for new teams
    (`instance.settings.default_plan`: the one chosen at set-up or in the admin panel, else
    `configured_plan`, the operator's `CVSM_DEFAULT_PLAN`, else Starter), with the actor as its
    Owner.

    With `e2e_wrapped_key` the team is end-to-end, at key version 1, and that wrap (of the key
    the creator's client made, to the creator's public key) is the creator's; the creator must
    have set up a key pair (400 otherwise). The wrap is bound to the team's id, so the client
    chooses it (`team_id`, required for an end-to-end team and only there)."""
    name, slug = check_team_fields(name, slug)
    if actor.scope is not None:  # a scoped token cannot reach past its scope by making a team
        raise Forbidden(roles.READ_ONLY if actor.scope.read_only else "Token ini terikat pada satu tim")
    wrapped = None if e2e_wrapped_key is None else e2e_syntax.check_wrap(e2e_wrapped_key)
    auth = e2e_syntax.check_auth(e2e_auth, "e2e.auth")  # the creator's own recipient auth (format 2)
    if wrapped is None and team_id is not None:
        raise BadRequest(TEAM_ID_ONLY_E2E)
    if wrapped is not None and team_id is None:
        raise BadRequest(TEAM_ID_REQUIRED)
    async with db.transaction(conn) as cur:
        if plan_name is None:
            plan_name = await instance_settings.default_plan(cur, configured_plan)
        plan = PLANS[plan_name]
        if wrapped is not None and await db.fetchone(
                cur, "SELECT 1 FROM user_e2e_keys WHERE user_id = %s", (actor.user_id,)) is None:
            raise BadRequest(e2e_syntax.NO_USER_KEY)
        # An id in use, or one that named a team or a secret since deleted (`retired_ids`,
        # migration 0019: its audit chain is keyed by it), is taken for good.
        if team_id is not None and await db.fetchone(
                cur, """SELECT 1 FROM teams WHERE id = %(id)s
                          UNION ALL SELECT 1 FROM retired_ids WHERE id = %(id)s""",
                {"id": team_id}) is not None:
            raise Conflict(TEAM_ID_TAKEN)
        async with db.unique_as_conflict(cur, SLUG_TAKEN):
            team = await db.fetchone(
                cur,
                """INSERT INTO teams (id, slug, name, plan, max_secrets, max_members, e2e,
                                      key_version)
                   VALUES (coalesce(%s, gen_random_uuid()), %s, %s, %s, %s, %s, %s, %s)
                   RETURNING *""",
                (team_id, slug, name, plan_name, plan["max_secrets"], plan["max_members"],
                 wrapped is not None, 1 if wrapped is not None else None),
            )
        await cur.execute(
            "INSERT INTO team_members (team_id, user_id, role) VALUES (%s, %s, %s)",
            (team["id"], actor.user_id, OWNER),
        )
        if wrapped is not None:
            await e2e.insert_wrap(cur, actor, team["id"], 1, wrapped_key=wrapped, auth=auth,
                                  user_id=actor.user_id)
        await audit.record(cur, actor, "team_create", "team", team_id=team["id"],
                           resource_id=team["id"],
                           metadata={"slug": slug, **({"e2e": True} if wrapped else {})})
    return {**team, "role": OWNER}


async def get_team(conn: db.Connection, actor: Actor, team_id: uuid.UUID) -> dict:
    async with db.cursor(conn) as cur:
        role = await roles.require(cur, team_id, actor, VIEWER)
        team = await db.fetchone(cur, "SELECT * FROM teams WHERE id = %s", (team_id,))
    return {**team, "role": role}


async def plan_usage(conn: db.Connection, actor: Actor, team_id: uuid.UUID) -> dict:
    """The team's plan, each quota's limit (None: unlimited) and what is used of it: live
    secrets (`max_secrets`), seats taken by members and pending invitations (`max_members`),
    environments holding a live secret (`max_environments`), and the audit log's retention in
    days. Viewer or above; `upgrade_command` is the operator's command that raises the limits
    (`quota_lift`)."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, VIEWER)
        team = await db.fetchone(cur, "SELECT * FROM teams WHERE id = %s", (team_id,))
        used = await db.fetchone(
            cur,
            """SELECT count(*) AS secrets,
                      array_agg(DISTINCT environment) FILTER (WHERE environment IS NOT NULL)
                          AS environments,
                      cvsm_audit_retention_days(%(team)s) AS retention_days
               FROM secrets WHERE team_id = %(team)s AND deleted_at IS NULL""",
            {"team": team_id})
        seats = await seats_taken(cur, team_id)
    active = sorted(used["environments"] or [], key=ENVIRONMENTS.index)
    return {
        "plan": team["plan"], "slug": team["slug"],
        "secrets": {"used": used["secrets"], "limit": team["max_secrets"]},
        "members": {"used": seats, "limit": team["max_members"]},
        "environments": {"used": len(active), "limit": max_environments(team["plan"]),
                         "active": active},
        "retention_days": used["retention_days"],
        "upgrade_command": upgrade_command(team["slug"], team["plan"]),
    }


async def delete_team(conn: db.Connection, actor: Actor, team_id: uuid.UUID) -> None:
    """Owner only; secrets and the tokens bound to it go with it, audit entries stay (their team
    reference nulled)."""
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, OWNER)
        team = await lock_team(cur, team_id)
        if team["billing_status"] in ("active", "trialing", "past_due", "unpaid"):
            raise Conflict(STILL_SUBSCRIBED)
        await audit.record(cur, actor, "team_delete", "team", team_id=None, resource_id=team_id,
                           metadata={"slug": team["slug"]})
        await cur.execute("DELETE FROM teams WHERE id = %s", (team_id,))
        await credentials.bump(cur)  # tokens bound to the team went with it


_MEMBER_SQL = """SELECT m.user_id, m.role, u.email, u.username, u.name
                 FROM team_members m JOIN users u ON u.id = m.user_id"""


async def list_members(conn: db.Connection, actor: Actor, team_id: uuid.UUID) -> list[dict]:
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, VIEWER)
        return await db.fetchall(
            cur, _MEMBER_SQL + " WHERE m.team_id = %s ORDER BY u.username", (team_id,)
        )


async def seats_taken(cur: db.Cursor, team_id: uuid.UUID, *, joining_email: str | None = None) -> int:
    """Members plus pending invitations (spec: both count toward `max_members`).

    An invitation to someone who is already a member takes no second seat, nor does one to
    `joining_email` (the person joining now, whose seat is the one being filled)."""
    row = await db.fetchone(
        cur,
        """SELECT (SELECT count(*) FROM team_members WHERE team_id = %(team)s)
                + (SELECT count(*) FROM team_invites i
                   WHERE i.team_id = %(team)s AND i.accepted_at IS NULL
                     AND i.revoked_at IS NULL AND i.expires_at > now()
                     AND lower(i.email) IS DISTINCT FROM lower(%(joining)s)
                     AND NOT EXISTS (SELECT 1 FROM team_members m JOIN users u ON u.id = m.user_id
                                     WHERE m.team_id = i.team_id
                                       AND lower(u.email) = lower(i.email))) AS n""",
        {"team": team_id, "joining": joining_email},
    )
    return row["n"]


async def check_seat(cur: db.Cursor, team: Mapping, *, joining_email: str | None = None) -> None:
    """403 when the team (locked by the caller) has no seat left for one more person."""
    if team["max_members"] is not None and \
            await seats_taken(cur, team["id"], joining_email=joining_email) >= team["max_members"]:
        raise quota_refused(MEMBER_QUOTA, team, "max_members")


def check_grant(caller_role: str, role: str) -> None:
    """Only an Owner grants (or invites to) Admin or Owner."""
    if RANK[role] >= RANK[ADMIN] and caller_role != OWNER:
        raise Forbidden("Hanya Owner yang dapat memberikan peran Admin atau Owner")


def grantable_roles(caller_role: str | None) -> list[str]:
    """The roles `caller_role` may give (`check_grant`): none below Admin, Viewer and Member
    for an Admin, every role for an Owner."""
    if not roles.may(caller_role, ADMIN):
        return []
    return [role for role in RANK if caller_role == OWNER or RANK[role] < RANK[ADMIN]]


def may_change_role(caller_role: str | None, member_role: str, *, owners: int) -> bool:
    """Whether `update_member` lets `caller_role` change a `member_role`'s role at all;
    `owners` is the team's number of Owners (the last one stays an Owner)."""
    if member_role == OWNER and owners <= 1:
        return False
    return roles.may(caller_role, ADMIN) and (RANK[member_role] < RANK[ADMIN]
                                               or caller_role == OWNER)


def may_remove(caller_role: str | None, member_role: str, *, is_self: bool, owners: int) -> bool:
    """Whether `remove_member` lets `caller_role` remove the member (themself when `is_self`);
    `owners` is the team's number of Owners (the last one stays)."""
    if member_role == OWNER and owners <= 1:
        return False
    return is_self or may_change_role(caller_role, member_role, owners=owners)


async def add_member(conn: db.Connection, actor: Actor, team_id: uuid.UUID, identifier: str,
                     role: str) -> dict:
    """Add an existing user (by email or username) with `role`; Admin or above, within quota."""
    role = check_role(role)
    identifier = identifier.strip()
    column = "email" if "@" in identifier else "username"
    async with db.transaction(conn) as cur:
        caller_role = await roles.require(cur, team_id, actor, ADMIN)
        check_grant(caller_role, role)
        team = await lock_team(cur, team_id)
        user = await db.fetchone(
            cur, f"SELECT id, email FROM users WHERE lower({column}) = lower(%s)", (identifier,)
        )
        if user is None:
            raise NotFound("Pengguna tidak ditemukan")
        if await roles.role_of(cur, team_id, user["id"]) is not None:
            raise Conflict("Pengguna sudah menjadi anggota tim ini")
        await check_seat(cur, team, joining_email=user["email"])
        await cur.execute(
            "INSERT INTO team_members (team_id, user_id, role) VALUES (%s, %s, %s)",
            (team_id, user["id"], role),
        )
        # An invitation still pending for this person is answered: they are in.
        await cur.execute(
            """UPDATE team_invites SET revoked_at = now()
               WHERE team_id = %s AND lower(email) = lower(%s)
                 AND accepted_at IS NULL AND revoked_at IS NULL""",
            (team_id, user["email"]),
        )
        row = await db.fetchone(
            cur, _MEMBER_SQL + " WHERE m.team_id = %s AND m.user_id = %s", (team_id, user["id"])
        )
        await audit.record(cur, actor, "member_add", "member", team_id=team_id,
                           resource_id=user["id"],
                           metadata={"email": user["email"], "role": role})
    return row


async def _target(cur: db.Cursor, actor: Actor, team_id: uuid.UUID,
                  user_id: uuid.UUID) -> tuple[str, dict]:
    """The actor's role and the member row to act on, with the team locked."""
    caller_role = await roles.require(cur, team_id, actor, VIEWER)
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


async def update_member(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                        user_id: uuid.UUID, role: str) -> dict:
    """Change a member's role; only an Owner grants or changes Admin and Owner; the last Owner
    stays."""
    role = check_role(role)
    roles.check_writable(actor)
    async with db.transaction(conn) as cur:
        caller_role, member = await _target(cur, actor, team_id, user_id)
        roles.check_rank(caller_role, ADMIN)
        check_grant(caller_role, role)
        if RANK[member["role"]] >= RANK[ADMIN] and caller_role != OWNER:
            raise Forbidden("Hanya Owner yang dapat mengubah peran Admin atau Owner")
        if member["role"] == OWNER and role != OWNER and await _owner_count(cur, team_id) <= 1:
            raise Conflict("Tim harus memiliki setidaknya satu Owner")
        await cur.execute(
            "UPDATE team_members SET role = %s WHERE team_id = %s AND user_id = %s",
            (role, team_id, member["user_id"]),
        )
        await audit.record(cur, actor, "member_update", "member", team_id=team_id,
                           resource_id=member["user_id"],
                           metadata={"email": member["email"], "from": member["role"],
                                     "to": role})
    return {**member, "role": role}


async def remove_member(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                        user_id: uuid.UUID) -> None:
    """Remove a member (Admin or above; anyone may leave); the last Owner stays."""
    roles.check_writable(actor)
    async with db.transaction(conn) as cur:
        caller_role, member = await _target(cur, actor, team_id, user_id)
        if member["user_id"] != actor.user_id:
            roles.check_rank(caller_role, ADMIN)
            if RANK[member["role"]] >= RANK[ADMIN] and caller_role != OWNER:
                raise Forbidden("Hanya Owner yang dapat mengeluarkan Admin atau Owner")
        if member["role"] == OWNER and await _owner_count(cur, team_id) <= 1:
            raise Conflict("Tim harus memiliki setidaknya satu Owner")
        await cur.execute(
            "DELETE FROM team_members WHERE team_id = %s AND user_id = %s",
            (team_id, member["user_id"]),
        )
        # An end-to-end team's keys: nothing wrapped for them (or their tokens) stays.
        dropped = await e2e.drop_member_wraps(cur, team_id, member["user_id"])
        await audit.record(cur, actor, "member_remove", "member", team_id=team_id,
                           resource_id=member["user_id"],
                           metadata={"email": member["email"], "role": member["role"],
                                     **({"e2e_wraps_dropped": dropped} if dropped else {})})
