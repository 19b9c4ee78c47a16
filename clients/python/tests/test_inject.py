"""inject: sets, keeps and overwrites environment variables and returns the names it set."""

from __future__ import annotations

import os

import pytest


from .conftest import Sdk, Stub


# R8: inject checks every name and value it would set before setting any (the conformance case
# inject_is_all_or_nothing); only those: a variable it keeps is not checked.


async def test_a_value_inject_would_not_set_is_not_checked(
    sdk: Sdk, stub: Stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (("CVSM_T_A", "a"), ("CVSM_T_B", "b\nline"), ("CVSM_T_C", ""), ("CVSM_T_NUL", "a\0b")):
        stub.add(name, value)
        monkeypatch.delenv(name, raising=False)
    stub.add("CVSM_T_S", "staging only", environment="staging")
    monkeypatch.delenv("CVSM_T_S", raising=False)
    monkeypatch.setenv("CVSM_T_A", "kept")
    monkeypatch.setenv("CVSM_T_NUL", "kept")
    assert await sdk.call(sdk.client().inject()) == ["CVSM_T_B", "CVSM_T_C"]
    assert os.environ["CVSM_T_NUL"] == "kept"
