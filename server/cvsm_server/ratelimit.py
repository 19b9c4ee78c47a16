"""Rate limits: fixed windows counted in PostgreSQL, so every server process sharing the database
enforces one limit together (N processes never multiply the allowance by N).

Kinds and keys (spec, Limits): `auth` per client IP on /auth/* and the dashboard's account
forms, `public` per client IP on /public/*, `api` per credential (API token, or the user behind a
JWT) on the rest of /api/v1, and `failed_auth` per client IP for failed credentials (so failures
cannot grow storage).

The throttle in front of every credential check (passwords, two-factor codes, API tokens, mail
link tokens) is `guard` then `failed`: while the client address is at its `failed_auth` limit, or
the account named by the credential is in its progressive delay, `guard` refuses with 429 and a
`Retry-After` **before** the credential is checked, and stores nothing; so a right guess made
while limited is refused like a wrong one and the limit is no oracle. `failed` counts a wrong
credential for the address and the account; `passed` clears the account's delay. An account's
delay starts after `ACCOUNT_FREE_FAILURES` consecutive failures and doubles with each further one
up to `ACCOUNT_MAX_DELAY` seconds (as Keycloak's brute-force detection does); a day without
failures forgets them.

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
# Consecutive failures an account is allowed before each check must wait, and the longest wait.
ACCOUNT_FREE_FAILURES = 5
ACCOUNT_MAX_DELAY = 900
# The current fixed window of `rate_period` seconds (the same expression as in HIT_CTE).
_WINDOW = ("to_timestamp(floor(extract(epoch FROM clock_timestamp()) / %(rate_period)s)"
           " * %(rate_period)s)")


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


# A scalar subquery: the seconds left in the address's window when it is at its limit, else
# NULL (parameters: `guard_params`). Reads only; the token lookup puts it in its own statement.
ADDRESS_WAIT = f"""
(SELECT extract(epoch FROM window_start + make_interval(secs => %(rate_period)s)
                           - clock_timestamp())
 FROM rate_limit_counters
 WHERE key = %(rate_key)s AND window_start = {_WINDOW} AND count >= %(rate_limit)s)
"""

# The seconds to wait before the next check: the address's window, when it is at its limit, and
# the account's delay. Reads only.
_GUARD = f"""
SELECT {ADDRESS_WAIT} AS address_wait,
       (SELECT extract(epoch FROM blocked_until - clock_timestamp())
        FROM auth_throttle WHERE key = %(account)s AND blocked_until > clock_timestamp())
           AS account_wait
"""

_ACCOUNT_FAILED = """
INSERT INTO auth_throttle AS t (key, failures, blocked_until, last_failed_at)
VALUES (%(account)s, 1, NULL, clock_timestamp())
ON CONFLICT (key) DO UPDATE SET
    failures = CASE WHEN t.last_failed_at < clock_timestamp() - interval '1 day' THEN 1
                    ELSE t.failures + 1 END,
    blocked_until = CASE
        WHEN t.last_failed_at >= clock_timestamp() - interval '1 day'
             AND t.failures + 1 > %(free)s
        THEN clock_timestamp()
             + make_interval(secs => least(power(2, t.failures + 1 - %(free)s), %(max)s))
        END,
    last_failed_at = clock_timestamp()
"""


def guard_params(address: Charge | None, account: str | None = None) -> dict:
    if address is None:
        params = {"rate_key": None, "rate_period": 60, "rate_limit": 0}
    else:
        params = address.params()
    return {**params, "account": account}


async def guard(conn: db.Connection, address: Charge | None, account: str | None = None) -> None:
    """Refuse (429, Retry-After) before a credential is checked while the client's address is at
    its failed-credential limit or `account` is in its delay; stores nothing."""
    if address is None and account is None:
        return
    async with db.cursor(conn) as cur:
        row = await db.fetchone(cur, _GUARD, guard_params(address, account))
    refuse_while_waiting(row["address_wait"], row["account_wait"])


def refuse_while_waiting(*waits: object) -> None:
    """429 with the longest of the waits (seconds; None where there is none)."""
    seconds = [float(w) for w in waits if w is not None]
    if seconds:
        raise TooManyRequests(max(1.0, max(seconds)), FAILED_AUTH)


async def failed(conn: db.Connection, address: Charge | None, account: str | None = None) -> None:
    """Count one wrong credential: for the client's address (its `failed_auth` window) and for
    `account` (its consecutive failures and delay). Never raises for the limit: the next
    `guard` does."""
    async with db.cursor(conn) as cur:
        if address is not None:
            await cur.execute(HIT_CTE, address.params())
        if account is not None:
            await cur.execute(_ACCOUNT_FAILED, {"account": account, "free": ACCOUNT_FREE_FAILURES,
                                                "max": ACCOUNT_MAX_DELAY})


async def passed(cur: db.Cursor, account: str | None) -> None:
    """A right credential for `account`: its failures are forgotten."""
    if account is not None:
        await cur.execute("DELETE FROM auth_throttle WHERE key = %s", (account,))


async def purge_old_windows(pool: db.Pool) -> None:
    async with db.cursor(pool) as cur:
        await cur.execute(
            "DELETE FROM rate_limit_counters WHERE window_start < now() - interval '1 day'"
        )
        await cur.execute(
            "DELETE FROM auth_throttle WHERE last_failed_at < now() - interval '1 day'"
            " AND (blocked_until IS NULL OR blocked_until < now())"
        )
