"""Stopping gracefully: at SIGTERM the requests in flight finish, within a bounded drain time
(`CVSM_SHUTDOWN_DRAIN_SECONDS`, default 30), and then the app cleans up and the process exits.
`cvsm-server serve` and each worker of `serve --workers` stop through `stop`.

Why not `AppRunner.cleanup` alone: it first marks every connection closing, and aiohttp then
drops whatever a closing connection receives (`RequestHandler.data_received`). A request whose
body was still arriving at SIGTERM (an upload) never got the rest of it: its handler waited for
the whole shutdown timeout (60 s) and the client got no answer. Here the listening sockets close
first (no new connections), idle keep-alive connections close, the app's shutdown hooks run (the
change streams end), and the connections with a request in flight keep reading until their
answer is sent, each answer saying `Connection: close`; only then, or at the drain's end, does
`AppRunner.cleanup` run, with what is left of the drain time as its own limit.

The app's `on_shutdown` hooks run here, before the wait, and again in `AppRunner.cleanup`: each
must not mind a second call (`app._end_streams` does not).

Whether a connection has a request in flight is private to aiohttp: it is asked through
`web.aiohttp_adapter.request_in_flight`. The rest is aiohttp's public API (`Server.connections`,
`RequestHandler.close`, `Server.shutdown(timeout)`, `AppRunner.cleanup`).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from ..web.aiohttp_adapter import request_in_flight

log = logging.getLogger("cvsm.app")

POLL = 0.05
# The least `AppRunner.cleanup` is given to end what is left (0 would mean no limit to it).
MIN_WAIT = 0.5


class Drain:
    """Installed on an app before it starts; `stop(runner)` stops it gracefully."""

    def __init__(self, app: web.Application, seconds: float) -> None:
        self.seconds = seconds
        self.draining = False
        app.on_response_prepare.append(self._close_after)

    async def _close_after(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        if self.draining:  # the connection ends with this answer, which says so
            response.force_close()
            response.headers["Connection"] = "close"  # the headers were made before this hook

    async def stop(self, runner: web.AppRunner) -> None:
        """Stop listening, let the requests in flight finish within the drain time, then clean
        up the app (its jobs and database) with `runner.cleanup`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        self.draining = True
        for site in list(runner.sites):
            await site.stop()
        server = runner.server
        if server is not None:
            await asyncio.sleep(0)  # connections accepted just before: their requests begin
            for conn in server.connections:
                if not request_in_flight(conn):
                    conn.close()
            await runner.shutdown()  # on_shutdown: long-lived requests (change streams) end
            busy = [conn for conn in server.connections if request_in_flight(conn)]
            if busy:
                log.info("stopping: waiting up to %g s for %d request(s) in flight",
                         self.seconds, len(busy))
            while busy and loop.time() < deadline:
                await asyncio.sleep(POLL)
                busy = [conn for conn in server.connections if request_in_flight(conn)]
            if busy:
                log.warning("stopping: %d request(s) still in flight after %g s "
                            "(CVSM_SHUTDOWN_DRAIN_SECONDS); ending them", len(busy), self.seconds)
            # What `AppRunner.cleanup` would do with its `shutdown_timeout` (60 s by default),
            # within what is left of the drain, never 0, which aiohttp reads as "no limit": every
            # connection closes (an idle keep-alive one at once; without it, `shutdown` waits
            # out its limit for the next request), and the server ends what is left. Cleanup
            # then finds no connection left.
            for conn in server.connections:
                conn.close()
            await server.shutdown(max(MIN_WAIT, deadline - loop.time()))
        await runner.cleanup()
