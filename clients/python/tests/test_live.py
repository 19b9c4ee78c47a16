"""Live caches (``live=True``) and ``refresh``: the change stream drops changed values at once.

The change stream is played through respx by :class:`ChangeFeed` (the transport only); what the
server really sends is proved by the conformance case ``live_update_visible_within_a_second`` and
by server/tests/test_rotation_live.py, against the real server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

import cvsm
from cvsm import _cache, _live

from .conftest import FakeApi, Sdk

_END = object()


class _Connection(httpx.SyncByteStream, httpx.AsyncByteStream):
    """One open change stream: the bytes the test pushes, until it is ended or closed."""

    def __init__(self, request: httpx.Request) -> None:
        self.request = request
        self.queue: queue.Queue[Any] = queue.Queue()
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        while not self.closed.is_set():
            try:
                item = self.queue.get(timeout=0.01)
            except queue.Empty:
                continue
            if item is _END:
                return
            yield item

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self.closed.is_set():
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                await asyncio.sleep(0.005)
                continue
            if item is _END:
                return
            yield item

    def close(self) -> None:
        self.closed.set()

    async def aclose(self) -> None:
        self.closed.set()


class ChangeFeed:
    """The change stream of a :class:`FakeApi`: each request opens a connection that starts with
    a snapshot of the store's versions; the test pushes events to the newest one."""

    def __init__(self, api: FakeApi) -> None:
        self.api = api
        self.connections: list[_Connection] = []
        self.refuse: list[int] = []  # statuses to answer the next connections with
        api.changes = self.answer

    def versions(self, environment: str) -> dict[str, dict[str, Any]]:
        return {
            s["name"]: {"environment": environment, "version": s.get("version", 1)}
            for s in self.api.secrets
            if s["environment"] == environment
        }

    def answer(self, request: httpx.Request) -> httpx.Response:
        if self.refuse:
            status = self.refuse.pop(0)
            return httpx.Response(status, json={"error": f"kesalahan {status}"})
        connection = _Connection(request)
        environment = request.url.params.get("environment", "production")
        connection.queue.put(event("snapshot", {"secrets": self.versions(environment)}))
        self.connections.append(connection)
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, stream=connection)

    def push(self, data: bytes) -> None:
        self.connections[-1].queue.put(data)

    def end(self) -> None:
        self.connections[-1].queue.put(_END)


def event(name: str, data: dict[str, Any], event_id: str | None = None) -> bytes:
    text = f"event: {name}\n" + (f"id: {event_id}\n" if event_id else "") + f"data: {json.dumps(data)}\n\n"
    return text.encode()


def add(api: FakeApi, name: str, value: str, environment: str = "production") -> None:
    """Store a secret at version 1; its by-name answer says its version, as the server's does."""
    api.add(name, value, environment)
    api.secrets[-1]["version"] = 1  # type: ignore[assignment]


def update(api: FakeApi, name: str, value: str, environment: str = "production") -> int:
    """Change a stored value as a PUT would: a new version. Return it."""
    secret = next(s for s in api.secrets if (s["name"], s["environment"]) == (name, environment))
    secret["value"] = value
    secret["version"] = secret.get("version", 1) + 1  # type: ignore[assignment,operator]
    return secret["version"]  # type: ignore[return-value]


async def eventually(check: Callable[[], Any], timeout: float = 3.0) -> None:
    """Wait (letting the event loop run) until ``check()`` is true."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("not within the time allowed")
        await asyncio.sleep(0.005)


@pytest.fixture
def feed(api: FakeApi) -> ChangeFeed:
    return ChangeFeed(api)


@pytest.fixture(autouse=True)
def quick_reconnect(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    attempts: list[int] = []

    def delay(attempt: int) -> float:
        attempts.append(attempt)
        return 0.01

    monkeypatch.setattr(_live, "reconnect_delay", delay)
    monkeypatch.setattr(_live, "REFUSED_BACKOFF", 0.05)
    return attempts


async def close(sdk: Sdk, client: Any) -> None:
    await sdk.call(client.aclose() if sdk.flavour == "async" else client.close())


def stream_requests(api: FakeApi) -> list[httpx.Request]:
    return [r for r in api.requests if r.url.path.endswith("/secrets/changes")]


def reads(api: FakeApi) -> list[str]:
    return [k for k in api.kinds() if k != "changes"]


async def test_a_change_of_a_name_not_cached_costs_nothing_and_a_new_name_drops_get_all(
    sdk: Sdk, api: FakeApi, feed: ChangeFeed
) -> None:
    add(api, "A", "a")
    client = sdk.client(live=True)
    try:
        assert await sdk.call(client.get_all()) == {"A": "a"}
        await eventually(lambda: client.live_connected)
        # The export fetched before the first snapshot held unknown versions: fetched again once.
        assert await sdk.call(client.get_all()) == {"A": "a"}
        api.reset_requests()
        assert await sdk.call(client.get_all()) == {"A": "a"}
        assert await sdk.call(client.get("A")) == "a"
        assert api.requests == []
        add(api, "B", "b")
        feed.push(event("change", {"name": "B", "environment": "production", "version": 1}))
        await eventually(lambda: client._cache.fresh_all() is None)
        assert await sdk.call(client.get("A")) == "a"  # A did not change
        assert api.requests == []
        assert await sdk.call(client.get_all()) == {"A": "a", "B": "b"}
        assert reads(api) == ["export"]
    finally:
        await close(sdk, client)


async def test_a_deleted_secret_is_dropped(sdk: Sdk, api: FakeApi, feed: ChangeFeed) -> None:
    add(api, "GONE", "value")
    client = sdk.client(live=True)
    try:
        await sdk.call(client.get("GONE"))
        await eventually(lambda: client.live_connected)
        api.secrets.clear()
        feed.push(event("change", {"name": "GONE", "deleted": True}))
        await eventually(lambda: "GONE" not in client._cache.entries)
        with pytest.raises(cvsm.SecretNotFoundError):
            await sdk.call(client.get("GONE"))
    finally:
        await close(sdk, client)


async def test_the_event_for_the_version_already_held_keeps_it(sdk: Sdk, api: FakeApi, feed: ChangeFeed) -> None:
    add(api, "KEY", "one")
    client = sdk.client(live=True)
    try:
        await sdk.call(client.get("KEY"))
        await eventually(lambda: client.live_connected)
        version = update(api, "KEY", "two")
        assert await sdk.call(client.refresh("KEY")) == "two"  # read it before the event came
        api.reset_requests()
        feed.push(event("change", {"name": "KEY", "environment": "production", "version": version}))
        feed.push(event("change", {"name": "UNRELATED", "environment": "production", "version": 3}))
        await eventually(lambda: client._cache._stamp >= 3)
        assert await sdk.call(client.get("KEY")) == "two"
        assert reads(api) == []
    finally:
        await close(sdk, client)


async def test_after_a_lost_stream_it_reconnects_and_its_snapshot_catches_what_was_missed(
    sdk: Sdk, api: FakeApi, feed: ChangeFeed, quick_reconnect: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    add(api, "MISSED", "before")
    add(api, "SAME", "same")
    client = sdk.client(live=True)
    try:
        await sdk.call(client.get("MISSED"))
        await sdk.call(client.get("SAME"))
        await eventually(lambda: client.live_connected)
        feed.push(event("change", {"name": "SAME", "environment": "production", "version": 1}, event_id="41"))
        await eventually(lambda: client._live.last_event_id == "41")
        caplog.set_level(logging.INFO, logger="cvsm")
        feed.push(b"")
        update(api, "MISSED", "after")  # while the stream is down: no event
        feed.refuse = [503]
        feed.end()
        await eventually(lambda: len(feed.connections) == 2)
        await eventually(lambda: client.live_connected)  # the snapshot taken (and logged)
        assert "MISSED" not in client._cache.entries
        assert await sdk.call(client.get("MISSED")) == "after"
        assert "SAME" in client._cache.entries  # its version did not change
        reconnects = stream_requests(api)[1:]
        assert [r.headers.get("Last-Event-ID") for r in reconnects] == ["41", "41"]
        assert quick_reconnect == [0, 1]  # growing, then reset by the snapshot
        messages = [r.getMessage() for r in caplog.records]
        assert sum("change stream is down" in m for m in messages) == 1
        assert any("change stream is back (1 cached value(s) changed" in m for m in messages)
        assert not any(api.token in m for m in messages)
    finally:
        await close(sdk, client)


async def test_an_end_event_with_a_refusal_empties_the_cache(sdk: Sdk, api: FakeApi, feed: ChangeFeed) -> None:
    add(api, "KEY", "value")
    client = sdk.client(live=True)
    try:
        await sdk.call(client.get("KEY"))
        await eventually(lambda: client.live_connected)
        assert len(client._cache) == 1
        feed.refuse = [401]
        feed.push(event("end", {"status": 401}))
        await eventually(lambda: len(client._cache) == 0 and len(stream_requests(api)) == 2)
    finally:
        await close(sdk, client)


async def test_a_refused_stream_waits_long_and_reads_still_work(sdk: Sdk, api: FakeApi, feed: ChangeFeed) -> None:
    add(api, "KEY", "value")
    feed.refuse = [403]
    client = sdk.client(live=True)
    try:
        assert await sdk.call(client.get("KEY")) == "value"
        await eventually(lambda: len(stream_requests(api)) == 2)
        await eventually(lambda: client.live_connected)
    finally:
        await close(sdk, client)


async def test_close_ends_the_stream(sdk: Sdk, api: FakeApi, feed: ChangeFeed) -> None:
    add(api, "KEY", "value")
    client = sdk.client(live=True)
    await sdk.call(client.get("KEY"))
    await eventually(lambda: client.live_connected)
    await close(sdk, client)
    if sdk.flavour == "async":
        assert client._stream_task is None
    else:
        assert not client._stream._thread.is_alive()
    await eventually(lambda: feed.connections[0].closed.is_set())
    await asyncio.sleep(0.05)
    assert len(feed.connections) == 1  # no reconnection after close


# CVSM_LIVE's words, and no stream without live, are the conformance cases live_variable_spellings
# and live_variable_turns_the_stream_on_and_off.
def test_live_is_a_bool_and_shows_in_repr_only_when_on(sdk: Sdk, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "live" not in repr(sdk.client())
    assert "live=True" in repr(sdk.client(live=True))
    monkeypatch.setenv("CVSM_LIVE", "1")
    assert sdk.client(live=False).config.live is False
    with pytest.raises(cvsm.ConfigurationError, match="live must be True or False"):
        sdk.client(live="yes")


async def test_refresh_raises_what_get_raises_and_never_serves_a_kept_value(
    sdk: Sdk, api: FakeApi, clock: list[float]
) -> None:
    add(api, "KEY", "value")
    client = sdk.client(stale_if_error=60, max_retries=0)
    await sdk.call(client.get("KEY"))
    api.fail("by_name", 503)
    with pytest.raises(cvsm.ApiError) as caught:
        await sdk.call(client.refresh("KEY"))
    assert caught.value.status == 503
    with pytest.raises(cvsm.SecretNotFoundError) as missing:
        await sdk.call(client.refresh("key"))
    assert missing.value.suggestion == "KEY"
    with pytest.raises(cvsm.SecretNotFoundError, match="not a valid secret name"):
        await sdk.call(client.refresh("not a name"))
    with pytest.raises(cvsm.ConfigurationError):
        await sdk.call(client.refresh("KEY", environment=""))


def test_a_fetch_under_way_when_its_secret_changes_stores_nothing() -> None:
    cache = _cache.ValueCache(30)
    cache.snapshot({"A": 1, "B": 1})
    mark = cache.mark()
    cache.change("A", 2)
    cache.put_value("A", "read-before-the-change", mark)
    cache.put_value("B", "b", mark, version=1)
    assert cache.fresh_value("A") is None
    assert cache.fresh_value("B") == "b"
    # A read that says an older version than the stream announced is not stored either.
    cache.put_value("A", "old", cache.mark(), version=1)
    assert cache.fresh_value("A") is None
    cache.put_value("A", "new", cache.mark(), version=2)
    assert cache.fresh_value("A") == "new"
    # Nor a get_all begun before any change.
    mark = cache.mark()
    cache.change("C", 1)
    cache.put_all({"A": "new", "B": "b", "C": "c"}, mark)
    assert cache.fresh_all() is None


def test_a_dropped_value_is_still_kept_for_stale_if_error(clock: list[float]) -> None:
    cache = _cache.ValueCache(30, 60)
    cache.put_value("A", "kept", cache.mark(), version=1)
    cache.put_all({"A": "kept"}, cache.mark())
    cache.change("A", 2)
    assert cache.fresh_value("A") is None and cache.fresh_all() is None
    assert cache.kept_value("A") == ("kept", 0.0)
    assert cache.kept_all() == ({"A": "kept"}, 0.0)
    clock[0] += 91
    assert cache.kept_value("A") is None
    cache.clear()
    assert cache.kept_all() is None


def test_the_sse_decoder_reads_events_ids_and_comments() -> None:
    decoder = _live.SseDecoder()
    lines = [": heartbeat", "", "event: change", "id: 7", "data: {\"a\":", "data: 1}", "", "data: x", ""]
    events = [e for e in map(decoder.line, lines) if e is not None]
    assert events == [("change", "{\"a\":\n1}"), ("message", "x")]
    assert decoder.last_id == "7"
