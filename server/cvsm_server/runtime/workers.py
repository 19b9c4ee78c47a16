"""`cvsm-server serve --workers N` (N > 1): one parent process and N worker processes serving on
one port.

The parent binds the address once (an address in use fails at once), starts the
database once (the embedded PostgreSQL when `CVSM_DATABASE_URL` is unset) and applies the
migrations, then starts the workers. It never serves a request: it watches the workers,
restarts one that dies (after 1 s, doubling up to 30 s while a worker keeps dying within 30 s of
its start), and on SIGTERM or SIGINT stops them all (SIGTERM; each finishes the requests in
flight within `CVSM_SHUTDOWN_DRAIN_SECONDS`, `drain.py`) and then the database, and exits 0.

Decisions:
- Processes start with multiprocessing's `spawn` context: each worker is a fresh interpreter
  that builds its app with `create_app`. Not `fork`: the parent holds the embedded PostgreSQL
  handle, whose `atexit` hook stops the database, and a thread pool from its start-up; a forked
  copy of either in a worker is a way to stop the database or deadlock. The price is an import
  per worker start (about a second).
- SO_REUSEPORT, not one inherited socket: the parent binds the address with SO_REUSEPORT (so a
  port in use fails at once, and `--port 0` picks the port) and never listens on it; each worker
  binds its own listening socket to that address, and the kernel spreads new connections over
  the listening sockets by a hash of their addresses. With one shared socket the first worker
  to wake accepts a whole burst of connections (asyncio accepts up to the backlog in one go), so
  a load generator's or proxy's keep-alive connections all land in one worker: measured, 32 wrk
  connections, 2 workers, every request in one process. The price: connections a dying worker
  had not accepted yet are reset with its socket; new ones go to the others at once. Linux lets
  only processes of the same user join the port.
- Each worker opens the database the parent started, by URL (`CVSM_DATABASE_URL` and
  `CVSM_MIGRATION_DATABASE_URL` set for it), so no worker starts an embedded PostgreSQL; it finds
  no migration pending and checks the master key and the serving role as a single server does.
- Pool sizes are derived, not fixed: the parent asks PostgreSQL how many connections this server
  may hold (`max_connections` less the reserved slots, a little headroom, the role's and the
  database's own limits: `db.connection_budget`), leaves worker 0's background jobs their two,
  and shares the rest evenly, at most `db.POOL_SIZE` each. N workers that cannot each have
  `db.MIN_POOL` stop the start in one line. A worker whose pool is busy queues the request for a
  connection (up to `db.POOL_WAIT`, then 503 with Retry-After) instead of opening one more: the
  measured failure was 8 pools of 20 against 100 slots, 503 "remaining connection slots are
  reserved" for every request past them.
- Background jobs (audit retention, housekeeping, the mail sender) run in worker 0 only. They
  are safe in several processes (the mail sender claims messages with `FOR UPDATE SKIP LOCKED`
  and every send is woken by `NOTIFY`), so a restarting worker 0 only delays them; running them
  once saves N - 1 listening connections and duplicate purges.
- Log records carry the process id (`cvsm.app[1234]:`), so the lines of N workers can be told
  apart; the access log line of each request names its request id. No response says which
  worker served it.
- The parent and every worker run on uvloop unless `CVSM_EVENT_LOOP=asyncio` (`eventloop.py`);
  each worker says its loop when ready, and the parent logs it ("worker 0 ready (pid 1234),
  event loop uvloop").
- Workers ignore SIGINT (a Ctrl-C reaches the whole process group; the parent then sends
  SIGTERM), and stop on their own when the parent has gone (killed with SIGKILL).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.connection
import signal
import socket
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aiohttp import web

from .. import db
from . import drain, eventloop
from ..crypto import keys
from . import tls
from ..core.config import ConfigError, Settings

log = logging.getLogger("cvsm.workers")

MAX_WORKERS = 64
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
# Restart back-off: the first restart waits FIRST_DELAY, each quick death doubles it up to
# MAX_DELAY; a worker that ran STABLE seconds starts the count afresh.
FIRST_DELAY, MAX_DELAY, STABLE = 1.0, 30.0, 30.0
# How long a stopping worker may take past its drain time (`CVSM_SHUTDOWN_DRAIN_SECONDS`, the
# requests in flight) to clean up: its background jobs end, the checkpoint at stop is signed, the
# pool closes. And how long a worker whose end was seen (its sentinel readable) may take to be
# reaped: its pipe closes as it exits, just before the kernel lets it be waited for.
STOP_MARGIN = 30.0
REAP_TIMEOUT = 5.0


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs, pickled to the spawned process (the settings' repr hides keys)."""

    index: int
    settings: Settings
    url: str  # the address served, for share links when CVSM_APP_URL is unset
    # (family, socket address) of each socket the parent bound: the worker binds the same.
    addresses: tuple[tuple[int, tuple], ...] = ()
    tls_cert: Path | None = None
    tls_key: Path | None = None
    log_level: int = logging.INFO


class StartFailed(Exception):
    """A worker could not start; `code` is the exit status `cvsm-server` returns."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# --- the worker process ------------------------------------------------------------------------


def worker_main(spec: WorkerSpec, channel: multiprocessing.connection.Connection) -> None:
    """The entry point of a worker process: serve until SIGTERM or the parent's end. Says
    ("ready",) or ("failed", code, message) on `channel` once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=spec.log_level, format=LOG_FORMAT)
    code, message = 0, None
    try:
        eventloop.run(_serve(spec, channel), spec.settings.event_loop)
    except keys.KeyMismatch as exc:
        code, message = 3, f"refusing to start: {exc}"
    except (ConfigError, tls.TlsError) as exc:
        code, message = 2, str(exc)
    except db.UNAVAILABLE as exc:
        code, message = 1, f"cannot reach the database: {_first_line(exc)}"
    except OSError as exc:
        code, message = 1, f"cannot serve: {exc.strerror or exc}"
    except Exception as exc:  # not expected: the log keeps the traceback for the operator
        log.exception("worker %d failed", spec.index)
        code, message = 1, f"worker {spec.index} failed: {type(exc).__name__}"
    if message is not None:
        try:
            channel.send(("failed", code, message))
        except OSError:
            pass
    sys.exit(code)


def _listen(addresses: tuple[tuple[int, tuple], ...]) -> list[socket.socket]:
    """This worker's own sockets on the parent's addresses (SO_REUSEPORT); listening comes with
    `SockSite.start`."""
    sockets: list[socket.socket] = []
    try:
        for family, address in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


async def _serve(spec: WorkerSpec, channel: multiprocessing.connection.Connection) -> None:
    from .app import create_app
    from ..web.state import APP_URL

    ssl_context = tls.server_context(spec.tls_cert, spec.tls_key) if spec.tls_cert else None
    app = create_app(spec.settings)
    app[APP_URL] = spec.url
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    parent = multiprocessing.parent_process()
    if parent is not None:
        def parent_gone() -> None:
            loop.remove_reader(parent.sentinel)
            log.warning("worker %d: the parent process has gone; stopping", spec.index)
            stop.set()
        loop.add_reader(parent.sentinel, parent_gone)
    stopping = drain.Drain(app, spec.settings.shutdown_drain_seconds)
    runner = web.AppRunner(app, handle_signals=False, keepalive_timeout=75.0)
    sockets: list[socket.socket] = []
    try:
        await runner.setup()  # the database pool, the master-key check, background jobs
        eventloop.settle()
        sockets = _listen(spec.addresses)
        for sock in sockets:
            await web.SockSite(runner, sock, ssl_context=ssl_context).start()
        channel.send(("ready", eventloop.described(spec.settings.event_loop)))
        await stop.wait()
    finally:
        await stopping.stop(runner)
        for sock in sockets:
            sock.close()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


# --- the parent --------------------------------------------------------------------------------


def _when_readable(loop: asyncio.AbstractEventLoop, fd: int) -> asyncio.Future[None]:
    """A future done when `fd` can be read (a message, an end of file, a process's end)."""
    future: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not future.done():
            future.set_result(None)

    loop.add_reader(fd, readable)
    # Runs before the awaiting task resumes (and may close `fd`): registered first.
    future.add_done_callback(lambda _: loop.remove_reader(fd))
    return future


class _Slot:
    """Worker number `index`: the process now running in it, restarted whenever it ends."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: Any = None
        self.first_start: asyncio.Future[None] | None = None


class Supervisor:
    """Starts `count` workers, keeps them running, and stops them."""

    def __init__(self, count: int, spec: WorkerSpec) -> None:
        self.count = count
        self.spec = spec
        self.context = multiprocessing.get_context("spawn")
        self.slots = [_Slot(i) for i in range(count)]
        self.stopping = False

    def _spec_for(self, index: int) -> WorkerSpec:
        settings = self.spec.settings
        jobs = settings.background_jobs and index == 0
        return replace(self.spec, index=index, settings=replace(settings, background_jobs=jobs))

    async def _start(self, slot: _Slot) -> tuple[Any, tuple]:
        """Start a process in `slot`; returns it and its first word: ("ready",) or
        ("failed", code, message), or ("exited",) when it ended without one."""
        receiver, sender = self.context.Pipe(duplex=False)
        process = self.context.Process(target=worker_main, name=f"cvsm-worker-{slot.index}",
                                       args=(self._spec_for(slot.index), sender))
        process.start()
        sender.close()
        slot.process = process
        loop = asyncio.get_running_loop()
        try:
            await _when_readable(loop, receiver.fileno())
            try:
                word = receiver.recv()
            except (EOFError, OSError):
                word = ("exited",)
        finally:
            receiver.close()
        return process, word

    async def _keep(self, slot: _Slot) -> None:
        """Run a worker in `slot` for as long as the supervisor runs, restarting it when it ends."""
        loop = asyncio.get_running_loop()
        delay = 0.0
        first = True
        while True:
            started = time.monotonic()
            process, word = await self._start(slot)
            if first:
                first = False
                if word[0] == "ready":
                    log.info("worker %d ready (pid %d), event loop %s", slot.index, process.pid,
                             word[1])
                    slot.first_start.set_result(None)
                else:
                    await _when_readable(loop, process.sentinel)
                    process.join()
                    code = word[1] if word[0] == "failed" else 1
                    message = word[2] if word[0] == "failed" else \
                        f"worker {slot.index} exited with status {process.exitcode} while starting"
                    slot.first_start.set_exception(StartFailed(message, code))
                    return
            elif word[0] == "ready":
                log.info("worker %d restarted (pid %d), event loop %s", slot.index, process.pid,
                         word[1])
            else:
                log.warning("worker %d (pid %d) could not start: %s", slot.index, process.pid,
                            word[2] if word[0] == "failed" else "it exited")
            await _when_readable(loop, process.sentinel)
            process.join()
            if self.stopping:
                return
            delay = FIRST_DELAY if time.monotonic() - started >= STABLE or not delay \
                else min(delay * 2, MAX_DELAY)
            log.warning("worker %d (pid %d) exited with %s; restarting in %g s", slot.index,
                        process.pid, _status(process.exitcode), delay)
            await asyncio.sleep(delay)

    async def run(self, announce: str, stop: asyncio.Event) -> None:
        """Start the workers, log `announce` once all serve, and supervise until `stop` is set;
        then stop them. Raises `StartFailed` when a worker cannot start."""
        loop = asyncio.get_running_loop()
        for slot in self.slots:
            slot.first_start = loop.create_future()
        keepers = [asyncio.create_task(self._keep(slot)) for slot in self.slots]
        stopper = asyncio.create_task(stop.wait())
        try:
            started = asyncio.gather(*(slot.first_start for slot in self.slots))
            done, _ = await asyncio.wait([started, stopper], return_when=asyncio.FIRST_COMPLETED)
            if started in done:
                started.result()  # raises StartFailed
                log.info("%s", announce)
                await stopper
            else:
                started.cancel()
            log.info("stopping %d workers", self.count)
        finally:
            self.stopping = True
            for slot in self.slots:  # a second worker that failed too: its reason is not news
                if slot.first_start.done() and not slot.first_start.cancelled():
                    slot.first_start.exception()
            for keeper in keepers:
                keeper.cancel()
            stopper.cancel()
            await asyncio.gather(*keepers, return_exceptions=True)
            await self._stop_all(loop)

    async def _stop_all(self, loop: asyncio.AbstractEventLoop) -> None:
        running = [s.process for s in self.slots if s.process is not None and s.process.is_alive()]
        for process in running:
            process.terminate()
        limit = self.spec.settings.shutdown_drain_seconds + STOP_MARGIN
        ended: set[int] = set()
        if running:
            waits = {p.pid: _when_readable(loop, p.sentinel) for p in running}
            await asyncio.wait(waits.values(), timeout=limit)
            ended = {pid for pid, wait in waits.items() if wait.done() and not wait.cancelled()}
            for wait in waits.values():
                wait.cancel()
        for process in running:
            # A readable sentinel means the worker is exiting; `is_alive` could still say yes
            # for a moment (it was read as "did not stop" 90 ms after SIGTERM): wait for it.
            process.join(REAP_TIMEOUT if process.pid in ended else 0)
            if process.is_alive():
                log.warning("worker pid %d did not stop within %g s; killing it", process.pid,
                            limit)
                process.kill()
            process.join()


def _status(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"status {exitcode}"


async def _pool_size(server_url: str, count: int, settings: Settings) -> int:
    """Each worker's pool size: what PostgreSQL leaves this server, shared by `count` workers
    and worker 0's background jobs (`db.pool_size_for`; ConfigError when they do not fit)."""
    size = db.pool_size_for(await db.connection_budget(server_url), count,
                            jobs=settings.background_jobs)
    log.info("%d workers, each with up to %d database connections", count, size)
    return size


async def serve(settings: Settings, count: int, sockets: list[socket.socket], url: str,
                announce: str, tls_files: tuple[Path, Path] | None) -> int:
    """The parent: the database once, then `count` workers on the address of `sockets` (bound by
    the caller with SO_REUSEPORT; the parent never listens) until SIGTERM or SIGINT (one that
    comes while the database starts stops the server once it has started)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("event loop: %s", eventloop.described(settings.event_loop))
    # Generated once here (the embedded default), so the workers read the same files.
    keys.load_master_key(settings)
    keys.load_jwt_secret(settings)
    async with db.running(settings) as (owner_url, server_url):
        if stop.is_set():
            return 0
        pool_size = settings.pool_size or await _pool_size(server_url, count, settings)
        spec = WorkerSpec(
            index=0,
            settings=replace(settings, database_url=server_url, migration_database_url=owner_url,
                             pool_size=pool_size, processes=count),
            url=url,
            addresses=tuple((sock.family, sock.getsockname()) for sock in sockets),
            tls_cert=tls_files[0] if tls_files else None,
            tls_key=tls_files[1] if tls_files else None,
            log_level=logging.getLogger().level,
        )
        await Supervisor(count, spec).run(announce, stop)
    return 0

