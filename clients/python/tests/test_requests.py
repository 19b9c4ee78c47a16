"""What goes on the wire: paths, query parameters, headers and the user agent."""

from __future__ import annotations

import cvsm

from .conftest import TEAM_ID, TOKEN, FakeApi, Sdk


async def test_every_request_carries_bearer_token_accept_json_and_user_agent(sdk: Sdk, api: FakeApi) -> None:
    api.add("API_KEY", "k")
    client = sdk.client(team="acme")
    await sdk.call(client.get("API_KEY"))
    await sdk.call(client.get_all())
    assert api.kinds() == ["teams", "list", "value", "export"]
    for request in api.requests:
        assert request.method == "GET"
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        assert request.headers["Accept"] == "application/json"
        assert request.headers["User-Agent"] == "cvsm-python/0.1.0"
    assert cvsm.USER_AGENT == f"cvsm-python/{cvsm.__version__}" == "cvsm-python/0.1.0"


async def test_get_lists_with_environment_and_search_then_reads_the_secret_by_id(sdk: Sdk, api: FakeApi) -> None:
    secret_id = api.add("API_KEY", "k")
    assert await sdk.call(sdk.client().get("API_KEY")) == "k"
    listing, read = api.requests
    assert listing.url.path == f"/api/v1/teams/{TEAM_ID}/secrets"
    assert dict(listing.url.params) == {"environment": "production", "search": "API_KEY"}
    assert read.url.path == f"/api/v1/teams/{TEAM_ID}/secrets/{secret_id}"


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


async def test_team_slug_is_resolved_once_per_client(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    api.add("B", "2")
    client = sdk.client(team="acme")
    await sdk.call(client.get("A"))
    await sdk.call(client.get("B"))
    assert api.kinds() == ["teams", "list", "value", "list", "value"]


async def test_team_id_is_used_without_listing_teams(sdk: Sdk, api: FakeApi) -> None:
    api.add("A", "1")
    await sdk.call(sdk.client(team=TEAM_ID).get("A"))
    assert "teams" not in api.kinds()


async def test_unknown_team_slug_is_a_configuration_error(sdk: Sdk, api: FakeApi) -> None:
    client = sdk.client(team="nobody")
    try:
        await sdk.call(client.get("A"))
    except cvsm.ConfigurationError as error:
        assert "nobody" in str(error)
    else:
        raise AssertionError("expected ConfigurationError")


async def test_team_and_secret_ids_are_sent_encoded(sdk: Sdk, api: FakeApi) -> None:
    api.secrets.append({"id": "a/b?c", "name": "A", "value": "1", "environment": "production"})
    client = sdk.client(team="x/y")
    api.teams.append({"id": "t/1", "slug": "x/y"})
    try:
        await sdk.call(client.get("A"))
    except cvsm.ConfigurationError:
        pass
    assert api.requests[1].url.raw_path.startswith(b"/api/v1/teams/t%2F1/secrets?")
