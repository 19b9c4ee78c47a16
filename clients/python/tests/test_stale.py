"""Stale if error (R14): kept values answer a failed refresh, marked and logged, within a bound."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest

import cvsm
from cvsm import _cache

from .conftest import TOKEN, Sdk, Stub

VALUE = "kept-value-never-logged"


def on_request(sdk: Sdk, number: int, act: Callable[[httpx.Request], None]) -> Any:
    """Return an http_client that runs ``act`` as its ``number``-th request (from 1) leaves."""
    seen: list[httpx.Request] = []

    def hook(request: httpx.Request) -> None:
        seen.append(request)
        if len(seen) == number:
            act(request)

    async def async_hook(request: httpx.Request) -> None:
        hook(request)

    if sdk.flavour == "async":
        sdk.owned.append(httpx.AsyncClient(event_hooks={"request": [async_hook]}, trust_env=False))
    else:
        sdk.owned.append(httpx.Client(event_hooks={"request": [hook]}, trust_env=False))
    return sdk.owned[-1]


async def test_a_fetch_begun_before_clear_cache_keeps_nothing(sdk: Sdk, stub: Stub, clock: list[float]) -> None:
    stub.add("KEPT", VALUE)
    events: list[cvsm.StaleEvent] = []
    # Cleared while the answer is on its way.
    http = on_request(sdk, 1, lambda request: client.clear_cache())
    client = sdk.client(cache_ttl=1, stale_if_error=30, on_stale=events.append, max_retries=0, http_client=http)
    assert await sdk.call(client.get("KEPT")) == VALUE
    clock[0] += 2
    stub.fault("by_name", status=503)
    with pytest.raises(cvsm.ApiError):
        await sdk.call(client.get("KEPT"))
    assert events == []


async def test_a_value_another_call_fetched_meanwhile_is_not_marked_stale(
    sdk: Sdk, stub: Stub, clock: list[float]
) -> None:
    stub.add("KEPT", VALUE)
    events: list[cvsm.StaleEvent] = []

    def refreshed_elsewhere_then_refused(request: httpx.Request) -> None:
        client._cache.put_value("KEPT", "newer", client._cache.mark())  # as a concurrent get would
        raise httpx.ConnectError("refused", request=request)

    http = on_request(sdk, 2, refreshed_elsewhere_then_refused)
    client = sdk.client(cache_ttl=1, stale_if_error=30, on_stale=events.append, max_retries=0, http_client=http)
    await sdk.call(client.get("KEPT"))
    clock[0] += 2
    assert await sdk.call(client.get("KEPT")) == "newer"
    assert events == []


async def test_an_exception_from_on_stale_comes_out_of_the_call(sdk: Sdk, stub: Stub, clock: list[float]) -> None:
    stub.add("KEPT", VALUE)

    def refuse(event: cvsm.StaleEvent) -> None:
        raise RuntimeError(f"no stale {event.name} here")

    client = sdk.client(cache_ttl=1, stale_if_error=30, max_retries=0, on_stale=refuse)
    await sdk.call(client.get("KEPT"))
    clock[0] += 2
    stub.fault("by_name", status=503)
    with pytest.raises(RuntimeError, match="no stale KEPT here"):
        await sdk.call(client.get("KEPT"))


# The warning: once per name, naming the secret and the error's kind, never the value or token.


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "cvsm" and r.levelno == logging.WARNING]


async def test_a_stale_answer_is_logged_once_per_name_until_fetched_fresh_again(
    sdk: Sdk, stub: Stub, clock: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    stub.add("KEPT", VALUE)
    stub.add("OTHER", VALUE + "-other")
    client = sdk.client(cache_ttl=1, stale_if_error=60, max_retries=0)  # no on_stale: logging alone
    await sdk.call(client.get("KEPT"))
    await sdk.call(client.get("OTHER"))
    await sdk.call(client.get_all())
    clock[0] += 2
    for _ in range(3):
        stub.fault("any", count=3, status=503)
        assert await sdk.call(client.get("KEPT")) == VALUE
        await sdk.call(client.get("OTHER"))
        await sdk.call(client.get_all())
    assert warnings_of(caplog) == [
        "serving a stale value of secret 'KEPT' in production, 2.0s old: the refresh failed with ApiError (HTTP 503)",
        "serving a stale value of secret 'OTHER' in production, 2.0s old: the refresh failed with ApiError (HTTP 503)",
        "serving a stale value of every secret in production, 2.0s old: the refresh failed with ApiError (HTTP 503)",
    ]
    await sdk.call(client.get("KEPT"))  # the outage is over: fetched fresh
    clock[0] += 2
    stub.fault("by_name", drop=True)
    await sdk.call(client.get("KEPT"))  # a new outage: logged again
    await sdk.call(client.get("KEPT"))
    assert len(warnings_of(caplog)) == 4
    assert warnings_of(caplog)[-1].endswith("the refresh failed with NetworkError")
    assert all(VALUE not in r.getMessage() and TOKEN not in r.getMessage() for r in caplog.records)


def test_kept_entries_past_their_bound_are_dropped_from_memory(clock: list[float]) -> None:
    cache = _cache.ValueCache(1, 2)
    cache.put_value("OLD", VALUE, cache.mark())
    cache.put_all({"OLD_TOO": VALUE}, cache.mark())
    clock[0] += 3
    assert cache.kept_value("OLD") is None and cache.kept_all() is None
    cache.put_value("NEW", "new", cache.mark())
    assert list(cache.entries) == ["NEW"]
    assert repr(cache) == "ValueCache(entries=1)"
