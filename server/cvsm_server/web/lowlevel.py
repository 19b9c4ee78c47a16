"""What happens below the application: requests that aiohttp's HTTP parser rejects, and what
aiohttp itself writes to the log.

A request the parser rejects (a control character in a header, a bad request line, a header
over the size limit, an invalid method or Content-Length, a broken chunk...) never reaches the
application: no middleware and no `on_response_prepare` runs for it (aiohttp issues #3287 and
#6463). Left alone, aiohttp then

- logs "Error handling request" with the parser's exception, whose text quotes the offending
  request line or header: an `Authorization: Bearer cvsm_…` token or a `/share/shr_…` URL ends
  up in the log, in full or cut where a TCP packet ended;
- answers a plain-text 400 that echoes those bytes, with a `Server` header and none of our
  security headers.

`create_app` passes `HANDLER_ARGS` and calls `install(app)`, so every runner of the app
(`web.run_app`, `AppRunner`, the test servers) gets:

- the access log `RedactingAccessLogger`, through `web.Application(handler_args=...)`: aiohttp's
  supported per-application hook into its connection handler, which takes precedence over what
  the runner passes;
- `RedactingFilter` on aiohttp's, asyncio's and our own loggers: it removes credentials from every
  record's message and exception text (a parser exception is reduced to its description, without
  the request bytes it quotes), whatever logs through them;
- `SafeRequestHandler`, which answers those errors as every other error is answered
  (`{"error": "<Indonesian message>"}`, security headers, no `Server`) and logs one line without
  the request bytes. aiohttp has no hook for that response (`handler_args` only passes
  arguments to its `RequestHandler`), so this is a `RequestHandler` subclass overriding
  `handle_error`, built for each connection by the app's server (`SafeServer`).

The aiohttp internals this relies on (choosing the server and handler class, taking `Server`
out) are reached through `web.aiohttp_adapter` only, whose tests fail if a release changes one.
"""

from __future__ import annotations

import json
import logging
import re
import traceback
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMethod, HttpProcessingError

from .accesslog import RedactingAccessLogger, redact
from .aiohttp_adapter import ResponseWithoutServerHeader, new_handler, serve_with
from .headers import SECURITY_HEADERS

# Passed to `web.Application(handler_args=...)`: aiohttp gives these to every connection handler,
# over what a runner passes (`web.run_app(..., access_log_class=...)` included).
# `lingering_time`: after answering a request whose body it did not read (refused before it,
# issue 36), the server discards what still arrives for at most this long, then closes (the
# answer says `Connection: close`). Nothing is kept or parsed; closing at once instead would
# reset the connection under a proxy still sending the body it buffered (nginx: a 502 instead
# of the server's 413). aiohttp's default is 10 s.
LINGERING_SECONDS = 2.0
HANDLER_ARGS: Mapping[str, Any] = MappingProxyType({"access_log_class": RedactingAccessLogger,
                                                    "lingering_time": LINGERING_SECONDS})

# Loggers aiohttp and asyncio write to (a filter on a logger applies to its own records only,
# not to its children's); `install_log_filter` adds ours, `cvsm` and `cvsm.*`.
LOGGERS = ("aiohttp.access", "aiohttp.client", "aiohttp.internal", "aiohttp.server",
           "aiohttp.web", "aiohttp.websocket", "asyncio", "cvsm")

MESSAGES = {
    400: "Permintaan tidak valid",
    413: "Isi permintaan terlalu besar",
    414: "Alamat permintaan terlalu panjang",
    431: "Header permintaan terlalu besar",
    500: "Terjadi kesalahan pada server",
    504: "Server tidak menjawab tepat waktu",
}

# A word of a parser message that is description, not request data: a plain word (`Invalid`,
# `Content-Length:`, `HTTP/,`, `can't`) or a small number. The request bytes come quoted
# (`b'GET …'`) or as a raw path (`/share/shr_…`), and the description ends at the first such word.
_DESCRIPTION_WORD = re.compile(
    r"(?:[A-Za-z]{1,20}(?:-[A-Za-z]{1,20})*(?:'(?:t|s|re|ll|ve|d|m))?/?|[0-9]{1,5})[.,:;]?")


def describe(exc: HttpProcessingError) -> str:
    """The parser's description of what was wrong, without the request bytes it quotes:
    `Invalid header value char`, `Bad status line: Expected CRLF after version`."""
    words = []
    for word in str(exc.message or "").split():
        if not _DESCRIPTION_WORD.fullmatch(word):
            break
        words.append(word)
    return redact(" ".join(words).rstrip(".,:;"))


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip("\n")


def safe_exception_text(text: str, exc: BaseException) -> str:
    """`text`, the traceback of `exc` as `logging` writes it, with each parser exception's text
    replaced by its description and every credential redacted."""
    for link in _chain(exc):
        if isinstance(link, HttpProcessingError):
            text = text.replace(str(link), describe(link) or "(no description)")
    return redact(text)


class RedactingFilter(logging.Filter):
    """Removes credentials from a record's message, exception text and stack text.

    A record whose exception text had to change keeps the safe text in `exc_text` (which standard
    formatters write as is) and loses `exc_info`, so that no handler formats the original again.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format: logging would print the arguments as they are
            message = f"{record.msg} (with arguments that do not format)"
            record.msg, record.args = message, None
        safe = redact(message)
        if safe != message:
            record.msg, record.args = safe, None
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text = _traceback(exc)
            safe = safe_exception_text(text, exc)
            if safe != text:
                record.exc_info, record.exc_text = None, safe
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_FILTER = RedactingFilter()


def install_log_filter() -> None:
    """Puts the redacting filter on aiohttp's and asyncio's loggers and on every `cvsm.*` logger
    created so far (each module creates its own on import). Safe to repeat."""
    ours = [name for name in list(logging.root.manager.loggerDict) if name.startswith("cvsm.")]
    for name in (*LOGGERS, *ours):
        logging.getLogger(name).addFilter(_FILTER)


class ErrorResponse(ResponseWithoutServerHeader):
    """`{"error": message}` with the security headers and no `Server` header.

    For a request the parser rejected, no `on_response_prepare` runs, and aiohttp adds `Server`
    while preparing the headers; this response takes it out again at that point.
    """

    def __init__(self, status: int, message: str | None = None) -> None:
        if message is None:
            message = MESSAGES.get(status) or (
                "Terjadi kesalahan pada server" if status >= 500 else "Permintaan tidak valid")
        super().__init__(text=json.dumps({"error": message}), status=status,
                         content_type="application/json", headers=SECURITY_HEADERS)
        self.headers["Cache-Control"] = "no-store"


class SafeRequestHandler(web.RequestHandler):
    """aiohttp's connection handler, answering the errors it handles itself (parser errors, and
    a handler's exception or timeout that no middleware caught) with `ErrorResponse`."""

    __slots__ = ()

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None, message: str | None = None) -> web.StreamResponse:
        if isinstance(exc, HttpProcessingError):
            # Sent by scanners and by TLS clients on the plain-HTTP port: not worth a warning.
            level = logging.DEBUG if isinstance(exc, BadHttpMethod) else logging.WARNING
            description = describe(exc)
            self.logger.log(level, "Bad HTTP request from %s: %s%s", request.remote,
                            type(exc).__name__, f": {description}" if description else "")
        else:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
        if request.writer.output_size > 0:  # as aiohttp's: the response has started already
            raise ConnectionError("Response is sent already, cannot send another response "
                                  "with the error message")
        response = ErrorResponse(status)
        response.force_close()
        return response


class SafeServer(web.Server):
    """aiohttp's `web.Server` (the protocol factory a site listens with), building the
    `SafeRequestHandler` above for each connection."""

    def __call__(self) -> web.RequestHandler:
        return new_handler(self, SafeRequestHandler)


def install(app: web.Application) -> None:
    """Every runner of `app` serves it with `SafeServer` above, and aiohttp's logs are redacted.

    aiohttp has no public way to choose the server's class: `aiohttp_adapter.serve_with`.
    """
    install_log_filter()
    serve_with(app, SafeServer)
