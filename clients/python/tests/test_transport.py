"""The transport on the shared stub: whole-attempt timeouts (R1), private CAs, the seam.

R1 and R7 of conformance/PROTOCOL.md, and the ``http_client`` option.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

import cvsm

from .conftest import TEAM_ID, TOKEN, Sdk, Stub

TIMEOUT = 0.5
# Time a loaded machine may add to an attempt that gives up at its deadline.
SLACK = 1.0
# The stub's answer to an export: its head at once, then its body a byte every `drip` seconds.
DRIPPED = {"status": 200, "body": json.dumps({"A": "x" * 100}), "drip": 0.05}


# R1: the timeout bounds the whole attempt, each retry's its own (the conformance cases
# timeout_covers_the_whole_body, timeout_is_per_attempt and timeout_is_network_error).


# The blocking client keeps its deadlines with one watchdog thread, never a thread per attempt.


def test_blocking_attempts_that_time_out_start_no_thread_each(stub: Stub, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    caller = threading.current_thread()
    start = threading.Thread.start

    def recording_start(thread: threading.Thread) -> None:
        if threading.current_thread() is caller:
            started.append(thread.name)
        start(thread)

    stub.fault("export", count=6, **DRIPPED)
    monkeypatch.setattr(threading.Thread, "start", recording_start)
    client = cvsm.Client(token=TOKEN, base_url=stub.url, team=TEAM_ID, timeout=TIMEOUT, max_retries=5)
    started_at = time.monotonic()
    with pytest.raises(cvsm.NetworkError, match="timed out"):
        client.get_all()
    elapsed = time.monotonic() - started_at
    client.close()
    assert len(stub.requests()) == 6
    assert 6 * TIMEOUT <= elapsed < 6 * TIMEOUT + 3.2 + SLACK  # backoff: at most 0.1 * (1+2+4+8+16) s
    # At most the process's one watchdog, if no earlier client had started it.
    assert started in ([], ["cvsm-deadlines"])
    assert [t.name for t in threading.enumerate() if t.name.startswith("cvsm")] == ["cvsm-deadlines"]


@pytest.mark.parametrize(
    "fault", [{"delay": 10}, DRIPPED, DRIPPED | {"drip": 10}], ids=["nothing", "body", "body-never"]
)
def test_a_keep_alive_connection_is_cut_at_the_deadline_too(stub: Stub, fault: dict[str, object]) -> None:
    stub.add("A", "1")
    stub.fault("export", after=1, **fault)  # the second request, on the first one's connection
    client = cvsm.Client(token=TOKEN, base_url=stub.url, team=TEAM_ID, timeout=TIMEOUT, max_retries=0, cache_ttl=0)
    assert client.get_all() == {"A": "1"}
    started = time.monotonic()
    with pytest.raises(cvsm.NetworkError, match="timed out"):
        client.get_all()
    elapsed = time.monotonic() - started
    assert client.get_all() == {"A": "1"}  # and the next call, on a new connection, works
    client.close()
    assert TIMEOUT <= elapsed < TIMEOUT + SLACK


# R7: the proxy variables and a private CA trusted through ca_file or CVSM_CA_FILE, and only then,
# are conformance cases (proxy_*, private_ca_trusted_through_ca_file); here httpx's own verify.


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def tls_server(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stub]:
    folder = tmp_path_factory.mktemp("tls")
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(folder / "server.pem"))
    server = Stub(folder, str(folder / "server.pem"), str(folder / "server.pem"))
    server.reset()
    server.add("A", "over tls")
    yield server
    server.stop()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


async def test_an_answer_dripped_over_tls_times_out_at_the_deadline(
    sdk: Sdk, tls_server: Stub, ca_file: str
) -> None:
    tls_server.fault("export", **DRIPPED)
    client = sdk.client(base_url=tls_server.url, timeout=TIMEOUT, max_retries=0, ca_file=ca_file)
    started = time.monotonic()
    with pytest.raises(cvsm.NetworkError, match="timed out"):
        await sdk.call(client.get_all())
    assert TIMEOUT <= time.monotonic() - started < TIMEOUT + SLACK


async def test_verify_is_passed_to_httpx(sdk: Sdk, tls_server: Stub, ca: trustme.CA) -> None:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    assert await sdk.call(sdk.client(base_url=tls_server.url, verify=context).get_all()) == {"A": "over tls"}


def test_ca_file_and_verify_together_are_a_configuration_error(sdk: Sdk, ca_file: str) -> None:
    with pytest.raises(cvsm.ConfigurationError, match="not both"):
        sdk.client(ca_file=ca_file, verify=False)


# The transport seam: an httpx client the caller owns.


def seam_client(
    sdk: Sdk, handler: object, base_url: str | None = None, **options: object
) -> tuple[object, object]:
    transport_class = httpx.MockTransport
    if sdk.flavour == "async":
        http: object = httpx.AsyncClient(transport=transport_class(handler), **options)  # type: ignore[arg-type]
    else:
        http = httpx.Client(transport=transport_class(handler), **options)  # type: ignore[arg-type]
    return http, sdk.client(http_client=http, base_url=base_url or sdk.base_url)


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


async def test_http_client_never_gets_the_base_url_user_and_password(sdk: Sdk) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"A": "1"})

    with_userinfo = sdk.base_url.replace("://", "://cvsm-user:p4ss-must-not-show@", 1)
    _, client = seam_client(sdk, handler, base_url=with_userinfo)
    assert await sdk.call(client.get_all()) == {"A": "1"}  # type: ignore[attr-defined]
    (request,) = seen
    # httpx makes "Authorization: Basic" of a URL's user and password, in place of the token.
    assert request.headers.get_list("Authorization") == [f"Bearer {TOKEN}"]
    assert request.url.userinfo == b""
    assert client.config.base_url == with_userinfo  # type: ignore[attr-defined]


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


async def test_http_client_gets_the_whole_attempt_timeout(sdk: Sdk, stub: Stub) -> None:
    stub.fault("export", **DRIPPED)
    http = httpx.AsyncClient(timeout=None) if sdk.flavour == "async" else httpx.Client(timeout=None)
    sdk.owned.append(http)
    client = sdk.client(http_client=http, timeout=TIMEOUT, max_retries=0)
    started = time.monotonic()
    with pytest.raises(cvsm.NetworkError):
        await sdk.call(client.get_all())
    assert time.monotonic() - started < TIMEOUT + SLACK


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
