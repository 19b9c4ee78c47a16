"""Rate limits: fixed windows counted in PostgreSQL, so every server process sharing the database
enforces one limit together (N processes never multiply the allowance by N).

Kinds and keys (spec, Limits): `auth` per client IP on /auth/*, `public` per client IP on
/public/*, `api` per credential (API token, or the user behind a JWT) on the rest of /api/v1,
and `failed_auth` per client IP for failed credentials (so failures cannot grow storage).

A charge can be counted on its own (`hit`, one round trip) or inside another statement: the
audited secret read puts `HIT_CTE` in its own statement, so a read costs one round trip with the
limit on. The web layer decides which (`web.middleware.rate_limit_middleware`).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import credentials, db
from .config import RateLimit, Settings
from .errors import TooManyRequests

# A CTE body: count one request in the current window; `count` and the seconds `remaining`.
HIT_CTE = """
INSERT INTO rate_limit_counters (key, window_start, count)
VALUES (%(rate_key)s,
        to_timestamp(floor(extract(epoch FROM clock_timestamp()) / %(rate_period)s) * %(rate_period)s),
        1)
ON CONFLICT (key, window_start) DO UPDATE SET count = rate_limit_counters.count + 1
RETURNING count,
          extract(epoch FROM window_start + make_interval(secs => %(rate_period)s)
                              - clock_timestamp()) AS remaining
"""

FAILED_AUTH = "Terlalu banyak percobaan autentikasi yang gagal, coba lagi nanti"


@dataclass(frozen=True, slots=True)
class Charge:
    """One request to count against `limit` under `key` (kind and key joined)."""

    key: str
    limit: RateLimit

    @classmethod
    def of(cls, kind: str, key: str, limit: RateLimit | None) -> Charge | None:
        return None if limit is None else cls(f"{kind}:{key}", limit)

    @classmethod
    def failed_auth(cls, settings: Settings, ip: str | None) -> Charge | None:
        """The charge for one failed credential (token or login) from `ip`."""
        return cls.of("failed_auth", ip or "-", settings.rate_limit("failed_auth"))

    def params(self) -> dict:
        return {"rate_key": self.key, "rate_period": self.limit.period,
                "rate_limit": self.limit.limit}

    def check(self, count: int, remaining: float, message: str | None = None) -> None:
        """Raise TooManyRequests (with Retry-After) when `count` passed the limit."""
        if count > self.limit.limit:
            raise TooManyRequests(max(1.0, float(remaining)), message)


_HIT_CONFIRMING = f"""
WITH hit AS ({HIT_CTE}) SELECT count, remaining, {credentials.EPOCH_SQL} AS epoch FROM hit
"""


async def hit(conn: db.Connection, charge: Charge | None, message: str | None = None, *,
              epoch: int | None = None) -> None:
    """Count one request; raise TooManyRequests (with Retry-After) over the limit.

    With `epoch` (a credential from the cache), the same statement confirms it: a moved epoch
    raises `credentials.StaleCredential` (the count stays)."""
    if charge is None:
        if epoch is not None and await credentials.current_epoch(conn) != epoch:
            raise credentials.StaleCredential()
        return
    async with db.cursor(conn) as cur:
        if epoch is None:
            row = await db.fetchone(cur, HIT_CTE, charge.params())
        else:
            row = await db.fetchone(cur, _HIT_CONFIRMING, charge.params())
            if row["epoch"] != epoch:
                raise credentials.StaleCredential()
    charge.check(row["count"], row["remaining"], message)


async def purge_old_windows(pool: db.Pool) -> None:
    async with db.cursor(pool) as cur:
        await cur.execute(
            "DELETE FROM rate_limit_counters WHERE window_start < now() - interval '1 day'"
        )
