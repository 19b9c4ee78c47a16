"""The event loop `cvsm-server serve` runs on: uvloop (MagicStack's loop on libuv, the one
aiohttp's documentation names for speed) unless `CVSM_EVENT_LOOP=asyncio` asks for asyncio's own.

Measured with bench/bench_reads.py on 2 cores: about 9% less server CPU per audited read (0.26-0.27
against 0.29-0.30 ms). The single process, the `--workers` parent and every worker run on it;
what could differ under it (SO_REUSEPORT sockets, signal handlers and the SIGTERM drain, the
embedded PostgreSQL's supervision in a thread, TLS, the change stream's long responses) is covered
by the tests that start real server processes. The test suite's in-process apps stay on asyncio's
loop (pytest-asyncio's). Where uvloop is not installed (Windows has no build of it), asyncio's
loop serves and the start-up line says so.

`settle()`, called once a serving process has started its app, moves what start-up built (the
modules, routes, templates, catalogs, the pool) out of the garbage collector's reach
(`gc.freeze`): its full passes then walk only what requests leave behind. Measured on 2 cores,
a served app under wrk (32 connections, audited reads), four runs of each alternating:
3,340-3,450 reads/s against 2,930-3,380, server CPU 0.23 ms per read against 0.24-0.26; in
bench/bench_reads.py's runs the machine's own spread (about 10% from run to run) hides it.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

try:
    import uvloop
except ImportError:  # pragma: no cover - not installed (Windows)
    uvloop = None

T = TypeVar("T")


def factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for `asyncio.Runner`: uvloop's when chosen and installed, else None
    (asyncio's default loop)."""
    if choice == "uvloop" and uvloop is not None:
        return uvloop.new_event_loop
    return None


def run(main: Coroutine[Any, Any, T], choice: str) -> T:
    """`asyncio.run(main)` on the loop `choice` names (`Settings.event_loop`)."""
    with asyncio.Runner(loop_factory=factory(choice)) as runner:
        return runner.run(main)


def name(loop: asyncio.AbstractEventLoop | None = None) -> str:
    """`uvloop` or `asyncio`: the loop running now (or `loop`), as the start-up log says it."""
    loop = loop or asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.split(".")[0] == "uvloop" else "asyncio"


def described(choice: str) -> str:
    """The start-up log's words for the running loop (and why, when it is not the one chosen)."""
    running = name()
    if running != choice and choice == "uvloop":
        return f"{running} (uvloop is not installed)"
    return running


def settle() -> None:
    """After start-up, in a serving process only (the tests' apps come and go in one process):
    collect once, then leave every object alive now out of the collector's passes for the rest
    of the process (`gc.freeze`, as Python's documentation suggests for long-lived servers)."""
    gc.collect()
    gc.freeze()
