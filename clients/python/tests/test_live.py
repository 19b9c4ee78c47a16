"""Live caches (``live=True``) and ``refresh``: the change stream drops changed values at once.

The change stream is conformance/stub.py's (the ``stub`` fixture: ``push`` changes a secret and
announces it, or writes raw events, or ends the open streams); what the server really sends is
proved by the conformance cases live_* and by server/tests/test_rotation_live.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

import cvsm
from cvsm import _cache, _live

from .conftest import TOKEN, Sdk, Stub


def event(name: str, data: dict[str, Any], event_id: str | None = None) -> dict[str, str]:
    """Return a /_stub/changes item that writes one event as it stands."""
    text = f"event: {name}\n" + (f"id: {event_id}\n" if event_id else "") + f"data: {json.dumps(data)}\n\n"
    return {"raw": text}


async def eventually(check: Callable[[], Any], timeout: float = 5.0) -> None:
    """Wait (letting the event loop run) until ``check()`` is true."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("not within the time allowed")
        await asyncio.sleep(0.01)


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


# Another name's change leaving a cached value, and dropping the get_all result: the conformance
# case live_change_drops_the_get_all_result.


async def test_a_deleted_secret_is_dropped(sdk: Sdk, stub: Stub) -> None:
    stub.add("GONE", "value")
    client = sdk.client(live=True)
    try:
        await sdk.call(client.get("GONE"))
        await eventually(lambda: client.live_connected)
        stub.push({"name": "GONE", "deleted": True})
        await eventually(lambda: "GONE" not in client._cache.entries)
        with pytest.raises(cvsm.SecretNotFoundError):
            await sdk.call(client.get("GONE"))
    finally:
        await close(sdk, client)


async def test_the_event_for_the_version_already_held_keeps_it(sdk: Sdk, stub: Stub) -> None:
    stub.add("KEY", "one")
    client = sdk.client(live=True)
    try:
        await sdk.call(client.get("KEY"))
        await eventually(lambda: client.live_connected)
        stub.add("KEY", "two")  # version 2, not announced yet
        assert await sdk.call(client.refresh("KEY")) == "two"  # read it before the event came
        mark = len(stub.requests())
        stub.push(event("change", {"name": "KEY", "environment": "production", "version": 2}),
                  event("change", {"name": "UNRELATED", "environment": "production", "version": 3}))
        await eventually(lambda: client._cache._stamp >= 3)
        assert await sdk.call(client.get("KEY")) == "two"
        assert [k for k in stub.kinds(mark) if k != "changes"] == []
    finally:
        await close(sdk, client)


async def test_after_a_lost_stream_it_reconnects_and_its_snapshot_catches_what_was_missed(
    sdk: Sdk, stub: Stub, quick_reconnect: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    stub.add("MISSED", "before")
    stub.add("SAME", "same")
    client = sdk.client(live=True)
    try:
        await sdk.call(client.get("MISSED"))
        await sdk.call(client.get("SAME"))
        await eventually(lambda: client.live_connected)
        stub.push(event("change", {"name": "SAME", "environment": "production", "version": 1}, event_id="41"))
        await eventually(lambda: client._live.last_event_id == "41")
        caplog.set_level(logging.INFO, logger="cvsm")
        stub.add("MISSED", "after")  # while the stream is down: no event
        stub.fault("changes", status=503)
        stub.push({"close": True})
        await eventually(lambda: len(stub.requests("changes")) == 3 and client.live_connected)
        await eventually(lambda: "MISSED" not in client._cache.entries)  # the snapshot (logged)
        assert await sdk.call(client.get("MISSED")) == "after"
        assert "SAME" in client._cache.entries  # its version did not change
        reconnects = stub.requests("changes")[1:]
        assert [r["headers"].get("last-event-id") for r in reconnects] == ["41", "41"]
        assert quick_reconnect == [0, 1]  # growing, then reset by the snapshot
        messages = [r.getMessage() for r in caplog.records]
        assert sum("change stream is down" in m for m in messages) == 1
        assert any("change stream is back (1 cached value(s) changed" in m for m in messages)
        assert not any(TOKEN in m for m in messages)
    finally:
        await close(sdk, client)


async def test_an_end_event_with_a_refusal_empties_the_cache(sdk: Sdk, stub: Stub) -> None:
    stub.add("KEY", "value")
    client = sdk.client(live=True)
    try:
        await sdk.call(client.get("KEY"))
        await eventually(lambda: client.live_connected)
        assert len(client._cache) == 1
        stub.fault("changes", status=401)
        stub.push(event("end", {"status": 401}))
        await eventually(lambda: len(client._cache) == 0 and len(stub.requests("changes")) == 2)
    finally:
        await close(sdk, client)


# A refused stream (401) emptying the cache and reads going on while it is down are the
# conformance cases live_stream_refused_empties_the_cache and live_stream_down_falls_back_to_cache_ttl.


async def test_close_ends_the_stream(sdk: Sdk, stub: Stub) -> None:
    stub.add("KEY", "value")
    client = sdk.client(live=True)
    await sdk.call(client.get("KEY"))
    await eventually(lambda: client.live_connected)
    await close(sdk, client)
    if sdk.flavour == "async":
        assert client._stream_task is None
    else:
        assert not client._stream._thread.is_alive()
    await eventually(lambda: stub.streams() == {"open": 0, "closed": 1})
    await asyncio.sleep(0.05)
    assert len(stub.requests("changes")) == 1  # no reconnection after close


# CVSM_LIVE's words, and no stream without live, are the conformance cases live_variable_spellings
# and live_variable_turns_the_stream_on_and_off.
def test_live_is_a_bool_and_shows_in_repr_only_when_on(sdk: Sdk, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "live" not in repr(sdk.client())
    assert "live=True" in repr(sdk.client(live=True))
    monkeypatch.setenv("CVSM_LIVE", "1")
    assert sdk.client(live=False).config.live is False
    with pytest.raises(cvsm.ConfigurationError, match="live must be True or False"):
        sdk.client(live="yes")


# refresh reading past the cache, its retries, its 404 with a suggestion and no kept value
# answering it are the conformance case refresh_reads_past_the_cache.
async def test_refresh_checks_its_name_and_environment_before_any_request(sdk: Sdk) -> None:
    client = sdk.client(base_url="http://127.0.0.1:9/api/v1")  # nothing listens there
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
