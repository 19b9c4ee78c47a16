"""Rate limits: fixed windows counted in PostgreSQL, so every server process sharing the database
enforces one limit together (N processes never multiply the allowance by N).

Kinds and keys (spec, Limits): `auth` per client IP on /auth/*, `public` per client IP on
/public/*, `api` per credential (API token, or the user behind a JWT) on the rest of /api/v1.
"""

from __future__ import annotations

import math

from . import db
from .config import RateLimit
from .errors import TooManyRequests

_HIT = """
INSERT INTO rate_limit_counters (key, window_start, count)
VALUES (%(key)s, to_timestamp(floor(extract(epoch FROM clock_timestamp()) / %(period)s) * %(period)s), 1)
ON CONFLICT (key, window_start) DO UPDATE SET count = rate_limit_counters.count + 1
RETURNING count,
          extract(epoch FROM window_start + make_interval(secs => %(period)s) - clock_timestamp())
              AS remaining
"""


async def hit(pool, kind: str, key: str, limit: RateLimit | None) -> None:
    """Count one request for `key`; raise TooManyRequests (with Retry-After) over the limit."""
    if limit is None:
        return
    async with db.cursor(pool) as cur:
        row = await db.fetchone(cur, _HIT, {"key": f"{kind}:{key}", "period": limit.period})
    if row["count"] > limit.limit:
        raise TooManyRequests(max(1, math.ceil(float(row["remaining"]))))


async def purge_old_windows(pool) -> None:
    async with db.cursor(pool) as cur:
        await cur.execute(
            "DELETE FROM rate_limit_counters WHERE window_start < now() - interval '1 day'"
        )
