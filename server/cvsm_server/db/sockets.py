"""The socket a connection is watched on: libpq's own, which may change while it connects (a
multi-host URL: one socket a host tried), and a number the event loop may still hold for a
socket closed under it (`db.pool`'s watch of each connection's socket)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

import psycopg2


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
    `db.pool.SOCKET_CHECK` look (half a second each) after a failover. A number that is no longer
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
