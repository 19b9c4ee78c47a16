"""Configuration: explicit options, CVSM_* variables, defaults and configuration errors."""

from __future__ import annotations

import pytest

import cvsm

from .conftest import BASE_URL, TEAM_ID, TOKEN, Sdk


def test_options_default_to_production_30s_cache_10s_timeout_and_2_retries(sdk: Sdk) -> None:
    config = sdk.client().config
    assert config.as_dict() == {
        "base_url": BASE_URL,
        "team": TEAM_ID,
        "environment": "production",
        "cache_ttl": 30,
        "timeout": 10.0,
        "max_retries": 2,
        "ca_file": None,
    }


def test_configuration_comes_from_cvsm_variables(sdk: Sdk, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CVSM_TOKEN", TOKEN)
    monkeypatch.setenv("CVSM_BASE_URL", BASE_URL + "/")
    monkeypatch.setenv("CVSM_TEAM", "acme")
    monkeypatch.setenv("CVSM_ENVIRONMENT", "staging")
    monkeypatch.setenv("CVSM_CACHE_TTL", "5")
    config = sdk.cls().config
    assert (config.base_url, config.team, config.environment, config.cache_ttl) == (
        BASE_URL,
        "acme",
        "staging",
        5,
    )


def test_explicit_options_win_over_variables(sdk: Sdk, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CVSM_BASE_URL", "http://elsewhere.test/api/v1")
    monkeypatch.setenv("CVSM_TEAM", "other")
    monkeypatch.setenv("CVSM_ENVIRONMENT", "staging")
    monkeypatch.setenv("CVSM_CACHE_TTL", "5")
    config = sdk.client(environment="development", cache_ttl=0, timeout=2.5, max_retries=0).config
    assert config.as_dict() == {
        "base_url": BASE_URL,
        "team": TEAM_ID,
        "environment": "development",
        "cache_ttl": 0,
        "timeout": 2.5,
        "max_retries": 0,
        "ca_file": None,
    }


@pytest.mark.parametrize(
    ("missing", "variable"),
    [("token", "CVSM_TOKEN"), ("base_url", "CVSM_BASE_URL"), ("team", "CVSM_TEAM")],
)
def test_missing_required_option_is_a_configuration_error_naming_the_variable(
    sdk: Sdk, missing: str, variable: str
) -> None:
    with pytest.raises(cvsm.ConfigurationError) as caught:
        sdk.client(**{missing: None})
    assert f"{variable} is not set" in str(caught.value)
    assert caught.value.status is None


@pytest.mark.parametrize("raw", ["abc", "-1", "1.5", " "])
def test_cache_ttl_variable_that_is_not_a_non_negative_integer_is_a_configuration_error(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("CVSM_CACHE_TTL", raw)
    with pytest.raises(cvsm.ConfigurationError, match="CVSM_CACHE_TTL"):
        sdk.client()


@pytest.mark.parametrize(
    "options",
    [
        {"cache_ttl": -1},
        {"cache_ttl": 1.5},
        {"cache_ttl": True},
        {"timeout": 0},
        {"timeout": "10"},
        {"max_retries": -1},
        {"base_url": "ftp://cvsm.test"},
        {"base_url": "cvsm.test/api/v1"},
        {"token": "cvsm_abc def"},
    ],
)
def test_invalid_explicit_option_is_a_configuration_error(sdk: Sdk, options: dict[str, object]) -> None:
    with pytest.raises(cvsm.ConfigurationError):
        sdk.client(**options)


def test_configuration_errors_are_cvsm_errors() -> None:
    assert issubclass(cvsm.ConfigurationError, cvsm.CvsmError)
