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
audited secret read puts its count in its own statement, so a read costs one round trip with the
limit on. The web layer decides which (`web.middleware.rate_limit_middleware`).

The per-credential `api` limit is not counted request by request: each process leases units
from the shared counter (`Leases`), `step` at a time (`count = count + step` in `LEASE_CTE`; the
step grows while a credential spends its leases fast, up to `MAX_STEP`), and spends them
locally, so one credential's requests no longer queue on its counter row (the row stayed locked
until the read's commit had flushed its WAL: one credential's reads serialised). A lease still
rides in a read's statement (one round trip), so it holds the row through that commit: another
process leasing the same key meanwhile waits for it, which large leases make rare.
The counter only ever grants units below the limit, so N processes together never admit more
than it; what a process leased and has not spent when the window ends is lost, so a credential
may be refused early by the units other processes hold (see `Leases`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from . import credentials
from .. import db
from ..core.config import RateLimit, Settings
from ..core.errors import TooManyRequests

# The current fixed window of `rate_period` seconds.
_WINDOW = ("to_timestamp(floor(extract(epoch FROM clock_timestamp()) / %(rate_period)s)"
           " * %(rate_period)s)")


def _count_cte(step: str) -> str:
    """A CTE body: count `step` in the current window; `count` and the seconds `remaining`."""
    return f"""
INSERT INTO rate_limit_counters (key, window_start, count)
VALUES (%(rate_key)s, {_WINDOW}, {step})
ON CONFLICT (key, window_start) DO UPDATE SET count = rate_limit_counters.count + {step}
RETURNING count,
          extract(epoch FROM window_start + make_interval(secs => %(rate_period)s)
                              - clock_timestamp()) AS remaining
"""


# One request; and `%(rate_step)s` at once, a lease of that many units (`Leases`).
HIT_CTE = _count_cte("1")
LEASE_CTE = _count_cte("%(rate_step)s")

FAILED_AUTH = "Terlalu banyak percobaan autentikasi yang gagal, coba lagi nanti"
# Consecutive failures an account is allowed before each check must wait, and the longest wait.
ACCOUNT_FREE_FAILURES = 5
ACCOUNT_MAX_DELAY = 900


@dataclass(frozen=True, slots=True)
class Charge:
    """One request to count against `limit` under `key` (kind and key joined); with `lease`,
    the request leases `step` units at once for its process (`Leases`)."""

    key: str
    limit: RateLimit
    step: int = 1
    lease: Lease | None = None
    # A lease taken ahead, by a request already paid from the lease: it never refuses its own.
    ahead: bool = False

    @classmethod
    def of(cls, kind: str, key: str, limit: RateLimit | None) -> Charge | None:
        return None if limit is None else cls(f"{kind}:{key}", limit)

    @classmethod
    def failed_auth(cls, settings: Settings, ip: str | None) -> Charge | None:
        """The charge for one failed credential (token or login) from `ip`."""
        return cls.of("failed_auth", ip or "-", settings.rate_limit("failed_auth"))

    def params(self) -> dict:
        return {"rate_key": self.key, "rate_period": self.limit.period,
                "rate_limit": NEVER if self.ahead else self.limit.limit, "rate_step": self.step}

    def check(self, count: int, remaining: float, message: str | None = None) -> None:
        """Raise TooManyRequests (with Retry-After) when `count` passed the limit; with a lease,
        when none of the `step` units counted up to `count` was below it (the units granted
        beyond this request's own go to the lease)."""
        if self.lease is not None:
            if self._grant(count, remaining, own=not self.ahead) or self.ahead:
                return
        elif count <= self.limit.limit:
            return
        raise TooManyRequests(max(1.0, float(remaining)), message)

    def keep(self, count: int, remaining: float) -> None:
        """A leasing statement counted but its request does not go on (a stale credential: it
        is retried): every unit granted goes to the lease."""
        if self.lease is not None:
            self._grant(count, remaining, own=False)

    def _grant(self, count: int, remaining: float, *, own: bool) -> int:
        granted = max(0, min(self.step, self.limit.limit - (count - self.step)))
        self.lease.granted(granted - 1 if own and granted else granted, granted == 0, count,
                           float(remaining), self.limit.period)
        return granted


# A limit no count reaches (a lease taken ahead must not refuse the read that carries it).
NEVER = 2**31 - 1
# The units a key's first lease takes at most, and the most any lease takes: a process whose
# last lease of a key lasted under FAST_LEASE seconds doubles the next (a hot credential then
# leases about once per MAX_STEP requests: each lease is a larger statement than the read's
# own, ~1.8 ms of wall time against 0.47), one that lasted over SLOW_LEASE seconds halves it.
FIRST_STEP = 32
MAX_STEP = 1024
FAST_LEASE = 1.0
SLOW_LEASE = 10.0
# How many leases a process keeps (one per credential seen in the window; past it the expired
# are dropped, then all, which can only refuse early).
MAX_LEASES = 10_000


class Lease:
    """The units one process holds under one key in the current window."""

    __slots__ = ("units", "low", "expires", "count", "exhausted", "pending", "cap", "granted_at")

    def __init__(self) -> None:
        self.units = 0
        self.low = 0  # lease again, ahead, when the units held fall below this
        self.cap = FIRST_STEP  # the most units the next lease takes (`Leases.charge` adapts it)
        self.granted_at: float | None = None  # time.monotonic() of the last lease granted
        self.expires = 0.0  # time.monotonic() at the window's end
        self.count = 0  # the shared count after this process's last lease
        self.exhausted = False  # the window's limit is reached: refuse here until it ends
        self.pending: asyncio.Future[None] | None = None  # a lease in flight

    def take(self, now: float) -> bool:
        """Spend a unit held here; raise TooManyRequests while the window is exhausted."""
        if now >= self.expires:
            self.units, self.count, self.exhausted = 0, 0, False
        if self.units > 0:
            self.units -= 1
            return True
        if self.exhausted:
            raise TooManyRequests(self.expires - now)
        return False

    def granted(self, units: int, exhausted: bool, count: int, remaining: float,
                period: int) -> None:
        """The lease in flight came back with `units` to hold here (the shared `count` and the
        window's `remaining` seconds); `exhausted`: it got none, the window is full."""
        now = time.monotonic()
        self.granted_at = now
        expires = now + max(0.0, remaining)
        if now >= self.expires or expires > self.expires + period / 2:  # a new window
            self.units, self.exhausted = 0, False
        self.expires, self.count = expires, count
        self.units += units
        self.exhausted = exhausted
        self.settle()

    def adapt(self, now: float) -> int:
        """The most units the lease about to be taken may take: doubled when the last one
        granted was spent (down to its ahead mark) within FAST_LEASE seconds, halved when that
        took over SLOW_LEASE, between FIRST_STEP and MAX_STEP."""
        if self.granted_at is not None:
            lasted = now - self.granted_at
            if lasted < FAST_LEASE:
                self.cap = min(MAX_STEP, self.cap * 2)
            elif lasted > SLOW_LEASE:
                self.cap = max(FIRST_STEP, self.cap // 2)
        return self.cap

    def settle(self) -> None:
        """Wake the requests waiting for the lease in flight (also when it failed)."""
        if self.pending is not None:
            if not self.pending.done():
                self.pending.set_result(None)
            self.pending = None


class Leases:
    """This process's leases of the per-credential limit. A lease takes
    `min(cap, what the window has left / (2 x processes))` units (at least 1): while a window
    is young each process holds a few, near its end one at a time. The cap adapts to how fast
    the key spends its leases (`Lease.adapt`): FIRST_STEP at first, doubling up to MAX_STEP
    while each lease is spent within FAST_LEASE seconds, so a hot credential's leasing
    statement is rare. When the units held fall below a quarter of a lease, the next request
    leases more ahead (its own unit already paid), so the others do not wait for it.

    Accuracy: never more than the limit is admitted, in all processes together; a credential is
    refused early by at most the units other processes have leased and not spent (less than
    half of what was left when they leased); with one process the limit is exact."""

    def __init__(self, processes: int = 1) -> None:
        self.processes = max(1, processes)
        self._leases: dict[str, Lease] = {}

    def __repr__(self) -> str:
        return f"Leases(processes={self.processes}, keys={len(self._leases)})"

    def _lease(self, key: str, now: float) -> Lease:
        lease = self._leases.get(key)
        if lease is None:
            if len(self._leases) >= MAX_LEASES:
                self._leases = {k: v for k, v in self._leases.items()
                                if v.expires > now or v.pending is not None}
                if len(self._leases) >= MAX_LEASES:
                    self._leases.clear()
            lease = self._leases[key] = Lease()
        return lease

    async def charge(self, charge: Charge) -> Charge | None:
        """None when a unit held here pays for the request (nothing to count); else the charge
        that leases more (its statement must count it, and `settle` its lease whatever
        happens). One lease per key is in flight at a time: the others wait for it, then spend
        what it brought. TooManyRequests while the window is exhausted."""
        while True:
            now = time.monotonic()
            lease = self._lease(charge.key, now)
            if lease.take(now):
                if lease.pending is not None or lease.units >= lease.low:
                    return None
                ahead = True  # running low: this request leases the next units meanwhile
                break
            if lease.pending is None:
                ahead = False
                break
            await asyncio.shield(lease.pending)
        left = charge.limit.limit - lease.count if now < lease.expires else charge.limit.limit
        step = max(1, min(lease.adapt(now), left // (2 * self.processes)))
        lease.low = step // 4
        lease.pending = asyncio.get_running_loop().create_future()
        return Charge(charge.key, charge.limit, step, lease, ahead)


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


_LEASE = db.Statement("cvsm_rate_lease", LEASE_CTE)
_LEASE_CONFIRMING = db.Statement("cvsm_rate_lease_confirming", f"""
WITH hit AS ({LEASE_CTE}) SELECT count, remaining, {credentials.EPOCH_SQL} AS epoch FROM hit
""")


async def lease(conn: db.Connection, charge: Charge, *, epoch: int | None = None) -> None:
    """`hit` for a charge from `Leases.charge`: counts its `step` units at once (and confirms a
    cached credential's `epoch` in the same statement)."""
    async with db.cursor(conn) as cur:
        if epoch is None:
            row = await _LEASE.fetchone(cur, charge.params())
        else:
            row = await _LEASE_CONFIRMING.fetchone(cur, charge.params())
            if row["epoch"] != epoch:
                charge.keep(row["count"], row["remaining"])
                raise credentials.StaleCredential()
    charge.check(row["count"], row["remaining"])


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
