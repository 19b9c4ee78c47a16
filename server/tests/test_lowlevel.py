"""Requests aiohttp's HTTP parser rejects, on a real socket: the answer is our JSON error with the
security headers, and no log line holds a credential from the rejected bytes.

The tokens are fresh random ones, and a log "holds" one when any 12 characters of its secret part
appear in a record: its message, its exception (`exc_info`, formatted) or `exc_text`, its stack.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import socket
import threading
import traceback
from collections.abc import Iterable
from typing import Any

import pytest
from aiohttp import http_parser, web
from aiohttp.http_exceptions import BadHttpMessage, InvalidURLError, LineTooLong

from cvsm_server.web import lowlevel
from cvsm_server.web.accesslog import redact
from cvsm_server.runtime.app import create_app
from cvsm_server.web.headers import SECURITY_HEADERS

API_TOKEN = "cvsm_" + secrets.token_hex(32)
SHARE_TOKEN = "shr_" + secrets.token_urlsafe(32)
FRAGMENT = 12
# aiohttp's C parser, the one in its wheels; the pure-Python one (AIOHTTP_NO_EXTENSIONS=1) accepts
# a few of the requests below.
C_PARSER = http_parser.HttpRequestParser is not http_parser.HttpRequestParserPy
c_parser_only = pytest.mark.skipif(not C_PARSER, reason="the pure-Python parser accepts this request")


def fragments(token: str) -> set[str]:
    secret = token.split("_", 1)[1]
    return {secret[i:i + FRAGMENT] for i in range(len(secret) - FRAGMENT + 1)}


FRAGMENTS = fragments(API_TOKEN) | fragments(SHARE_TOKEN)


def record_texts(records: Iterable[logging.LogRecord]) -> list[str]:
    texts = []
    for record in records:
        texts.append(record.getMessage())
        if record.exc_info:
            texts.append("".join(traceback.format_exception(*record.exc_info)))
            texts.append(logging.Formatter().formatException(record.exc_info))
        texts.extend(t for t in (record.exc_text, record.stack_info) if t)
        texts.append(logging.Formatter().format(record))
    return texts


def assert_no_credential(texts: Iterable[str]) -> None:
    for text in texts:
        if any(fragment in text for fragment in FRAGMENTS):
            pytest.fail(f"a credential reached the log: {redact(text)!r}")


def parse_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def assert_our_error(raw: bytes, status: int = 400, message: str = "Permintaan tidak valid") -> None:
    assert raw, "no response"
    got, headers, body = parse_response(raw)
    assert got == status, raw[:200]
    for name, value in SECURITY_HEADERS.items():
        assert headers.get(name.lower()) == value, name
    assert "server" not in headers
    assert "x-powered-by" not in headers
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body) == {"error": message}
    assert_no_credential([body.decode("latin-1")])


def crlf(*lines: str, body: str = "") -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n" + body).encode("latin-1")


AUTH = f"Authorization: Bearer {API_TOKEN}"
SHARE_API = f"/api/v1/public/share/{SHARE_TOKEN}"
SHARE_PAGE = f"/share/{SHARE_TOKEN}"

# name -> what the client sends, packet by packet.
MALFORMED: dict[str, Any] = {
    "control character in a header value": [
        crlf("GET /api/v1/auth/me HTTP/1.1", "Host: x", AUTH + "\x01")],
    "header over the size limit": [
        crlf("GET /api/v1/auth/me HTTP/1.1", "Host: x", AUTH + "a" * 9000)],
    "header name with the token and a control character": [
        crlf("GET /api/v1/auth/me HTTP/1.1", "Host: x", f"{API_TOKEN}\x01: y")],
    "header line without a colon": [
        crlf("GET /api/v1/auth/me HTTP/1.1", "Host: x", f"Authorization Bearer {API_TOKEN}")],
    "token split across packets, then a control character": [
        crlf("GET /api/v1/auth/me HTTP/1.1", "Host: x")[:-2] + (AUTH[:-40]).encode(),
        (AUTH[-40:] + "\x01\r\n\r\n").encode()],
    "bad request line with the share URL": [
        crlf(f"GET {SHARE_API} HTTP/1.1 junk", "Host: x", AUTH)],
    "space inside the share page URL": [
        crlf(f"GET {SHARE_PAGE} x HTTP/1.1", "Host: x")],
    "request line over the size limit": [
        crlf(f"GET {SHARE_PAGE}?t={API_TOKEN}{'a' * 9000} HTTP/1.1", "Host: x")],
    "control character in the share URL": [
        crlf(f"GET {SHARE_API}\x01 HTTP/1.1", "Host: x")],
    "invalid method": [
        crlf(f"G\x01T {SHARE_PAGE}?token={API_TOKEN} HTTP/1.1", "Host: x")],
    "the token as the method": pytest.param(
        [crlf(f"{API_TOKEN} {SHARE_PAGE} HTTP/1.1", "Host: x")], marks=c_parser_only),
    "bad HTTP version": [
        crlf(f"GET {SHARE_PAGE} HTTP/{API_TOKEN}", "Host: x")],
    "bad Content-Length": [
        crlf("POST /api/v1/auth/login HTTP/1.1", "Host: x", f"Content-Length: {API_TOKEN}")],
    "Content-Length with Transfer-Encoding": [
        crlf(f"POST {SHARE_API} HTTP/1.1", "Host: x", AUTH, "Content-Length: 5",
             "Transfer-Encoding: chunked", body="0\r\n\r\n")],
    "bad chunk size": [
        crlf("POST /api/v1/auth/login HTTP/1.1", "Host: x", "Transfer-Encoding: chunked",
             body=f"{API_TOKEN}\r\nxx\r\n0\r\n\r\n")],
    "bad chunk extension": pytest.param(
        [crlf("POST /api/v1/auth/login HTTP/1.1", "Host: x", "Transfer-Encoding: chunked",
              body=f"2;ext={SHARE_TOKEN}\x01\r\nxx\r\n0\r\n\r\n")], marks=c_parser_only),
    "bad request after a good one on the same connection": [
        crlf("GET /api/v1/health HTTP/1.1", "Host: x") + crlf(f"G\x01T {SHARE_PAGE} HTTP/1.1", AUTH)],
}


async def exchange(host: str, port: int, packets: list[bytes]) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for packet in packets:
            writer.write(packet)
            await writer.drain()
            await asyncio.sleep(0.05)
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


@pytest.mark.parametrize("packets", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_rejected_request_gets_our_error_and_leaves_no_credential_in_the_log(
        aiohttp_server, settings, caplog, packets):
    caplog.set_level(logging.DEBUG)
    server = await aiohttp_server(create_app(settings))
    raw = await exchange(server.host, server.port, packets)
    await server.close()
    if raw.startswith(b"HTTP/1.1 200"):  # the good request before the bad one
        _, _, rest = raw.partition(b"HTTP/1.0 400")
        raw = b"HTTP/1.0 400" + rest
    assert_our_error(raw)
    assert_no_credential(record_texts(caplog.records))
    assert_no_credential([caplog.text])
    noted = [r.getMessage() for r in caplog.records if r.name == "aiohttp.server"]
    assert any(m.startswith("Bad HTTP request from 127.0.0.1: ") for m in noted), noted
    access = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    assert any('"UNKNOWN /" 400' in line for line in access), access


async def test_apprunner_with_default_arguments_gets_the_redacting_access_log(settings, caplog):
    """Like the conformance harness and `web.run_app`: no access logger passed to the runner."""
    caplog.set_level(logging.DEBUG)
    runner = web.AppRunner(create_app(settings))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        host, port = runner.addresses[0][:2]
        good = await exchange(host, port, [crlf(f"GET {SHARE_PAGE}?t={API_TOKEN} HTTP/1.1", "Host: x",
                                                "Connection: close", f"User-Agent: ci {API_TOKEN}")])
        bad = await exchange(host, port, [crlf(f"GET {SHARE_API} HTTP/1.1 junk", "Host: x", AUTH)])
    finally:
        await runner.cleanup()
    assert parse_response(good)[0] == 200
    assert_our_error(bad)
    access = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    assert any('"GET /share/shr_[redacted]" 200' in line and "cvsm_[redacted]" in line
               for line in access), access
    assert any('"UNKNOWN /" 400' in line for line in access), access
    assert_no_credential(record_texts(caplog.records))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def blocking_exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_run_app_like_the_cli(settings, caplog):
    """`cvsm-server serve` runs the app with `web.run_app`, passing no access logger."""
    caplog.set_level(logging.DEBUG)
    port = free_port()
    loop = asyncio.new_event_loop()

    def stop() -> None:
        raise web.GracefulExit()

    thread = threading.Thread(target=web.run_app, args=(create_app(settings),), kwargs={
        "host": "127.0.0.1", "port": port, "loop": loop, "handle_signals": False, "print": None})
    thread.start()
    try:
        for _ in range(200):
            try:
                good = blocking_exchange(port, crlf(f"GET {SHARE_PAGE} HTTP/1.1", "Host: x",
                                                    "Connection: close"))
                break
            except ConnectionRefusedError:
                threading.Event().wait(0.05)
        else:
            pytest.fail("run_app did not start")
        bad = blocking_exchange(port, crlf("GET /api/v1/auth/me HTTP/1.1", "Host: x", AUTH + "\x01"))
    finally:
        loop.call_soon_threadsafe(stop)
        thread.join(30)
    assert parse_response(good)[0] == 200
    assert_our_error(bad)
    access = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    assert any('"GET /share/shr_[redacted]" 200' in line for line in access), access
    assert_no_credential(record_texts(caplog.records))


async def test_an_exception_no_middleware_caught_gets_our_500_and_a_redacted_traceback(aiohttp_server, caplog):
    """aiohttp's own 500 (an error outside every middleware) goes the same way."""
    caplog.set_level(logging.DEBUG)

    async def boom(request: web.Request) -> web.Response:
        try:
            raise KeyError(request.headers["Authorization"])
        except KeyError as exc:
            raise RuntimeError(f"lookup failed for {SHARE_TOKEN}") from exc

    app = web.Application()
    app.router.add_get("/boom", boom)
    lowlevel.install(app)
    server = await aiohttp_server(app)
    raw = await exchange(server.host, server.port, [crlf("GET /boom HTTP/1.1", "Host: x", AUTH)])
    await server.close()
    assert_our_error(raw, 500, "Terjadi kesalahan pada server")
    errors = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert errors and "RuntimeError: lookup failed for shr_[redacted]" in (errors[0].exc_text or "")
    assert "KeyError: 'Bearer cvsm_[redacted]'" in errors[0].exc_text
    assert_no_credential(record_texts(caplog.records))


def test_the_log_filter_redacts_messages_arguments_and_parser_exceptions(caplog):
    caplog.set_level(logging.DEBUG)
    lowlevel.install_log_filter()
    log = logging.getLogger("aiohttp.server")
    log.info("client sent %s and %s", API_TOKEN, f"/share/{SHARE_TOKEN}")
    logging.getLogger("cvsm.errors").error("unhandled error on %s %s", "GET", f"/share/{SHARE_TOKEN}")
    tail = API_TOKEN[-40:]  # the part after a packet boundary: no prefix left
    for exc in (BadHttpMessage(f"Invalid header value char:\n\n  b'{tail}\\x01'\n  ^"),
                LineTooLong(f"Bearer {API_TOKEN}".encode()[:100] + b"...", 8190),
                InvalidURLError(f"/share/{SHARE_TOKEN}")):  # the pure-Python parser's raw path
        try:
            try:
                raise exc
            except BadHttpMessage as inner:
                raise ValueError("wrapped") from inner
        except ValueError as outer:
            logging.getLogger("asyncio").error("failed", exc_info=outer)
    assert_no_credential(record_texts(caplog.records))
    texts = [r.exc_text for r in caplog.records if r.exc_text]
    assert "BadHttpMessage: Invalid header value char" in texts[0]
    assert "LineTooLong: Got more than 8190 bytes when reading" in texts[1]
    assert "InvalidURLError: (no description)" in texts[2]
    assert caplog.records[0].getMessage() == "client sent cvsm_[redacted] and /share/shr_[redacted]"
    assert caplog.records[1].getMessage() == "unhandled error on GET /share/shr_[redacted]"


def test_a_parser_error_is_described_without_the_bytes_it_quotes():
    assert lowlevel.describe(BadHttpMessage("Transfer-Encoding can't be present with Content-Length")) \
        == "Transfer-Encoding can't be present with Content-Length"
    assert lowlevel.describe(BadHttpMessage(
        f"Bad status line:\n  Invalid major version:\n\n  b'GET / HTTP/{API_TOKEN}'\n  ^")) \
        == "Bad status line: Invalid major version"
    assert lowlevel.describe(BadHttpMessage(f"{API_TOKEN[5:]}: bad")) == ""


def test_redact_leaves_identifiers_alone():
    text = "cvsm_server/runtime/app.py cvsm_describe cvsm_check_config shr_ is a prefix"
    assert redact(text) == text.replace("shr_ ", "shr_[redacted] ")
    assert redact(f"x {API_TOKEN[:9]}") == "x cvsm_[redacted]"
    assert redact(f"{API_TOKEN}zz, {SHARE_TOKEN}.") == "cvsm_[redacted], shr_[redacted]"
    assert redact(f'"{API_TOKEN.upper()} /share/{SHARE_TOKEN.upper()}"') == '"cvsm_[redacted] /share/shr_[redacted]"'
    assert redact(f"/share/shr%5F{SHARE_TOKEN[4:]}") == "/share/shr_[redacted]"
