"""Every place cvsm reads or replaces something aiopg keeps private, in one module.

aiopg (the project's chosen driver) has no public way to do what each function here does; the
rest of the code calls these and touches no `_name` of aiopg's (`tests/test_private_adapters.py`
checks both: the names below still exist with the shape used here on the installed aiopg, and no
other module of `cvsm_server` reads a private attribute). Written against aiopg 1.4. When a
release changes one of them, that test fails naming it and the version; what breaks without it
is said with each.

- `watch_own_socket`: the watch each connection keeps on its own socket (below), patched into
  aiopg's `Connection` (`_fileno`, `_conn`, `_loop`, `_ready`, `_weakref`, `_writing`, `_waiter`,
  `_poll`, `_close`, `_connect`). Without it, a postmaster killed under load hangs requests for
  30 s and then answers 500 (issue 39, test_db_outage), and after a failover every statement
  waits half a second (issue 40, test_failover).
- `take_free` / `give_back_free`: the pool's fast path for a request's connection (below).
- `kept_row_cursor` / `keep_row_cursor`: the row cursor `db.pool.row_cursor` keeps on each
  connection, as an attribute of cvsm's own on aiopg's `Connection` (it has no slot for it).
- `unwatch` reads asyncio's `loop._selector` (the selector loop's; uvloop has none) to drop a
  registration whose socket was closed under it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
from typing import Any

import aiopg
import psycopg2
import psycopg2.extensions

log = logging.getLogger("cvsm.db")

# The private names this module relies on, on aiopg's `Connection` (checked by the tests):
# methods replaced (with the parameters used) and attributes read or written.
RELIES_ON_METHODS = {"_close": ("self",), "_connect": ("self",), "_ready": ("weak_self",),
                     "_poll": ("self", "waiter", "timeout")}
RELIES_ON_ATTRIBUTES = ("_fileno", "_conn", "_loop", "_weakref", "_writing", "_waiter")


# --- a connection the database dropped ------------------------------------------------------------
#
# When the database goes away, libpq closes a connection's socket the moment it finds the server
# gone, inside whatever call found it, while aiopg still has the socket's number registered with
# the event loop and forgets it only later (when the connection is closed), if at all. The number
# is free meanwhile and the next connection opened gets it; aiopg's registration of the new
# socket then changes only the callback (the loop believes the number is watched already), or
# the dead connection's late close unregisters the new socket. Either way an answer or an end
# the loop never reports: a statement that waited for it hung until aiopg's statement limit
# (30 s), then was a 500 (issue 39, up to half of the postmaster kills under load).
# `watch_own_socket`: each new connection registers its socket afresh; a connection's close
# unregisters its number only while that number is still its own socket; and a statement
# waiting for its answer also looks at its socket itself every SOCKET_CHECK seconds, so no
# event the loop misses can hold it (test_db_outage kills the postmaster under load ten times;
# written against aiopg 1.4's `Connection`: `_fileno`, `_ready`, `_poll`, `_close`, `_writing`).
# With a multi-host URL (high availability) libpq may end a connect on another socket than the
# one it began with: `follow_socket` moves the watch to it (test_failover, issue 40).


class StatementTimeout(asyncio.TimeoutError):
    """A statement got no answer within aiopg's limit (the pool's `timeout`): the database is
    away or stuck, as a lost connection is (`UNAVAILABLE`)."""


# How often a statement waiting for its answer looks at its socket itself (`watch_own_socket`).
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


def watch_own_socket(connection_class: type) -> None:
    """Patch the socket watch above into aiopg's `Connection` class (once)."""
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
            follow_socket(self)

    async def _connect(self) -> Any:
        connected = await original_connect(self)
        follow_socket(self)
        self._cvsm_connected = True
        return connected

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        fd = self._fileno
        self._cvsm_socket = socket_identity(fd)
        self._cvsm_connected = False
        # A dead connection's registration may still hold this number: register anew.
        self._loop.remove_reader(fd)
        self._loop.add_reader(fd, self._ready, self._weakref)

    def _close(self) -> None:
        if (self._fileno is not None
                and socket_identity(self._fileno) != getattr(self, "_cvsm_socket", None)):
            self._fileno = None  # libpq closed it; the number belongs to another socket now
            self._writing = False
        original_close(self)

    async def _poll(self, waiter: asyncio.Future, timeout: float) -> None:
        # aiopg's `_poll`, with a timer looking at the socket every SOCKET_CHECK seconds while
        # the answer is awaited: a socket that has something to read (an answer, or its end)
        # while no event said so is read then, so that no registration the loop lost can hold a
        # statement. One timer a statement (an answer within SOCKET_CHECK never fires it), not
        # a wait with a timeout (`asyncio.wait`'s future, set and callbacks at every statement).
        assert waiter is self._waiter, (waiter, self._waiter)
        self._ready(self._weakref)
        loop = self._loop
        deadline = loop.time() + timeout
        timer: asyncio.TimerHandle | None = None
        expired = False

        def look() -> None:
            nonlocal timer, expired
            if waiter.done():
                return
            if loop.time() >= deadline:
                expired = True
                waiter.cancel()
                return
            if _has_something(self._fileno, self._writing):
                log.debug("a database socket had news the event loop did not report")
                self._ready(self._weakref)
            if not waiter.done():
                timer = loop.call_at(min(loop.time() + SOCKET_CHECK, deadline), look)

        if not waiter.done():
            timer = loop.call_at(min(loop.time() + SOCKET_CHECK, deadline), look)
        try:
            try:
                await waiter
            except asyncio.CancelledError:
                if expired:
                    raise StatementTimeout(
                        f"no answer from the database within {timeout:g} s") from None
                raise
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
            if timer is not None:
                timer.cancel()
            self._waiter = None

    connection_class._poll = _poll
    connection_class._ready = staticmethod(_ready)
    connection_class._connect = _connect
    connection_class.__init__ = __init__
    connection_class._close = _close
    connection_class._cvsm_watches_own_socket = True


def socket_identity(fd: int) -> tuple[int, int] | None:
    """What socket number `fd` is now (device, inode), or None when it is closed."""
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def unwatch(loop: asyncio.AbstractEventLoop, fd: int) -> None:
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


def follow_socket(self: Any) -> None:
    """Watch the socket libpq uses now. With a multi-host URL (high availability,
    docs/operations.md) libpq opens a new socket for each host it tries while connecting, and
    aiopg watches only the first: without this, every statement on that connection waited for
    `SOCKET_CHECK` look (half a second each) after a failover. A number that is no longer
    this connection's socket is left alone: another connection may hold it now."""
    old = self._fileno
    if old is None:
        return
    try:
        fd = self._conn.fileno()
    except (psycopg2.Error, ValueError):
        return
    identity = socket_identity(fd)
    if fd == old and identity == self._cvsm_socket:
        return
    loop = self._loop
    if fd != old and socket_identity(old) == self._cvsm_socket:  # still ours: unwatch it
        unwatch(loop, old)
    self._fileno, self._cvsm_socket = fd, identity
    unwatch(loop, fd)  # the registration of a socket closed under this number
    loop.add_reader(fd, self._ready, self._weakref)
    if self._writing:
        loop.add_writer(fd, self._ready, self._weakref)


def kept_row_cursor(conn: aiopg.Connection) -> aiopg.Cursor | None:
    """The row cursor kept on `conn` by `keep_row_cursor`, or None."""
    return getattr(conn, "_cvsm_row_cursor", None)


def keep_row_cursor(conn: aiopg.Connection, cur: aiopg.Cursor) -> None:
    """Keep `cur` on `conn` (it dies with its connection: a cycle the collector frees). An
    attribute of cvsm's own, named so that no aiopg attribute can clash with it."""
    conn._cvsm_row_cursor = cur


# --- the pool's fast path -------------------------------------------------------------------------
#
# aiopg's pool takes a lock under a timeout and walks every free connection on acquire, and
# starts a task to wake a waiter on release: about 55 us of CPU per request against 2 us here
# (a loop of `db.connection(pool)` on this machine), a sixth of issue 25's 0.30 ms goal for a
# whole audited read. `take_free` and `give_back_free` do the common case (a usable connection
# is free; no acquire waits) with the pool's own bookkeeping and nothing else, and leave every
# other case to aiopg's public `acquire` and `release`. aiopg has no public way to do it: they
# read and change aiopg 1.4's Pool attributes `_free` (a deque), `_used` and `_terminated`
# (sets), `_closing`, `_recycle`, `_loop` and `_cond` (an asyncio.Condition, whose `_waiters`
# says whether an acquire waits). Without them requests still work, through aiopg's slow path.
# test_workers checks that a warm request takes this path, that a connection found dead is
# replaced, and that a waiting request still gets a connection given back.
RELIES_ON_POOL = ("_free", "_used", "_terminated", "_closing", "_recycle", "_loop", "_cond")
_IDLE = psycopg2.extensions.TRANSACTION_STATUS_IDLE


def take_free(pool: aiopg.Pool) -> aiopg.Connection | None:
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


def give_back_free(pool: aiopg.Pool, conn: aiopg.Connection) -> bool:
    """Give `conn` back to the free list at once when nothing else is to be done: it is open,
    outside a transaction, not terminated, the pool is not closing, and no acquire waits."""
    if (pool._closing or pool._cond._waiters or conn.closed or conn in pool._terminated
            or conn not in pool._used or conn.raw.get_transaction_status() != _IDLE):
        return False
    pool._used.remove(conn)
    pool._free.append(conn)
    return True


