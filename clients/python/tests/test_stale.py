"""Stale if error (R14): kept values answer a failed refresh, marked and logged, within a bound."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

import cvsm
from cvsm import _cache

from .conftest import FakeApi, Sdk

VALUE = "kept-value-never-logged"

OUTAGES = [
    pytest.param([httpx.ConnectError("refused")] * 3, cvsm.NetworkError, None, id="refused"),
    pytest.param([httpx.ReadTimeout("timed out")] * 3, cvsm.NetworkError, None, id="timeout"),
    pytest.param([httpx.Response(200, content=b"<html>maintenance</html>")] * 3, cvsm.NetworkError, None,
                 id="unreadable"),
    pytest.param([503] * 3, cvsm.ApiError, 503, id="503"),
    pytest.param([502] * 3, cvsm.ApiError, 502, id="502"),
    pytest.param([500], cvsm.ApiError, 500, id="500"),
    pytest.param([httpx.Response(429, headers={"Retry-After": "1"})], cvsm.RateLimitError, 429, id="429"),
]


class Recorder:
    """An ``on_stale`` callback that keeps what it was told."""

    def __init__(self) -> None:
        self.events: list[cvsm.StaleEvent] = []

    def __call__(self, event: cvsm.StaleEvent) -> None:
        self.events.append(event)


@pytest.fixture
def on_stale() -> Recorder:
    return Recorder()


def stale_client(sdk: Sdk, on_stale: Recorder, **options: Any) -> Any:
    settings: dict[str, Any] = {"cache_ttl": 1, "stale_if_error": 30, "on_stale": on_stale}
    settings.update(options)
    return sdk.client(**settings)


async def test_a_fetch_begun_before_clear_cache_keeps_nothing(
    sdk: Sdk, api: FakeApi, clock: list[float], on_stale: Recorder
) -> None:
    api.add("KEPT", VALUE)
    client = stale_client(sdk, on_stale, max_retries=0)
    api.fail("by_name", lambda request: client.clear_cache())  # cleared while the answer is on its way
    assert await sdk.call(client.get("KEPT")) == VALUE
    clock[0] += 2
    api.fail("by_name", 503)
    with pytest.raises(cvsm.ApiError):
        await sdk.call(client.get("KEPT"))


async def test_a_value_another_call_fetched_meanwhile_is_not_marked_stale(
    sdk: Sdk, api: FakeApi, clock: list[float], on_stale: Recorder
) -> None:
    api.add("KEPT", VALUE)
    client = stale_client(sdk, on_stale, max_retries=0)
    await sdk.call(client.get("KEPT"))
    clock[0] += 2

    def refreshed_elsewhere_then_refused(request: httpx.Request) -> None:
        client._cache.put_value("KEPT", "newer", client._cache.mark())  # as a concurrent get would
        raise httpx.ConnectError("refused", request=request)

    api.fail("by_name", refreshed_elsewhere_then_refused)
    assert await sdk.call(client.get("KEPT")) == "newer"
    assert on_stale.events == []


async def test_an_exception_from_on_stale_comes_out_of_the_call(sdk: Sdk, api: FakeApi, clock: list[float]) -> None:
    api.add("KEPT", VALUE)

    def refuse(event: cvsm.StaleEvent) -> None:
        raise RuntimeError(f"no stale {event.name} here")

    client = sdk.client(cache_ttl=1, stale_if_error=30, max_retries=0, on_stale=refuse)
    await sdk.call(client.get("KEPT"))
    clock[0] += 2
    api.fail("by_name", 503)
    with pytest.raises(RuntimeError, match="no stale KEPT here"):
        await sdk.call(client.get("KEPT"))


# The warning: once per name, naming the secret and the error's kind, never the value.


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "cvsm" and r.levelno == logging.WARNING]


async def test_a_stale_answer_is_logged_once_per_name_until_fetched_fresh_again(
    sdk: Sdk, api: FakeApi, clock: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="cvsm")
    api.add("KEPT", VALUE)
    api.add("OTHER", VALUE + "-other")
    client = sdk.client(cache_ttl=1, stale_if_error=60, max_retries=0)  # no on_stale: logging alone
    await sdk.call(client.get("KEPT"))
    await sdk.call(client.get("OTHER"))
    await sdk.call(client.get_all())
    clock[0] += 2
    for _ in range(3):
        api.fail("any", 503, 503, 503)
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
    api.fail("by_name", httpx.ConnectError("refused"))
    await sdk.call(client.get("KEPT"))  # a new outage: logged again
    await sdk.call(client.get("KEPT"))
    assert len(warnings_of(caplog)) == 4
    assert warnings_of(caplog)[-1].endswith("the refresh failed with NetworkError")
    assert all(VALUE not in message for message in warnings_of(caplog))


def test_kept_entries_past_their_bound_are_dropped_from_memory(clock: list[float]) -> None:
    cache = _cache.ValueCache(1, 2)
    cache.put_value("OLD", VALUE, cache.mark())
    cache.put_all({"OLD_TOO": VALUE}, cache.mark())
    clock[0] += 3
    assert cache.kept_value("OLD") is None and cache.kept_all() is None
    cache.put_value("NEW", "new", cache.mark())
    assert list(cache.entries) == ["NEW"]
    assert repr(cache) == "ValueCache(entries=1)"
