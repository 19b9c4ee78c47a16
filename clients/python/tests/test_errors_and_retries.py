"""Errors per status, retries on 502/503/504 and network errors, never on 4xx, and 429."""

from __future__ import annotations

import email.utils
import json
import time

import httpx
import pytest

import cvsm
from cvsm import _protocol

from .conftest import FakeApi, Sdk


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (301, cvsm.ApiError),
        (400, cvsm.ApiError),
        (401, cvsm.AuthenticationError),
        (403, cvsm.PermissionDeniedError),
        (404, cvsm.SecretNotFoundError),
        (409, cvsm.ApiError),
        (422, cvsm.ApiError),
        (429, cvsm.RateLimitError),
        (500, cvsm.ApiError),
    ],
)
async def test_each_status_of_the_value_request_raises_its_error_once_without_retry(
    sdk: Sdk, api: FakeApi, status: int, error_type: type[cvsm.CvsmError]
) -> None:
    api.add("A", "1")
    api.fail("value", status)
    with pytest.raises(error_type) as caught:
        await sdk.call(sdk.client().get("A"))
    assert type(caught.value) is error_type
    assert caught.value.status == status
    assert str(caught.value).startswith(f"HTTP {status}: kesalahan {status}")
    assert api.kinds() == ["list", "value"]


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_gateway_errors_are_retried_twice_then_raise_api_error(sdk: Sdk, api: FakeApi, status: int) -> None:
    api.fail("list", status, status, status)
    with pytest.raises(cvsm.ApiError) as caught:
        await sdk.call(sdk.client().get("A"))
    assert caught.value.status == status
    assert len(api.requests) == 3


async def test_one_503_then_success_returns_the_value(sdk: Sdk, api: FakeApi, no_backoff: list[int]) -> None:
    api.add("A", "1")
    api.fail("value", 503)
    assert await sdk.call(sdk.client().get("A")) == "1"
    assert api.kinds() == ["list", "value", "value"]
    assert no_backoff == [0]


async def test_max_retries_bounds_the_attempts(sdk: Sdk, api: FakeApi, no_backoff: list[int]) -> None:
    api.fail("export", *([503] * 10))
    with pytest.raises(cvsm.ApiError):
        await sdk.call(sdk.client(max_retries=4).get_all())
    assert len(api.requests) == 5
    assert no_backoff == [0, 1, 2, 3]
    api.reset_requests()
    with pytest.raises(cvsm.ApiError):
        await sdk.call(sdk.client(max_retries=0).get_all())
    assert len(api.requests) == 1


@pytest.mark.parametrize(
    "exception",
    [
        httpx.ConnectError("refused"),
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
        httpx.ReadError("connection reset"),
        httpx.ReadTimeout("timed out"),
    ],
    ids=["refused", "dropped", "reset", "timeout"],
)
async def test_network_failures_are_retried_then_raise_network_error(
    sdk: Sdk, api: FakeApi, exception: Exception
) -> None:
    api.fail("list", exception, exception, exception)
    with pytest.raises(cvsm.NetworkError) as caught:
        await sdk.call(sdk.client().get("A"))
    assert caught.value.status is None
    assert len(api.requests) == 3


async def test_dropped_connection_once_then_success(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    api.fail("list", httpx.RemoteProtocolError("Server disconnected"))
    assert await sdk.call(sdk.client().get("A")) == "1"
    assert api.kinds() == ["list", "list", "value"]


async def test_unreadable_response_is_a_network_error(sdk: Sdk, api: FakeApi) -> None:
    garbage = httpx.Response(200, content=b"<html>proxy error</html>")
    api.fail("export", garbage, garbage, garbage)
    with pytest.raises(cvsm.NetworkError, match="unreadable response"):
        await sdk.call(sdk.client().get_all())


async def test_rate_limit_carries_retry_after_and_is_not_retried(sdk: Sdk, api: FakeApi) -> None:
    api.fail("list", httpx.Response(429, headers={"Retry-After": "7"}, json={"error": "terlalu banyak"}))
    with pytest.raises(cvsm.RateLimitError) as caught:
        await sdk.call(sdk.client().get("A"))
    assert (caught.value.status, caught.value.retry_after) == (429, 7)
    assert len(api.requests) == 1


async def test_rate_limit_without_retry_after_has_none(sdk: Sdk, api: FakeApi) -> None:
    api.fail("list", 429)
    with pytest.raises(cvsm.RateLimitError) as caught:
        await sdk.call(sdk.client().get("A"))
    assert caught.value.retry_after is None


async def test_error_without_json_body_uses_the_reason_phrase(sdk: Sdk, api: FakeApi) -> None:
    api.fail("list", httpx.Response(500, content=b"oops"))
    with pytest.raises(cvsm.ApiError, match=r"^HTTP 500: Internal Server Error$"):
        await sdk.call(sdk.client().get("A"))


def test_backoff_is_full_jitter_doubling_from_100ms() -> None:
    # The autouse no_backoff fixture replaced the module attribute; the original is kept here.
    for attempt in range(4):
        delays = [_original_backoff(attempt) for _ in range(300)]
        assert all(0 <= d <= 0.1 * 2**attempt for d in delays)
        assert max(delays) > 0.05 * 2**attempt  # jitter spans the range, not a constant


def test_every_error_is_a_cvsm_error() -> None:
    for error_type in (
        cvsm.ConfigurationError,
        cvsm.AuthenticationError,
        cvsm.PermissionDeniedError,
        cvsm.SecretNotFoundError,
        cvsm.RateLimitError,
        cvsm.ApiError,
        cvsm.NetworkError,
    ):
        assert issubclass(error_type, cvsm.CvsmError)


_original_backoff = _protocol.backoff_delay


# R3: a 2xx of the wrong shape is unreadable, and retried like a dropped connection.

UNREADABLE = [
    ("export", None),
    ("export", []),
    ("export", "text"),
    ("export", {"A": 1}),
    ("export", {"A": None}),
    ("list", {"total": 0}),
    ("list", {"secrets": {}}),
    ("list", {"secrets": [{"name": "A"}]}),
    ("value", {"secret": {}}),
    ("value", {"value": 5}),
    ("teams", {}),
    ("teams", {"teams": "acme"}),
]


@pytest.mark.parametrize(("kind", "body"), UNREADABLE, ids=[f"{k}-{json.dumps(b)}" for k, b in UNREADABLE])
async def test_a_2xx_of_the_wrong_shape_is_retried_then_a_network_error(
    sdk: Sdk, api: FakeApi, kind: str, body: object
) -> None:
    api.add("A", "1")
    answer = httpx.Response(200, json=body)
    api.fail(kind, answer, answer, answer)
    client = sdk.client(team="acme")
    with pytest.raises(cvsm.NetworkError, match="unreadable response") as caught:
        await sdk.call(client.get_all() if kind == "export" else client.get("A"))
    assert caught.value.status is None
    assert api.kinds().count(kind) == 3


@pytest.mark.parametrize("kind", ["export", "list", "value", "teams"])
async def test_one_unreadable_answer_then_success(sdk: Sdk, api: FakeApi, kind: str) -> None:
    api.add("A", "1")
    api.fail(kind, httpx.Response(200, json=None))
    client = sdk.client(team="acme")
    if kind == "export":
        assert await sdk.call(client.get_all()) == {"A": "1"}
    else:
        assert await sdk.call(client.get("A")) == "1"
    assert api.kinds().count(kind) == 2


# R4: Retry-After.


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("0", 0),
        ("7", 7),
        (" 12 ", 12),
        (120.2, 121),  # seconds from now, written as an HTTP date
        (-60.0, 0),
        ("soon", None),
        ("-1", None),
        ("1.5", None),
        (b"\xb2", None),
        ("", None),
        (None, None),
    ],
    ids=[
        "zero", "seconds", "spaces", "date", "past-date", "word", "negative", "fraction", "superscript", "empty",
        "absent",
    ],
)
async def test_retry_after_forms(
    sdk: Sdk, api: FakeApi, header: str | bytes | float | None, expected: int | None
) -> None:
    if isinstance(header, float):
        header = email.utils.formatdate(time.time() + header, usegmt=True)
    headers = {"Retry-After": header} if header is not None else {}
    api.fail("list", httpx.Response(429, headers=headers, json={"error": "terlalu banyak"}))
    with pytest.raises(cvsm.RateLimitError) as caught:
        await sdk.call(sdk.client().get("A"))
    if expected is not None and expected > 1:
        # An HTTP date has one-second resolution and is counted from now, rounded up.
        assert caught.value.retry_after in (expected - 1, expected)
    else:
        assert caught.value.retry_after == expected


# R5: redirects are not followed.


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_a_redirect_is_an_api_error_and_is_not_followed(sdk: Sdk, api: FakeApi, status: int) -> None:
    api.fail("export", httpx.Response(status, headers={"Location": "http://elsewhere.test/api/v1/x"}))
    with pytest.raises(cvsm.ApiError) as caught:
        await sdk.call(sdk.client().get_all())
    assert caught.value.status == status
    assert "redirects are not followed" in str(caught.value)
    assert [r.url.host for r in api.requests] == ["cvsm.test"]


# R9: the server saying the base URL, team or environment is wrong is a configuration error.


@pytest.mark.parametrize(
    ("kind", "status"),
    [("teams", 404), ("list", 404), ("export", 404), ("list", 400), ("export", 400)],
)
async def test_a_wrong_base_url_team_or_environment_is_a_configuration_error(
    sdk: Sdk, api: FakeApi, kind: str, status: int
) -> None:
    api.add("A", "1")
    api.fail(kind, status)
    client = sdk.client(team="acme")
    with pytest.raises(cvsm.ConfigurationError) as caught:
        await sdk.call(client.get_all() if kind == "export" else client.get("A"))
    assert caught.value.status == status
    assert caught.value.request_id is not None
    assert str(caught.value).startswith(f"HTTP {status}: kesalahan {status} (")
    assert len(api.requests) == (2 if kind != "teams" else 1)


async def test_an_unknown_team_id_is_a_configuration_error_with_404(sdk: Sdk, api: FakeApi) -> None:
    with pytest.raises(cvsm.ConfigurationError) as caught:
        await sdk.call(sdk.client(team="00000000-0000-4000-8000-000000000000").get_all())
    assert caught.value.status == 404


@pytest.mark.parametrize("kind", ["teams", "value"])
async def test_a_400_to_the_teams_or_value_request_stays_an_api_error(sdk: Sdk, api: FakeApi, kind: str) -> None:
    api.add("A", "1")
    api.fail(kind, 400)
    with pytest.raises(cvsm.ApiError) as caught:
        await sdk.call(sdk.client(team="acme").get("A"))
    assert caught.value.status == 400


# R11: what an error carries.


async def test_errors_from_an_answer_carry_its_request_id(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    api.fail("value", httpx.Response(500, headers={"X-Request-Id": "rid-500"}, json={"error": "x"}))
    with pytest.raises(cvsm.ApiError) as caught:
        await sdk.call(sdk.client().get("A"))
    assert (caught.value.request_id, caught.value.suggestion, caught.value.retry_after) == ("rid-500", None, None)


async def test_a_name_absent_from_the_listing_carries_the_listing_request_id(sdk: Sdk, api: FakeApi) -> None:
    api.add("API_KEY", "1")
    with pytest.raises(cvsm.SecretNotFoundError) as caught:
        await sdk.call(sdk.client().get("api_key"))
    assert (caught.value.request_id, caught.value.suggestion, caught.value.status) == ("req-1", "API_KEY", None)


async def test_errors_without_an_answer_have_no_request_id(sdk: Sdk, api: FakeApi) -> None:
    api.fail("list", *[httpx.ConnectError("refused")] * 3)
    with pytest.raises(cvsm.NetworkError) as caught:
        await sdk.call(sdk.client().get("A"))
    assert (caught.value.request_id, caught.value.status, caught.value.suggestion) == (None, None, None)


def test_every_error_type_has_every_field() -> None:
    for error in (
        cvsm.ConfigurationError("m"),
        cvsm.AuthenticationError("m", status=401),
        cvsm.PermissionDeniedError("m", status=403),
        cvsm.SecretNotFoundError("m"),
        cvsm.RateLimitError("m"),
        cvsm.ApiError("m", status=500),
        cvsm.NetworkError("m"),
    ):
        assert {"message", "status", "retry_after", "request_id", "suggestion"} <= set(dir(error))
