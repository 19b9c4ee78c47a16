"""The change stream (`GET /teams/:team/secrets/changes`) over real HTTP: a snapshot, then each
committed change within a second, never a value; the export's scope rules; revocation, leaving
the team and shutdown end it; a change made through one server process reaches a stream on
another."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import aiohttp
import pytest

from conftest import Api, query
from cvsm_server.secrets import changes
from cvsm_server.web.state import POOL
from serving import served

VALUE = "s3cret-value-never-streamed"


class Stream:
    """The events of one open stream, read line by line as a client would."""

    def __init__(self, resp: Any) -> None:
        self.resp = resp
        self.raw = b""

    async def next(self, timeout: float = 5.0) -> tuple[str, Any]:
        """The next event (name, data) or comment ("comment", text); ("eof", None) at the end."""
        name, data = None, []
        deadline = time.monotonic() + timeout
        while True:
            line = await asyncio.wait_for(self.resp.content.readline(),
                                          max(0.01, deadline - time.monotonic()))
            self.raw += line
            if not line:
                return "eof", None
            text = line.decode().rstrip("\n")
            if text.startswith(":"):
                return "comment", text[1:].strip()
            if text.startswith("event: "):
                name = text[len("event: "):]
            elif text.startswith("data: "):
                data.append(text[len("data: "):])
            elif text == "" and name is not None:
                return name, json.loads("\n".join(data))

    async def expect(self, name: str, timeout: float = 5.0) -> Any:
        got, data = await self.next(timeout)
        assert got == name, (got, data)
        return data


async def open_stream(client: Any, team: str, token: str, **params: str) -> tuple[Any, Stream]:
    resp = await client.get(f"/api/v1/teams/{team}/secrets/changes", params=params,
                            headers=Api.auth(token))
    return resp, Stream(resp)


async def test_a_change_by_another_client_arrives_within_a_second_and_no_value_is_sent(
        api, client, owner, team_id) -> None:
    secret_id = await api.secret(owner, team_id, "DB_PASSWORD", VALUE)
    await api.secret(owner, team_id, "STAGING_ONLY", VALUE + "-staging", "staging")
    watcher = (await api.api_token(owner, read_only=True))["token"]
    resp, stream = await open_stream(client, "acme", watcher, environment="production")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    snapshot = await stream.expect("snapshot")
    assert snapshot == {"secrets": {"DB_PASSWORD": {"environment": "production", "version": 1}}}

    started = time.monotonic()
    put = await client.put(f"/api/v1/teams/{team_id}/secrets/{secret_id}",
                           headers=api.auth(owner["token"]), json={"value": VALUE + "-2"})
    assert put.status == 200
    change = await stream.expect("change", timeout=1.0)
    assert time.monotonic() - started < 1.0
    assert change == {"name": "DB_PASSWORD", "environment": "production", "version": 2}

    await api.secret(owner, team_id, "NEW_KEY", VALUE + "-new")
    assert await stream.expect("change", 1.0) == {"name": "NEW_KEY", "environment": "production",
                                                   "version": 1}
    # Another environment's change wakes nothing here; a rollback is a new version; a delete.
    await api.secret(owner, team_id, "STAGING_TWO", VALUE, "staging")
    back = await client.post(f"/api/v1/teams/{team_id}/secrets/{secret_id}/rollback",
                             headers=api.auth(owner["token"]), json={"version": 1})
    assert back.status == 200
    assert await stream.expect("change", 1.0) == {"name": "DB_PASSWORD",
                                                   "environment": "production", "version": 3}
    gone = await client.delete(f"/api/v1/teams/{team_id}/secrets/{secret_id}",
                               headers=api.auth(owner["token"]))
    assert gone.status == 200
    assert await stream.expect("change", 1.0) == {"name": "DB_PASSWORD", "deleted": True}
    resp.close()
    assert VALUE.encode() not in stream.raw


async def test_each_connection_is_audited_once_as_watch(api, client, owner, team_id,
                                                        database_url, monkeypatch) -> None:
    monkeypatch.setattr(changes, "HEARTBEAT_SECONDS", 0.2)
    await api.secret(owner, team_id, "A", VALUE)
    resp, stream = await open_stream(client, team_id, owner["token"])
    await stream.expect("snapshot")
    assert (await stream.next())[0] == "comment"  # a heartbeat
    assert (await stream.next())[0] == "comment"
    resp.close()
    rows = await query(database_url, "SELECT action, resource, metadata FROM audit_logs "
                                     "WHERE action = 'watch'")
    assert [(r["action"], r["resource"]) for r in rows] == [("watch", "secret")]
    assert rows[0]["metadata"] == {"environment": "all", "environments": ["production"],
                                   "count": 1}


async def test_an_idle_stream_holds_no_database_connection(api, client, owner, team_id,
                                                           monkeypatch) -> None:
    monkeypatch.setattr(changes, "HEARTBEAT_SECONDS", 0.3)
    pool = client.server.app[POOL]
    streams = []
    for _ in range(3):
        resp, stream = await open_stream(client, team_id, owner["token"])
        await stream.expect("snapshot")
        streams.append((resp, stream))
    await asyncio.sleep(0.1)
    assert pool.freesize == pool.size  # three streams open, every pooled connection free
    for resp, stream in streams:
        assert (await stream.next())[0] == "comment"  # each checked in at its heartbeat
    await asyncio.sleep(0.1)
    assert pool.freesize == pool.size
    for resp, _ in streams:
        resp.close()


async def test_without_environment_the_export_precedence_decides(api, client, owner,
                                                                  team_id) -> None:
    await api.secret(owner, team_id, "URL", "dev", "development")
    staging = await api.secret(owner, team_id, "URL", "staging", "staging")
    resp, stream = await open_stream(client, team_id, owner["token"])
    assert (await stream.expect("snapshot"))["secrets"] == {
        "URL": {"environment": "staging", "version": 1}}
    await api.secret(owner, team_id, "URL", "prod", "production")
    assert await stream.expect("change", 1.0) == {"name": "URL", "environment": "production",
                                                   "version": 1}
    await client.put(f"/api/v1/teams/{team_id}/secrets/{staging}",
                     headers=api.auth(owner["token"]), json={"value": "staging 2"})
    # The staging version moved, but the export still takes production's: no event.
    with pytest.raises(asyncio.TimeoutError):
        await stream.next(timeout=0.7)
    resp.close()


async def test_scope_rules_are_the_exports(api, client, owner, team_id) -> None:
    await api.secret(owner, team_id, "PROD", VALUE)
    await api.secret(owner, team_id, "STAGE", VALUE, "staging")
    other_team = await api.team(owner, "other")
    staging_only = (await api.api_token(owner, team_id="acme", environments=["staging"]))["token"]

    resp, stream = await open_stream(client, "acme", staging_only)
    assert (await stream.expect("snapshot"))["secrets"] == {
        "STAGE": {"environment": "staging", "version": 1}}
    await api.secret(owner, team_id, "PROD_TWO", VALUE)
    await api.secret(owner, team_id, "STAGE_TWO", VALUE, "staging")
    assert await stream.expect("change", 1.0) == {"name": "STAGE_TWO", "environment": "staging",
                                                   "version": 1}
    resp.close()
    # Outside its environments the stream is filtered to them, as the export is: empty.
    resp, stream = await open_stream(client, "acme", staging_only, environment="production")
    assert resp.status == 200
    assert (await stream.expect("snapshot")) == {"secrets": {}}
    resp.close()

    refusals = [
        (staging_only, other_team, {}, 404),  # a token bound to another team
        ((await api.register("stranger"))["token"], "acme", {}, 404),  # not a member
        (owner["token"], "acme", {"environment": "prod"}, 400),
        ("cvsm_not_a_real_token", "acme", {}, 401),
    ]
    for token, team, params, status in refusals:
        resp, _ = await open_stream(client, team, token, **params)
        assert resp.status == status, (team, params)
        assert "error" in await resp.json()


async def test_revoking_the_token_ends_the_stream(api, client, owner, team_id) -> None:
    created = await api.api_token(owner)
    resp, stream = await open_stream(client, team_id, created["token"])
    await stream.expect("snapshot")
    started = time.monotonic()
    revoked = await client.delete(f"/api/v1/tokens/{created['api_token']['id']}",
                                  headers=api.auth(owner["token"]))
    assert revoked.status == 200
    assert await stream.expect("end", 2.0) == {"status": 401}
    assert await stream.next(2.0) == ("eof", None)
    assert time.monotonic() - started < 2.0


async def test_leaving_the_team_ends_the_stream(api, client, owner, team_id) -> None:
    member = await api.register("member_one")
    await api.add_member(owner, team_id, member, "Viewer")
    resp, stream = await open_stream(client, team_id, member["token"])
    await stream.expect("snapshot")
    removed = await client.delete(f"/api/v1/teams/{team_id}/members/{member['id']}",
                                  headers=api.auth(owner["token"]))
    assert removed.status == 200
    await api.secret(owner, team_id, "AFTER", VALUE)  # the next change finds them gone
    assert await stream.expect("end", 2.0) == {"status": 404}
    assert VALUE.encode() not in stream.raw


async def test_the_stream_counts_once_against_the_rate_limit(start_client, make_settings,
                                                             monkeypatch) -> None:
    monkeypatch.setattr(changes, "HEARTBEAT_SECONDS", 0.1)
    client = await start_client(make_settings(ratelimit_api="3/60"))
    api = Api(client)
    owner = await api.register("limited")  # /auth: not the API limit
    await api.team(owner, "acme")  # 1
    resp, stream = await open_stream(client, "acme", owner["token"])  # 2
    await stream.expect("snapshot")
    for _ in range(5):  # heartbeats and their credential checks cost nothing
        assert (await stream.next())[0] == "comment"
    me = await client.get("/api/v1/me", headers=api.auth(owner["token"]))  # 3
    assert me.status == 200
    over = await client.get("/api/v1/me", headers=api.auth(owner["token"]))
    assert over.status == 429
    resp.close()


async def test_a_change_through_one_process_reaches_a_stream_on_another_and_shutdown_ends_it(
        database_url, tmp_path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    with contextlib.ExitStack() as processes:
        one = processes.enter_context(served(database_url, tmp_path / "one"))
        stop_two = contextlib.ExitStack()
        two = stop_two.enter_context(served(database_url, tmp_path / "two"))
        processes.push(stop_two)
        async with aiohttp.ClientSession() as session:
            async def call(method: str, path: str, token: str | None = None, **body: Any) -> dict:
                async with session.request(method, f"{one.url}/api/v1{path}", json=body,
                                           headers=Api.auth(token) if token else {}) as resp:
                    assert resp.status < 300, await resp.text()
                    return await resp.json()

            token = (await call("POST", "/auth/register", email="p@example.com",
                                username="procs", password="correct horse 1", name="P"))["token"]
            await call("POST", "/teams", token, name="Team", slug="acme")
            resp = await session.get(f"{two.url}/api/v1/teams/acme/secrets/changes",
                                     headers=Api.auth(token))
            stream = Stream(resp)
            assert await stream.expect("snapshot") == {"secrets": {}}
            started = time.monotonic()
            await call("POST", "/teams/acme/secrets", token, name="KEY", value=VALUE,
                       environment="production")
            assert await stream.expect("change", 1.0) == {
                "name": "KEY", "environment": "production", "version": 1}
            assert time.monotonic() - started < 1.0

            started = time.monotonic()
            stop_two.close()  # SIGTERM, and wait for the process to exit
            assert time.monotonic() - started < 20  # not the minute a stuck stream would hold it
            assert await stream.expect("end") == {"reason": "shutdown"}
            assert await stream.next() == ("eof", None)
            assert VALUE.encode() not in stream.raw
            # the served processes run on uvloop (`eventloop.py`): the stream and the drain too
            assert "event loop: uvloop" in one.output() and "event loop: uvloop" in two.output()
