"""CLI sign-in: the OAuth 2.0 Device Authorization Grant (RFC 8628) behind `cvsm login`.

1. The terminal asks for a code (`start`, `POST /auth/device/code`, no credential): a secret
   device code (kept by the terminal; stored here only as its keyed hash) and a short user code
   `XXXX-XXXX` from an alphabet without vowels or look-alikes (RFC 8628 section 6.1), valid
   `EXPIRES_IN` seconds.
2. A signed-in member opens `{app_url}/device`, enters or confirms the user code, sees the
   requesting client's host name, address and agent (so a phished code shows), picks one of
   their teams and the reach (reads only or the member's role; some environments), and approves
   or denies (`describe`, `decide`). Wrong user codes count like wrong passwords: per address
   (`failed_auth`) and per account (the progressive delay), so codes cannot be guessed.
3. The terminal polls (`poll`, `POST /auth/device/token`) no faster than `interval` seconds:
   `authorization_pending`, `slow_down` (polled too fast: the interval grows by 5 s),
   `access_denied`, `expired_token`, or, once approved, a new API token for that machine, named
   "cvsm login on <hostname>", bound to the chosen team and never wider than the approver (a
   Viewer's token is read-only; the approver's role is read again when it is minted). The token
   is minted then and shown once, expiring `CVSM_DEVICE_TOKEN_DAYS` (90) days later (then it
   answers as any expired token); the code is spent (a second poll: `invalid_grant`, as for an
   unknown code).
The error values are RFC 8628's (and RFC 6749's `invalid_grant`), fixed like `2fa_required`.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import timedelta

from .. import db
from ..audit import log as audit
from ..core.actor import Actor
from ..core.errors import BadRequest, Forbidden, NotFound
from ..core.i18n import Text
from ..core.inputs import check_line
from ..core.timeutil import iso
from ..crypto.sealing import Keyring
from ..e2e import service as e2e
from ..secrets.inputs import ENVIRONMENTS, check_environment
from ..teams import roles, service as teams
from . import credentials, ratelimit, tokens
from .sessions import require_jwt

EXPIRES_IN = 600          # seconds a code lives
INTERVAL = 5              # seconds between polls (RFC 8628's default)
SLOW_DOWN_STEP = 5        # seconds added to the interval at each `slow_down`
MAX_INTERVAL = 60
TOKEN_DAYS = 90           # days a minted token lives unless `CVSM_DEVICE_TOKEN_DAYS` says
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"  # RFC 8628 6.1: no vowels, no look-alikes
USER_CODE_LENGTH = 8
HOSTNAME_MAX = 64
GRANT_TYPE = "urn:ietf:params:oauth:grant-type:device_code"
PATH = "/device"

# The error values (RFC 8628 3.5, RFC 6749 5.2): fixed, never translated.
AUTHORIZATION_PENDING = "authorization_pending"
SLOW_DOWN = "slow_down"
ACCESS_DENIED = "access_denied"
EXPIRED_TOKEN = "expired_token"
INVALID_GRANT = "invalid_grant"
UNSUPPORTED_GRANT_TYPE = "unsupported_grant_type"

USER_CODE_UNKNOWN = "Kode tidak dikenal, sudah dipakai, atau sudah kedaluwarsa"
VIEWER_READ_ONLY = "Peran Viewer hanya dapat menyetujui token hanya-baca"
E2E_TEAM = ("Tim end-to-end memerlukan token yang dibuat di peramban (halaman Token API): "
            "pilih tim lain untuk cvsm login")
BAD_DECISION = "Pilih setujui atau tolak"


class DeviceError(BadRequest):
    """An RFC 8628 token-endpoint error: 400 with `error` = one of the fixed values."""


def normalise_user_code(text: str) -> str | None:
    """The user code as stored (8 letters of the alphabet), from what a person typed: case,
    spaces and dashes do not matter. None when it cannot be a code."""
    code = "".join(c for c in text.upper() if c not in " -\t")
    if len(code) != USER_CODE_LENGTH or any(c not in USER_CODE_ALPHABET for c in code):
        return None
    return code


def display_user_code(code: str) -> str:
    return f"{code[:4]}-{code[4:]}"


def _new_user_code() -> str:
    return "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(USER_CODE_LENGTH))


async def start(conn: db.Connection, client: Actor, keyring: Keyring, *, app_url: str,
                hostname: str | None = None) -> dict:
    """A new device authorization for the terminal `client`: RFC 8628's answer (3.2)."""
    host = (hostname or "").strip()
    if hostname is not None and not 1 <= len(host) <= HOSTNAME_MAX:
        raise BadRequest(Text("Kolom '{name}' harus 1 sampai {n} karakter", name="hostname",
                              n=HOSTNAME_MAX))
    check_line("hostname", host)
    device_code = secrets.token_urlsafe(32)
    async with db.cursor(conn) as cur:
        for _attempt in range(5):  # a live user code taken already: another one
            user_code = _new_user_code()
            row = await db.fetchone(
                cur,
                """INSERT INTO device_authorizations
                       (device_code_hash, user_code, client_ip, client_user_agent, hostname,
                        expires_at, interval_seconds)
                   VALUES (%s, %s, %s, %s, %s, now() + %s, %s)
                   ON CONFLICT (user_code) WHERE status = 'pending' DO NOTHING
                   RETURNING id""",
                (keyring.token_hash(device_code), user_code, client.ip, client.user_agent, host,
                 timedelta(seconds=EXPIRES_IN), INTERVAL),
            )
            if row is not None:
                break
        else:  # 20^8 codes: five collisions in a row do not happen
            raise RuntimeError("no free user code")
    uri = app_url.rstrip("/") + PATH
    shown = display_user_code(user_code)
    return {"device_code": device_code, "user_code": shown, "verification_uri": uri,
            "verification_uri_complete": f"{uri}?user_code={shown}",
            "expires_in": EXPIRES_IN, "interval": INTERVAL}


_LIVE = """SELECT id, user_code, client_ip, client_user_agent, hostname, created_at, expires_at
           FROM device_authorizations
           WHERE user_code = %s AND status = 'pending' AND expires_at > now()"""


async def describe(conn: db.Connection, actor: Actor, user_code: str,
                   failures: ratelimit.Charge | None = None) -> dict:
    """The pending authorization a signed-in member typed the code of (what the page shows
    before they decide). A wrong code counts as a failed credential of the address and the
    account; while either waits, every code is refused (429) before it is looked up."""
    require_jwt(actor)
    account = f"device:{actor.user_id}"
    await ratelimit.guard(conn, failures, account)
    code = normalise_user_code(user_code)
    row = None
    if code is not None:
        async with db.cursor(conn) as cur:
            row = await db.fetchone(cur, _LIVE, (code,))
    if row is None:
        await ratelimit.failed(conn, failures, account)
        raise NotFound(USER_CODE_UNKNOWN)
    return {**row, "user_code": display_user_code(row["user_code"])}


async def decide(conn: db.Connection, actor: Actor, user_code: str, *, approve: bool,
                 team: str | None = None, read_only: bool = True,
                 environments: list[str] | None = None,
                 failures: ratelimit.Charge | None = None) -> dict:
    """Approve (for one of the actor's teams, no wider than the actor's role there) or deny
    the pending authorization named by `user_code`. Returns the authorization row."""
    found = await describe(conn, actor, user_code, failures)
    team_id = None
    if approve:
        if not team:
            raise BadRequest("Pilih tim untuk token ini")
        if environments is not None:
            if not environments:
                environments = None
            else:
                for environment in environments:
                    check_environment(environment)
                environments = [e for e in ENVIRONMENTS if e in environments]
        team_id = await teams.resolve(conn, team)
    async with db.transaction(conn) as cur:
        if approve:
            role = await roles.require(cur, team_id, actor, roles.VIEWER)  # 404 unless a member
            if role == roles.VIEWER and not read_only:
                raise Forbidden(VIEWER_READ_ONLY)
            if await e2e.key_version_of(cur, team_id) is not None:
                raise BadRequest(E2E_TEAM)
        row = await db.fetchone(
            cur,
            """UPDATE device_authorizations
               SET status = %s, decided_by = %s, decided_at = now(), team_id = %s,
                   read_only = %s, environments = %s
               WHERE id = %s AND status = 'pending' AND expires_at > now()
               RETURNING id, hostname, client_ip, team_id, read_only, environments""",
            ("approved" if approve else "denied", actor.user_id, team_id, read_only,
             environments, found["id"]),
        )
        if row is None:  # decided or expired meanwhile
            raise NotFound(USER_CODE_UNKNOWN)
        await audit.record(cur, actor, "device_approve" if approve else "device_deny",
                           "device_authorization", team_id=team_id, resource_id=row["id"],
                           metadata={"hostname": row["hostname"], "client_ip": row["client_ip"],
                                     "read_only": read_only, "environments": environments})
    async with db.cursor(conn) as cur:
        await ratelimit.passed(cur, f"device:{actor.user_id}")
    return row


async def poll(conn: db.Connection, client: Actor, keyring: Keyring, device_code: str, *,
               grant_type: str | None = None, token_days: int = TOKEN_DAYS,
               failures: ratelimit.Charge | None = None) -> tuple[dict, str, Mapping]:
    """The terminal's poll (RFC 8628 3.4/3.5): a DeviceError with the fixed value while there
    is nothing to give; once approved, (the new token's row, the token, its team), once. The
    token expires `token_days` days after it is minted (`CVSM_DEVICE_TOKEN_DAYS`)."""
    if grant_type is not None and grant_type != GRANT_TYPE:
        raise DeviceError(UNSUPPORTED_GRANT_TYPE)
    await ratelimit.guard(conn, failures)
    digest = keyring.token_hash(device_code)
    async with db.transaction(conn) as cur:
        row = await db.fetchone(
            cur,
            """SELECT d.*, d.expires_at <= now() AS expired,
                      d.last_polled_at > now() - make_interval(secs => d.interval_seconds)
                          AS too_fast
               FROM device_authorizations d WHERE device_code_hash = %s FOR UPDATE""",
            (digest,),
        )
        if row is None or row["status"] == "spent":
            failed = True
        else:
            failed = False
            await cur.execute("UPDATE device_authorizations SET last_polled_at = now() "
                              "WHERE id = %s", (row["id"],))
    if failed:
        await ratelimit.failed(conn, failures)
        raise DeviceError(INVALID_GRANT)
    if row["status"] == "denied":
        raise DeviceError(ACCESS_DENIED)
    if row["expired"]:
        raise DeviceError(EXPIRED_TOKEN)
    if row["status"] == "pending":
        if row["too_fast"]:
            async with db.cursor(conn) as cur:
                await cur.execute(
                    "UPDATE device_authorizations SET interval_seconds = least(%s, "
                    "interval_seconds + %s) WHERE id = %s",
                    (MAX_INTERVAL, SLOW_DOWN_STEP, row["id"]))
            raise DeviceError(SLOW_DOWN)
        raise DeviceError(AUTHORIZATION_PENDING)
    return await _mint(conn, keyring, row, token_days)


async def _mint(conn: db.Connection, keyring: Keyring, found: Mapping,
                token_days: int) -> tuple[dict, str, Mapping]:
    """The approved authorization's token: made now, in the same transaction that spends it,
    expiring `token_days` days from now."""
    token = tokens.generate()
    async with db.transaction(conn) as cur:
        spent = await db.fetchone(
            cur,
            """UPDATE device_authorizations SET status = 'spent'
               WHERE id = %s AND status = 'approved' RETURNING id""",
            (found["id"],))
        if spent is None:  # another poll took it
            raise DeviceError(INVALID_GRANT)
        approver = await db.fetchone(
            cur,
            """SELECT u.id, u.email, m.role, t.slug, t.name
               FROM users u JOIN team_members m ON m.user_id = u.id AND m.team_id = %s
               JOIN teams t ON t.id = m.team_id
               WHERE u.id = %s AND u.disabled_at IS NULL""",
            (found["team_id"], found["decided_by"]))
        if approver is None:  # left the team (or was disabled) since approving
            raise DeviceError(ACCESS_DENIED)
        read_only = found["read_only"] or approver["role"] == roles.VIEWER
        name = "cvsm login on " + (found["hostname"] or found["client_ip"] or "?")
        name = name[:100]
        row = await db.fetchone(
            cur,
            f"""INSERT INTO api_tokens (user_id, name, token_prefix, token_hash, team_id,
                                        environments, read_only, expires_at)
                VALUES (%s, %s, %s, %s, %s, %s, %s, now() + make_interval(days => %s))
                RETURNING {tokens.COLUMNS}""",
            (approver["id"], name, token[:tokens.PREFIX_LENGTH], keyring.token_hash(token),
             found["team_id"], found["environments"], read_only, token_days))
        await cur.execute("UPDATE device_authorizations SET token_id = %s WHERE id = %s",
                          (row["id"], found["id"]))
        minter = Actor(ip=found["client_ip"], user_agent=found["client_user_agent"],
                       user_id=approver["id"], email=approver["email"], via="device_flow")
        await audit.record(cur, minter, "token_create", "api_token", resource_id=row["id"],
                           team_id=found["team_id"],
                           metadata={"name": name, "token_prefix": row["token_prefix"],
                                     "environments": found["environments"],
                                     "read_only": read_only,
                                     "expires_at": iso(row["expires_at"]),
                                     "device_authorization": str(found["id"])})
    return row, token, {"id": str(found["team_id"]), "slug": approver["slug"],
                        "name": approver["name"]}


async def current_token(conn: db.Connection, actor: Actor) -> tuple[dict, dict | None]:
    """The API token the actor is calling with (`cvsm whoami`) and its team, if bound to one."""
    if actor.via != "api_token" or actor.token_id is None:
        raise Forbidden("Hanya untuk permintaan dengan token API")
    async with db.cursor(conn) as cur:
        row = await db.fetchone(cur, f"SELECT {tokens.COLUMNS} FROM api_tokens WHERE id = %s",
                                (actor.token_id,))
        team = None
        if row is not None and row["team_id"] is not None:
            team = await db.fetchone(cur, "SELECT id, slug, name FROM teams WHERE id = %s",
                                     (row["team_id"],))
    if row is None:
        raise NotFound("Token tidak ditemukan")
    return row, team


async def revoke_current_token(conn: db.Connection, actor: Actor) -> None:
    """Revoke the API token the actor is calling with (`cvsm logout`): it stops working in every
    process at once."""
    if actor.via != "api_token" or actor.token_id is None:
        raise Forbidden("Hanya untuk permintaan dengan token API")
    async with db.transaction(conn) as cur:
        row = await db.fetchone(
            cur,
            """UPDATE api_tokens SET revoked_at = now()
               WHERE id = %s AND revoked_at IS NULL RETURNING id, name, token_prefix, team_id""",
            (actor.token_id,))
        if row is None:
            raise NotFound("Token tidak ditemukan")
        await cur.execute("DELETE FROM team_key_wraps WHERE token_id = %s", (actor.token_id,))
        await credentials.bump(cur)
        await audit.record(cur, actor, "token_revoke", "api_token", resource_id=row["id"],
                           team_id=row["team_id"],
                           metadata={"name": row["name"], "token_prefix": row["token_prefix"]})


async def purge_expired(pool: db.Pool) -> None:
    """Authorizations a day past their expiry (their tokens stay, as any token)."""
    async with db.cursor(pool) as cur:
        await cur.execute("DELETE FROM device_authorizations "
                          "WHERE expires_at < now() - interval '1 day'")

