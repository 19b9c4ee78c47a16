"""Every place cvsm reads or replaces something aiohttp keeps private, in one module.

aiohttp has no public way to do what each function or class here does; the rest of the code
calls these and touches no `_name` of aiohttp's (`tests/test_private_adapters.py` checks both: the
names below still exist with the shape used here on the installed aiohttp, and no other module
of `cvsm_server` reads a private attribute). Written against aiohttp 3.9 to 3.14. When a
release changes one of them, that test fails naming it and the version; what
breaks without it is said with each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import hdrs, web

# The private names this module relies on, by the class that has them (checked by the tests).
RELIES_ON: dict[type, tuple[str, ...]] = {
    web.Application: ("_make_handler",),
    web.Server: ("_loop", "_kwargs"),
    web.RequestHandler: ("_request_in_progress", "_messages"),
    web.StreamResponse: ("_prepare_headers",),
}


def request_in_flight(handler: web.RequestHandler) -> bool:
    """Whether a connection has a request in flight (its handler running, its body perhaps still
    arriving) or one received and not begun: `RequestHandler._request_in_progress` and
    `_messages`. Used by the SIGTERM drain (`runtime.drain`), which closes only the connections
    for which this is false. aiohttp's own `Server.pre_shutdown` closes every connection, and a
    closed connection drops what it receives: without this, an upload still arriving at SIGTERM
    would never be answered."""
    return bool(handler._request_in_progress or handler._messages)


def serve_with(app: web.Application, server_class: type[web.Server]) -> None:
    """Every runner of `app` (`AppRunner`, hence `web.run_app` and the test servers) serves it
    with `server_class`, a `web.Server` subclass: `Application._make_handler` is the one call a
    runner makes for its server, and this wraps it (the server it built becomes a
    `server_class`). `handler_args` only passes arguments to aiohttp's `RequestHandler`; the
    class is not one of them. Without this, requests aiohttp's parser rejects are answered with
    aiohttp's plain-text 400 echoing the request bytes, and logged with them (`web.lowlevel`)."""
    make_handler: Callable[..., web.Server] = app._make_handler

    def _make_handler(**kwargs: Any) -> web.Server:
        server = make_handler(**kwargs)
        server.__class__ = server_class
        return server

    # object.__setattr__: aiohttp's debug mode warns on any attribute set on an Application.
    object.__setattr__(app, "_make_handler", _make_handler)


def new_handler(server: web.Server, handler_class: type[web.RequestHandler]) -> web.RequestHandler:
    """A connection handler of `handler_class` (a `web.RequestHandler` subclass) for `server`,
    built as `web.Server.__call__` builds aiohttp's own: from the server's loop and the keyword
    arguments it was made with (`Server._loop`, `Server._kwargs`: the access log class,
    `lingering_time`, ... from `handler_args`)."""
    return handler_class(server, loop=server._loop, **server._kwargs)


class ResponseWithoutServerHeader(web.Response):
    """A `web.Response` that leaves without a `Server` (or `X-Powered-By`) header. aiohttp adds
    `Server` in `StreamResponse._prepare_headers`, after every hook: for a request its parser
    rejected no `on_response_prepare` runs, so the header can only be taken out there. Without
    this, those answers name the server software."""

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        self.headers.popall(hdrs.SERVER, None)
        self.headers.popall("X-Powered-By", None)
