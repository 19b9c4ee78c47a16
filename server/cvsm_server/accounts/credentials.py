"""The in-process credential cache, kept exact across processes by a revocation epoch.

A request with a known JWT session or API token is authenticated from this process's cache,
with no database round trip of its own. Every change that must stop a credential (logout-all,
token revocation, an allowlist lock, a prefix lock) bumps one counter in PostgreSQL
(`credential_epoch`) in the transaction that makes it. A cached credential is only provisional:
the request's first statement (its rate-limit count, or the audited read itself) also reads the
epoch, and if it moved since the cache was filled, the statement does nothing, the cache is
emptied and the credential is checked again in the database. So a revoked, expired, locked or
logged-out credential fails on every process from the moment its change commits, at the cost of
reading one single-row table inside statements the request makes anyway.

The cache also remembers which JWTs' signatures it has checked (`VerifiedJwt`: the session they
name and their `exp`), so a known JWT is not decoded and verified again at every request. That
says nothing about the session being live, which its `SessionEntry` and the epoch decide as
above; an entry is dropped with the rest of the cache, and is never used at or past its `exp`.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from .. import db
from ..core.actor import Scope

DEFAULT_TTL = 60.0
MAX_ENTRIES = 10_000

# A scalar subquery for statements that confirm a provisional credential.
EPOCH_SQL = "(SELECT epoch FROM credential_epoch)"


class StaleCredential(Exception):
    """The credential epoch moved since this process cached the caller's credential."""


async def bump(cur: db.Cursor) -> None:
    """Invalidate every process's cached credentials when the current transaction commits."""
    await cur.execute("UPDATE credential_epoch SET epoch = epoch + 1")


async def current_epoch(conn: db.Connection) -> int:
    async with db.cursor(conn) as cur:
        return (await db.fetchone(cur, f"SELECT {EPOCH_SQL} AS epoch"))["epoch"]


@dataclass(slots=True)
class SessionEntry:
    user_id: uuid.UUID
    email: str
    expires_at: datetime
    cached_at: float


@dataclass(slots=True)
class VerifiedJwt:
    """A JWT whose signature and claims this process checked: the session it names, and its
    `exp` (seconds since the epoch) past which it is refused as any expired JWT is."""
    user_id: uuid.UUID
    session_id: uuid.UUID
    exp: int


@dataclass(slots=True)
class TokenEntry:
    id: uuid.UUID
    user_id: uuid.UUID
    email: str
    prefix: str
    expires_at: datetime | None
    allowed_ips: list[str]
    last_ip: str | None
    last_user_agent: str | None
    last_used_at: datetime | None
    cached_at: float
    scope: Scope | None = None


@dataclass
class CredentialCache:
    """Sessions by id and API tokens by keyed hash, valid for one epoch, in one process."""

    ttl: float = DEFAULT_TTL
    epoch: int = -1
    sessions: dict[uuid.UUID, SessionEntry] = field(default_factory=dict)
    tokens: dict[bytes, TokenEntry] = field(default_factory=dict)
    # Keyed by the whole JWT: an entry matches only the exact token whose signature was checked.
    jwts: dict[str, VerifiedJwt] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (f"CredentialCache(epoch={self.epoch}, sessions={len(self.sessions)}, "
                f"tokens={len(self.tokens)}, jwts={len(self.jwts)})")

    def _fresh(self, cached_at: float) -> bool:
        return time.monotonic() - cached_at < self.ttl

    def session(self, session_id: uuid.UUID) -> SessionEntry | None:
        entry = self.sessions.get(session_id)
        if entry is not None and not self._fresh(entry.cached_at):
            self.sessions.pop(session_id, None)
            return None
        return entry

    def token(self, digest: bytes) -> TokenEntry | None:
        entry = self.tokens.get(digest)
        if entry is not None and not self._fresh(entry.cached_at):
            self.tokens.pop(digest, None)
            return None
        return entry

    def jwt(self, token: str) -> VerifiedJwt | None:
        """The checked claims of `token` while it has not expired, or None (check it)."""
        entry = self.jwts.get(token)
        if entry is not None and entry.exp <= time.time():
            self.jwts.pop(token, None)
            return None
        return entry

    def put_jwt(self, token: str, entry: VerifiedJwt) -> None:
        if self.ttl > 0:
            if len(self.jwts) >= MAX_ENTRIES:
                self.jwts.clear()
            self.jwts[token] = entry

    def _admit(self, epoch: int) -> bool:
        """Whether an entry read at `epoch` may be cached; a newer epoch empties the cache."""
        if epoch > self.epoch:
            self.clear()
            self.epoch = epoch
        return epoch == self.epoch and self.ttl > 0

    def put_session(self, session_id: uuid.UUID, entry: SessionEntry, epoch: int) -> None:
        if self._admit(epoch):
            if len(self.sessions) >= MAX_ENTRIES:
                self.sessions.clear()
            self.sessions[session_id] = entry

    def put_token(self, digest: bytes, entry: TokenEntry, epoch: int) -> None:
        if self._admit(epoch):
            if len(self.tokens) >= MAX_ENTRIES:
                self.tokens.clear()
            self.tokens[digest] = entry

    def stale(self, epoch: int) -> None:
        """A statement saw `epoch`, newer than the cache: drop everything."""
        if epoch > self.epoch:
            self.clear()
            self.epoch = epoch

    def clear(self) -> None:
        self.sessions.clear()
        self.tokens.clear()
        self.jwts.clear()
