"""The aiopg pool and its connections: opening a pool (keepalives, a bounded wait for a free
connection, 503 with Retry-After when none comes), transactions and cursors, the connection budget
of a process, the outage log of background jobs. What this needs of aiopg beyond its public API
(the watch each connection keeps on its own socket, the pool's fast path for a request's
connection) is in `db.aiopg_adapter`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiopg
import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras

from ..core.config import ConfigError
from ..core.errors import Conflict, ServiceUnavailable
from .aiopg_adapter import SOCKET_CHECK, StatementTimeout  # noqa: F401 (names of db.pool too)
from .aiopg_adapter import (give_back_free, keep_row_cursor, kept_row_cursor, take_free,
                            watch_own_socket)

log = logging.getLogger("cvsm.db")

# The group role that holds the server's privileges (migration 0004), and the login role the
# embedded default serves as.
APP_ROLE = "cvsm_app"

Cursor = aiopg.Cursor
Connection = aiopg.Connection
Pool = aiopg.Pool

# Errors that mean "the database is not reachable right now" rather than "this request is wrong".
UNAVAILABLE = (psycopg2.OperationalError, psycopg2.InterfaceError)

# What a background job meets while the database is away (down, restarting, unreachable): not
# a bug, so logged as an outage (`OutageLog`), without a traceback.
OUTAGE = (*UNAVAILABLE, OSError, asyncio.TimeoutError, ServiceUnavailable)
# Connection budget (`connection_budget`, `pool_size_for`): a server process's pool serves at
# most POOL_SIZE requests' connections at once, and needs MIN_POOL to serve at all. HEADROOM
# slots are left to others (a restarting worker's start-up check, an operator's psql, a backup);
# the background jobs (one process) hold JOB_CONNECTIONS of their own (the mail and webhook
# senders' LISTEN connections) on top of their process's pool.
POOL_SIZE = 20
MIN_POOL = 2
HEADROOM = 3
JOB_CONNECTIONS = 2
# How long a request waits for a pooled connection when every one is busy (or PostgreSQL has no
# slot left for a new one) before it is answered 503 with Retry-After.
POOL_WAIT = 10.0
# What PostgreSQL says when it has no slot left for a new connection.
_NO_SLOT = ("too many clients", "remaining connection slots are reserved",
            "too many connections for role", "too many connections for database")


# A connection the database dropped: each watches its own socket (`aiopg_adapter`, issue 39).
watch_own_socket(aiopg.connection.Connection)


def with_user(url: str, user: str) -> str:
    """The same database as `url`, connecting as `user` (a key=value DSN)."""
    params = psycopg2.extensions.parse_dsn(url)
    params["user"] = user
    params.pop("password", None)
    return psycopg2.extensions.make_dsn(**params)


# TCP keepalives on every connection (libpq's settings; a unix socket has none, and needs none:
# the server's end closing is seen at once): a database host that vanished from the network, whose
# socket would never close, is noticed within about KEEPALIVE_IDLE + INTERVAL * COUNT seconds,
# and data it never acknowledges within TCP_USER_TIMEOUT ms. Settings in the URL win.
KEEPALIVES = {"keepalives": "1", "keepalives_idle": "5", "keepalives_interval": "2",
              "keepalives_count": "3"}
if psycopg2.extensions.libpq_version() >= 120000:  # libpq 12 knows it
    KEEPALIVES["tcp_user_timeout"] = "10000"


def with_keepalives(url: str) -> str:
    """`url` with `KEEPALIVES` for the settings it does not make itself."""
    params = psycopg2.extensions.parse_dsn(url)
    return psycopg2.extensions.make_dsn(**{**KEEPALIVES, **params})


async def create_pool(url: str, *, maxsize: int = 20) -> aiopg.Pool:
    return await aiopg.create_pool(
        with_keepalives(url),
        minsize=1,
        maxsize=maxsize,
        timeout=30,
        options="-c TimeZone=UTC",
        cursor_factory=psycopg2.extras.RealDictCursor,
    )


class OutageLog:
    """A background job's log while the database is away: one warning when it goes (the first
    failure), one line when it is back (the next success), nothing for the retries between.
    A failure that is no outage (a bug) is logged with its traceback, as before."""

    def __init__(self, logger: logging.Logger, job: str) -> None:
        self.logger = logger
        self.job = job
        self.since: float | None = None

    def failed(self, exc: BaseException) -> None:
        if not isinstance(exc, OUTAGE):
            self.logger.error("%s failed", self.job, exc_info=exc)
        elif self.since is None:
            self.since = time.monotonic()
            self.logger.warning("%s: the database is unreachable (%s); retrying quietly until it "
                                "is back", self.job, first_line(exc))

    def ok(self) -> None:
        if self.since is not None:
            self.logger.warning("%s: the database is back (away %.1f s)", self.job,
                                time.monotonic() - self.since)
            self.since = None


def first_line(exc: BaseException) -> str:
    """An error's first line (its type's name when it has no text)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


async def connection_budget(url: str) -> int:
    """How many connections a server connecting with `url` may hold together: PostgreSQL's
    `max_connections` less the slots reserved for superusers (and `pg_use_reserved_connections`)
    and HEADROOM, and no more than the role's or the database's own connection limit."""
    conn = await aiopg.connect(with_keepalives(url), timeout=30)
    try:
        cur = await conn.cursor()
        try:
            await cur.execute(
                """SELECT current_setting('max_connections')::int,
                          current_setting('superuser_reserved_connections')::int,
                          coalesce(current_setting('reserved_connections', true)::int, 0),
                          (SELECT rolconnlimit FROM pg_roles WHERE rolname = current_user),
                          (SELECT datconnlimit FROM pg_database
                           WHERE datname = current_database())""")
            slots, superuser, reserved, role_limit, db_limit = await cur.fetchone()
        finally:
            cur.close()
    finally:
        await conn.close()
    budget = slots - superuser - reserved - HEADROOM
    for limit in (role_limit, db_limit):
        if limit is not None and limit >= 0:
            budget = min(budget, limit - 1)  # one spare: a dead worker's close late
    return budget


def pool_size_for(budget: int, processes: int, *, jobs: bool) -> int:
    """Each of `processes` pools' size (requests' connections, at most POOL_SIZE) so that
    together, with the background jobs' own connections, they stay within `budget`; ConfigError
    when they cannot each have MIN_POOL."""
    extra = JOB_CONNECTIONS if jobs else 0
    size = min(POOL_SIZE, (budget - extra) // processes)
    if size < MIN_POOL:
        needed = processes * MIN_POOL + extra
        what = f"{processes} workers need" if processes > 1 else "the server needs"
        raise ConfigError(
            f"{what} at least {needed} database connections and PostgreSQL leaves this server "
            f"{max(budget, 0)} (max_connections less reserved slots and connection limits): "
            "raise max_connections" + (" or run fewer workers" if processes > 1 else ""))
    return size


class connection:
    """`async with connection(pool) as conn`: a connection from the pool, waiting up to
    POOL_WAIT for one while all are busy; 503 (with Retry-After) when none comes in time or the
    database cannot be reached. Given back to the pool on the way out, whatever happened.

    (A class rather than a generator-based context manager: every request enters one.)"""

    __slots__ = ("_pool", "_conn")

    def __init__(self, pool: aiopg.Pool) -> None:
        self._pool = pool
        self._conn: aiopg.Connection | None = None

    async def __aenter__(self) -> aiopg.Connection:
        try:
            self._conn = await acquire(self._pool, POOL_WAIT)
        except (*UNAVAILABLE, OSError, asyncio.TimeoutError):
            raise ServiceUnavailable() from None
        return self._conn

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if not give_back_free(self._pool, conn):
            await self._pool.release(conn)
        if isinstance(exc, UNAVAILABLE) and conn.closed:
            # The database dropped this connection. After a restart or a failover it dropped
            # the idle ones too, which the pool would otherwise find one failed request at a
            # time: let them go, and the next request opens a new one.
            await self._pool.clear()


async def acquire(pool: aiopg.Pool, wait: float = POOL_WAIT) -> aiopg.Connection:
    """A connection from `pool` within `wait` seconds (asyncio.TimeoutError after). The pool
    queues callers while it is full; when PostgreSQL refuses it a new connection for want of a
    slot, and this pool has connections in use, it waits for one of them instead."""
    conn = take_free(pool)  # the common case, without aiopg's slow path
    if conn is not None:
        return conn
    if pool.freesize:  # a connection is free: no wait to bound
        try:
            return await pool.acquire()
        except psycopg2.OperationalError:
            pass  # one that had to be opened anew could not be: wait below
    loop = asyncio.get_running_loop()
    pause = 0.02
    async with asyncio.timeout_at(loop.time() + wait):
        while True:
            try:
                return await pool.acquire()
            except psycopg2.OperationalError as exc:
                if pool.size <= pool.freesize or not any(m in str(exc) for m in _NO_SLOT):
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)


@asynccontextmanager
async def transaction(conn: aiopg.Connection) -> AsyncIterator[aiopg.Cursor]:
    """A cursor inside BEGIN/COMMIT; any exception rolls back. A broken connection is dropped."""
    cur = await conn.cursor()
    try:
        await cur.execute("BEGIN")
        try:
            yield cur
        except BaseException:
            await rollback(conn, cur)
            raise
        await cur.execute("COMMIT")
    finally:
        cur.close()


async def rollback(conn: Any, cur: aiopg.Cursor) -> None:
    try:
        await asyncio.shield(cur.execute("ROLLBACK"))
    except BaseException:
        conn.close()  # the pool discards a closed connection


@asynccontextmanager
async def cursor(source: aiopg.Connection | aiopg.Pool) -> AsyncIterator[aiopg.Cursor]:
    """A cursor in autocommit mode, for single statements, on a connection or from a pool."""
    if isinstance(source, aiopg.Pool):
        async with source.acquire() as conn:
            cur = await conn.cursor()
            try:
                yield cur
            finally:
                cur.close()
        return
    cur = await source.cursor()
    try:
        yield cur
    finally:
        cur.close()


@asynccontextmanager
async def pool_transaction(pool: aiopg.Pool) -> AsyncIterator[aiopg.Cursor]:
    """`transaction` on a connection taken from `pool` (for jobs and commands)."""
    async with pool.acquire() as conn:
        async with transaction(conn) as cur:
            yield cur


# --- statements prepared once per connection ------------------------------------------------------


async def row_cursor(conn: aiopg.Connection) -> aiopg.Cursor:
    """`conn`'s cursor for hot statements (`Statement.fetchone`), in autocommit mode: its rows
    are tuples, which the statement maps to dicts by its column names, cheaper than building a
    dict cursor's rows; and it is made once per connection and kept on it, so a request that
    runs one hot statement creates no cursor. Not closed by the caller."""
    cur = kept_row_cursor(conn)
    if cur is None or cur.closed:
        cur = await conn.cursor(cursor_factory=psycopg2.extensions.cursor)
        keep_row_cursor(conn, cur)
    return cur


async def fetchone(cur: aiopg.Cursor, sql: str, args: tuple | dict | None = None) -> dict | None:
    await cur.execute(sql, args)
    return await cur.fetchone()


async def fetchall(cur: aiopg.Cursor, sql: str, args: tuple | dict | None = None) -> list[dict]:
    await cur.execute(sql, args)
    return list(await cur.fetchall())


@asynccontextmanager
async def unique_as_conflict(cur: aiopg.Cursor, message: str, *,
                             savepoint: str | None = None) -> AsyncIterator[None]:
    """Turn a unique violation inside the block into `Conflict(message)`.

    With `savepoint`, the block runs under a savepoint that is rolled back on the violation, so
    the surrounding transaction goes on (bulk items); without, the violation aborts it."""
    if savepoint:
        await cur.execute(f"SAVEPOINT {savepoint}")
    try:
        yield
    except psycopg2.errors.UniqueViolation:
        if savepoint:
            await cur.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
        raise Conflict(message) from None
    if savepoint:
        await cur.execute(f"RELEASE SAVEPOINT {savepoint}")


