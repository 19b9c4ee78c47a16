"""One request per get; exact, case-sensitive names; not-found errors and their case suggestion; the values."""

from __future__ import annotations

import pytest

import cvsm
from cvsm import _protocol

from .conftest import FakeApi, Sdk


async def test_a_listing_that_holds_the_exact_name_after_a_404_is_still_not_found(sdk: Sdk, api: FakeApi) -> None:
    # The read by name is the authority; the listing only tells a missing secret from a wrong team.
    api.add("RACY", "1")
    api.fail("by_name", 404)
    with pytest.raises(cvsm.SecretNotFoundError) as caught:
        await sdk.call(sdk.client().get("RACY"))
    assert (caught.value.status, caught.value.suggestion) == (404, None)


def test_team_and_name_are_percent_encoded_in_the_path() -> None:
    # Only valid names are ever sent, and they need no encoding; the path encodes them anyway.
    call = _protocol.by_name_call("a team/x", "production", "A/B?C")
    assert call.path == "/teams/a%20team%2Fx/secrets/by-name/A%2FB%3FC"


# R10: a name that is not a valid secret name is not found, without a request.


# R2: an export of any size, in one request, kept once.
