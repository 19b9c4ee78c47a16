"""Errors per status, retries on 502/503/504 and network errors, never on 4xx, and 429."""

from __future__ import annotations

import email.utils
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


def test_retry_after_as_http_date_is_converted_to_seconds() -> None:
    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    assert 118 <= (_protocol.retry_after_seconds(when) or 0) <= 121
    assert _protocol.retry_after_seconds("soon") is None


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
