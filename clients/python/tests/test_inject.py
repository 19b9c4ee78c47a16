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


# R8: inject checks every name and value it would set before setting any.


async def test_a_value_inject_would_not_set_is_not_checked(
    sdk: Sdk, seeded: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeded.add("CVSM_T_NUL", "a\0b")
    monkeypatch.setenv("CVSM_T_NUL", "kept")
    assert await sdk.call(sdk.client().inject()) == ["CVSM_T_B", "CVSM_T_C"]
    assert os.environ["CVSM_T_NUL"] == "kept"
