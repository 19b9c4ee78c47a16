"""End-to-end teams: the token's key part, the team key fetched once, values opened in the client.

The cross-language vectors (``conformance/vectors/e2e.json``, read from the repository) are
opened through the client itself, against the fake API serving them; then the client's flow
against an end-to-end team: requests, cache, clear-cache, key versions and the errors.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

import cvsm
from cvsm import e2e

from .conftest import BASE_URL, TEAM_ID, E2eTeam, FakeApi, Sdk

VECTORS_PATH = Path(__file__).resolve().parents[3] / "conformance" / "vectors" / "e2e.json"
VALUE = "postgres://app:s3cr3t-e2e@db.internal/app"


@pytest.fixture(scope="module")
def vectors() -> dict[str, Any]:
    if not VECTORS_PATH.is_file():  # an sdist holds the tests, not the repository's vectors
        pytest.skip(f"the vectors are read from the repository: {VECTORS_PATH} is not there")
    data: dict[str, Any] = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
    return data


def b64u(text: str) -> bytes:
    return e2e._unb64u(text)


# The vectors ---------------------------------------------------------------------------------


def test_every_recipient_of_the_vectors_opens_the_team_key(vectors: dict[str, Any]) -> None:
    assert len(vectors["recipients"]) >= 2
    for recipient in vectors["recipients"]:
        opened = e2e.unwrap_team_key(recipient["wrapped_key"], vectors["team_id"], vectors["key_version"],
                                     b64u(recipient["private_key"]))
        assert opened == b64u(vectors["team_key"]), recipient["what"]
        as_object = X25519PrivateKey.from_private_bytes(b64u(recipient["private_key"]))  # what the client holds
        assert e2e.unwrap_team_key(recipient["wrapped_key"], vectors["team_id"], vectors["key_version"],
                                   as_object) == opened


def vector_api(api: FakeApi, vectors: dict[str, Any], entry: dict[str, Any], key_answer: dict | None = None) -> None:
    """Serve the vectors' team to the vectors' token: the key answer of its first pin case (key
    version 3, the links down to version 1, where the token is pinned), and ``entry``'s envelope
    (sealed under key version 2, reached through the link of version 3)."""
    api.token = vectors["token"]["api_token"]
    api.e2e = E2eTeam()  # marks the answers end-to-end; the key answer is the vectors' own below
    api.secrets = [{"id": "0", "name": entry["name"], "value": entry["envelope"], "environment": entry["environment"]}]
    api.fail("e2e_key", httpx.Response(200, json=key_answer or vectors["token_pins"][0]["key_answer"]))


async def test_every_value_of_the_vectors_opens_through_the_client_or_is_a_decryption_error(
    sdk: Sdk, api: FakeApi, vectors: dict[str, Any]
) -> None:
    assert any(not v["opens"] for v in vectors["values"]) and any(v["opens"] for v in vectors["values"])
    for entry in vectors["values"]:
        vector_api(api, vectors, entry)
        client = sdk.client(token=vectors["token"]["token"], environment=entry["environment"])
        if entry["opens"]:
            assert await sdk.call(client.get(entry["name"])) == entry["value"], entry
        else:
            with pytest.raises(cvsm.DecryptionError) as caught:
                await sdk.call(client.get(entry["name"]))
            assert json.dumps(entry["name"]) in str(caught.value), entry["why"]
            assert caught.value.status is None


async def test_the_vectors_token_is_split_and_only_its_api_token_is_sent(
    sdk: Sdk, api: FakeApi, vectors: dict[str, Any]
) -> None:
    token = vectors["token"]
    assert e2e.split_token(token["token"]) == (token["api_token"], b64u(token["private_key"]))
    parts = e2e.parse_token(token["token"])
    assert parts is not None and (parts.key_version, parts.commitment) == (1, b64u(token["commitment"]))
    vector_api(api, vectors, vectors["values"][0])
    await sdk.call(sdk.client(token=token["token"]).get(vectors["values"][0]["name"]))
    assert [r.headers["Authorization"] for r in api.requests] == [f"Bearer {token['api_token']}"] * 2


@pytest.mark.parametrize("index", range(7))
def test_each_bad_token_of_the_vectors_is_a_configuration_error(
    sdk: Sdk, vectors: dict[str, Any], index: int
) -> None:
    bad = vectors["bad_tokens"][index]
    with pytest.raises(cvsm.ConfigurationError) as caught:
        sdk.client(token=bad)
    key_part = bad.partition(".")[2]
    assert bad not in str(caught.value)
    assert not key_part or key_part not in str(caught.value)
    assert "key part" in str(caught.value)


async def test_a_token_that_is_not_an_api_token_is_sent_whole_dots_and_all(sdk: Sdk, api: FakeApi) -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"  # a session JWT has dots of its own
    api.token = jwt
    api.add("A", "plain")
    assert await sdk.call(sdk.client(token=jwt).get("A")) == "plain"
    assert api.requests[0].headers["Authorization"] == f"Bearer {jwt}"


def test_the_vectors_have_the_bad_tokens_the_test_above_counts(vectors: dict[str, Any]) -> None:
    assert len(vectors["bad_tokens"]) == 7


async def test_every_pin_case_of_the_vectors_gives_its_outcome_through_the_client(
    sdk: Sdk, api: FakeApi, vectors: dict[str, Any]
) -> None:
    """A key answer that does not chain to the token's pin (a key the server chose, a missing or
    altered link, a team rolled back below the pin) is the decryption error: no value."""
    entry = vectors["values"][0]  # sealed under key version 2
    outcomes = set()
    for case in vectors["token_pins"]:
        outcomes.add(case["outcome"])
        vector_api(api, vectors, entry, case["key_answer"])
        client = sdk.client(token=case["token"])
        if case["outcome"] == "ok":  # a pin above version 2 reaches it through the links too
            assert await sdk.call(client.get(entry["name"])) == entry["value"], case["why"]
        else:
            with pytest.raises(cvsm.DecryptionError) as caught:
                await sdk.call(client.get(entry["name"]))
            assert caught.value.status is None, case["why"]
            assert api.kinds()[-1] == "e2e_key"
        api.reset_requests()
    assert outcomes == {"ok", "integrity"}


def test_the_format_2_vectors_agree_with_the_sdk(vectors: dict[str, Any]) -> None:
    """Links, recipient auth, anchors, the PBKDF2 bounds, NFC and low-order keys (the checks of
    ``conformance/e2e_vectors.py`` made by this SDK's own functions)."""
    spec = importlib.util.spec_from_file_location("e2e_vectors", VECTORS_PATH.parents[1] / "e2e_vectors.py")
    assert spec is not None and spec.loader is not None
    checker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checker)  # the repository's checker, run on this SDK's cvsm.e2e
    assert checker.check_format2(vectors) == []


# The client against an end-to-end team -------------------------------------------------------
# (its wire rules, the requests, the key kept and fetched again, every error of the reads and of
# the key request, are the conformance cases conformance/cases/e2e_*.json; here: secrecy and
# concurrency)


@pytest.fixture
def team(api: FakeApi) -> E2eTeam:
    return api.end_to_end()


async def test_neither_the_key_part_nor_the_team_key_shows_in_print_or_logs(
    sdk: Sdk, api: FakeApi, team: E2eTeam, caplog: pytest.LogCaptureFixture
) -> None:
    api.add_sealed("A", VALUE)
    caplog.set_level(logging.DEBUG)
    client = sdk.client(token=team.token)
    await sdk.call(client.get("A"))
    team_key = e2e._b64u(team.team_key)
    texts = [repr(client), str(client), repr(vars(client)), repr(client._token), repr(client._team_key)]
    texts += [r.getMessage() for r in caplog.records]
    for text in texts:
        for hidden in (team.token, team.key_part, team_key, repr(team.team_key), repr(team.private_key), VALUE):
            assert hidden not in text


def test_the_decryption_error_is_exported_and_documented() -> None:
    assert "DecryptionError" in cvsm.__all__
    assert issubclass(cvsm.DecryptionError, cvsm.CvsmError)
    assert not issubclass(cvsm.DecryptionError, (cvsm.NetworkError, cvsm.ApiError, cvsm.ConfigurationError))
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert "## End-to-end teams" in readme and "`DecryptionError`" in readme


def frame_locals_texts(error: BaseException) -> list[str]:
    """Return the repr of every local of every frame of ``error``'s traceback and of the errors it
    chains to (as an error reporter that captures locals sends them), the test's own frame aside."""
    texts: list[str] = []
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        tb = current.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename != __file__:
                texts += [f"{name}={value!r}" for name, value in tb.tb_frame.f_locals.items()]
            tb = tb.tb_next
        pending += [current.__cause__, current.__context__]
    return texts


@pytest.mark.parametrize("failure", ["refused", "wrong wrap"])
async def test_no_traceback_local_of_a_failing_key_fetch_holds_the_private_key(
    sdk: Sdk, api: FakeApi, team: E2eTeam, failure: str
) -> None:
    api.add_sealed("A", "one")
    if failure == "refused":
        api.fail("e2e_key", 403)
    else:
        _, other_public = e2e.generate_key_pair()
        wrapped = e2e.wrap_team_key(team.team_key, team.team_id, team.key_version, other_public)
        api.fail("e2e_key", httpx.Response(200, json={"team_id": team.team_id, "key_version": 1,
                                                      "wrapped_key": wrapped}))
    client = sdk.client(token=team.token)
    with pytest.raises(cvsm.CvsmError) as caught:
        await sdk.call(client.get("A"))
    texts = frame_locals_texts(caught.value)
    assert len(texts) > 10  # the client's frames were walked
    for text in texts:
        for hidden in (repr(team.private_key), team.key_part, team.private_key.hex()):
            assert hidden not in text


# Concurrent reads: one key request; a drop while it is in flight ------------------------------


class SlowTransport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Answer from ``api`` after a pause, so that concurrent calls overlap (respx answers at once)."""

    def __init__(self, api: FakeApi, pause: float = 0.05) -> None:
        self.api = api
        self.pause = pause

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        time.sleep(self.pause)
        return self.api.handle(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(self.pause)
        return self.api.handle(request)


READERS = 8


def test_concurrent_first_reads_in_threads_make_one_key_request(api: FakeApi, team: E2eTeam) -> None:
    names = [f"S{i}" for i in range(READERS)]
    for name in names:
        api.add_sealed(name, name.lower())
    with httpx.Client(transport=SlowTransport(api)) as http, cvsm.Client(
        token=team.token, base_url=BASE_URL, team=TEAM_ID, http_client=http
    ) as client, ThreadPoolExecutor(READERS) as pool:
        assert list(pool.map(client.get, names)) == [name.lower() for name in names]
    assert sorted(api.kinds()) == ["by_name"] * READERS + ["e2e_key"]


async def test_concurrent_first_reads_in_tasks_make_one_key_request(api: FakeApi, team: E2eTeam) -> None:
    names = [f"S{i}" for i in range(READERS)]
    for name in names:
        api.add_sealed(name, name.lower())
    async with httpx.AsyncClient(transport=SlowTransport(api)) as http:
        client = cvsm.AsyncClient(token=team.token, base_url=BASE_URL, team=TEAM_ID, http_client=http)
        values = await asyncio.gather(*(client.get(name) for name in names), client.get_all())
    assert values[:-1] == [name.lower() for name in names]
    assert values[-1] == {name: name.lower() for name in names}
    assert sorted(api.kinds()) == ["by_name"] * READERS + ["e2e_key", "export"]


async def test_concurrent_reads_after_a_rekey_fetch_the_new_key_once(api: FakeApi, team: E2eTeam) -> None:
    api.add_sealed("A", "old")
    async with httpx.AsyncClient(transport=SlowTransport(api)) as http:
        client = cvsm.AsyncClient(token=team.token, base_url=BASE_URL, team=TEAM_ID, http_client=http, cache_ttl=0)
        assert await client.get("A") == "old"
        team.rekey()
        api.secrets.clear()
        api.add_sealed("A", "new")
        api.reset_requests()
        assert await asyncio.gather(*(client.get("A") for _ in range(READERS))) == ["new"] * READERS
    assert sorted(api.kinds()) == ["by_name"] * READERS + ["e2e_key"]


async def test_a_key_fetched_while_the_cache_is_cleared_is_not_kept(sdk: Sdk, api: FakeApi, team: E2eTeam) -> None:
    api.add_sealed("A", "one")
    client = sdk.client(token=team.token)
    api.fail("e2e_key", lambda request: client.clear_cache())  # cleared while the key is on its way
    assert await sdk.call(client.get("A")) == "one"  # the call itself still opens its value
    assert await sdk.call(client.get("A")) == "one"
    assert api.kinds() == ["by_name", "e2e_key", "by_name", "e2e_key"]
    assert await sdk.call(client.get("A")) == "one"
    assert api.kinds() == ["by_name", "e2e_key", "by_name", "e2e_key"]  # kept from then on


def test_a_key_fetched_while_another_call_is_refused_with_401_is_not_kept(api: FakeApi, team: E2eTeam) -> None:
    api.add_sealed("A", "one")
    api.add_sealed("B", "two")
    client = cvsm.Client(token=team.token, base_url=BASE_URL, team=TEAM_ID)

    def refused_meanwhile(request: httpx.Request) -> None:
        api.fail("by_name", 401)
        with pytest.raises(cvsm.AuthenticationError):
            client.get("B")

    api.fail("e2e_key", refused_meanwhile)
    assert client.get("A") == "one"
    assert client.get("B") == "two"
    assert api.kinds() == ["by_name", "e2e_key", "by_name", "by_name", "e2e_key"]  # A, its key, B refused, B, a key
