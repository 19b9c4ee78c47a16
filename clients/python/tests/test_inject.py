"""inject: sets, keeps and overwrites environment variables and returns the names it set."""

from __future__ import annotations

import json
import os

import httpx
import pytest

import cvsm

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


# R8: inject checks every name and value it would set before setting any.


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("CVSM_T_NUL", "a\0b", "NUL"),
        ("1CVSM_T", "x", "not a variable name"),
        ("CVSM-T", "x", "not a variable name"),
        ("CVSM_T_SURROGATE", "\ud800", "cannot be encoded"),
    ],
    ids=["nul", "leading-digit", "dash", "lone-surrogate"],
)
async def test_a_secret_inject_cannot_set_is_a_configuration_error_and_nothing_is_set(
    sdk: Sdk, seeded: FakeApi, name: str, value: str, why: str
) -> None:
    seeded.add(name, value)
    export = {s["name"]: s["value"] for s in seeded.secrets if s["environment"] == "production"}
    # As the server sends it: JSON escapes, so a lone surrogate can travel.
    seeded.fail("export", httpx.Response(200, content=json.dumps(export).encode()))
    with pytest.raises(cvsm.ConfigurationError, match=why) as caught:
        await sdk.call(sdk.client().inject(overwrite=True))
    assert json.dumps(name) in str(caught.value)
    if value != "x":
        assert value not in str(caught.value)
    assert os.environ["CVSM_T_A"] == "kept"
    assert "CVSM_T_B" not in os.environ and "CVSM_T_C" not in os.environ


async def test_a_value_inject_would_not_set_is_not_checked(
    sdk: Sdk, seeded: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeded.add("CVSM_T_NUL", "a\0b")
    monkeypatch.setenv("CVSM_T_NUL", "kept")
    assert await sdk.call(sdk.client().inject()) == ["CVSM_T_B", "CVSM_T_C"]
    assert os.environ["CVSM_T_NUL"] == "kept"
