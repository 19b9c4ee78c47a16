"""What goes on the wire: paths, query parameters, headers and the user agent."""

from __future__ import annotations

import pytest

import cvsm

from .conftest import FakeApi, Sdk


async def test_the_team_is_sent_percent_encoded(sdk: Sdk, api: FakeApi) -> None:
    client = sdk.client(team="x/y z")
    with pytest.raises(cvsm.ConfigurationError):
        await sdk.call(client.get("A"))
    with pytest.raises(cvsm.ConfigurationError):
        await sdk.call(client.get_all())
    assert [r.url.raw_path.partition(b"?")[0] for r in api.requests] == [
        b"/api/v1/teams/x%2Fy%20z/secrets/by-name/A",
        b"/api/v1/teams/x%2Fy%20z/secrets",
        b"/api/v1/teams/x%2Fy%20z/secrets/export",
    ]
