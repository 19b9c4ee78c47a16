"""The end-to-end cases' setup against the reference server itself (in-process, embedded
PostgreSQL): the team the harness makes is one the Python SDK opens, and one the server cannot."""

from __future__ import annotations

from collections.abc import AsyncIterator

import cvsm
import pytest
from cvsm import e2e

from conformance.cases import load_cases
from conformance.server import ReferenceServer, Seeder


@pytest.fixture
async def seeded() -> AsyncIterator[tuple[str, Seeder]]:
    server = ReferenceServer()
    await server.start()
    try:
        async with Seeder(server.url) as seeder:
            await seeder.seed([c for c in load_cases() if c.e2e or c.id == "not_found"])
            yield server.url + "/api/v1", seeder
    finally:
        await server.stop()


async def test_the_harness_makes_end_to_end_teams_the_sdk_opens_and_the_server_serves_sealed(
    seeded: tuple[str, Seeder]
) -> None:
    api, seeder = seeded
    seed = seeder.teams["e2e_get_all_opens_values"]
    assert seed.e2e is not None
    async with cvsm.AsyncClient(token=seed.e2e.token, base_url=api, team=seed.team_id) as client:
        assert await client.get_all() == {"E2E_ALPHA": "alpha-e2e-value", "E2E_BETA": "beta e2e\nvalue \u00e9"}
    # What the server itself answers the run's user: envelopes, which only the team key opens.
    export = await seeder.call("GET", f"/teams/{seed.team_id}/secrets/export?format=json&environment=production")
    assert set(export) == {"E2E_ALPHA", "E2E_BETA"}
    for name, envelope in export.items():
        assert envelope.startswith("cvsm-e2e1.1.") and "e2e-value" not in envelope
        assert e2e.open_value(envelope, seed.e2e.team_key, team_id=seed.team_id, environment="production",
                              name=name) in ("alpha-e2e-value", "beta e2e\nvalue \u00e9")
    assert seeder.teams["not_found"].e2e is None


async def test_a_resealed_secret_is_a_decryption_error_until_it_is_resealed_for_its_name(
    seeded: tuple[str, Seeder]
) -> None:
    api, seeder = seeded
    case_id = "e2e_tampered_value_is_decryption_error"
    seed = seeder.teams[case_id]
    assert seed.e2e is not None
    async with cvsm.AsyncClient(token=seed.e2e.token, base_url=api, team=seed.team_id, cache_ttl=0) as client:
        assert await client.get("E2E_SWAPPED") == "swapped-e2e-value"
        await seeder.reseal(case_id, "E2E_SWAPPED", "swapped-e2e-value", "E2E_OTHER")
        with pytest.raises(cvsm.DecryptionError, match="E2E_SWAPPED"):
            await client.get("E2E_SWAPPED")
        await seeder.reseal(case_id, "E2E_SWAPPED", "swapped-e2e-value", "E2E_SWAPPED")
        assert await client.get("E2E_SWAPPED") == "swapped-e2e-value"


async def test_a_forged_team_key_is_refused_by_the_sdk_and_forged_once(seeded: tuple[str, Seeder]) -> None:
    """forge_team_key (issue 37): the team moves to a key of the server's own, wrapped to the
    token's real key and not chained to the version the token pins; the SDK refuses it."""
    api, seeder = seeded
    case_id = "e2e_forged_team_key_is_decryption_error"
    seed = seeder.teams[case_id]
    assert seed.e2e is not None
    async with cvsm.AsyncClient(token=seed.e2e.token, base_url=api, team=seed.team_id, cache_ttl=0) as client:
        assert await client.get("CVSMCONF_E2E_FORGED") == "genuine-e2e-value"
        await seeder.forge_team_key(case_id)
        await seeder.forge_team_key(case_id)  # a later language's run: already forged, nothing more
        with pytest.raises(cvsm.DecryptionError) as caught:
            await client.get("CVSMCONF_E2E_FORGED")
        assert "forged-by-the-server" not in str(caught.value)
    listing = await seeder.call("GET", f"/teams/{seed.team_id}/e2e/members")
    assert listing["key_version"] == 2
    # what the server serves is a wrap of another key than the one the token pinned
    parts = e2e.parse_token(seed.e2e.token)
    assert parts is not None and parts.key_version == 1
    assert parts.commitment == e2e.commitment(seed.e2e.team_key, seed.team_id, 1)


async def test_a_rekeyed_team_is_opened_through_its_links_and_the_environment_is_sealed_in(
    seeded: tuple[str, Seeder]
) -> None:
    """rekey_team moves the team on as a member's client does (a link back to the version before,
    every value sealed anew), so the token pinned to version 1 still opens it; reseal_secret's
    environment seals a value for another environment, which does not open for production."""
    api, seeder = seeded
    case = next(c for c in load_cases() if c.id == "e2e_older_envelope_opens_through_the_links")
    seed = seeder.teams[case.id]
    assert seed.e2e is not None
    assert await seeder.rekey_team(case) == 2
    assert await seeder.rekey_team(case) == 3
    key = await seeder.call("GET", f"/teams/{seed.team_id}/e2e/members")
    assert key["key_version"] == 3
    async with cvsm.AsyncClient(token=seed.e2e.token, base_url=api, team=seed.team_id) as client:
        assert await client.get_all() == {"E2E_OLD": "old-e2e-value", "E2E_NEW": "new-e2e-value"}
    export = await seeder.call("GET", f"/teams/{seed.team_id}/secrets/export?format=json&environment=production")
    assert all(envelope.startswith("cvsm-e2e1.3.") for envelope in export.values())
    assert seed.e2e.envelopes[("E2E_OLD", "production")].startswith("cvsm-e2e1.1.")

    case_id = "e2e_value_sealed_for_another_environment_does_not_open"
    env_seed = seeder.teams[case_id]
    assert env_seed.e2e is not None
    async with cvsm.AsyncClient(token=env_seed.e2e.token, base_url=api, team=env_seed.team_id,
                                cache_ttl=0) as client:
        await seeder.reseal(case_id, "E2E_ENV_SWAPPED", "env-swapped-e2e-value", "E2E_ENV_SWAPPED", "staging")
        with pytest.raises(cvsm.DecryptionError, match="E2E_ENV_SWAPPED"):
            await client.get("E2E_ENV_SWAPPED")
        await seeder.reseal(case_id, "E2E_ENV_SWAPPED", "env-swapped-e2e-value", "E2E_ENV_SWAPPED")
        assert await client.get("E2E_ENV_SWAPPED") == "env-swapped-e2e-value"
