"""API access tokens: format, keyed hashes, lookup with prefix locks and IP allowlists, and
their management (list, create, revoke).

Rules (spec, Authentication; contract, API access tokens):
- format `cvsm_` + 64 lowercase hex, checked before any storage lookup;
- stored as HMAC-SHA-256 under a server key, compared in constant time;
- 10 failed lookups for one prefix in 5 minutes lock that prefix for 5 minutes (429);
- with `allowed_ips`, a request from elsewhere is a 403 that counts in `failed_auth_count`; the
  fifth miss locks the token for an hour (`locked_until`, 401 meanwhile) and resets the count;
- a failed lookup is counted per client IP first (`failed_auth` rate limit): past that limit
  the answer is 429 and nothing more is stored.
A token bound to an end-to-end team has its own X25519 public key; the client that makes it
wraps the team key to it (stored with the team's wraps, `e2e`) and appends the private key to the
token string it shows, so the server never sees that half. Only a token bound to one team can
carry a key: a token without a team reaches the user's end-to-end teams' names and envelopes, but
no team key (its `GET .../e2e/key` is a 403).
All lock state lives in PostgreSQL, shared by every server process; a known token is served from
the process's `credentials` cache, which every lock and revocation invalidates (`credentials.bump`).
"""

from __future__ import annotations

import hmac
import re
import secrets
import time
import uuid
from collections.abc import Mapping
from datetime import timedelta

from ..audit import log as audit
from . import credentials
from .. import db
from ..e2e import service as e2e
from ..e2e import syntax as e2e_syntax
from . import ratelimit
from ..teams import roles, service as teams
from ..core.actor import Actor, Scope
from ..core.clientip import address_allowed, validate_allowlist
from ..crypto.sealing import Keyring
from ..core.errors import BadRequest, Conflict, Forbidden, NotFound, TooManyRequests, Unauthorized
from ..core.i18n import Text
from ..core.inputs import check_line, timestamp
from ..secrets.inputs import ENVIRONMENTS, check_environment
from .sessions import require_jwt
from ..core.timeutil import iso, now

TOKEN_RE = re.compile(r"cvsm_[0-9a-f]{64}\Z")
PREFIX_LENGTH = 13  # "cvsm_" and 8 hex digits
PREFIX_FAILURES = 10
PREFIX_WINDOW = timedelta(minutes=5)
PREFIX_LOCK = timedelta(minutes=5)
ALLOWLIST_MISSES = 5
ALLOWLIST_LOCK = timedelta(hours=1)
LAST_USE_EVERY = timedelta(seconds=60)

INVALID = "Token tidak valid, kedaluwarsa, atau sudah dicabut"
PREFIX_LOCKED = "Terlalu banyak percobaan token, coba lagi nanti"
TOKEN_LOCKED = "Token dikunci sementara karena akses dari alamat yang tidak diizinkan"
IP_NOT_ALLOWED = "Alamat IP ini tidak diizinkan untuk token tersebut"


def generate() -> str:
    return "cvsm_" + secrets.token_hex(32)


def _failure_lock_key(prefix: str) -> int:
    return int.from_bytes(prefix.encode()[-8:].rjust(8, b"\0"), "big", signed=True)


# One round trip: the client address's failed-credential wait and the prefix lock (an
# aggregate, so always exactly one row), and every token with that prefix (none: one row of
# NULLs).
_LOOKUP = f"""
SELECT lock.remaining AS lock_remaining, lock.epoch, lock.address_wait, c.*
FROM (SELECT max(extract(epoch FROM locked_until - clock_timestamp())) AS remaining,
             (SELECT epoch FROM credential_epoch) AS epoch,
             {ratelimit.ADDRESS_WAIT} AS address_wait
      FROM token_prefix_locks
      WHERE prefix = %(prefix)s AND locked_until > clock_timestamp()) AS lock
LEFT JOIN LATERAL (
    SELECT t.id, t.user_id, t.token_hash, t.allowed_ips, t.last_ip, t.last_user_agent,
           t.last_used_at, t.expires_at, t.team_id, t.environments, t.read_only,
           (t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())
            AND u.disabled_at IS NULL) AS active,
           (t.locked_until IS NOT NULL AND t.locked_until > now()) AS locked,
           u.email
    FROM api_tokens t JOIN users u ON u.id = t.user_id
    WHERE t.token_prefix = %(prefix)s
) AS c ON true
"""


async def _record_failed_lookup(pool: db.Pool, cache: credentials.CredentialCache, prefix: str,
                                failures: ratelimit.Charge | None) -> None:
    """Count a failed lookup for the client IP, then for the prefix; the tenth within the window
    locks the prefix. Serialised per prefix so that concurrent failures are all counted."""
    async with db.connection(pool) as conn:
        await ratelimit.failed(conn, failures)
        async with db.transaction(conn) as cur:
            await cur.execute("SELECT pg_advisory_xact_lock(%s)", (_failure_lock_key(prefix),))
            await cur.execute("INSERT INTO token_prefix_failures (prefix) VALUES (%s)", (prefix,))
            row = await db.fetchone(
                cur,
                """SELECT count(*) AS n FROM token_prefix_failures
                   WHERE prefix = %s AND failed_at > clock_timestamp() - %s""",
                (prefix, PREFIX_WINDOW),
            )
            if row["n"] >= PREFIX_FAILURES:
                await cur.execute(
                    """INSERT INTO token_prefix_locks (prefix, locked_until)
                       VALUES (%s, clock_timestamp() + %s)
                       ON CONFLICT (prefix) DO UPDATE SET locked_until = EXCLUDED.locked_until""",
                    (prefix, PREFIX_LOCK),
                )
                await cur.execute("DELETE FROM token_prefix_failures WHERE prefix = %s", (prefix,))
                await credentials.bump(cur)


async def _allowlist_miss(pool: db.Pool, token_id: uuid.UUID, client: Actor) -> None:
    """Count a request from outside the token's allowlist (403); the fifth locks the token. A
    token that is locked already answers the lock's 401 and counts nothing more, whether or not
    this process had it cached."""
    async with db.connection(pool) as conn, db.transaction(conn) as cur:
        row = await db.fetchone(
            cur,
            """UPDATE api_tokens SET
                   failed_auth_count = CASE WHEN failed_auth_count + 1 >= %(n)s
                                            THEN 0 ELSE failed_auth_count + 1 END,
                   locked_until = CASE WHEN failed_auth_count + 1 >= %(n)s
                                       THEN now() + %(lock)s ELSE locked_until END
               WHERE id = %(id)s AND (locked_until IS NULL OR locked_until <= now())
               RETURNING locked_until > now() AS locked, failed_auth_count = 0 AS just_locked,
                         team_id, token_prefix, locked_until""",
            {"n": ALLOWLIST_MISSES, "lock": ALLOWLIST_LOCK, "id": token_id},
        )
        if row is None:
            raise Unauthorized(TOKEN_LOCKED)
        if row["locked"]:
            await credentials.bump(cur)
            if row["just_locked"]:  # audited (and a team-bound token's `token.locked` event)
                await audit.record(cur, client, "token_lock", "api_token", team_id=row["team_id"],
                                   resource_id=token_id,
                                   metadata={"token_prefix": row["token_prefix"],
                                             "reason": "allowed_ips",
                                             "locked_until": iso(row["locked_until"])})


async def authenticate(pool: db.Pool, cache: credentials.CredentialCache, keyring: Keyring,
                       token: str, client: Actor, *,
                       failures: ratelimit.Charge | None = None) -> Actor:
    """The user behind an API token, or a 401/403/429 as the token rules say.

    A token in this process's cache costs no database round trip (but a change of client
    address or agent, or a minute since, writes its last use)."""
    if not TOKEN_RE.match(token):
        raise Unauthorized(INVALID)
    prefix = token[:PREFIX_LENGTH]
    digest = keyring.token_hash(token)
    entry = cache.token(digest)
    epoch = cache.epoch
    if entry is None or (entry.expires_at is not None and entry.expires_at <= now()):
        entry = await _lookup(pool, cache, prefix, digest, failures)
        epoch = None  # read from the database just now: confirmed
    if entry.allowed_ips and not address_allowed(client.ip or "", entry.allowed_ips):
        await _allowlist_miss(pool, entry.id, client)
        raise Forbidden(IP_NOT_ALLOWED)
    stamp = now()
    if (entry.last_used_at is None or stamp - entry.last_used_at > LAST_USE_EVERY
            or entry.last_ip != client.ip or entry.last_user_agent != client.user_agent):
        async with db.connection(pool) as conn, db.cursor(conn) as cur:
            await _LAST_USE.execute(cur, {"ip": client.ip, "user_agent": client.user_agent,
                                          "at": stamp, "id": entry.id})
        entry.last_ip, entry.last_user_agent, entry.last_used_at = client.ip, client.user_agent, stamp
    return client.as_user(entry.user_id, entry.email, via="api_token", token_id=entry.id,
                          epoch=epoch, scope=entry.scope)


_LAST_USE = db.Statement("cvsm_token_last_use", """
UPDATE api_tokens SET last_ip = %(ip)s, last_user_agent = %(user_agent)s, last_used_at = %(at)s
WHERE id = %(id)s""")


async def _lookup(pool: db.Pool, cache: credentials.CredentialCache, prefix: str, digest: bytes,
                  failures: ratelimit.Charge | None) -> credentials.TokenEntry:
    async with db.connection(pool) as conn, db.cursor(conn) as cur:
        rows = await db.fetchall(cur, _LOOKUP, {"prefix": prefix, **ratelimit.guard_params(failures)})
    # While the address is at its failed-credential limit no token is compared: a right one is
    # refused like a wrong one.
    ratelimit.refuse_while_waiting(rows[0]["address_wait"])
    if rows[0]["lock_remaining"] is not None:
        raise TooManyRequests(float(rows[0]["lock_remaining"]), PREFIX_LOCKED)
    match = None
    for row in rows:  # compare every candidate: timing does not depend on which matched
        if row["id"] is not None and hmac.compare_digest(bytes(row["token_hash"]), digest):
            match = row
    if match is None or not match["active"]:
        await _record_failed_lookup(pool, cache, prefix, failures)
        raise Unauthorized(INVALID)
    if match["locked"]:
        raise Unauthorized(TOKEN_LOCKED)
    entry = credentials.TokenEntry(
        id=match["id"], user_id=match["user_id"], email=match["email"], prefix=prefix,
        expires_at=match["expires_at"], allowed_ips=list(match["allowed_ips"] or []),
        last_ip=match["last_ip"], last_user_agent=match["last_user_agent"],
        last_used_at=match["last_used_at"], cached_at=time.monotonic(),
        scope=scope_of(match),
    )
    cache.put_token(digest, entry, rows[0]["epoch"])
    return entry


def scope_of(row: Mapping) -> Scope | None:
    """A token row's scope; None for a token with the user's full power."""
    if row["team_id"] is None and not row["environments"] and not row["read_only"]:
        return None
    environments = tuple(row["environments"]) if row["environments"] else None
    return Scope(team_id=row["team_id"], environments=environments, read_only=row["read_only"])


# --- management (JWT only) ---------------------------------------------------------------------

_COLUMNS = """id, name, token_prefix, expires_at, allowed_ips, failed_auth_count, locked_until,
              last_ip, last_user_agent, last_used_at, revoked_at, created_at, team_id,
              environments, read_only, e2e_public_key"""
COLUMNS = _COLUMNS  # a token's row as `token_json` reads it (also `device_flow`'s)

E2E_REQUIRED = ("Token untuk tim end-to-end memerlukan kolom 'e2e' {public_key, wrapped_key}: kunci "
                "publik token dan kunci tim yang dibungkus untuknya")
E2E_NEEDS_TEAM = "Kolom 'e2e' hanya untuk token yang terikat pada satu tim end-to-end ('team_id')"


def token_json(row: Mapping) -> dict:
    """A token as listings show it: never the token or its hash."""
    return {
        "id": str(row["id"]),
        "name": row["name"],
        "token_prefix": row["token_prefix"],
        "expires_at": iso(row["expires_at"]),
        "allowed_ips": list(row["allowed_ips"] or []),
        "failed_auth_count": row["failed_auth_count"],
        "locked_until": iso(row["locked_until"]),
        "last_ip": row["last_ip"],
        "last_user_agent": row["last_user_agent"],
        "last_used_at": iso(row["last_used_at"]),
        "revoked_at": iso(row["revoked_at"]),
        "created_at": iso(row["created_at"]),
        "team_id": str(row["team_id"]) if row["team_id"] else None,
        "environments": list(row["environments"]) if row["environments"] else None,
        "read_only": row["read_only"],
        "e2e_public_key": (e2e_syntax.b64u(row["e2e_public_key"]) if row.get("e2e_public_key")
                           else None),
    }


async def list_tokens(conn: db.Connection, actor: Actor) -> list[dict]:
    require_jwt(actor)
    async with db.cursor(conn) as cur:
        return await db.fetchall(
            cur,
            f"""SELECT {_COLUMNS} FROM api_tokens WHERE user_id = %s AND revoked_at IS NULL
                ORDER BY created_at DESC""",
            (actor.user_id,),
        )


async def create_token(conn: db.Connection, actor: Actor, keyring: Keyring, *, name: str,
                       expires_at: str | None = None, allowed_ips: list[str] | None = None,
                       team: str | None = None, environments: list[str] | None = None,
                       read_only: bool = False, e2e_key: dict | None = None) -> tuple[dict, str]:
    """A new token of the actor's (JWT only); returns its row and the token (shown once).

    `team` (id or slug, of a team the actor is in), `environments` and `read_only` narrow what
    the token may do; none of them given, it has the user's full power. A token bound to an
    end-to-end team needs `e2e_key` ({public_key, wrapped_key}: the token's public key and the
    team's current key wrapped to it), from a creator who holds that key."""
    require_jwt(actor)
    public_key = wrapped = auth = wrapped_version = None
    if e2e_key is not None:
        if team is None:
            raise BadRequest(E2E_NEEDS_TEAM)
        public_key = e2e_syntax.check_public_key(e2e_key.get("public_key"), "e2e.public_key")
        wrapped = e2e_syntax.check_wrap(e2e_key.get("wrapped_key"), "e2e.wrapped_key")
        auth = e2e_syntax.check_auth(e2e_key.get("auth"), "e2e.auth")
        wrapped_version = e2e_key.get("key_version")
        if wrapped_version is not None and (not isinstance(wrapped_version, int)
                                            or isinstance(wrapped_version, bool)):
            raise BadRequest("Kolom 'e2e.key_version' harus bilangan bulat")
    if environments is not None:
        if not environments:
            raise BadRequest("Kolom 'environments' tidak boleh kosong")
        for environment in environments:
            check_environment(environment)
        environments = [e for e in ENVIRONMENTS if e in environments]
    name = name.strip()
    if not 1 <= len(name) <= 100:
        raise BadRequest("Kolom 'name' harus 1 sampai 100 karakter")
    check_line("name", name)
    expiry = None
    if expires_at is not None:
        expiry = timestamp("expires_at", expires_at)
        if expiry <= now():
            raise BadRequest("Kolom 'expires_at' harus di masa depan")
    try:
        allowed = validate_allowlist(allowed_ips or [])
    except ValueError as exc:
        raise BadRequest(Text("Alamat IP atau CIDR tidak valid: {reason}",
                              reason=str(exc)[:64])) from None
    token = generate()
    team_id = None
    if team is not None:
        team_id = await teams.resolve(conn, team)
    async with db.transaction(conn) as cur:
        key_version = None
        if team_id is not None:
            await roles.require(cur, team_id, actor, roles.VIEWER)  # 404 unless a member
            key_version = await e2e.key_version_of(cur, team_id, share=True)
        if key_version is None and public_key is not None:
            raise BadRequest(E2E_NEEDS_TEAM)
        if key_version is not None:
            if public_key is None:
                raise BadRequest(E2E_REQUIRED)
            if not await e2e.caller_holds(cur, actor, team_id, key_version):
                raise Forbidden(e2e_syntax.NO_WRAP)
            if wrapped_version is not None and wrapped_version != key_version:
                raise Conflict(Text(e2e_syntax.STALE_WRAP_VERSION, got=wrapped_version,
                                    want=key_version))
        row = await db.fetchone(
            cur,
            f"""INSERT INTO api_tokens (user_id, name, token_prefix, token_hash, expires_at,
                                        allowed_ips, team_id, environments, read_only,
                                        e2e_public_key)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}""",
            (actor.user_id, name, token[:PREFIX_LENGTH], keyring.token_hash(token), expiry, allowed,
             team_id, environments, read_only, public_key),
        )
        if key_version is not None:
            await e2e.insert_wrap(cur, actor, team_id, key_version, wrapped_key=wrapped,
                                  auth=auth, token_id=row["id"])
        await audit.record(cur, actor, "token_create", "api_token", resource_id=row["id"],
                           team_id=team_id,
                           metadata={"name": name, "token_prefix": row["token_prefix"],
                                     "environments": environments, "read_only": read_only})
    return row, token


async def revoke_token(conn: db.Connection, actor: Actor, token_id: uuid.UUID) -> None:
    """Revoke one of the actor's tokens (JWT only); every process stops accepting it."""
    require_jwt(actor)
    async with db.transaction(conn) as cur:
        row = await db.fetchone(
            cur,
            """UPDATE api_tokens SET revoked_at = now()
               WHERE id = %s AND user_id = %s AND revoked_at IS NULL
               RETURNING id, name, token_prefix, team_id""",
            (token_id, actor.user_id),
        )
        if row is None:
            raise NotFound("Token tidak ditemukan")
        await cur.execute("DELETE FROM team_key_wraps WHERE token_id = %s", (token_id,))
        await credentials.bump(cur)
        await audit.record(cur, actor, "token_revoke", "api_token", resource_id=token_id,
                           team_id=row["team_id"],
                           metadata={"name": row["name"], "token_prefix": row["token_prefix"]})


async def purge_old_failures(pool: db.Pool) -> None:
    async with db.cursor(pool) as cur:
        await cur.execute(
            "DELETE FROM token_prefix_failures WHERE failed_at < clock_timestamp() - %s",
            (PREFIX_WINDOW,),
        )
        await cur.execute("DELETE FROM token_prefix_locks WHERE locked_until < clock_timestamp()")
