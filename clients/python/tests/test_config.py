"""Configuration: explicit options, CVSM_* variables, defaults and configuration errors."""

from __future__ import annotations

import pytest

import cvsm

from .conftest import BASE_URL, TEAM_ID, TOKEN, FakeApi, Sdk


def test_options_default_to_production_30s_cache_10s_timeout_and_2_retries(sdk: Sdk) -> None:
    config = sdk.client().config
    assert config.as_dict() == {
        "base_url": BASE_URL,
        "team": TEAM_ID,
        "environment": "production",
        "cache_ttl": 30,
        "timeout": 10.0,
        "max_retries": 2,
        "stale_if_error": 0,
        "ca_file": None,
        "live": False,
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
        "stale_if_error": 0,
        "ca_file": None,
        "live": False,
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


def test_timeout_and_max_retries_come_from_cvsm_variables(sdk: Sdk, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CVSM_TIMEOUT", "2.5")
    monkeypatch.setenv("CVSM_MAX_RETRIES", "5")
    config = sdk.client().config
    assert (config.timeout, config.max_retries) == (2.5, 5)
    config = sdk.client(timeout=1, max_retries=0).config
    assert (config.timeout, config.max_retries) == (1.0, 0)


@pytest.mark.parametrize(
    ("variable", "raw"),
    [
        ("CVSM_TIMEOUT", "0"),
        ("CVSM_TIMEOUT", "-1"),
        ("CVSM_TIMEOUT", "ten"),
        ("CVSM_TIMEOUT", "inf"),
        ("CVSM_TIMEOUT", "nan"),
        ("CVSM_MAX_RETRIES", "-1"),
        ("CVSM_MAX_RETRIES", "1.5"),
        ("CVSM_MAX_RETRIES", "two"),
    ],
)
def test_invalid_timeout_or_max_retries_variable_is_a_configuration_error_naming_it(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, variable: str, raw: str
) -> None:
    monkeypatch.setenv(variable, raw)
    with pytest.raises(cvsm.ConfigurationError, match=variable):
        sdk.client()


# R6: tokens from files.


@pytest.mark.parametrize("padding", ["\n", "\r\n", " ", "\t", " \t\r\n"])
@pytest.mark.parametrize("source", ["option", "variable"])
async def test_token_whitespace_is_trimmed(
    sdk: Sdk, api: FakeApi, monkeypatch: pytest.MonkeyPatch, padding: str, source: str
) -> None:
    api.add("A", "1")
    padded = padding + TOKEN + padding
    if source == "variable":
        monkeypatch.setenv("CVSM_TOKEN", padded)
        client = sdk.client(token=None)
    else:
        client = sdk.client(token=padded)
    assert await sdk.call(client.get("A")) == "1"
    assert api.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize(
    "token",
    [
        TOKEN[:10] + " " + TOKEN[10:],
        TOKEN[:10] + "\t" + TOKEN[10:],
        TOKEN + "\r\nX-Evil: 1",
        TOKEN + "\x00",
        TOKEN + "é",
    ],
    ids=["inner-space", "inner-tab", "header-injection", "nul", "non-ascii"],
)
@pytest.mark.parametrize("source", ["option", "variable"])
def test_token_with_other_characters_is_a_configuration_error_without_the_token(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, token: str, source: str
) -> None:
    if source == "variable":
        if "\x00" in token:
            pytest.skip("no environment variable can hold NUL")
        monkeypatch.setenv("CVSM_TOKEN", token)
    with pytest.raises(cvsm.ConfigurationError, match="token") as caught:
        sdk.client(token=None) if source == "variable" else sdk.client(token=token)
    assert TOKEN not in str(caught.value)
    assert TOKEN[:10] not in repr(caught.value)


def test_a_token_of_whitespace_only_is_not_set(sdk: Sdk) -> None:
    with pytest.raises(cvsm.ConfigurationError, match="CVSM_TOKEN is not set"):
        sdk.client(token=" \n")


# R14: stale_if_error, option or CVSM_STALE_IF_ERROR, default 0.


def test_stale_if_error_comes_from_its_variable_and_the_option_wins(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert sdk.client().config.stale_if_error == 0
    monkeypatch.setenv("CVSM_STALE_IF_ERROR", "300")
    assert sdk.client().config.stale_if_error == 300
    assert sdk.client(stale_if_error=5).config.stale_if_error == 5
    assert sdk.client(stale_if_error=0).config.stale_if_error == 0
    monkeypatch.setenv("CVSM_STALE_IF_ERROR", "")
    assert sdk.client().config.stale_if_error == 0


@pytest.mark.parametrize("raw", ["soon", "-1", "1.5", " ", "1e3"])
def test_stale_if_error_variable_that_is_not_a_non_negative_integer_is_a_configuration_error(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("CVSM_STALE_IF_ERROR", raw)
    with pytest.raises(cvsm.ConfigurationError, match="CVSM_STALE_IF_ERROR"):
        sdk.client()


@pytest.mark.parametrize("value", [-1, 1.5, True, "30"])
def test_invalid_explicit_stale_if_error_is_a_configuration_error(sdk: Sdk, value: object) -> None:
    with pytest.raises(cvsm.ConfigurationError, match="stale_if_error"):
        sdk.client(stale_if_error=value)


def test_on_stale_must_be_callable(sdk: Sdk) -> None:
    with pytest.raises(TypeError, match="on_stale"):
        sdk.client(on_stale="print")
