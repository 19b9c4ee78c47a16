"""API access tokens: format, keyed hashes, lookup with prefix locks, IP allowlists, and routes.

Rules (spec, Authentication; contract, API access tokens):
- format `cvsm_` + 64 lowercase hex, checked before any storage lookup;
- stored as HMAC-SHA-256 under a server key, compared in constant time;
- 10 failed lookups for one prefix in 5 minutes lock that prefix for 5 minutes (429);
- with `allowed_ips`, a request from elsewhere is a 403 that counts in `failed_auth_count`; the
  fifth miss locks the token for an hour (`locked_until`, 401 meanwhile) and resets the count.
All lock state lives in PostgreSQL, shared by every server process.
"""

from __future__ import annotations

import hmac
import math
import re
import secrets
from datetime import timedelta

from aiohttp import web

from . import audit, db
from .clientip import address_allowed, validate_allowlist
from .errors import BadRequest, Forbidden, NotFound, TooManyRequests, Unauthorized
from .inputs import field, path_uuid, read_json, string_list
from .state import CLIENT_IP, KEYRING, POOL, Principal, principal
from .timeutil import iso, now, parse_iso

TOKEN_RE = re.compile(r"cvsm_[0-9a-f]{64}\Z")
PREFIX_LENGTH = 13  # "cvsm_" and 8 hex digits
PREFIX_FAILURES = 10
PREFIX_WINDOW = timedelta(minutes=5)
PREFIX_LOCK = timedelta(minutes=5)
ALLOWLIST_MISSES = 5
ALLOWLIST_LOCK = timedelta(hours=1)

INVALID = "Token tidak valid, kedaluwarsa, atau sudah dicabut"


def generate() -> str:
    return "cvsm_" + secrets.token_hex(32)


def _failure_lock_key(prefix: str) -> int:
    return int.from_bytes(prefix.encode()[-8:].rjust(8, b"\0"), "big", signed=True)


# One round trip: the prefix lock (an aggregate, so always exactly one row) and every token with
# that prefix (none: one row of NULLs).
_LOOKUP = """
SELECT lock.remaining AS lock_remaining, c.*
FROM (SELECT max(extract(epoch FROM locked_until - clock_timestamp())) AS remaining
      FROM token_prefix_locks
      WHERE prefix = %(prefix)s AND locked_until > clock_timestamp()) AS lock
LEFT JOIN LATERAL (
    SELECT t.id, t.user_id, t.token_hash, t.allowed_ips, t.last_ip, t.last_user_agent,
           t.last_used_at,
           (t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())) AS active,
           (t.locked_until IS NOT NULL AND t.locked_until > now()) AS locked,
           u.email
    FROM api_tokens t JOIN users u ON u.id = t.user_id
    WHERE t.token_prefix = %(prefix)s
) AS c ON true
"""


async def _record_failed_lookup(pool, prefix: str) -> None:
    """Count a failed lookup; the tenth within the window locks the prefix. Serialised per prefix
    so that concurrent failures are all counted and the lock is never missed."""
    async with db.transaction(pool) as cur:
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


async def authenticate(request: web.Request, token: str) -> Principal:
    """The user behind an API token, or a 401/403/429 as the token rules say."""
    if not TOKEN_RE.match(token):
        raise Unauthorized(INVALID)
    pool = request.app[POOL]
    prefix = token[:PREFIX_LENGTH]
    digest = request.app[KEYRING].token_hash(token)
    async with db.cursor(pool) as cur:
        rows = await db.fetchall(cur, _LOOKUP, {"prefix": prefix})
    if rows[0]["lock_remaining"] is not None:
        raise TooManyRequests(math.ceil(float(rows[0]["lock_remaining"])),
                              "Terlalu banyak percobaan token, coba lagi nanti")
    candidates = [row for row in rows if row["id"] is not None]
    match = None
    for row in candidates:  # compare every candidate: timing does not depend on which matched
        if hmac.compare_digest(bytes(row["token_hash"]), digest):
            match = row
    if match is None or not match["active"]:
        await _record_failed_lookup(pool, prefix)
        raise Unauthorized(INVALID)
    if match["locked"]:
        raise Unauthorized("Token dikunci sementara karena akses dari alamat yang tidak diizinkan")
    ip = request[CLIENT_IP]
    if match["allowed_ips"] and not address_allowed(ip, match["allowed_ips"]):
        async with db.cursor(pool) as cur:
            await cur.execute(
                """UPDATE api_tokens SET
                       failed_auth_count = CASE WHEN failed_auth_count + 1 >= %(n)s
                                                THEN 0 ELSE failed_auth_count + 1 END,
                       locked_until = CASE WHEN failed_auth_count + 1 >= %(n)s
                                           THEN now() + %(lock)s ELSE locked_until END
                   WHERE id = %(id)s""",
                {"n": ALLOWLIST_MISSES, "lock": ALLOWLIST_LOCK, "id": match["id"]},
            )
        raise Forbidden("Alamat IP ini tidak diizinkan untuk token tersebut")
    agent = (request.headers.get("User-Agent") or "")[:512]
    stale = match["last_used_at"] is None or now() - match["last_used_at"] > timedelta(seconds=60)
    if stale or match["last_ip"] != ip or match["last_user_agent"] != agent:
        async with db.cursor(pool) as cur:
            await cur.execute(
                """UPDATE api_tokens SET last_ip = %s, last_user_agent = %s, last_used_at = now()
                   WHERE id = %s""",
                (ip, agent, match["id"]),
            )
    return Principal(user_id=match["user_id"], email=match["email"], via="api_token",
                     token_id=match["id"])


def require_jwt(request: web.Request) -> Principal:
    """Endpoints that manage credentials refuse API tokens: a leaked token cannot mint more."""
    who = principal(request)
    if who.via != "jwt":
        raise Forbidden("Endpoint ini memerlukan login, bukan token API")
    return who


def _public(row: dict) -> dict:
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
    }


_COLUMNS = """id, name, token_prefix, expires_at, allowed_ips, failed_auth_count, locked_until,
              last_ip, last_user_agent, last_used_at, revoked_at, created_at"""


async def list_tokens(request: web.Request) -> web.Response:
    who = require_jwt(request)
    async with db.cursor(request.app[POOL]) as cur:
        rows = await db.fetchall(
            cur,
            f"""SELECT {_COLUMNS} FROM api_tokens WHERE user_id = %s AND revoked_at IS NULL
                ORDER BY created_at DESC""",
            (who.user_id,),
        )
    return web.json_response({"tokens": [_public(r) for r in rows]})


async def create_token(request: web.Request) -> web.Response:
    who = require_jwt(request)
    body = await read_json(request, max_bytes=64 * 1024)
    name = field(body, "name", str).strip()
    if not 1 <= len(name) <= 100:
        raise BadRequest("Kolom 'name' harus 1 sampai 100 karakter")
    expires_at = None
    if (raw := field(body, "expires_at", str, required=False)) is not None:
        try:
            expires_at = parse_iso(raw)
        except ValueError:
            raise BadRequest("Kolom 'expires_at' harus berupa waktu ISO 8601") from None
        if expires_at <= now():
            raise BadRequest("Kolom 'expires_at' harus di masa depan")
    allowed = string_list(body, "allowed_ips", required=False, max_items=100)
    try:
        allowed = validate_allowlist(allowed)
    except ValueError as exc:
        raise BadRequest(f"Alamat IP atau CIDR tidak valid: {str(exc)[:64]}") from None
    token = generate()
    async with db.transaction(request.app[POOL]) as cur:
        row = await db.fetchone(
            cur,
            f"""INSERT INTO api_tokens (user_id, name, token_prefix, token_hash, expires_at, allowed_ips)
                VALUES (%s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}""",
            (who.user_id, name, token[:PREFIX_LENGTH], request.app[KEYRING].token_hash(token),
             expires_at, allowed),
        )
        await audit.record(cur, request, "token_create", "api_token", resource_id=row["id"],
                           metadata={"name": name, "token_prefix": row["token_prefix"]})
    return web.json_response({"api_token": _public(row), "token": token}, status=201)


async def revoke_token(request: web.Request) -> web.Response:
    who = require_jwt(request)
    token_id = path_uuid(request, "token_id")
    async with db.transaction(request.app[POOL]) as cur:
        row = await db.fetchone(
            cur,
            """UPDATE api_tokens SET revoked_at = now()
               WHERE id = %s AND user_id = %s AND revoked_at IS NULL RETURNING id, token_prefix""",
            (token_id, who.user_id),
        )
        if row is None:
            raise NotFound("Token tidak ditemukan")
        await audit.record(cur, request, "token_revoke", "api_token", resource_id=token_id,
                           metadata={"token_prefix": row["token_prefix"]})
    return web.json_response({"ok": True})


async def purge_old_failures(pool) -> None:
    async with db.cursor(pool) as cur:
        await cur.execute(
            "DELETE FROM token_prefix_failures WHERE failed_at < clock_timestamp() - %s",
            (PREFIX_WINDOW,),
        )
        await cur.execute("DELETE FROM token_prefix_locks WHERE locked_until < clock_timestamp()")


def setup_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/tokens", list_tokens)
    app.router.add_post("/api/v1/tokens", create_token)
    app.router.add_delete("/api/v1/tokens/{token_id}", revoke_token)

