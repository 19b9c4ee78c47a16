"""The cache: hits make no request, clear_cache and expiry make the next call fetch."""

from __future__ import annotations

import threading

import pytest

import cvsm

from .conftest import TEAM_ID, TOKEN, Sdk, Stub


async def test_mutating_a_returned_dict_does_not_change_the_cache(sdk: Sdk, stub: Stub) -> None:
    stub.add("A", "1")
    client = sdk.client()
    (await sdk.call(client.get_all()))["A"] = "changed"
    assert await sdk.call(client.get_all()) == {"A": "1"}


def test_client_cache_is_shared_safely_between_threads(stub: Stub) -> None:
    names = [f"S{i}" for i in range(16)]
    for name in names:
        stub.add(name, name.lower())
    client = cvsm.Client(token=TOKEN, base_url=stub.url, team=TEAM_ID)
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
    client.close()
    assert failures == []
    # Each thread misses each name and get_all (one request each) at most once before the
    # cache holds it: the cache answered the rest of the 2,560 reads.
    assert len(stub.requests()) <= 8 * (len(names) + 1)


def test_a_cached_client_get_is_answered_without_a_flow(stub: Stub, monkeypatch: pytest.MonkeyPatch) -> None:
    # The lean path: a fresh entry answers Client.get before any generator is made.
    stub.add("A", "1")
    client = cvsm.Client(token=TOKEN, base_url=stub.url, team="acme")
    assert client.get("A") == "1"

    def no_flow(name: str) -> None:
        raise AssertionError(f"a flow for {name}")

    monkeypatch.setattr(client, "_get_flow", no_flow)
    assert client.get("A") == "1"
    with pytest.raises(AssertionError, match="a flow for B"):
        client.get("B")
    client.close()
