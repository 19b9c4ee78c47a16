"""Configuration: explicit options, CVSM_* variables, defaults and configuration errors."""

from __future__ import annotations

import pytest

import cvsm

from .conftest import Sdk


# A negative cache_ttl and a token with a space in it are conformance cases; these are Python's types.
@pytest.mark.parametrize("options", [
    {"cache_ttl": 1.5}, {"cache_ttl": True}, {"timeout": 0}, {"timeout": "10"}, {"max_retries": -1},
    {"base_url": "ftp://cvsm.test"}, {"base_url": "cvsm.test/api/v1"},
])
def test_invalid_explicit_option_is_a_configuration_error(sdk: Sdk, options: dict[str, object]) -> None:
    with pytest.raises(cvsm.ConfigurationError):
        sdk.client(**options)


# R6: tokens from files.


def test_a_token_of_whitespace_only_is_not_set(sdk: Sdk) -> None:
    with pytest.raises(cvsm.ConfigurationError, match="CVSM_TOKEN is not set"):
        sdk.client(token=" \n")


# R14: stale_if_error, option or CVSM_STALE_IF_ERROR, default 0.


@pytest.mark.parametrize("value", [-1, 1.5, True, "30"])
def test_invalid_explicit_stale_if_error_is_a_configuration_error(sdk: Sdk, value: object) -> None:
    with pytest.raises(cvsm.ConfigurationError, match="stale_if_error"):
        sdk.client(stale_if_error=value)


def test_on_stale_must_be_callable(sdk: Sdk) -> None:
    with pytest.raises(TypeError, match="on_stale"):
        sdk.client(on_stale="print")
