"""Team invitations by email: create (with the mail), list, revoke, accept.

- Admin or above invites; only an Owner invites to Admin or Owner (`teams.check_grant`).
- A pending invitation (neither accepted, revoked nor expired) takes a seat: members plus
  pending invitations count toward `max_members` (`teams.check_seat`).
- Creating an invitation never looks at whether an account exists for the address: a
  registered and an unknown address get the same answer, the same mail and the same work.
- The token (random, 7 days) goes only into the mail; the database keeps its HMAC
  (`Keyring.token_hash`). Accepting needs the session JWT of the invited address (compared
  case-insensitively); whatever is wrong with a token (unknown, used, revoked, expired, another
  account, already a member) is one generic 400. Accepting proves the address: it is marked
  verified.
"""

from __future__ import annotations

import uuid

from ..audit import log as audit
from .. import db
from ..mail import messages as mail, tokens as mailtokens
from ..accounts import ratelimit
from . import roles
from ..accounts import sessions
from . import service as teams
from ..core.actor import Actor
from ..crypto.sealing import Keyring
from ..core.errors import BadRequest, Conflict, Forbidden, NotFound
from ..core.inputs import check_email
from .roles import ADMIN, OWNER, RANK
from ..core.timeutil import iso

PURPOSE = "team_invite"  # the outbox's purpose for the mail
INVITE_INVALID = "Undangan tidak valid atau sudah tidak berlaku"
INVITE_NOT_FOUND = "Undangan tidak ditemukan"
ALREADY_INVITED = "Email ini sudah memiliki undangan yang masih berlaku untuk tim ini"
ALREADY_MEMBER = "Email ini sudah menjadi anggota tim ini"

# Pending: neither accepted nor revoked, and not expired.
_PENDING = "i.accepted_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > now()"
_INVITE_SQL = """SELECT i.id, i.team_id, i.email, i.role, i.expires_at, i.created_at,
                        u.email AS invited_by_email
                 FROM team_invites i LEFT JOIN users u ON u.id = i.invited_by"""


def invite_json(row: dict) -> dict:
    """An invitation as the API shows it: never its token or hash."""
    return {"id": str(row["id"]), "team_id": str(row["team_id"]), "email": row["email"],
            "role": row["role"], "invited_by": row["invited_by_email"],
            "expires_at": iso(row["expires_at"]), "created_at": iso(row["created_at"])}



async def create_invite(conn: db.Connection, actor: Actor, keyring: Keyring, team_id: uuid.UUID,
                        email: str, role: str, app_url: str) -> dict:
    """Invite `email` to the team with `role` and mail the link; Admin or above, within quota.

    409 when the address is already a member or already has a pending invitation."""
    role = teams.check_role(role)
    email = check_email(email)
    async with db.transaction(conn) as cur:
        caller_role = await roles.require(cur, team_id, actor, ADMIN)
        teams.check_grant(caller_role, role)
        team = await teams.lock_team(cur, team_id)
        member = await db.fetchone(
            cur,
            """SELECT 1 FROM team_members m JOIN users u ON u.id = m.user_id
               WHERE m.team_id = %s AND lower(u.email) = lower(%s)""",
            (team_id, email),
        )
        if member is not None:
            raise Conflict(ALREADY_MEMBER)
        # An expired invitation to this address is closed (at its expiry), so a new one can be
        # made; one that is still pending is a conflict.
        await cur.execute(
            """UPDATE team_invites SET revoked_at = expires_at
               WHERE team_id = %s AND lower(email) = lower(%s) AND accepted_at IS NULL
                 AND revoked_at IS NULL AND expires_at <= now()""",
            (team_id, email),
        )
        pending = await db.fetchone(
            cur,
            """SELECT 1 FROM team_invites WHERE team_id = %s AND lower(email) = lower(%s)
                 AND accepted_at IS NULL AND revoked_at IS NULL""",
            (team_id, email),
        )
        if pending is not None:
            raise Conflict(ALREADY_INVITED)
        await teams.check_seat(cur, team)
        token = mailtokens.generate()
        async with db.unique_as_conflict(cur, ALREADY_INVITED):
            row = await db.fetchone(
                cur,
                """INSERT INTO team_invites (team_id, email, role, token_hash, invited_by, expires_at)
                   VALUES (%s, %s, %s, %s, %s, now() + %s) RETURNING id""",
                (team_id, email, role, keyring.token_hash(token), actor.user_id,
                 mailtokens.INVITE_LIFETIME),
            )
        invite = await db.fetchone(cur, _INVITE_SQL + " WHERE i.id = %s", (row["id"],))
        link = f"{app_url}/invites/accept?token={token}"
        await mail.send(cur, keyring, PURPOSE, "team_invite", email, {
            "app_url": app_url, "link": link, "team_name": team["name"], "role": role,
            "inviter": actor.email or "",
            "days": mailtokens.INVITE_LIFETIME.days,
        }, tokens=(token,))
        await audit.record(cur, actor, "invite_created", "invite", team_id=team_id,
                           resource_id=invite["id"], metadata={"email": email, "role": role})
    return invite


async def list_invites(conn: db.Connection, actor: Actor, team_id: uuid.UUID) -> list[dict]:
    """The team's pending invitations, newest first; Admin or above."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, ADMIN, reading=True)
        return await db.fetchall(
            cur, _INVITE_SQL + f" WHERE i.team_id = %s AND {_PENDING} ORDER BY i.created_at DESC, i.id",
            (team_id,),
        )


async def revoke_invite(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                        invite_id: uuid.UUID) -> None:
    """Revoke a pending invitation (Admin or above; only an Owner revokes one to Admin or
    Owner, as only an Owner made it); 404 for an id that is not a pending one of this team."""
    async with db.transaction(conn) as cur:
        caller_role = await roles.require(cur, team_id, actor, ADMIN)
        await teams.lock_team(cur, team_id)
        invite = await db.fetchone(
            cur, f"SELECT i.id, i.role, i.email FROM team_invites i WHERE i.id = %s "
                 f"AND i.team_id = %s AND {_PENDING} FOR UPDATE",
            (invite_id, team_id),
        )
        if invite is None:
            raise NotFound(INVITE_NOT_FOUND)
        if RANK[invite["role"]] >= RANK[ADMIN] and caller_role != OWNER:
            raise Forbidden("Hanya Owner yang dapat mencabut undangan Admin atau Owner")
        await cur.execute("UPDATE team_invites SET revoked_at = now() WHERE id = %s", (invite_id,))
        await audit.record(cur, actor, "invite_revoked", "invite", team_id=team_id,
                           resource_id=invite_id,
                           metadata={"email": invite["email"], "role": invite["role"]})


async def describe_invite(conn: db.Connection, keyring: Keyring, token: object,
                          failures: ratelimit.Charge | None = None) -> dict | None:
    """What the landing page of the invitation link `token` names: the team (name and slug),
    the inviter's email (None once that account is gone) and the role; None when the token
    opens no pending invitation. The token's holder was told the same by the mail; nothing
    is changed (a mail scanner may open the link). The link is a credential: the lookup stands
    behind the failed-credential throttle (`failures`, the client's address; a 429 while it
    is limited) and a token that opens nothing is counted there."""
    if not mailtokens.well_formed(token):
        return None
    await ratelimit.guard(conn, failures)
    async with db.cursor(conn) as cur:
        found = await db.fetchone(
            cur, f"""SELECT t.name AS team_name, t.slug AS team_slug, i.role,
                            u.email AS invited_by_email
                     FROM team_invites i JOIN teams t ON t.id = i.team_id
                     LEFT JOIN users u ON u.id = i.invited_by
                     WHERE i.token_hash = %s AND {_PENDING}""",
            (keyring.token_hash(token),),  # type: ignore[arg-type]
        )
    if found is None:
        await ratelimit.failed(conn, failures)
    return found


async def accept_invite(conn: db.Connection, actor: Actor, keyring: Keyring, token: object) -> dict:
    """Join the team of the invitation `token` (session JWT of the invited address only).

    Returns the team with the new role. One generic 400 for every token problem; 403 when the
    team has no seat left (its plan changed since the invitation)."""
    sessions.require_jwt(actor)
    if not mailtokens.well_formed(token):
        raise BadRequest(INVITE_INVALID)
    token_hash = keyring.token_hash(token)  # type: ignore[arg-type]
    async with db.transaction(conn) as cur:
        found = await db.fetchone(
            cur, "SELECT team_id FROM team_invites WHERE token_hash = %s", (token_hash,)
        )
        if found is None:
            raise BadRequest(INVITE_INVALID)
        # The team first, then the invitation: the same lock order as create and revoke.
        team = await teams.lock_team(cur, found["team_id"])
        invite = await db.fetchone(
            cur, f"SELECT i.* FROM team_invites i WHERE i.token_hash = %s AND {_PENDING} FOR UPDATE",
            (token_hash,),
        )
        user = await db.fetchone(cur, "SELECT id, email FROM users WHERE id = %s FOR NO KEY UPDATE",
                                 (actor.user_id,))
        if invite is None or user is None or user["email"].lower() != invite["email"].lower() \
                or await roles.role_of(cur, team["id"], user["id"]) is not None:
            raise BadRequest(INVITE_INVALID)
        await teams.check_seat(cur, team, joining_email=user["email"])
        await cur.execute(
            "INSERT INTO team_members (team_id, user_id, role) VALUES (%s, %s, %s)",
            (team["id"], user["id"], invite["role"]),
        )
        await cur.execute(
            "UPDATE team_invites SET accepted_at = now(), accepted_by = %s WHERE id = %s",
            (user["id"], invite["id"]),
        )
        # Following the link proves the address.
        await cur.execute("UPDATE users SET email_verified = true WHERE id = %s", (user["id"],))
        await audit.record(cur, actor, "invite_accepted", "invite", team_id=team["id"],
                           resource_id=invite["id"],
                           metadata={"email": invite["email"], "role": invite["role"]})
    return {**team, "role": invite["role"]}
