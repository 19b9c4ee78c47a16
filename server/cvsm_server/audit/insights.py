"""Read insights, drawn from what cvsm already records: who read a secret and when (the audit
log's `read` entries, with the token each went through), per team the secrets nobody read and
the tokens nobody used lately, and a team's environments side by side.

The side-by-side view never carries a value: each cell holds a digest, an HMAC-SHA256 of the
value under a key made for that one call (`compare_environments`), so two equal values show
equal digests within the answer while the digest says nothing about the value, cannot be
matched against a guess without the key, and cannot be compared across two calls.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets as random
import uuid
from dataclasses import dataclass
from datetime import timedelta

from . import log as audit
from .. import db
from ..teams import roles
from ..core.actor import Actor
from ..crypto.sealing import Keyring
from ..secrets.queries import open_value
from ..secrets.inputs import ENVIRONMENTS

WINDOW = timedelta(days=30)
READERS_LIMIT = 200
DIGEST_HEX = 16  # 64 bits of the HMAC: enough to tell values apart on one page


# The read rollup's token of a session read (migration 0038: token ids are uuids there).
NO_TOKEN = uuid.UUID(int=0)

# A read of a secret, as the rollup and the log's unsealed tail both give it.
_READ = "action = 'read' AND resource = 'secret'"


async def secret_readers(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                         secret_id: uuid.UUID, *, window: timedelta = WINDOW,
                         limit: int = READERS_LIMIT) -> list[dict]:
    """Who read the secret in the last `window`, one row per reader (an e-mail and the token it
    went through), the latest first: `at` (the last read), `email` (None for a system reader),
    `via_token` (the token's name, None for a session), `ip` (of the last read) and `reads`.
    Admin or above, as for the audit log it comes from. From the read rollup (whole UTC days,
    migration 0022) and the log's entries not sealed yet: the page costs its readers, never a
    scan of the log."""
    async with audit.bounded(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN, reading=True)
        return await db.fetchall(
            cur,
            f"""WITH r AS (
                    SELECT user_email, token_id, via_token, reads, last_at, last_ip
                    FROM audit_reads
                    WHERE team_id = %(team)s AND secret_id = %(secret_uuid)s
                      AND day >= ((now() - %(window)s) AT TIME ZONE 'UTC')::date
                      AND last_at >= now() - %(window)s
                    UNION ALL
                    SELECT coalesce(user_email, ''),
                           coalesce(cvsm_audit_uuid_or_null(metadata->>'token_id'), %(nil)s),
                           metadata->>'via_token', 1, created_at, ip_address
                    FROM ({audit.UNSEALED}) u
                    WHERE team_id = %(team)s AND {_READ} AND resource_id = %(secret)s
                      AND created_at >= now() - %(window)s)
                SELECT max(last_at) AS at, nullif(user_email, '') AS email,
                       (array_agg(via_token ORDER BY last_at DESC))[1] AS via_token,
                       (array_agg(last_ip ORDER BY last_at DESC))[1] AS ip,
                       sum(reads)::bigint AS reads
                FROM r GROUP BY user_email, token_id
                ORDER BY at DESC LIMIT %(limit)s""",
            {"team": team_id, "secret": str(secret_id), "secret_uuid": secret_id,
             "nil": NO_TOKEN, "window": window, "limit": limit,
             "mark": await audit.sealed_mark(cur)},
        )


# A secret's last read in the rollup: the newest of its newest day's rows (a row's `last_at`
# falls on its `day`), so one probe of the key's end per partition from the newest, not every
# day of every reader (`ORDER BY day DESC LIMIT 1`: the partitions in order, newest first).
_LAST_READ = """(SELECT max(r.last_at) FROM audit_reads r
                 WHERE r.team_id = s.team_id AND r.secret_id = s.id
                   AND r.day = (SELECT d.day FROM audit_reads d
                                WHERE d.team_id = s.team_id AND d.secret_id = s.id
                                ORDER BY d.day DESC LIMIT 1))"""


async def unread_secrets(conn: db.Connection, actor: Actor, team_id: uuid.UUID, *,
                         window: timedelta = WINDOW) -> list[dict]:
    """The team's live secrets that nobody read in the last `window` and that are older than
    it (a new secret is not stale), by name and environment, each with `last_read_at` (None:
    never read while the log kept it). Admin or above. From the read rollup and the log's
    unsealed tail: one index probe per secret."""
    async with audit.bounded(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN, reading=True)
        return await db.fetchall(
            cur,
            f"""WITH tail AS MATERIALIZED (
                    SELECT resource_id, max(created_at) AS last_at FROM ({audit.UNSEALED}) u
                    WHERE team_id = %(team)s AND {_READ} GROUP BY resource_id),
                live AS MATERIALIZED (
                    SELECT s.id, s.name, s.environment, s.created_at, s.updated_at,
                           greatest({_LAST_READ}, (SELECT t.last_at FROM tail t
                                                   WHERE t.resource_id = s.id::text))
                               AS last_read_at
                    FROM secrets s
                    WHERE s.team_id = %(team)s AND s.deleted_at IS NULL
                      AND s.created_at < now() - %(window)s)
                SELECT * FROM live
                WHERE last_read_at IS NULL OR last_read_at < now() - %(window)s
                ORDER BY name, environment""",
            {"team": team_id, "window": window, "mark": await audit.sealed_mark(cur)},
        )


async def unused_tokens(conn: db.Connection, actor: Actor, team_id: uuid.UUID, *,
                        window: timedelta = WINDOW) -> list[dict]:
    """The live API tokens that can reach the team (scoped to it, or unscoped and held by one
    of its members) and were not used in the last `window` and are older than it: `id`,
    `name`, `token_prefix`, `owner_email`, `last_used_at`, `created_at` and `mine` (only its
    holder can revoke it). Admin or above."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN, reading=True)
        return await db.fetchall(
            cur,
            """SELECT t.id, t.name, t.token_prefix, u.email AS owner_email, t.last_used_at,
                      t.created_at, t.user_id = %(me)s AS mine
               FROM api_tokens t JOIN users u ON u.id = t.user_id
               WHERE t.revoked_at IS NULL
                 AND (t.expires_at IS NULL OR t.expires_at > now())
                 AND (t.team_id = %(team)s OR (t.team_id IS NULL AND EXISTS (
                      SELECT 1 FROM team_members m
                      WHERE m.team_id = %(team)s AND m.user_id = t.user_id)))
                 AND t.created_at < now() - %(window)s
                 AND (t.last_used_at IS NULL OR t.last_used_at < now() - %(window)s)
               ORDER BY t.last_used_at NULLS FIRST, t.name, t.id""",
            {"team": team_id, "me": actor.user_id, "window": window},
        )


@dataclass(frozen=True, slots=True)
class Cell:
    """One name in one environment: its secret and a digest of its value (never the value)."""

    secret_id: uuid.UUID
    version: int
    digest: str


@dataclass(frozen=True, slots=True)
class Row:
    """One name across the environments shown; `cells[env]` is None where it is missing."""

    name: str
    cells: dict[str, Cell | None]

    @property
    def missing(self) -> list[str]:
        return [env for env, cell in self.cells.items() if cell is None]

    @property
    def differs(self) -> bool:
        """True when two environments that have the name hold different values."""
        return len({cell.digest for cell in self.cells.values() if cell is not None}) > 1


@dataclass(frozen=True, slots=True)
class Comparison:
    environments: tuple[str, ...]
    rows: list[Row]


def value_digest(key: bytes, value: str) -> str:
    return hmac.new(key, value.encode("utf-8"), hashlib.sha256).hexdigest()[:DIGEST_HEX]


async def compare_environments(conn: db.Connection, actor: Actor, keyring: Keyring,
                               team_id: uuid.UUID) -> Comparison:
    """The team's names by environment (production, staging, development, those the actor may
    see), with which are missing and which differ, shown by digests under a key made for this
    call only. Viewer or above (who may read the values anyway); audited once as
    `compare_environments` with the counts, since every value is decrypted to digest it. An
    end-to-end team's envelopes are not opened (the server cannot): their cells have an empty
    digest, so only which names are missing is told, never that values differ."""
    environments = tuple(e for e in ENVIRONMENTS if actor.scope is None
                         or actor.scope.allows_environment(e))
    key = random.token_bytes(32)
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.VIEWER)
        rows = await db.fetchall(
            cur,
            """SELECT id, team_id, name, environment, version, key_id, nonce, ciphertext, envelope
               FROM secrets WHERE team_id = %s AND deleted_at IS NULL
                 AND environment = ANY(%s::text[])
               ORDER BY name""",
            (team_id, list(environments)),
        )
        by_name: dict[str, dict[str, Cell | None]] = {}
        for row in rows:
            cells = by_name.setdefault(row["name"], dict.fromkeys(environments))
            digest = "" if row["envelope"] is not None else value_digest(
                key, open_value(keyring, row))
            cells[row["environment"]] = Cell(row["id"], row["version"], digest)
        result = Comparison(environments, [Row(n, c) for n, c in by_name.items()])
        await audit.record(cur, actor, "compare_environments", "secret", team_id=team_id,
                           metadata={"environments": list(environments), "names": len(by_name),
                                     "differing": sum(r.differs for r in result.rows),
                                     "missing": sum(bool(r.missing) for r in result.rows)})
    return result
