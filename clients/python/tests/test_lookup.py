"""One request per get; exact, case-sensitive names; not-found errors and their case suggestion; the values."""

from __future__ import annotations

import httpx
import pytest

import cvsm
from cvsm import _protocol

from .conftest import TEAM_ID, FakeApi, Sdk


async def test_get_is_one_read_by_name(sdk: Sdk, api: FakeApi) -> None:
    api.add("API_KEY", "k")
    api.add("API_KEY", "s", environment="staging")
    assert await sdk.call(sdk.client().get("API_KEY")) == "k"
    assert await sdk.call(sdk.client(environment="staging").get("API_KEY")) == "s"
    first, second = api.requests
    assert first.url.path == f"/api/v1/teams/{TEAM_ID}/secrets/by-name/API_KEY"
    assert dict(first.url.params) == {"environment": "production"}
    assert dict(second.url.params) == {"environment": "staging"}


async def test_a_missing_secret_is_read_by_name_then_searched_for_once(sdk: Sdk, api: FakeApi) -> None:
    api.add("PRESENT", "p")
    with pytest.raises(cvsm.SecretNotFoundError) as caught:
        await sdk.call(sdk.client().get("MISSING"))
    assert str(caught.value) == 'secret "MISSING" not found in production'
    by_name, listing = api.requests
    assert by_name.url.path.endswith("/secrets/by-name/MISSING")
    assert listing.url.path == f"/api/v1/teams/{TEAM_ID}/secrets"
    assert dict(listing.url.params) == {"environment": "production", "search": "MISSING"}


async def test_a_listing_that_holds_the_exact_name_after_a_404_is_still_not_found(sdk: Sdk, api: FakeApi) -> None:
    # The read by name is the authority; the listing only tells a missing secret from a wrong team.
    api.add("RACY", "1")
    api.fail("by_name", 404)
    with pytest.raises(cvsm.SecretNotFoundError) as caught:
        await sdk.call(sdk.client().get("RACY"))
    assert (caught.value.status, caught.value.suggestion) == (404, None)


async def test_a_listing_that_fails_otherwise_raises_its_own_error(sdk: Sdk, api: FakeApi) -> None:
    api.fail("list", 503, 503, 503)
    with pytest.raises(cvsm.ApiError) as caught:
        await sdk.call(sdk.client().get("MISSING"))
    assert caught.value.status == 503
    assert api.kinds() == ["by_name", "list", "list", "list"]


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
    assert (error.name, error.environment, error.suggestion, error.status, error.request_id) == (
        "database_url",
        "production",
        "DATABASE_URL",
        404,
        "req-1",
    )
    assert api.kinds() == ["by_name", "list"]


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


async def test_a_suggestion_comes_only_from_the_client_environment(sdk: Sdk, api: FakeApi) -> None:
    api.add("API_KEY", "s", environment="staging")
    listing = {"secrets": [{"id": "x", "name": "API_KEY", "environment": "staging"}], "total": 1}
    api.fail("list", httpx.Response(200, json=listing))  # a server that ignored ?environment=
    with pytest.raises(cvsm.SecretNotFoundError) as caught:
        await sdk.call(sdk.client().get("api_key"))
    assert caught.value.suggestion is None


def test_team_and_name_are_percent_encoded_in_the_path() -> None:
    # Only valid names are ever sent, and they need no encoding; the path encodes them anyway.
    call = _protocol.by_name_call("a team/x", "production", "A/B?C")
    assert call.path == "/teams/a%20team%2Fx/secrets/by-name/A%2FB%3FC"


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
    with pytest.raises(cvsm.SecretNotFoundError, match="is not a valid secret name") as caught:
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
