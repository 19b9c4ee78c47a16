"""The proxy counts every request and plays its faults; tested against a stub upstream."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from conformance.proxy import Fault, FaultProxy, request_kind


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"path": request.path, "query": request.query_string,
                                  "ua": request.headers.get("User-Agent")})

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fault_proxy = FaultProxy(f"http://127.0.0.1:{runner.addresses[0][1]}")
    await fault_proxy.start()
    yield fault_proxy
    await fault_proxy.close()
    await runner.cleanup()


def test_request_kinds_name_the_four_sdk_endpoints() -> None:
    assert request_kind("/api/v1/teams") == "teams"
    assert request_kind("/api/v1/teams/t/secrets") == "list"
    assert request_kind("/api/v1/teams/t/secrets/export") == "export"
    assert request_kind("/api/v1/teams/t/secrets/s") == "value"
    assert request_kind("/api/v1/teams/t/secrets/by-name/API_KEY") == "by_name"
    assert request_kind("/api/v1/health") == "other"


async def test_forwards_and_records_with_connection_close(proxy: FaultProxy) -> None:
    async with httpx.AsyncClient(headers={"User-Agent": "cvsm-test/0.1.0"}) as client:
        response = await client.get(f"{proxy.base_url}/teams/t/secrets", params={"search": "A&B", "environment": "production"})
    assert response.json() == {"path": "/api/v1/teams/t/secrets", "query": "search=A%26B&environment=production",
                               "ua": "cvsm-test/0.1.0"}
    assert response.headers["connection"] == "close"
    (record,) = proxy.log
    assert (record.kind, record.query["search"], record.headers["user-agent"], record.status) == (
        "list", ["A&B"], "cvsm-test/0.1.0", 200)


async def test_status_fault_answers_in_place_of_the_server_for_the_matching_kind_only(proxy: FaultProxy) -> None:
    proxy.add_faults([Fault(match="export", times=2, status=429, headers={"Retry-After": "7"})])
    async with httpx.AsyncClient() as client:
        other = await client.get(f"{proxy.base_url}/teams/t/secrets")
        first = await client.get(f"{proxy.base_url}/teams/t/secrets/export")
        second = await client.get(f"{proxy.base_url}/teams/t/secrets/export")
        third = await client.get(f"{proxy.base_url}/teams/t/secrets/export")
    assert other.status_code == 200
    assert (first.status_code, first.headers["retry-after"], second.status_code, third.status_code) == (429, "7", 429, 200)
    assert [r.fault for r in proxy.log] == [None, "status 429", "status 429", None]


@pytest.mark.parametrize("drop", ["before_response", "mid_response"])
async def test_dropped_connection_is_a_transport_error_and_still_counted(proxy: FaultProxy, drop: str) -> None:
    proxy.add_faults([Fault(match="any", drop=drop)])
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.TransportError):
            await client.get(f"{proxy.base_url}/teams")
        assert (await client.get(f"{proxy.base_url}/teams")).status_code == 200
    assert len(proxy.log) == 2


async def test_delay_fault_outlasts_a_short_client_timeout(proxy: FaultProxy) -> None:
    proxy.add_faults([Fault(match="teams", delay=1.0)])
    async with httpx.AsyncClient(timeout=0.2) as client:
        with pytest.raises(httpx.TimeoutException):
            await client.get(f"{proxy.base_url}/teams")
    await asyncio.sleep(0)
    assert len(proxy.log) == 1


async def test_made_up_answers_carry_a_request_id_of_their_own(proxy: FaultProxy) -> None:
    proxy.add_faults([Fault(match="list", status=500), Fault(match="list", status=502, headers={"X-Request-Id": "mine"})])
    async with httpx.AsyncClient() as client:
        first = await client.get(f"{proxy.base_url}/teams/t/secrets")
        second = await client.get(f"{proxy.base_url}/teams/t/secrets")
    assert first.headers["x-request-id"].startswith("conformance-")
    assert second.headers["x-request-id"] == "mine"


async def test_serves_as_a_forward_proxy_for_absolute_targets(proxy: FaultProxy) -> None:
    async with httpx.AsyncClient(proxy=proxy.proxy_url) as client:
        response = await client.get("http://cvsm-conformance.invalid/api/v1/teams/t/secrets?environment=staging")
    assert response.json()["path"] == "/api/v1/teams/t/secrets"
    (record,) = proxy.log
    assert (record.forward_proxy, record.kind, record.query) == (True, "list", {"environment": ["staging"]})


async def test_drip_sends_the_body_a_byte_at_a_time(proxy: FaultProxy) -> None:
    proxy.add_faults([Fault(match="list", drip=0.05)])
    async with httpx.AsyncClient() as client:
        async with client.stream("GET", f"{proxy.base_url}/teams/t/secrets") as response:
            chunks = [chunk async for chunk in response.aiter_raw()]
    assert len(chunks) > 10 and all(len(c) == 1 for c in chunks)


async def test_drip_with_a_status_sends_the_made_up_body_a_byte_at_a_time(proxy: FaultProxy) -> None:
    proxy.add_faults([Fault(match="by_name", status=404, drip=0.01, headers={"X-Request-Id": "dripped"})])
    async with httpx.AsyncClient() as client:
        async with client.stream("GET", f"{proxy.base_url}/teams/t/secrets/by-name/A") as response:
            # The status line and headers come at once; only the body drips.
            assert (response.status_code, response.headers["x-request-id"]) == (404, "dripped")
            chunks = [chunk async for chunk in response.aiter_raw()]
    assert len(chunks) > 10 and all(len(c) == 1 for c in chunks)
    assert b"".join(chunks) == b'{"error": "injected by the conformance proxy (404)"}'
    (record,) = proxy.log
    assert (record.status, record.fault) == (404, "status 404, drip a byte every 0.01s")


async def test_tls_listener_is_trusted_only_through_the_private_ca(tmp_path: Path) -> None:
    from conformance.proxy import PrivateCA

    ca = PrivateCA(tmp_path)
    tls_proxy = FaultProxy("http://127.0.0.1:9", tls=ca.server_context())
    await tls_proxy.start()
    try:
        async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(ca.ca_file))) as client:
            response = await client.get(f"{tls_proxy.tls_base_url}/teams")
        assert response.status_code == 502  # upstream port 9 refuses: the TLS part worked
        async with httpx.AsyncClient() as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(f"{tls_proxy.tls_base_url}/teams")
    finally:
        await tls_proxy.close()


async def test_serves_a_request_sent_through_a_connect_tunnel(proxy: FaultProxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"CONNECT cvsm-conformance.invalid:80 HTTP/1.1\r\nHost: cvsm-conformance.invalid:80\r\n\r\n")
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    writer.write(b"GET /api/v1/teams HTTP/1.1\r\nHost: cvsm-conformance.invalid\r\n\r\n")
    answer = await reader.read()
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200") and b'"path": "/api/v1/teams"' in answer
    (record,) = proxy.log
    assert (record.forward_proxy, record.kind) == (True, "teams")


async def test_the_change_stream_is_relayed_event_by_event_while_it_stays_open() -> None:
    """A live client's stream never ends on its own: each event reaches the client as it is sent."""
    sent = asyncio.Event()

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"event: snapshot\ndata: {}\n\n")
        await sent.wait()
        await response.write(b"event: change\ndata: {\"name\":\"A\"}\n\n")
        await asyncio.sleep(30)  # open until the client leaves
        return response

    app = web.Application()
    app.router.add_get("/api/v1/teams/{team}/secrets/changes", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fault_proxy = FaultProxy(f"http://127.0.0.1:{runner.addresses[0][1]}")
    await fault_proxy.start()
    try:
        assert request_kind("/api/v1/teams/t/secrets/changes") == "changes"
        async with httpx.AsyncClient(timeout=5) as client:
            async with client.stream("GET", f"{fault_proxy.base_url}/teams/t/secrets/changes") as response:
                assert response.status_code == 200
                assert response.headers["content-type"] == "text/event-stream"
                lines = response.aiter_lines()
                assert [await lines.__anext__() for _ in range(3)] == ["event: snapshot", "data: {}", ""]
                sent.set()
                assert [await lines.__anext__() for _ in range(2)] == ["event: change", 'data: {"name":"A"}']
        (record,) = fault_proxy.log
        assert (record.kind, record.status) == ("changes", 200)
    finally:
        await fault_proxy.close()
        await runner.cleanup()
