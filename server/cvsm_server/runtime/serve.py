"""`cvsm-server serve`: binding the address (one line when it cannot), serving the app in this
process or in N worker processes, readiness (sd_notify) once listening, and the exit status when
the embedded PostgreSQL is lost."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import ssl
import sys
from pathlib import Path

from aiohttp import web

from ..core.config import ConfigError, Settings
from ..db.postmaster import EmbeddedStartError
from ..web.state import APP_URL, SETTINGS
from ..crypto import keys
from .. import __version__, db
from . import drain, eventloop, notify, tls, workers


class _CannotListen(Exception):
    """The HTTP address could not be bound; the message says why, in one line."""


def _listen_error(host: str, port: int, exc: OSError) -> _CannotListen:
    reason = exc.strerror if isinstance(exc, socket.gaierror) else None
    if not reason and exc.errno and exc.errno > 0:
        reason = os.strerror(exc.errno)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return _CannotListen(f"cannot listen on {address}: {(reason or str(exc)).lower()}")


def _bind(host: str, port: int, *, reuse_port: bool = False) -> list[socket.socket]:
    """Sockets bound to the address (listening comes later), made the way `loop.create_server`
    makes them, so that an address in use fails at once: before the database starts, migrations
    run and background jobs begin. `reuse_port`: SO_REUSEPORT, so that the workers of
    `serve --workers` can bind the same address (`workers.py`)."""
    sockets: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            if os.name == "posix":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise _listen_error(host, port, exc) from None
    return sockets


WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def listen_url(host: str, port: int, scheme: str = "http") -> str:
    """The URL to open for a server listening on `host:port`: a wildcard address (all
    interfaces) becomes `localhost`, an IPv6 literal goes in brackets."""
    if host in WILDCARD_HOSTS:
        host = "localhost"
    elif ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def port_of(sockets: list[socket.socket], port: int) -> int:
    return sockets[0].getsockname()[1] if sockets else port


def _announcement(host: str, port: int, url: str, share_base: str) -> str:
    where = url if host not in WILDCARD_HOSTS else f"{host or '*'}:{port}, open {url}"
    return f"cvsm-server {__version__} listening on {where} (share links: {share_base}/share/…)"


async def _run(app: web.Application, host: str, port: int,
               ssl_context: ssl.SSLContext | None = None) -> None:
    """Bind the address, start the app (database, migrations, key check), listen, and serve until
    SIGINT or SIGTERM; then, or when any of it fails, clean up what started (the embedded
    PostgreSQL included)."""
    sockets = _bind(host, port)
    # The port really bound (`--port 0` picks a free one); set before start-up, where the app
    # can still take state. CVSM_APP_URL, when set, wins (`web.request.app_url`).
    url = listen_url(host, port_of(sockets, port), "https" if ssl_context else "http")
    app[APP_URL] = url
    share_base = app[SETTINGS].app_url or url
    stopping = drain.Drain(app, app[SETTINGS].shutdown_drain_seconds)
    runner = web.AppRunner(app, handle_signals=True, keepalive_timeout=75.0)
    try:
        await runner.setup()
        eventloop.settle()
        for sock in sockets:
            try:
                await web.SockSite(runner, sock, ssl_context=ssl_context).start()
            except OSError as exc:
                raise _listen_error(host, port, exc) from None
        announcement = _announcement(host, port_of(sockets, port), url, share_base)
        logging.getLogger("cvsm").info("event loop: %s",
                                       eventloop.described(app[SETTINGS].event_loop))
        logging.getLogger("cvsm").info("%s", announcement)
        notify.ready(announcement)
        # Serving, SIGINT and SIGTERM stop it through cleanup while every task still runs, so
        # the requests in flight finish (`drain.py`) and the app's shutdown ends long requests
        # itself (the change streams send `end`); a GracefulExit out of the loop would cancel
        # every task first.
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        notify.stopping()
        await stopping.stop(runner)
        for sock in sockets:
            sock.close()


def serve_here(settings: Settings, host: str, port: int,
           tls_files: tuple[Path, Path] | None = None) -> int:
    from .app import create_app

    try:
        ssl_context = tls.server_context(*tls_files) if tls_files else None
        app = create_app(settings)
    except (ConfigError, tls.TlsError) as exc:
        print(f"cvsm-server: {exc}", file=sys.stderr)
        return 2
    try:
        eventloop.run(_run(app, host, port, ssl_context), settings.event_loop)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    except keys.KeyMismatch as exc:
        print(f"cvsm-server: refusing to start: {exc}", file=sys.stderr)
        return 3
    except ConfigError as exc:
        print(f"cvsm-server: {exc}", file=sys.stderr)
        return 2
    except (_CannotListen, EmbeddedStartError) as exc:
        print(f"cvsm-server: {exc}", file=sys.stderr)
        return 1
    except db.UNAVAILABLE as exc:
        print(f"cvsm-server: cannot reach the database: {db.first_line(exc)}", file=sys.stderr)
        return 1
    return _embedded_lost() or 0


def _embedded_lost() -> int | None:
    """1 when the server stopped because its embedded PostgreSQL could not be started again
    (`db.supervision`): a supervisor (systemd's Restart=on-failure, Docker's restart policy)
    then starts it afresh."""
    if (reason := db.embedded_lost()) is None:
        return None
    print(f"cvsm-server: stopped: {reason}", file=sys.stderr)
    return 1


def serve_workers(settings: Settings, host: str, port: int, count: int,
                   tls_files: tuple[Path, Path] | None) -> int:
    """`serve --workers N`, N > 1: this process binds, runs the database and supervises."""
    try:
        if tls_files:
            tls.server_context(*tls_files)  # each worker builds its own; fail here, once
        sockets = _bind(host, port, reuse_port=True)
    except (tls.TlsError, _CannotListen) as exc:
        print(f"cvsm-server: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, tls.TlsError) else 1
    url = listen_url(host, port_of(sockets, port), "https" if tls_files else "http")
    announce = (_announcement(host, port_of(sockets, port), url, settings.app_url or url)
                + f", {count} workers")
    try:
        code = eventloop.run(_notifying(
            workers.serve(settings, count, sockets, url, announce, tls_files), sockets, announce),
            settings.event_loop)
        return _embedded_lost() or code
    except KeyboardInterrupt:
        return 0
    except workers.StartFailed as exc:
        print(f"cvsm-server: {exc}", file=sys.stderr)
        return exc.code
    except ConfigError as exc:
        print(f"cvsm-server: {exc}", file=sys.stderr)
        return 2
    except (_CannotListen, EmbeddedStartError) as exc:
        print(f"cvsm-server: {exc}", file=sys.stderr)
        return 1
    except db.UNAVAILABLE as exc:
        print(f"cvsm-server: cannot reach the database: {db.first_line(exc)}", file=sys.stderr)
        return 1
    finally:
        for sock in sockets:
            sock.close()


async def _notifying(serving, sockets: list[socket.socket], announce: str) -> int:
    """Run `serving` (`workers.serve`); under systemd, tell it READY=1 once the port accepts a
    connection. The workers listen, not this process, so readiness is seen from outside: the
    kernel hands a connection only to a socket that listens, that is, to a worker serving."""
    probe = asyncio.create_task(_ready_when_listening(sockets, announce))
    try:
        return await serving
    finally:
        probe.cancel()
        notify.stopping()


async def _ready_when_listening(sockets: list[socket.socket], announce: str) -> None:
    if not os.environ.get("NOTIFY_SOCKET") or not sockets:
        return
    sock = sockets[0]
    host, port = sock.getsockname()[:2]
    if host in WILDCARD_HOSTS:
        host = "::1" if sock.family == socket.AF_INET6 else "127.0.0.1"
    while True:
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.2)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        notify.ready(announce)
        return
