"""Exact, case-sensitive names; not-found errors and their case suggestion; the values themselves."""

from __future__ import annotations

import httpx
import pytest

import cvsm

from .conftest import FakeApi, Sdk


async def test_name_that_differs_only_in_case_is_a_different_secret(sdk: Sdk, api: FakeApi) -> None:
    api.add("API_KEY", "upper")
    api.add("api_key", "lower")
    client = sdk.client()
    assert await sdk.call(client.get("API_KEY")) == "upper"
    assert await sdk.call(client.get("api_key")) == "lower"


async def test_not_found_suggests_the_name_that_differs_only_in_case(sdk: Sdk, api: FakeApi) -> None:
    api.add("DATABASE_URL", "postgres://x")
    with pytest.raises(cvsm.SecretNotFoundError) as caught:
        await sdk.call(sdk.client().get("database_url"))
    error = caught.value
    assert str(error) == 'secret "database_url" not found in production; did you mean "DATABASE_URL"?'
    assert (error.name, error.environment, error.suggestion, error.status) == (
        "database_url",
        "production",
        "DATABASE_URL",
        None,
    )


async def test_not_found_without_a_near_name_makes_no_suggestion(sdk: Sdk, api: FakeApi) -> None:
    api.add("API_KEY_OLD", "x")
    with pytest.raises(cvsm.SecretNotFoundError) as caught:
        await sdk.call(sdk.client().get("API_KEY"))
    assert caught.value.suggestion is None
    assert "did you mean" not in str(caught.value)


async def test_secret_in_another_environment_is_not_found(sdk: Sdk, api: FakeApi) -> None:
    api.add("ONLY_STAGING", "x", environment="staging")
    with pytest.raises(cvsm.SecretNotFoundError, match="not found in production"):
        await sdk.call(sdk.client().get("ONLY_STAGING"))


async def test_http_404_to_the_value_request_is_a_not_found_error_with_status(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    api.fail("value", httpx.Response(404, json={"error": "rahasia tidak ditemukan"}))
    with pytest.raises(cvsm.SecretNotFoundError) as caught:
        await sdk.call(sdk.client().get("A"))
    error = caught.value
    assert (error.status, error.name, error.environment, error.suggestion) == (404, "A", "production", None)
    assert str(error) == "HTTP 404: rahasia tidak ditemukan"


@pytest.mark.parametrize(
    "value",
    ["", "line one\nline two\r\n", "héllo wörld ✓ 秘密", "x" * 65_536, "é" * 32_768, "a\"b'c$HOME`x`\\n"],
    ids=["empty", "multi-line", "non-ascii", "64KiB", "64KiB-utf8", "shell-quotes"],
)
async def test_values_come_back_byte_for_byte(sdk: Sdk, api: FakeApi, value: str) -> None:
    api.add("V", value)
    client = sdk.client()
    assert await sdk.call(client.get("V")) == value
    assert await sdk.call(client.get_all()) == {"V": value}


# R10: a name that is not a valid secret name is not found, without a request.


@pytest.mark.parametrize(
    "name",
    ["", "1ABC", "API-KEY", "A" * 256, "../teams", "A B", "API_KEY\n", "ÄPI"],
    ids=["empty", "leading-digit", "dash", "too-long", "path", "space", "newline", "non-ascii"],
)
async def test_an_invalid_name_is_not_found_without_a_request(sdk: Sdk, api: FakeApi, name: str) -> None:
    with pytest.raises(cvsm.SecretNotFoundError, match="is not valid") as caught:
        await sdk.call(sdk.client().get(name))
    assert (caught.value.name, caught.value.status, caught.value.request_id) == (name, None, None)
    assert api.requests == []


async def test_the_longest_valid_name_is_looked_up(sdk: Sdk, api: FakeApi) -> None:
    name = "_" + "a9" * 127
    assert len(name) == 255
    api.add(name, "long")
    assert await sdk.call(sdk.client().get(name)) == "long"


# R2: an export of any size, in one request, kept once.


async def test_a_large_export_is_read_in_one_request_and_answers_get(sdk: Sdk, api: FakeApi) -> None:
    values = {f"BIG_{i}": f"{i:04d}" + "x" * (1 << 20) for i in range(12)}  # 12 MiB
    for name, value in values.items():
        api.add(name, value)
    client = sdk.client()
    assert await sdk.call(client.get_all()) == values
    assert await sdk.call(client.get("BIG_11")) == values["BIG_11"]
    assert await sdk.call(client.get_all()) == values
    assert api.kinds() == ["export"]
