"""No token or secret value in a printed client, an error message or a log line."""

from __future__ import annotations

import logging

import pytest

import cvsm

from .conftest import TOKEN, Sdk, Stub

VALUE = "s3cr3t-v4lue-that-must-not-leak"


async def test_printed_client_holds_no_token_or_value(sdk: Sdk, stub: Stub) -> None:
    stub.add("A", VALUE)
    client = sdk.client()
    await sdk.call(client.get("A"))
    for text in (repr(client), str(client), repr(client.config), repr(vars(client))):
        assert TOKEN not in text
        assert VALUE not in text
    assert f"base_url='{stub.url}'" in repr(client)


# No error message of any kind holds the token or a value: the conformance case
# error_messages_hold_no_token_or_value.


async def test_log_lines_hold_no_token_or_value(sdk: Sdk, stub: Stub, caplog: pytest.LogCaptureFixture) -> None:
    stub.add("A", VALUE)
    stub.fault("by_name", status=503)
    caplog.set_level(logging.DEBUG)
    client = sdk.client(team="acme", cache_ttl=0, stale_if_error=60)
    await sdk.call(client.get("A"))
    await sdk.call(client.get_all())
    stub.fault("any", count=6, status=503)
    await sdk.call(client.get("A"))  # served stale, and logged as such
    await sdk.call(client.get_all())
    assert sum(r.levelno == logging.WARNING for r in caplog.records) == 2
    assert any(r.name == "cvsm" for r in caplog.records)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert TOKEN not in logged
    assert VALUE not in logged
# A missing option's message holding no token is the conformance case
# missing_configuration_is_configuration_error.
