"""Whole-attempt deadlines for the blocking client, kept by one watchdog thread for the process.

httpx bounds each phase and each read, not an attempt: a server that drips its answer a byte at
a time never trips a read timeout. So :class:`cvsm.Client` gives each attempt a
:class:`Deadline`, and one daemon thread, the :class:`Watchdog`, started at the first attempt
and shared by every client, shuts down the sockets of an attempt whose deadline passed. The read
blocked on one of them then fails at once, and the attempt reports a timeout. No thread is
started per attempt, so attempts that time out leave nothing behind.

An attempt learns its sockets from httpcore's ``trace`` request extension (a connection it opens
to the server or to a proxy) and from the response's ``network_stream`` extension. A keep-alive
connection taken from the pool is named only with the response, so until its status line and
headers have come the attempt does not know its socket: at its deadline the watchdog then shuts
down the sockets of the client's own pool that no live attempt holds (idle ones are dialled
again when needed; another thread's attempt that was just given one fails as dropped, a network
error retried like any). It does not with an ``http_client`` the caller owns, whose
connections may carry the caller's own requests: only the per-read timeouts bound those headers.

The ``trace`` callback also gives connecting, and each read phase, no more than the time left;
between the chunks of the body the attempt checks the deadline itself, which also covers
transports without sockets (a caller's mock transport).

An HTTP/2 connection, which a caller's ``http_client`` may use, carries other requests too: it is
never shut down; the checks between chunks and the per-read timeouts bound such an attempt.
"""

from __future__ import annotations

import heapq
import itertools
import os
import socket
import threading
import time
import weakref
from typing import Any

import httpx

_CONNECTED = ("connect_tcp.complete", "connect_unix_socket.complete", "start_tls.complete")
_CONNECTING = ("connect_tcp.started", "connect_unix_socket.started")
_READING = ("receive_response_headers.started", "receive_response_body.started")


class Pool:
    """The sockets of a client's own connection pool, each with the attempt that last used it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: weakref.WeakKeyDictionary[socket.socket, Deadline] = weakref.WeakKeyDictionary()

    def use(self, sock: socket.socket, deadline: Deadline) -> None:
        with self._lock:
            self._users[sock] = deadline

    def unheld(self) -> list[socket.socket]:
        """Return the sockets no live attempt holds: idle ones, or one an attempt was just given."""
        with self._lock:
            return [sock for sock, user in self._users.items() if not user.live()]


class Deadline:
    """The deadline of one attempt and the sockets to shut down when it passes."""

    def __init__(self, seconds: float, pool: Pool | None = None) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self._pool = pool
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._expired = False
        self._shared = False
        self._finished = False

    def left(self) -> float:
        """Return the seconds left, 0 once the deadline has passed."""
        return max(self.at - time.monotonic(), 0.0)

    def passed(self) -> bool:
        """Return whether the deadline has passed."""
        return self._expired or time.monotonic() >= self.at

    def live(self) -> bool:
        """Return whether the attempt is still running within its deadline."""
        return not (self._finished or self._expired)

    def timeout_error(self, request: httpx.Request) -> httpx.TimeoutException:
        """Return the error an attempt past its deadline ends with."""
        return httpx.TimeoutException(f"no complete answer within {self.seconds:g}s", request=request)

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """Follow httpcore's steps (the ``trace`` extension): note sockets, bound each phase."""
        if event.endswith(_CONNECTED):
            self.watch_stream(info.get("return_value"))
        elif event.endswith(_CONNECTING):
            # Connecting makes the socket, so the watchdog cannot cut it short: it gets no more
            # than the time left (``info`` holds the arguments it is about to connect with).
            if self.passed():
                raise httpx.ConnectTimeout(f"no connection within {self.seconds:g}s")
            if isinstance(info.get("timeout"), (int, float)):
                info["timeout"] = min(info["timeout"], self.left())
        elif event.endswith(_READING):
            # Each read of this phase gets the time left (the request's own timeout settings).
            timeouts = getattr(info.get("request"), "extensions", {}).get("timeout")
            if isinstance(timeouts, dict):
                timeouts["read"] = max(self.left(), 0.001)

    def watch_stream(self, stream: Any) -> None:
        """Shut ``stream``'s socket down at the deadline (at once if it has passed).

        A stream without a socket, or one on an HTTP/2 connection, is left alone.
        """
        if stream is None:
            return
        try:
            sock = stream.get_extra_info("socket")
            ssl_object = stream.get_extra_info("ssl_object")
        except Exception:  # noqa: BLE001 - a stream of another kind: nothing to watch
            return
        if ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2":
            self.shared_connection()
            return
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            if self._finished or self._shared:
                return
            if not self._expired:
                self._sockets.append(sock)
                if self._pool is not None:
                    self._pool.use(sock, self)
                return
        _shut_down(sock)

    def shared_connection(self) -> None:
        """Note that the attempt runs on an HTTP/2 connection: none of its sockets is shut down."""
        with self._lock:
            self._shared = True
            self._sockets = []  # the TCP socket under the TLS one, noted when it connected

    def expire(self) -> None:
        """Mark the deadline passed and shut down the attempt's sockets (the watchdog's part)."""
        with self._lock:
            if self._finished:
                return
            self._expired = True
            sockets, self._sockets = self._sockets, []
            if not sockets and not self._shared and self._pool is not None:
                # A keep-alive connection whose answer has not begun: one of these.
                sockets = self._pool.unheld()
        for sock in sockets:
            _shut_down(sock)

    def finish(self) -> None:
        """End the watch: the attempt is over, its connection may go back to the pool."""
        with self._lock:
            self._finished = True
            self._sockets = []


def _shut_down(sock: socket.socket) -> None:
    # socket.socket's own shutdown, also for an ssl.SSLSocket (whose override would drop its TLS
    # state under the reading thread): the blocked read sees the end of the stream at once.
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


class Watchdog:
    """One daemon thread that expires every attempt's :class:`Deadline` when it passes."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._done = 0
        self._thread: threading.Thread | None = None

    def watch(self, deadline: Deadline) -> None:
        """Expire ``deadline`` when it passes, unless :meth:`done` comes first."""
        with self._cond:
            heapq.heappush(self._heap, (deadline.at, next(self._order), deadline))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="cvsm-deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is deadline:
                self._cond.notify()

    def done(self, deadline: Deadline) -> None:
        """Forget ``deadline``: its attempt is over."""
        deadline.finish()
        with self._cond:
            # Finished entries leave the heap when they reach its top, and all at once when they
            # are most of it, so that the heap holds about the attempts in flight.
            self._done += 1
            if self._done > 64 and 2 * self._done > len(self._heap):
                self._heap = [entry for entry in self._heap if entry[2].live()]
                heapq.heapify(self._heap)
                self._done = 0

    def _run(self) -> None:
        while True:
            for deadline in self._next_expired():
                deadline.expire()

    def _next_expired(self) -> list[Deadline]:
        """Wait until some deadline passes; return the deadlines that have, off the heap."""
        with self._cond:
            heap = self._heap
            while True:
                while heap and not heap[0][2].live():
                    heapq.heappop(heap)
                if not heap:
                    self._cond.wait()
                    heap = self._heap
                    continue
                now = time.monotonic()
                if heap[0][0] > now:
                    self._cond.wait(heap[0][0] - now)
                    heap = self._heap
                    continue
                expired = []
                while heap and heap[0][0] <= now:
                    expired.append(heapq.heappop(heap)[2])
                return expired


WATCHDOG = Watchdog()
"""The process's watchdog; a child process after ``fork`` starts its own when it needs one."""

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=WATCHDOG._reset)
