"""The transport on real sockets: whole-attempt timeouts (R1), proxies, private CAs, the seam.

R1 and R7 of conformance/PROTOCOL.md, and the ``http_client`` option.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

import cvsm

from .conftest import TEAM_ID, TOKEN, Sdk
from .servers import RawServer, Respond, answer_with, drip, head_then_drip, http_answer

EXPORT_PATH = f"/api/v1/teams/{TEAM_ID}/secrets/export"
TIMEOUT = 0.5
# Time a loaded machine may add to an attempt that gives up at its deadline.
SLACK = 1.0


def fast(sdk: Sdk, url: str, **options: object) -> object:
    return sdk.client(base_url=url, timeout=TIMEOUT, max_retries=0, **options)


# R1: the timeout bounds the whole attempt.


async def test_each_retry_gets_its_own_whole_timeout(sdk: Sdk) -> None:
    with RawServer(drip(http_answer(200, {"A": "1"}))) as server:
        client = sdk.client(base_url=server.url(), timeout=TIMEOUT, max_retries=2)
        started = time.monotonic()
        with pytest.raises(cvsm.NetworkError):
            await sdk.call(client.get_all())
        elapsed = time.monotonic() - started
    assert 3 * TIMEOUT <= elapsed < 3 * TIMEOUT + SLACK
    assert len(server.heads) == 3


async def test_a_slow_answer_inside_the_timeout_is_read(sdk: Sdk) -> None:
    with RawServer(drip(http_answer(200, {"A": "1"}), every=0.001)) as server:
        client = sdk.client(base_url=server.url(), timeout=5, max_retries=0)
        assert await sdk.call(client.get_all()) == {"A": "1"}


async def test_a_client_that_timed_out_works_again(sdk: Sdk) -> None:
    answers = iter([drip(http_answer(200, {"A": "late"})), answer_with(200, {"A": "1"})])
    with RawServer(lambda head, conn, stop: next(answers)(head, conn, stop)) as server:
        client = fast(sdk, server.url(), cache_ttl=0)
        with pytest.raises(cvsm.NetworkError):
            await sdk.call(client.get_all())
        assert await sdk.call(client.get_all()) == {"A": "1"}


# The blocking client keeps its deadlines with one watchdog thread, never a thread per attempt.


def test_blocking_attempts_that_time_out_start_no_thread_each(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    caller = threading.current_thread()
    start = threading.Thread.start

    def recording_start(thread: threading.Thread) -> None:
        if threading.current_thread() is caller:  # not the test server's own threads
            started.append(thread.name)
        start(thread)

    with RawServer(head_then_drip(200, {"A": "x" * 100})) as server:
        monkeypatch.setattr(threading.Thread, "start", recording_start)
        client = cvsm.Client(token=TOKEN, base_url=server.url(), team=TEAM_ID, timeout=TIMEOUT, max_retries=5)
        started_at = time.monotonic()
        with pytest.raises(cvsm.NetworkError, match="timed out"):
            client.get_all()
        elapsed = time.monotonic() - started_at
        client.close()
    assert len(server.heads) == 6
    assert 6 * TIMEOUT <= elapsed < 6 * TIMEOUT + 3.2 + SLACK  # backoff: at most 0.1 * (1+2+4+8+16) s
    # At most the process's one watchdog, if no earlier client had started it.
    assert started in ([], ["cvsm-deadlines"])
    assert [t.name for t in threading.enumerate() if t.name.startswith("cvsm")] == ["cvsm-deadlines"]


def keep_alive_then(then: Respond) -> Respond:
    """Return a responder that answers once on a keep-alive connection, then ``then`` on it."""

    def respond(head: str, conn: socket.socket, stop: threading.Event) -> None:
        payload = json.dumps({"A": "1"}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
        second = b""
        while b"\r\n\r\n" not in second:
            chunk = conn.recv(65536)
            if not chunk:
                return
            second += chunk
        then(second.decode("latin-1"), conn, stop)

    return respond


def silent(head: str, conn: socket.socket, stop: threading.Event) -> None:
    stop.wait(10)


def head_then_silent(head: str, conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n")
    silent(head, conn, stop)


@pytest.mark.parametrize(
    "then",
    [
        silent,
        drip(http_answer(200, {"A": "2"})),
        head_then_drip(200, {"A": "x" * 100}),
        head_then_silent,
    ],
    ids=["nothing", "head", "body", "body-never"],
)
def test_a_keep_alive_connection_is_cut_at_the_deadline_too(then: Respond) -> None:
    with RawServer(keep_alive_then(then)) as server:
        client = cvsm.Client(
            token=TOKEN, base_url=server.url(), team=TEAM_ID, timeout=TIMEOUT, max_retries=0, cache_ttl=0
        )
        assert client.get_all() == {"A": "1"}
        started = time.monotonic()
        with pytest.raises(cvsm.NetworkError, match="timed out"):
            client.get_all()  # on the same connection: a new one would be answered {"A": "1"}
        elapsed = time.monotonic() - started
        assert client.get_all() == {"A": "1"}  # and the next call, on a new connection, works
        client.close()
    assert TIMEOUT <= elapsed < TIMEOUT + SLACK
    assert len(server.heads) == 2


# R7's proxy variables are the conformance cases proxy_from_environment and proxy_variable_forms.


# R7: a private CA (trusted through ca_file or CVSM_CA_FILE, and only then: the conformance case
# private_ca_trusted_through_ca_file), with httpx's own verify.


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_server(ca: trustme.CA) -> Iterator[RawServer]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    with RawServer(answer_with(200, {"A": "over tls"}), tls=context) as server:
        yield server


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


async def test_an_answer_dripped_over_tls_times_out_at_the_deadline(
    sdk: Sdk, tls_server: RawServer, ca_file: str
) -> None:
    tls_server.respond = drip(http_answer(200, {"A": "1"}))
    client = fast(sdk, tls_server.url(), ca_file=ca_file)
    started = time.monotonic()
    with pytest.raises(cvsm.NetworkError, match="timed out"):
        await sdk.call(client.get_all())
    assert TIMEOUT <= time.monotonic() - started < TIMEOUT + SLACK


async def test_verify_is_passed_to_httpx(sdk: Sdk, tls_server: RawServer, ca: trustme.CA) -> None:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    assert await sdk.call(sdk.client(base_url=tls_server.url(), verify=context).get_all()) == {"A": "over tls"}


def test_ca_file_and_verify_together_are_a_configuration_error(sdk: Sdk, ca_file: str) -> None:
    with pytest.raises(cvsm.ConfigurationError, match="not both"):
        sdk.client(ca_file=ca_file, verify=False)


# The transport seam: an httpx client the caller owns.


def seam_client(sdk: Sdk, handler: object, **options: object) -> tuple[object, object]:
    transport_class = httpx.MockTransport
    if sdk.flavour == "async":
        http: object = httpx.AsyncClient(transport=transport_class(handler), **options)  # type: ignore[arg-type]
    else:
        http = httpx.Client(transport=transport_class(handler), **options)  # type: ignore[arg-type]
    return http, sdk.client(http_client=http)


async def test_http_client_is_used_with_the_sdk_headers(sdk: Sdk) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"A": "1"})

    http, client = seam_client(sdk, handler, headers={"X-Caller": "mine"})
    assert await sdk.call(client.get_all()) == {"A": "1"}  # type: ignore[attr-defined]
    (request,) = seen
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["User-Agent"] == "cvsm-python/0.1.0"
    assert request.headers["X-Caller"] == "mine"
    # Closing the cvsm client leaves the caller's client open.
    await sdk.call(client.aclose() if sdk.flavour == "async" else client.close())  # type: ignore[attr-defined]
    assert not http.is_closed  # type: ignore[attr-defined]
    await sdk.call(http.aclose() if sdk.flavour == "async" else http.close())  # type: ignore[attr-defined]


async def test_http_client_that_follows_redirects_is_not_followed(sdk: Sdk) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(302, headers={"Location": "http://elsewhere.test/steal"})

    _, client = seam_client(sdk, handler, follow_redirects=True)
    with pytest.raises(cvsm.ApiError) as caught:
        await sdk.call(client.get_all())
    assert caught.value.status == 302
    assert [r.url.host for r in seen] == ["cvsm.test"]


async def test_http_client_gets_the_whole_attempt_timeout(sdk: Sdk) -> None:
    with RawServer(drip(http_answer(200, {"A": "1"}))) as server:
        http = httpx.AsyncClient(timeout=None) if sdk.flavour == "async" else httpx.Client(timeout=None)
        client = sdk.client(base_url=server.url(), http_client=http, timeout=TIMEOUT, max_retries=0)
        started = time.monotonic()
        with pytest.raises(cvsm.NetworkError):
            await sdk.call(client.get_all())
        assert time.monotonic() - started < TIMEOUT + SLACK
        await sdk.call(http.aclose() if isinstance(http, httpx.AsyncClient) else http.close())


def test_http_client_of_the_other_kind_is_a_type_error(sdk: Sdk) -> None:
    other = httpx.Client() if sdk.flavour == "async" else httpx.AsyncClient()
    with pytest.raises(TypeError, match="http_client"):
        sdk.client(http_client=other)


def test_http_client_with_ca_file_or_verify_is_a_configuration_error(
    sdk: Sdk, ca_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    http = httpx.AsyncClient() if sdk.flavour == "async" else httpx.Client()
    for options in ({"ca_file": ca_file}, {"verify": False}):
        with pytest.raises(cvsm.ConfigurationError, match="http_client"):
            sdk.client(http_client=http, **options)
    # CVSM_CA_FILE is for the client's own transport: with http_client it is not used.
    monkeypatch.setenv("CVSM_CA_FILE", ca_file)
    assert sdk.client(http_client=http).config.ca_file is None
