"""PostgreSQL: opening the database (embedded or external) as the server's own role, the aiopg
pool, connections, transactions and migrations.

With `CVSM_DATABASE_URL` unset the server runs the embedded PostgreSQL (`embedded.py`) in
`<data dir>/pg`, and supervises it (`_supervise`): a postmaster that dies is started again, with
its crash recovery, and requests recover by themselves (each pooled connection to the dead one
fails once, as a 503, and is replaced). When it cannot be started again the server stops, and
exits 1, so that its own supervisor (systemd, Docker) restarts it.

While the database is away, a background job logs one line when it loses it and one when it is
back (`OutageLog`), not a traceback at each retry.

The server never serves requests as a superuser or as the owner of the tables: migrations run as
the owner (the embedded superuser, or `CVSM_MIGRATION_DATABASE_URL`), and requests run as a login
role that is a member of `cvsm_app`, which holds only the table privileges the server needs (no
UPDATE, no TRUNCATE of the audit log; it can neither disable a trigger nor change
`session_replication_role`). See migration 0004 and the README.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import re
import select
import signal
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import aiopg
import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras

from .config import ConfigError, Settings
from .errors import Conflict, ServiceUnavailable
from .embedded import EmbeddedPostgres, EmbeddedStartError

log = logging.getLogger("cvsm.db")

# A stable number for pg_advisory_xact_lock while migrating ("cvsm" in ASCII).
MIGRATION_LOCK_ID = 0x6376736D
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

# The embedded PostgreSQL's supervision (`_supervise`): how often its postmaster is looked at,
# and how many starts in a row may fail before the server gives up and stops (exit status 1).
WATCH_SECONDS = 1.0
RESTART_TRIES = 5

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


# --- aiopg and a connection the database dropped --------------------------------------------------
#
# When the database goes away, libpq closes a connection's socket the moment it finds the server
# gone, inside whatever call found it, while aiopg still has the socket's number registered with
# the event loop and forgets it only later (when the connection is closed), if at all. The number
# is free meanwhile and the next connection opened gets it; aiopg's registration of the new
# socket then changes only the callback (the loop believes the number is watched already), or
# the dead connection's late close unregisters the new socket. Either way an answer or an end
# the loop never reports: a statement that waited for it hung until aiopg's statement limit
# (30 s), then was a 500 (issue 39, up to half of the postmaster kills under load).
# `_watch_own_socket`: each new connection registers its socket afresh; a connection's close
# unregisters its number only while that number is still its own socket; and a statement
# waiting for its answer also looks at its socket itself every SOCKET_CHECK seconds, so no
# event the loop misses can hold it (test_db_outage kills the postmaster under load ten times;
# written against aiopg 1.4's `Connection`: `_fileno`, `_ready`, `_poll`, `_close`, `_writing`).
# With a multi-host URL (high availability) libpq may end a connect on another socket than the
# one it began with: `_follow_socket` moves the watch to it (test_failover, issue 40).


def _socket_identity(fd: int) -> tuple[int, int] | None:
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    return info.st_dev, info.st_ino


class StatementTimeout(asyncio.TimeoutError):
    """A statement got no answer within aiopg's limit (the pool's `timeout`): the database is
    away or stuck, as a lost connection is (`UNAVAILABLE`)."""


# How often a statement waiting for its answer looks at its socket itself (`_watch_own_socket`).
SOCKET_CHECK = 0.5


def _has_something(fd: int | None, writing: bool) -> bool:
    """Whether socket `fd` has data or its end to read now, or room to write when `writing`
    (or is no longer open)."""
    if fd is None:
        return True
    try:
        readable, writable, _ = select.select([fd], [fd] if writing else [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable or writable)


def _unwatch(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """Forget the loop's registrations of socket number `fd`, also when the socket registered
    under it was closed meanwhile (the selector's change of it fails then: it is dropped)."""
    for remove in (loop.remove_writer, loop.remove_reader):
        try:
            remove(fd)
        except OSError:
            selector = getattr(loop, "_selector", None)
            if selector is not None:
                with contextlib.suppress(KeyError, ValueError, OSError):
                    selector.unregister(fd)


def _follow_socket(self: Any) -> None:
    """Watch the socket libpq uses now. With a multi-host URL (high availability,
    docs/operations.md) libpq opens a new socket for each host it tries while connecting, and
    aiopg watches only the first: without this, every statement on that connection waited for
    the SOCKET_CHECK look (half a second each) after a failover. A number that is no longer
    this connection's socket is left alone: another connection may hold it now."""
    old = self._fileno
    if old is None:
        return
    try:
        fd = self._conn.fileno()
    except (psycopg2.Error, ValueError):
        return
    identity = _socket_identity(fd)
    if fd == old and identity == self._cvsm_socket:
        return
    loop = self._loop
    if fd != old and _socket_identity(old) == self._cvsm_socket:  # still ours: unwatch it
        _unwatch(loop, old)
    self._fileno, self._cvsm_socket = fd, identity
    _unwatch(loop, fd)  # the registration of a socket closed under this number
    loop.add_reader(fd, self._ready, self._weakref)
    if self._writing:
        loop.add_writer(fd, self._ready, self._weakref)


def _watch_own_socket(connection_class: type) -> None:
    if getattr(connection_class, "_cvsm_watches_own_socket", False):
        return
    original_init, original_close = connection_class.__init__, connection_class._close
    original_ready, original_connect = connection_class._ready, connection_class._connect

    def _ready(weak_self: Any) -> None:
        original_ready(weak_self)
        self = weak_self()
        # Only while connecting: once connected, libpq keeps its socket (and a statement's
        # event costs no look at it).
        if (self is not None and not getattr(self, "_cvsm_connected", True)
                and not self._conn.closed):
            _follow_socket(self)

    async def _connect(self) -> Any:
        connected = await original_connect(self)
        _follow_socket(self)
        self._cvsm_connected = True
        return connected

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        fd = self._fileno
        self._cvsm_socket = _socket_identity(fd)
        self._cvsm_connected = False
        # A dead connection's registration may still hold this number: register anew.
        self._loop.remove_reader(fd)
        self._loop.add_reader(fd, self._ready, self._weakref)

    def _close(self) -> None:
        if (self._fileno is not None
                and _socket_identity(self._fileno) != getattr(self, "_cvsm_socket", None)):
            self._fileno = None  # libpq closed it; the number belongs to another socket now
            self._writing = False
        original_close(self)

    async def _poll(self, waiter: asyncio.Future, timeout: float) -> None:
        # aiopg's `_poll`, waiting for the answer in steps of SOCKET_CHECK seconds: between
        # them, a socket that has something to read (an answer, or its end) while no event said
        # so is read now, so that no registration the loop lost can hold a statement.
        assert waiter is self._waiter, (waiter, self._waiter)
        self._ready(self._weakref)
        loop = self._loop
        deadline = loop.time() + timeout
        try:
            while not waiter.done():
                left = deadline - loop.time()
                if left <= 0:
                    waiter.cancel()
                    raise StatementTimeout(f"no answer from the database within {timeout:g} s")
                await asyncio.wait((waiter,), timeout=min(SOCKET_CHECK, left))
                if not waiter.done() and _has_something(self._fileno, self._writing):
                    log.debug("a database socket had news the event loop did not report")
                    self._ready(self._weakref)
            waiter.result()
        except (asyncio.CancelledError, asyncio.TimeoutError):
            if not waiter.done():
                waiter.cancel()
            await asyncio.shield(self.close())
            raise
        except psycopg2.extensions.QueryCanceledError as exc:
            loop.call_exception_handler({"message": exc.pgerror, "exception": exc,
                                         "future": waiter})
            raise asyncio.CancelledError from None
        finally:
            self._waiter = None

    connection_class._poll = _poll
    connection_class._ready = staticmethod(_ready)
    connection_class._connect = _connect
    connection_class.__init__ = __init__
    connection_class._close = _close
    connection_class._cvsm_watches_own_socket = True


_watch_own_socket(aiopg.connection.Connection)


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


_lost: list[str] = []


def embedded_lost() -> str | None:
    """Why this process stopped its server because the embedded PostgreSQL could not be started
    again (`cvsm-server serve` then exits 1), or None."""
    return _lost[-1] if _lost else None


async def _supervise(embedded: EmbeddedPostgres) -> None:
    """Watch the embedded postmaster; start it again when it has died (one line when it goes,
    one when it is back). After RESTART_TRIES failed starts in a row: one error line, and SIGTERM
    to this process, which stops the server gracefully; `embedded_lost` says why."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(WATCH_SECONDS)
        if embedded.running():
            continue
        pid, began = embedded.pid, time.monotonic()
        log.warning("embedded PostgreSQL (pid %s) has stopped; starting it again", pid)
        for attempt in range(1, RESTART_TRIES + 1):
            try:
                await loop.run_in_executor(None, embedded.restart)
                break
            except EmbeddedStartError as exc:
                reason = str(exc)
            if attempt == RESTART_TRIES:
                log.error("%s (%d tries); stopping the server so that its supervisor restarts it",
                          reason, attempt)
                _lost.append(reason)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            await asyncio.sleep(min(2.0 ** attempt, 10.0))
        log.warning("embedded PostgreSQL running again (pid %s, %.1f s after it stopped)",
                    embedded.pid, time.monotonic() - began)


@dataclass
class Database:
    """An open database: the pool requests use, and the URL it was opened with."""

    pool: aiopg.Pool
    url: str


@asynccontextmanager
async def _cluster(settings: Settings, *,
                   supervise: bool = False) -> AsyncIterator[tuple[str, str, bool]]:
    """(owner URL, server URL, embedded?): the embedded PostgreSQL runs while this is open;
    `supervise`: and is started again when it dies (`_supervise`)."""
    if settings.database_url:
        yield (settings.migration_database_url or settings.database_url,
               settings.database_url, False)
        return
    loop = asyncio.get_running_loop()
    embedded = EmbeddedPostgres(settings.data_dir)
    owner_url = await loop.run_in_executor(None, embedded.start)
    log.info("embedded PostgreSQL running in %s", embedded.pgdata)
    supervisor = asyncio.create_task(_supervise(embedded)) if supervise else None
    try:
        yield owner_url, with_user(owner_url, APP_ROLE), True
    finally:
        if supervisor is not None:
            supervisor.cancel()
            await asyncio.gather(supervisor, return_exceptions=True)
        await loop.run_in_executor(None, embedded.stop)


@asynccontextmanager
async def schema_owner(settings: Settings) -> AsyncIterator[tuple[str, Path | None]]:
    """(owner URL, the embedded PostgreSQL's bin directory or None for an external database),
    for operator commands (`backup`, `restore`); the embedded PostgreSQL runs while open."""
    if settings.database_url:
        yield settings.migration_database_url or settings.database_url, None
        return
    loop = asyncio.get_running_loop()
    embedded = EmbeddedPostgres(settings.data_dir)
    owner_url = await loop.run_in_executor(None, embedded.start)
    try:
        yield owner_url, embedded.bin_dir
    finally:
        await loop.run_in_executor(None, embedded.stop)


async def _migrate_as_owner(owner_url: str, embedded: bool) -> list[int]:
    owner_pool = await create_pool(owner_url, maxsize=2)
    try:
        applied = await migrate(owner_pool)
        if embedded:  # the embedded default serves as cvsm_app itself
            await ensure_app_login(owner_pool)
        return applied
    finally:
        owner_pool.close()
        await owner_pool.wait_closed()


async def migrate_as_owner(owner_url: str, *, embedded: bool) -> list[int]:
    """Apply pending migrations with the owner's URL (`cvsm-server restore`, after loading)."""
    return await _migrate_as_owner(owner_url, embedded)


async def migrate_database(settings: Settings) -> list[int]:
    """Apply pending migrations as the schema owner (`cvsm-server migrate`)."""
    async with _cluster(settings) as (owner_url, _, embedded):
        return await _migrate_as_owner(owner_url, embedded)


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[tuple[str, str]]:
    """Start the embedded PostgreSQL when no URL is configured and apply pending migrations as
    the schema owner; yields (owner URL, server URL) and, for the embedded one, stops it on exit.
    `serve --workers` runs this once in its parent; the workers `open` the URLs it gives."""
    async with _cluster(settings, supervise=True) as (owner_url, url, embedded):
        await _migrate_as_owner(owner_url, embedded)
        yield owner_url, url


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


@asynccontextmanager
async def open(settings: Settings, *, maxsize: int | None = None,
               supervise: bool = False) -> AsyncIterator[Database]:
    """Start the embedded PostgreSQL when no URL is configured, apply pending migrations as the
    schema owner, and open a pool as the server's own (unprivileged) role. The app factory and
    `cvsm-server serve` use this.

    The pool holds at most `maxsize` connections; by default `settings.pool_size` (what
    `serve --workers` gave this worker) or, for a single process, what PostgreSQL leaves it
    (`pool_size_for`), plus the background jobs' connections when they run here.
    `supervise`: an embedded PostgreSQL that dies is started again (`_supervise`)."""
    async with _cluster(settings, supervise=supervise) as (owner_url, url, embedded):
        await _migrate_as_owner(owner_url, embedded)
        if maxsize is None:
            size = settings.pool_size or pool_size_for(await connection_budget(url), 1,
                                                       jobs=settings.background_jobs)
            maxsize = size + (JOB_CONNECTIONS if settings.background_jobs else 0)
        pool = await create_pool(url, maxsize=maxsize)
        try:
            await refuse_superuser(pool, settings.allow_superuser)
            yield Database(pool, url)
        finally:
            pool.close()
            await pool.wait_closed()


async def refuse_superuser(pool: aiopg.Pool, allowed: bool) -> None:
    """Stop start-up when the serving role could switch the audit guard off."""
    async with cursor(pool) as cur:
        row = await fetchone(
            cur,
            """SELECT r.rolsuper, r.rolbypassrls, current_user AS name,
                      coalesce(pg_has_role(current_user, (SELECT relowner FROM pg_class
                                                          WHERE oid = to_regclass('audit_logs')),
                                           'USAGE'), false) AS owns_audit
               FROM pg_roles r WHERE r.rolname = current_user""",
        )
    if row["rolsuper"] or row["owns_audit"]:
        what = "a superuser" if row["rolsuper"] else "the owner of the audit log"
        if not allowed:
            raise ConfigError(
                f"the database role {row['name']!r} is {what}: it could switch off the audit "
                f"log's protection. Connect as a role in {APP_ROLE} (see the README), or set "
                "CVSM_ALLOW_SUPERUSER=1 to run anyway"
            )
        log.warning("serving as %s (%s) because CVSM_ALLOW_SUPERUSER=1", row["name"], what)


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
        if not _release_now(self._pool, conn):
            await self._pool.release(conn)
        if isinstance(exc, UNAVAILABLE) and conn.closed:
            # The database dropped this connection. After a restart or a failover it dropped
            # the idle ones too, which the pool would otherwise find one failed request at a
            # time: let them go, and the next request opens a new one.
            await self._pool.clear()


# aiopg's pool takes a lock under a timeout and walks every free connection on acquire, and
# starts a task to wake a waiter on release: tens of microseconds per request. `_take_now` and
# `_release_now` do the common case (a usable connection is free; no acquire waits) with the
# pool's own bookkeeping and nothing else, and leave every other case to aiopg. They rely on
# aiopg 1.4's Pool attributes (`_free`, `_used`, `_terminated`, `_closing`, `_recycle`,
# `_cond`); test_workers checks that a warm request takes this path, that a connection found
# dead is replaced, and that a waiting request still gets a connection given back.
_IDLE = psycopg2.extensions.TRANSACTION_STATUS_IDLE


def _take_now(pool: aiopg.Pool) -> aiopg.Connection | None:
    """A free connection at once (the last one given back), or None: then aiopg's `acquire`."""
    free = pool._free
    while free and not pool._closing:
        conn = free.pop()
        if conn.closed:  # dropped, as aiopg's acquire drops it
            continue
        if -1 < pool._recycle < pool._loop.time() - conn.last_usage:
            free.append(conn)  # due to be recycled: aiopg's acquire does that
            return None
        pool._used.add(conn)
        return conn
    return None


def _release_now(pool: aiopg.Pool, conn: aiopg.Connection) -> bool:
    """Give `conn` back to the free list at once when nothing else is to be done: it is open,
    outside a transaction, not terminated, the pool is not closing, and no acquire waits."""
    if (pool._closing or pool._cond._waiters or conn.closed or conn in pool._terminated
            or conn not in pool._used or conn.raw.get_transaction_status() != _IDLE):
        return False
    pool._used.remove(conn)
    pool._free.append(conn)
    return True


async def acquire(pool: aiopg.Pool, wait: float = POOL_WAIT) -> aiopg.Connection:
    """A connection from `pool` within `wait` seconds (asyncio.TimeoutError after). The pool
    queues callers while it is full; when PostgreSQL refuses it a new connection for want of a
    slot, and this pool has connections in use, it waits for one of them instead."""
    conn = _take_now(pool)
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
            await _rollback(conn, cur)
            raise
        await cur.execute("COMMIT")
    finally:
        cur.close()


async def _rollback(conn: Any, cur: aiopg.Cursor) -> None:
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

_PARAM = re.compile(r"%\((\w+)\)s")
_generation = itertools.count(1)
# psycopg2 connection -> {statement key: the name it is prepared under on that connection}. A
# connection the pool opens anew is a new object, so it prepares afresh.
_prepared: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()


class Statement:
    """A hot statement, prepared once per connection (`PREPARE`) and then only executed.

    psycopg2 has no protocol-level prepare, so `sql` (with `%(name)s` parameters) becomes
    `PREPARE <name> AS <sql with $1..$n>`, and each call sends `EXECUTE <name>(<values>)`: the
    statement is parsed, analysed and planned once per connection instead of at every call
    (PostgreSQL settles on a generic plan after five executions; `explain` shows it). The first
    call on a connection sends PREPARE and EXECUTE in one message, so it is still one round trip.

    Each prepare uses a new name: a PREPARE whose outcome is unknown (its message failed) is
    never named again. A statement that vanished from its connection (`DISCARD ALL`, `DEALLOCATE`,
    a transaction-pooling PgBouncer: not supported, see docs/deploy.md) is prepared again when
    the connection is outside a transaction; inside one, the error aborts it."""

    def __init__(self, key: str, sql: str) -> None:
        names: list[str] = []
        def number(match: re.Match) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"
        self.key = key
        self.names = tuple(names)
        self._body = _PARAM.sub(number, sql)  # keeps `%%`: the message is interpolated whole
        self._args = f"({', '.join(f'%({n})s' for n in names)})" if names else ""
        self._columns: tuple[str, ...] | None = None  # of its rows, read once (`fetchone`)

    def __repr__(self) -> str:
        return f"Statement({self.key!r})"

    def _execute_sql(self, name: str) -> str:
        return f"EXECUTE {name}{self._args}"

    async def execute(self, cur: aiopg.Cursor, params: dict) -> None:
        """Run the statement on `cur`'s connection, preparing it there first if need be."""
        conn = cur.raw.connection
        names = _prepared.get(conn)
        if names is None:
            names = _prepared[conn] = {}
        name = names.get(self.key)
        if name is not None:
            try:
                await cur.execute(self._execute_sql(name), params)
                return
            except psycopg2.errors.InvalidSqlStatementName:
                names.pop(self.key, None)
                if conn.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
                    raise
        name = f"{self.key}_{next(_generation)}"
        try:
            await cur.execute(f"PREPARE {name} AS {self._body}; {self._execute_sql(name)}",
                              params)
        except BaseException:
            names.pop(self.key, None)
            raise
        names[self.key] = name

    async def fetchone(self, cur: aiopg.Cursor, params: dict) -> dict | None:
        """The first row as a dict, on a dict cursor or a tuple one (`row_cursor`)."""
        await self.execute(cur, params)
        row = await cur.fetchone()
        if row is None or type(row) is not tuple:
            return row
        names = self._columns
        if names is None:  # the same statement always answers the same columns
            names = self._columns = tuple(column.name for column in cur.description)
        return dict(zip(names, row))

    async def fetchall(self, cur: aiopg.Cursor, params: dict) -> list[dict]:
        await self.execute(cur, params)
        return list(await cur.fetchall())

    async def explain(self, cur: aiopg.Cursor, params: dict) -> str:
        """The plan PostgreSQL executes now for these parameters (`EXPLAIN EXECUTE`)."""
        await self.execute(cur, params)
        name = _prepared[cur.raw.connection][self.key]
        await cur.execute(f"EXPLAIN {self._execute_sql(name)}", params)
        return "\n".join(next(iter(row.values())) if isinstance(row, dict) else row[0]
                         for row in await cur.fetchall())


async def row_cursor(conn: aiopg.Connection) -> aiopg.Cursor:
    """`conn`'s cursor for hot statements (`Statement.fetchone`), in autocommit mode: its rows
    are tuples, which the statement maps to dicts by its column names, cheaper than building a
    dict cursor's rows; and it is made once per connection and kept on it, so a request that
    runs one hot statement creates no cursor. Not closed by the caller."""
    cur = getattr(conn, "_cvsm_row_cursor", None)
    if cur is None or cur.closed:
        cur = await conn.cursor(cursor_factory=psycopg2.extensions.cursor)
        conn._cvsm_row_cursor = cur  # dies with its connection (a cycle the collector frees)
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


def migration_files() -> list[tuple[int, str, str]]:
    """(number, name, sql) for every `NNNN_name.sql` shipped in the package, in order."""
    found = []
    for entry in resources.files("cvsm_server.migrations").iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append((int(number), rest[:-4], entry.read_text(encoding="utf-8")))
    return sorted(found)


class SchemaTooNew(ConfigError):
    """The database holds migrations this server does not know: a newer version migrated it."""


def _refuse_newer(done: set[int]) -> None:
    """Stop when the database has migrations this version does not ship (a newer version ran on
    it): this one would write to a schema it does not know. One line with both versions."""
    known = {n for n, _, _ in migration_files()}
    unknown = sorted(done - known)
    if unknown:
        from . import __version__

        raise SchemaTooNew(
            f"the database's schema is at migration {max(done):04d}, newer than this "
            f"cvsm-server {__version__} knows (up to {max(known):04d}; unknown: "
            f"{', '.join(f'{n:04d}' for n in unknown)}): run the version that migrated it, or "
            "restore a backup taken before that upgrade (docs/operations.md)")


async def _applied(cur: aiopg.Cursor) -> set[int]:
    row = await fetchone(cur, "SELECT to_regclass('schema_migrations') IS NOT NULL AS ok")
    if not row["ok"]:
        return set()
    return {r["version"] for r in await fetchall(cur, "SELECT version FROM schema_migrations")}


async def pending_migrations(pool: aiopg.Pool) -> list[int]:
    async with cursor(pool) as cur:
        done = await _applied(cur)
    _refuse_newer(done)
    return [n for n, _, _ in migration_files() if n not in done]


@asynccontextmanager
async def migration_lock(pool: aiopg.Pool) -> AsyncIterator[aiopg.Cursor]:
    """A cursor on one connection holding the migration lock (a session advisory lock): every
    one-time statement of a start-up runs under it, so processes starting together on one
    database wait for each other instead of failing ("tuple concurrently updated", a unique
    violation of a catalog). Released on the way out, or with the connection if it broke."""
    async with pool.acquire() as conn:
        cur = await conn.cursor()
        try:
            await cur.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_ID,))
            try:
                yield cur
            finally:
                if not conn.closed:  # else the lock went with the session
                    try:
                        await cur.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))
                    except (*UNAVAILABLE, OSError, asyncio.TimeoutError):
                        conn.close()
        finally:
            cur.close()


async def migrate(pool: aiopg.Pool, *, upto: int | None = None) -> list[int]:
    """Apply the migrations not yet recorded in `schema_migrations`, each in its own transaction.

    Concurrent start-ups are serialised by an advisory lock (`migration_lock`); returns the
    numbers applied. With nothing pending it issues no DDL, so a role without CREATE privilege
    may call it. A database with migrations this version does not know is refused
    (`SchemaTooNew`).
    """
    wanted = [n for n in await pending_migrations(pool) if upto is None or n <= upto]
    if not wanted:
        return []
    applied_now = []
    try:
        async with migration_lock(pool) as cur:
            await cur.execute(
                """CREATE TABLE IF NOT EXISTS schema_migrations (
                       version integer PRIMARY KEY,
                       name text NOT NULL,
                       applied_at timestamptz NOT NULL DEFAULT now())"""
            )
            done = await _applied(cur)  # another process may have migrated meanwhile
            _refuse_newer(done)
            for number, name, sql in migration_files():
                if upto is not None and number > upto:
                    break
                if number in done:
                    continue
                log.info("applying migration %04d_%s", number, name)
                await cur.execute("BEGIN")
                try:
                    await cur.execute(sql)
                    await cur.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                        (number, name))
                except BaseException:
                    await _rollback(cur.connection, cur)
                    raise
                await cur.execute("COMMIT")
                applied_now.append(number)
    except psycopg2.errors.InsufficientPrivilege:
        raise ConfigError(
            "database migrations are pending and this role may not apply them: run "
            "`cvsm-server migrate` with CVSM_MIGRATION_DATABASE_URL set to the schema owner"
        ) from None
    return applied_now


async def ensure_app_login(pool: aiopg.Pool) -> None:
    """The embedded default serves as `cvsm_app` itself: let it log in (once, under the lock)."""
    async with cursor(pool) as cur:
        row = await fetchone(cur, "SELECT rolcanlogin FROM pg_roles WHERE rolname = %s",
                             (APP_ROLE,))
    if row is not None and row["rolcanlogin"]:
        return
    async with migration_lock(pool) as cur:
        row = await fetchone(cur, "SELECT rolcanlogin FROM pg_roles WHERE rolname = %s",
                             (APP_ROLE,))
        if row is not None and not row["rolcanlogin"]:
            await cur.execute(f"ALTER ROLE {APP_ROLE} LOGIN")
