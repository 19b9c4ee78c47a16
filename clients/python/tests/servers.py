"""A real HTTP server on a socket, for what a transport mock cannot show: time, proxies, TLS.

``RawServer`` listens on 127.0.0.1 on a thread and hands each request head to a function that
writes the raw answer itself, all at once, a byte at a time, or not at all.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

Respond = Callable[[str, socket.socket, threading.Event], None]


def http_answer(status: int, body: Any, headers: dict[str, str] | None = None) -> bytes:
    """Return a whole HTTP/1.1 answer: ``body`` as JSON unless it is bytes; the connection closes."""
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(payload)}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


def answer_with(status: int, body: Any, headers: dict[str, str] | None = None) -> Respond:
    """Return a responder that sends one whole answer."""

    def respond(head: str, conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(http_answer(status, body, headers))

    return respond


def drip(data: bytes, every: float = 0.05) -> Respond:
    """Return a responder that sends ``data`` one byte every ``every`` seconds."""

    def respond(head: str, conn: socket.socket, stop: threading.Event) -> None:
        for i in range(len(data)):
            if stop.wait(every):
                return
            conn.sendall(data[i : i + 1])

    return respond


def head_then_drip(status: int, body: Any, every: float = 0.05) -> Respond:
    """Return a responder that sends the status line and headers at once, then drips the body."""
    head, _, payload = http_answer(status, body).partition(b"\r\n\r\n")

    def respond(request_head: str, conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head + b"\r\n\r\n")
        drip(payload, every)(request_head, conn, stop)

    return respond


class RawServer:
    """A server on 127.0.0.1 that answers every request with ``respond``; ``heads`` records them."""

    def __init__(self, respond: Respond, *, tls: ssl.SSLContext | None = None) -> None:
        self.respond = respond
        self.heads: list[str] = []
        self._tls = tls
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def url(self, path: str = "/api/v1") -> str:
        scheme = "https" if self._tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(10)
            if self._tls is not None:
                conn = self._tls.wrap_socket(conn, server_side=True)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            self.heads.append(head.split(b"\r\n\r\n")[0].decode("latin-1"))
            self.respond(self.heads[-1], conn, self._stop)
        except (OSError, ssl.SSLError):
            pass  # the client hung up, or refused our certificate
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        deadline = time.monotonic() + 5
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> RawServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
