"""The cache: hits make no request, clear_cache and expiry make the next call fetch."""

from __future__ import annotations

import threading

import pytest

import cvsm

from .conftest import FakeApi, Sdk


async def test_mutating_a_returned_dict_does_not_change_the_cache(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    client = sdk.client()
    (await sdk.call(client.get_all()))["A"] = "changed"
    assert await sdk.call(client.get_all()) == {"A": "1"}


REFUSALS = pytest.mark.parametrize(
    ("status", "error_type"), [(401, cvsm.AuthenticationError), (403, cvsm.PermissionDeniedError)]
)


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
    # Each thread misses each name and get_all (one request each) at most once before the
    # cache holds it: the cache answered the rest of the 2,560 reads.
    assert len(api.requests) <= 8 * (len(names) + 1)


def test_a_cached_client_get_is_answered_without_a_flow(api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    # The lean path: a fresh entry answers Client.get before any generator is made.
    api.add("A", "1")
    client = cvsm.Client(token="cvsm_" + "5e" * 32, base_url="http://cvsm.test/api/v1", team="acme")
    assert client.get("A") == "1"

    def no_flow(name: str) -> None:
        raise AssertionError(f"a flow for {name}")

    monkeypatch.setattr(client, "_get_flow", no_flow)
    assert client.get("A") == "1"
    with pytest.raises(AssertionError, match="a flow for B"):
        client.get("B")
