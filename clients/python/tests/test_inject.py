"""inject: sets, keeps and overwrites environment variables and returns the names it set."""

from __future__ import annotations

import os

import pytest

from .conftest import FakeApi, Sdk


@pytest.fixture
def seeded(api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api.add("CVSM_T_A", "a")
    api.add("CVSM_T_B", "b\nline")
    api.add("CVSM_T_C", "")
    api.add("CVSM_T_S", "staging only", environment="staging")
    for name in ("CVSM_T_A", "CVSM_T_B", "CVSM_T_C", "CVSM_T_S"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CVSM_T_A", "kept")
    return api


async def test_inject_keeps_existing_variables_and_returns_the_names_set(sdk: Sdk, seeded: FakeApi) -> None:
    names = await sdk.call(sdk.client().inject())
    assert names == ["CVSM_T_B", "CVSM_T_C"]
    assert os.environ["CVSM_T_A"] == "kept"
    assert os.environ["CVSM_T_B"] == "b\nline"
    assert os.environ["CVSM_T_C"] == ""
    assert "CVSM_T_S" not in os.environ


async def test_inject_overwrite_replaces_existing_variables(sdk: Sdk, seeded: FakeApi) -> None:
    names = await sdk.call(sdk.client().inject(overwrite=True))
    assert names == ["CVSM_T_A", "CVSM_T_B", "CVSM_T_C"]
    assert os.environ["CVSM_T_A"] == "a"


async def test_inject_uses_one_export_request(sdk: Sdk, seeded: FakeApi) -> None:
    client = sdk.client()
    await sdk.call(client.inject())
    await sdk.call(client.inject(overwrite=True))
    assert seeded.kinds() == ["export"]
