"""conformance.proxy is the harness's own HTTP proxy between the drivers and the server.

It records every request (so cases can count them and check headers) and plays queued faults:
an injected status, a connection dropped before or in the middle of the answer, a delay, a body
dripped one byte at a time. It speaks plain HTTP/1.1 over asyncio streams so that it can drop a
connection at any byte, and answers every request with ``Connection: close``: each request has
a connection of its own, so no HTTP library's transparent retry on a stale pooled connection can
blur the counts.

The same proxy also listens with TLS (a certificate for 127.0.0.1 signed by a private CA made
for the run, see ``PrivateCA``) and serves as a forward proxy: a request whose target is an
absolute ``http://`` URL, or one sent through a ``CONNECT`` tunnel, is answered as if it had
come straight, and recorded as proxied.
Every answer it makes up itself carries an ``X-Request-Id`` of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import itertools
import json
import re
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import attrs
from yarl import URL

API_PREFIX = "/api/v1"
_KINDS = [
    ("teams", re.compile(r"^/teams/?$")),
    ("export", re.compile(r"^/teams/[^/]+/secrets/export/?$")),
    ("by_name", re.compile(r"^/teams/[^/]+/secrets/by-name/[^/]+/?$")),
    ("list", re.compile(r"^/teams/[^/]+/secrets/?$")),
    ("changes", re.compile(r"^/teams/[^/]+/secrets/changes/?$")),
    ("value", re.compile(r"^/teams/[^/]+/secrets/[^/]+/?$")),
    ("e2e_key", re.compile(r"^/teams/[^/]+/e2e/key/?$")),
]
_HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
    "content-length", "host",
}
_MAX_HEAD = 64 * 1024
_MAX_BODY = 4 * 1024 * 1024


def request_kind(path: str) -> str:
    """request_kind names what an API path is for: teams, list, value, by_name, export, e2e_key
    (an end-to-end team's key, wrapped to the caller), changes (the change stream a live client
    holds open) or other."""
    if not path.startswith(API_PREFIX):
        return "other"
    rest = path[len(API_PREFIX):]
    for kind, pattern in _KINDS:
        if pattern.match(rest):
            return kind
    return "other"


@attrs.define
class RequestRecord:
    """RequestRecord is one request as the proxy received it."""

    method: str
    target: str
    path: str  # under /api/v1 when the request was for the API
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    kind: str
    fault: str | None = None
    status: int | None = None
    forward_proxy: bool = False
    tls: bool = False

    def describe(self) -> str:
        text = f"{self.method} {self.target}"
        if self.forward_proxy:
            text += " (as forward proxy)"
        if self.tls:
            text += " (tls)"
        if self.fault:
            text += f" [fault: {self.fault}]"
        elif self.status is not None:
            text += f" -> {self.status}"
        return text


@attrs.define
class Fault:
    """Fault is one queued misbehaviour, applied to the next ``times`` matching requests."""

    match: str
    times: int = 1
    status: int | None = None
    body: Any = None
    raw_body: str | None = None
    headers: dict[str, str] = attrs.Factory(dict)
    drop: str | None = None
    delay: float | None = None
    drip: float | None = None

    @classmethod
    def from_case(cls, data: dict[str, Any]) -> Fault:
        return cls(
            match=data["match"],
            times=int(data.get("times", 1)),
            status=data.get("status"),
            body=data.get("body"),
            raw_body=data.get("raw_body"),
            headers=dict(data.get("headers", {})),
            drop=data.get("drop"),
            delay=data.get("delay"),
            drip=data.get("drip"),
        )

    def applies_to(self, kind: str) -> bool:
        return self.times > 0 and self.match in ("any", kind)

    def describe(self) -> str:
        parts = []
        if self.delay:
            parts.append(f"delay {self.delay}s")
        if self.status is not None:
            parts.append(f"status {self.status}")
        if self.drop:
            parts.append(f"drop {self.drop}")
        if self.drip:
            parts.append(f"drip a byte every {self.drip}s")
        return ", ".join(parts) or "none"


class PrivateCA:
    """PrivateCA is the run's own certificate authority (trustme) and the proxy's certificate.

    Its PEM file is what a client is told to trust (``ca_file``, ``CVSM_CA_FILE``); no system
    store holds it, so a client that ignores the option fails the TLS handshake.
    """

    def __init__(self, directory: Path) -> None:
        import trustme

        self._ca = trustme.CA(organization_name="cvsm conformance")
        self._cert = self._ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = directory / "conformance-ca.pem"
        self._ca.cert_pem.write_to_path(str(self.ca_file))

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._cert.configure_cert(context)
        return context


class FaultProxy:
    """FaultProxy forwards HTTP/1.1 requests to ``upstream`` and records them."""

    def __init__(self, upstream: str, tls: ssl.SSLContext | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.log: list[RequestRecord] = []
        self.faults: list[Fault] = []
        self._tls = tls
        self._servers: list[asyncio.Server] = []
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self.port = 0
        self.tls_port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{API_PREFIX}"

    @property
    def tls_base_url(self) -> str:
        return f"https://127.0.0.1:{self.tls_port}{API_PREFIX}"

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=60),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        )
        server = await asyncio.start_server(self._on_connection, "127.0.0.1", 0, limit=_MAX_HEAD)
        self._servers.append(server)
        self.port = server.sockets[0].getsockname()[1]
        if self._tls is not None:
            server = await asyncio.start_server(
                self._on_connection, "127.0.0.1", 0, limit=_MAX_HEAD, ssl=self._tls, ssl_handshake_timeout=10
            )
            self._servers.append(server)
            self.tls_port = server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        for server in self._servers:
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    def add_faults(self, faults: list[Fault]) -> None:
        self.faults.extend(faults)

    def reset(self) -> None:
        """reset forgets pending faults (the log is kept; callers slice it by position)."""
        self.faults.clear()

    def _take_fault(self, kind: str) -> Fault | None:
        for fault in self.faults:
            if fault.applies_to(kind):
                fault.times -= 1
                if fault.times == 0:
                    self.faults.remove(fault)
                return fault
        return None

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        try:
            await self._serve_one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, ssl.SSLError):
            pass
        finally:
            self._tasks.discard(task)  # type: ignore[arg-type]
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_one(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tunneled: bool = False
    ) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        if method == "CONNECT" and not tunneled:
            # Some HTTP stacks (ureq) reach every proxy through a tunnel, plain http included:
            # open it, then serve the one request that comes through it.
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await self._serve_one(reader, writer, tunneled=True)
            return
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, _, value = line.partition(":")
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        body = await self._read_body(reader, headers)
        forward_proxy = tunneled or target.lower().startswith("http://")
        parts = urlsplit(target)
        if forward_proxy:  # absolute form: the client took us for its HTTP proxy
            target = parts.path + (f"?{parts.query}" if parts.query else "")
        record = RequestRecord(
            method=method,
            target=target,
            path=parts.path,
            query=parse_qs(parts.query, keep_blank_values=True),
            headers=headers,
            kind=request_kind(parts.path),
            forward_proxy=forward_proxy,
            tls=writer.get_extra_info("sslcontext") is not None,
        )
        self.log.append(record)
        fault = self._take_fault(record.kind)
        if fault is not None:
            record.fault = fault.describe()
            if fault.delay:
                await asyncio.sleep(fault.delay)
            if fault.drop == "before_response":
                return
        if fault is not None and fault.status is not None:
            status = fault.status
            out_headers = {"Content-Type": "application/json"}
            if fault.raw_body is not None:
                payload = fault.raw_body.encode("utf-8")
                out_headers["Content-Type"] = "text/html; charset=utf-8"
            else:
                body_json = fault.body if fault.body is not None else {
                    "error": f"injected by the conformance proxy ({status})"
                }
                payload = json.dumps(body_json).encode("utf-8")
            out_headers["X-Request-Id"] = f"conformance-{next(self._ids)}"
            out_headers.update(fault.headers)
            header_list = list(out_headers.items())
        elif record.kind == "changes":
            await self._forward_stream(method, target, headers, record, writer)
            return
        else:
            status, header_list, payload = await self._forward(method, target, headers, body)
        record.status = status
        reason = _reason(status)
        out = [f"HTTP/1.1 {status} {reason}"]
        out += [f"{k}: {v}" for k, v in header_list]
        out += [f"Content-Length: {len(payload)}", "Connection: close", "", ""]
        writer.write("\r\n".join(out).encode("latin-1"))
        if fault is not None and fault.drop == "mid_response":
            writer.write(payload[: len(payload) // 2])
            await writer.drain()
            transport = writer.transport
            if hasattr(transport, "abort"):
                transport.abort()
            return
        if fault is not None and fault.drip:
            for index in range(len(payload)):
                if writer.transport.is_closing():
                    return
                writer.write(payload[index:index + 1])
                await writer.drain()
                await asyncio.sleep(fault.drip)
            return
        writer.write(payload)
        await writer.drain()

    @staticmethod
    async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            chunks = []
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    # Trailers, if any, end with an empty line.
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":
                        pass
                    return b"".join(chunks)
                if sum(map(len, chunks)) + size > _MAX_BODY:
                    raise ValueError("request body too large")
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)
        length = int(headers.get("content-length", "0") or 0)
        if length > _MAX_BODY:
            raise ValueError("request body too large")
        return await reader.readexactly(length) if length else b""

    async def _forward(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        assert self._session is not None
        forward_headers = {k: v for k, v in headers.items() if k not in _HOP_BY_HOP}
        try:
            async with self._session.request(
                method,
                URL(self.upstream + target, encoded=True),
                headers=forward_headers,
                data=body or None,
                allow_redirects=False,
            ) as response:
                payload = await response.read()
                out = [(k, v) for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP]
                return response.status, out, payload
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            message = json.dumps({"error": f"conformance proxy: upstream failed: {type(exc).__name__}"})
            return 502, [("Content-Type", "application/json")], message.encode()


    async def _forward_stream(
        self, method: str, target: str, headers: dict[str, str], record: RequestRecord,
        writer: asyncio.StreamWriter,
    ) -> None:
        """_forward_stream relays the change stream (server-sent events) as it comes, without a
        length, until either side closes it: a live client holds it open for its whole life."""
        assert self._session is not None
        forward_headers = {k: v for k, v in headers.items() if k not in _HOP_BY_HOP}
        try:
            async with self._session.request(
                method, URL(self.upstream + target, encoded=True), headers=forward_headers,
                allow_redirects=False, timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
            ) as response:
                record.status = response.status
                out = [f"HTTP/1.1 {response.status} {_reason(response.status)}"]
                out += [f"{k}: {v}" for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP]
                out += ["Connection: close", "", ""]
                writer.write("\r\n".join(out).encode("latin-1"))
                await writer.drain()
                async for chunk in response.content.iter_any():
                    writer.write(chunk)
                    await writer.drain()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"
