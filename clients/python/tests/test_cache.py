"""The cache: hits make no request, clear_cache and expiry make the next call fetch."""

from __future__ import annotations

import threading

import pytest

import cvsm

from .conftest import FakeApi, Sdk


async def test_cache_hit_makes_no_request(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    client = sdk.client()
    assert await sdk.call(client.get("A")) == "1"
    api.reset_requests()
    assert await sdk.call(client.get("A")) == "1"
    assert api.requests == []


async def test_clear_cache_makes_the_next_call_fetch(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    client = sdk.client()
    await sdk.call(client.get("A"))
    await sdk.call(client.get_all())
    client.clear_cache()
    api.reset_requests()
    await sdk.call(client.get("A"))
    await sdk.call(client.get_all())
    assert api.kinds() == ["list", "value", "export"]


async def test_entries_expire_after_the_ttl(sdk: Sdk, api: FakeApi, clock: list[float]) -> None:
    api.add("A", "1")
    client = sdk.client(cache_ttl=5)
    await sdk.call(client.get("A"))
    clock[0] += 4.9
    await sdk.call(client.get("A"))
    assert api.kinds() == ["list", "value"]
    clock[0] += 0.2
    await sdk.call(client.get("A"))
    assert api.kinds() == ["list", "value", "list", "value"]


async def test_default_ttl_is_30_seconds(sdk: Sdk, api: FakeApi, clock: list[float]) -> None:
    api.add("A", "1")
    client = sdk.client()
    await sdk.call(client.get("A"))
    clock[0] += 29.5
    await sdk.call(client.get("A"))
    assert len(api.requests) == 2
    clock[0] += 1
    await sdk.call(client.get("A"))
    assert len(api.requests) == 4


async def test_cache_ttl_zero_disables_the_cache(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    client = sdk.client(cache_ttl=0)
    await sdk.call(client.get("A"))
    await sdk.call(client.get("A"))
    await sdk.call(client.get_all())
    await sdk.call(client.get_all())
    assert api.kinds() == ["list", "value", "list", "value", "export", "export"]


async def test_get_after_get_all_makes_no_request_and_get_all_is_cached(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    api.add("B", "2")
    client = sdk.client()
    assert await sdk.call(client.get_all()) == {"A": "1", "B": "2"}
    assert await sdk.call(client.get("B")) == "2"
    assert await sdk.call(client.get_all()) == {"A": "1", "B": "2"}
    assert api.kinds() == ["export"]


async def test_mutating_a_returned_dict_does_not_change_the_cache(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    client = sdk.client()
    (await sdk.call(client.get_all()))["A"] = "changed"
    assert await sdk.call(client.get_all()) == {"A": "1"}


async def test_errors_are_not_cached(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    client = sdk.client(max_retries=0)
    api.fail("list", 503)
    with pytest.raises(cvsm.ApiError):
        await sdk.call(client.get("A"))
    with pytest.raises(cvsm.SecretNotFoundError):
        await sdk.call(client.get("MISSING"))
    api.reset_requests()
    assert await sdk.call(client.get("A")) == "1"
    with pytest.raises(cvsm.SecretNotFoundError):
        await sdk.call(client.get("MISSING"))
    assert api.kinds() == ["list", "value", "list"]


async def test_authentication_error_empties_the_cache(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    api.add("B", "2")
    client = sdk.client()
    await sdk.call(client.get("A"))
    api.fail("list", 401)
    with pytest.raises(cvsm.AuthenticationError):
        await sdk.call(client.get("B"))
    api.reset_requests()
    await sdk.call(client.get("A"))
    assert api.kinds() == ["list", "value"]


async def test_permission_error_keeps_the_cache(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    client = sdk.client()
    await sdk.call(client.get("A"))
    api.fail("list", 403)
    with pytest.raises(cvsm.PermissionDeniedError):
        await sdk.call(client.get("B"))
    api.reset_requests()
    await sdk.call(client.get("A"))
    assert api.requests == []


def test_client_cache_is_shared_safely_between_threads(api: FakeApi) -> None:
    names = [f"S{i}" for i in range(16)]
    for name in names:
        api.add(name, name.lower())
    client = cvsm.Client(token="cvsm_" + "5e" * 32, base_url="http://cvsm.test/api/v1",
                         team="5b0c2c9e-8d5e-4a55-9a40-0d7f3f3e1a11")
    failures: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(20):
                for name in names:
                    assert client.get(name) == name.lower()
                client.get_all()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    # Each thread misses each name (two requests) and get_all (one) at most once before the
    # cache holds it: the cache answered the rest of the 2,560 reads.
    assert len(api.requests) <= 8 * (2 * len(names) + 1)
