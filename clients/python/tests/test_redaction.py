"""No token or secret value in a printed client. Error messages: the conformance cases
error_messages_hold_no_token_or_value and missing_configuration_is_configuration_error; log
lines: test_stale.py (the warnings) and test_live.py (the stream's)."""

from __future__ import annotations

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


async def test_printed_client_hides_the_base_url_password(sdk: Sdk, stub: Stub) -> None:
    with_userinfo = stub.url.replace("://", "://cvsm-user:p4ss-must-not-show@", 1)
    client = sdk.client(base_url=with_userinfo)
    for text in (repr(client), str(client), repr(client.config), repr(vars(client))):
        assert "p4ss-must-not-show" not in text
        assert "cvsm-user" not in text
    assert f"base_url='{stub.url.replace('://', '://***@', 1)}'" in repr(client)
    assert client.config.base_url == with_userinfo  # the data itself is unchanged
