"""What goes on the wire: paths, query parameters, headers and the user agent."""

from __future__ import annotations

import pytest

import cvsm

from .conftest import TEAM_ID, TEAM_SLUG, TOKEN, FakeApi, Sdk


async def test_every_request_carries_bearer_token_accept_json_and_user_agent(sdk: Sdk, api: FakeApi) -> None:
    api.add("API_KEY", "k")
    client = sdk.client(team="acme")
    await sdk.call(client.get("API_KEY"))
    with pytest.raises(cvsm.SecretNotFoundError):
        await sdk.call(client.get("MISSING_KEY"))
    await sdk.call(client.get_all())
    assert api.kinds() == ["by_name", "by_name", "list", "export"]
    for request in api.requests:
        assert request.method == "GET"
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        assert request.headers["Accept"] == "application/json"
        assert request.headers["User-Agent"] == "cvsm-python/0.1.0"
    assert cvsm.USER_AGENT == f"cvsm-python/{cvsm.__version__}" == "cvsm-python/0.1.0"


async def test_get_all_uses_the_json_export_of_the_environment(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    api.add("B", "2", environment="staging")
    values = await sdk.call(sdk.client(environment="staging").get_all())
    assert values == {"B": "2"}
    (export,) = api.requests
    assert export.url.path == f"/api/v1/teams/{TEAM_ID}/secrets/export"
    assert dict(export.url.params) == {"format": "json", "environment": "staging"}


async def test_default_environment_is_production(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "prod")
    api.add("A", "stage", environment="staging")
    assert await sdk.call(sdk.client().get("A")) == "prod"
    assert await sdk.call(sdk.client(environment="staging").get("A")) == "stage"


@pytest.mark.parametrize("team", [TEAM_ID, TEAM_SLUG], ids=["id", "slug"])
async def test_the_team_goes_into_every_path_as_configured_without_a_teams_lookup(
    sdk: Sdk, api: FakeApi, team: str
) -> None:
    api.add("A", "1")
    client = sdk.client(team=team)
    assert await sdk.call(client.get("A")) == "1"
    with pytest.raises(cvsm.SecretNotFoundError):
        await sdk.call(client.get("B"))
    assert await sdk.call(client.get_all()) == {"A": "1"}
    assert [r.url.raw_path.decode().partition("?")[0] for r in api.requests] == [
        f"/api/v1/teams/{team}/secrets/by-name/A",
        f"/api/v1/teams/{team}/secrets/by-name/B",
        f"/api/v1/teams/{team}/secrets",
        f"/api/v1/teams/{team}/secrets/export",
    ]


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
