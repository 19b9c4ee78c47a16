"""Webhooks: a real aiohttp receiver on a local port gets the events, signed (checked here with
an independent HMAC), retried after 500s and after it was down, never with a secret value; the
SSRF rules refuse each private range; the signing secret is shown once."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from cvsm_server import db
from cvsm_server.outbound import webhooks as webhook_sender
from cvsm_server.webhooks import service as webhooks
from cvsm_server.crypto.sealing import Keyring
from conftest import MASTER_KEY, Api, query, server_url

DOCS = Path(__file__).resolve().parents[2] / "docs" / "server.md"  # its "Webhooks" section
ALL_EVENTS = list(webhooks.EVENTS)


class Receiver:
    """An HTTP endpoint on 127.0.0.1 that records every request and answers with the next of
    `statuses` (200 when none are left)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self.arrived = asyncio.Event()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append({"path": request.path, "headers": dict(request.headers),
                              "body": await request.read(), "host": request.host})
        self.arrived.set()
        status = self.statuses.pop(0) if self.statuses else 200
        if 300 <= status < 400:
            raise web.HTTPFound(location="/elsewhere")
        return web.Response(status=status, text="x" * 200_000 if status == 200 else "no")

    async def start(self, port: int = 0) -> Receiver:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def bodies(self) -> list[dict]:
        return [json.loads(r["body"]) for r in self.requests]


@pytest.fixture
async def receiver() -> Any:
    box = await Receiver().start()
    yield box
    await box.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def independent_verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The receiver's check, written from the documented scheme, not from the server's code."""
    header = headers["Cvsm-Signature"]
    match = re.fullmatch(r"t=(\d+),v1=([0-9a-f]{64})", header)
    assert match, header
    expected = hmac.new(secret.encode("utf-8"), match.group(1).encode() + b"." + body,
                        hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, match.group(2))


async def wait_until(check: Any, what: str, timeout: float = 30.0) -> Any:
    """Poll `check` (async) until it gives something truthy; fail naming `what` otherwise."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = await check()
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.05)


async def deliveries(database_url: str, webhook_id: str) -> list[dict]:
    return await query(database_url, "SELECT * FROM webhook_deliveries WHERE webhook_id = %s "
                                     "ORDER BY created_at", (webhook_id,))


async def make_due(database_url: str, **changes: Any) -> None:
    """Move every pending delivery's next attempt to now (and apply `changes`), then wake the
    sender as a commit would."""
    sets = "".join(f", {k} = %s" for k in changes)
    await query(database_url, f"UPDATE webhook_deliveries SET next_attempt_at = now(){sets} "
                              "WHERE status = 'pending'", tuple(changes.values()))
    await query(database_url, "NOTIFY cvsm_webhooks")


@pytest.fixture
async def hook_client(database_url: str, start_client: Any, make_settings: Any) -> Any:
    """The app with its background jobs on and private webhook targets allowed (the receiver
    listens on 127.0.0.1)."""
    return await start_client(make_settings(background_jobs="on", webhook_allow_private="1",
                                            webhook_poll_seconds="1", mail_poll_seconds="1"))


@pytest.fixture
def hook_api(hook_client: Any) -> Api:
    return Api(hook_client)


async def add_webhook(api: Api, user: dict, team: str, url: str,
                      events: list[str] | None = None) -> dict:
    resp = await api.client.post(f"/api/v1/teams/{team}/webhooks", headers=api.auth(user["token"]),
                                 json={"url": url, "events": events or ALL_EVENTS,
                                       "description": "alerts"})
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def test_events_arrive_signed_with_metadata_and_never_a_value(hook_api: Api,
                                                                    database_url: str,
                                                                    receiver: Receiver) -> None:
    api = hook_api
    owner = await api.register("hook_owner")
    team = await api.team(owner, "hooked")
    created = await add_webhook(api, owner, team, receiver.url, [
        "secret.created", "secret.updated", "secret.deleted", "share.viewed", "member.added",
        "member.role_changed"])
    secret = created["secret"]
    assert secret.startswith("whsec_") and len(secret) > 30
    auth = api.auth(owner["token"])
    values = ["first-VALUE-7f3a9c", "second-VALUE-b81d2e"]

    secret_id = await api.secret(owner, team, "DATABASE_URL", values[0])
    resp = await api.client.put(f"/api/v1/teams/{team}/secrets/{secret_id}", headers=auth,
                                json={"value": values[1]})
    assert resp.status == 200
    resp = await api.client.post(f"/api/v1/teams/{team}/secrets/{secret_id}/shares",
                                 headers=auth, json={"max_views": 2})
    assert resp.status == 201
    share_token = (await resp.json())["url"].rsplit("/", 1)[1]
    resp = await api.client.get(f"/api/v1/public/share/{share_token}")
    assert resp.status == 200 and (await resp.json())["value"] == values[1]
    member = await api.register("hook_member")
    await api.add_member(owner, team, member, "Member")
    resp = await api.client.patch(f"/api/v1/teams/{team}/members/{member['id']}", headers=auth,
                                  json={"role": "Viewer"})
    assert resp.status == 200
    resp = await api.client.delete(f"/api/v1/teams/{team}/secrets/{secret_id}", headers=auth)
    assert resp.status == 200

    expected = ["secret.created", "secret.updated", "share.viewed", "member.added",
                "member.role_changed", "secret.deleted"]
    await wait_until(lambda: _ready(len(receiver.requests) >= len(expected)), "six deliveries")
    bodies = {b["type"]: b for b in receiver.bodies()}
    assert sorted(bodies) == sorted(expected)  # share.created was not asked for
    for request in receiver.requests:
        assert independent_verify(secret, request["headers"], request["body"])
        body = json.loads(request["body"])
        assert request["headers"]["Cvsm-Event-Id"] == body["id"]
        assert request["headers"]["Content-Type"] == "application/json"
        assert list(body) == ["id", "type", "created_at", "team", "actor", "data"]
        assert body["team"] == {"id": team, "slug": "hooked"}
        everything = request["body"].decode() + json.dumps(request["headers"])
        for value in values:
            assert value not in everything
        assert secret not in everything
    owner_actor = {"id": owner["id"], "email": owner["email"]}
    assert bodies["secret.created"]["actor"] == owner_actor
    assert bodies["secret.created"]["data"] == {"object": "secret", "id": secret_id,
                                                "name": "DATABASE_URL",
                                                "environment": "production"}
    assert bodies["secret.updated"]["data"]["fields"] == ["value"]
    assert bodies["secret.deleted"]["data"]["name"] == "DATABASE_URL"
    assert bodies["share.viewed"]["actor"] is None
    assert bodies["share.viewed"]["data"]["secret_id"] == secret_id
    assert bodies["share.viewed"]["data"]["view_count"] == 1
    assert bodies["member.added"]["data"] == {"object": "member", "id": member["id"],
                                              "email": member["email"], "role": "Member"}
    assert bodies["member.role_changed"]["data"]["to"] == "Viewer"

    # The delivery log: statuses and codes, no body.
    webhook_id = created["webhook"]["id"]
    resp = await api.client.get(f"/api/v1/teams/{team}/webhooks/{webhook_id}/deliveries",
                                headers=auth)
    assert resp.status == 200
    log = (await resp.json())["deliveries"]
    assert sorted(d["event"] for d in log) == sorted(expected)
    assert {(d["status"], d["attempts"], d["last_status_code"], d["last_error"]) for d in log} \
        == {("delivered", 1, 200, None)}
    text = json.dumps(log)
    assert "payload" not in text and "DATABASE_URL" not in text and secret not in text


async def _ready(value: Any) -> Any:
    return value


async def test_a_500_is_retried_until_the_receiver_accepts(hook_api: Api, database_url: str,
                                                           receiver: Receiver) -> None:
    api = hook_api
    owner = await api.register("retry_owner")
    team = await api.team(owner)
    created = await add_webhook(api, owner, team, receiver.url, ["secret.created"])
    webhook_id = created["webhook"]["id"]
    receiver.statuses = [500, 503]
    await api.secret(owner, team, "API_KEY", "v-1")

    async def attempts(n: int, code: int, status: str = "pending") -> Any:
        rows = await deliveries(database_url, webhook_id)
        return rows if rows and rows[0]["attempts"] == n and rows[0]["status"] == status \
            and rows[0]["last_status_code"] == code else None

    rows = await wait_until(lambda: attempts(1, 500), "the first attempt")
    assert rows[0]["last_error"] == "HTTP 500"
    assert rows[0]["next_attempt_at"] > rows[0]["last_attempt_at"]  # backed off, not failed
    await make_due(database_url)
    rows = await wait_until(lambda: attempts(2, 503), "the second attempt")
    assert rows[0]["last_error"] == "HTTP 503"
    await make_due(database_url)
    rows = await wait_until(lambda: attempts(3, 200, "delivered"), "the third attempt")
    assert rows[0]["last_error"] is None
    assert len(receiver.requests) == 3
    ids = {r["headers"]["Cvsm-Event-Id"] for r in receiver.requests}
    assert ids == {str(rows[0]["event_id"])}  # one event, retried
    for request in receiver.requests:  # each attempt signed afresh, each valid
        assert independent_verify(created["secret"], request["headers"], request["body"])


async def test_a_receiver_that_was_down_gets_the_event_when_back(hook_api: Api,
                                                                 database_url: str) -> None:
    api = hook_api
    owner = await api.register("down_owner")
    team = await api.team(owner)
    port = free_port()
    created = await add_webhook(api, owner, team, f"http://127.0.0.1:{port}/hook",
                                ["secret.created"])
    webhook_id = created["webhook"]["id"]
    await api.secret(owner, team, "API_KEY", "v-1")

    async def failed_once() -> Any:
        rows = await deliveries(database_url, webhook_id)
        return rows if rows and rows[0]["last_error"] else None

    rows = await wait_until(failed_once, "a refused connection")
    assert rows[0]["last_error"].startswith("connection failed")
    assert rows[0]["last_status_code"] is None and rows[0]["status"] == "pending"
    box = await Receiver().start(port)
    try:
        await make_due(database_url)

        async def delivered() -> Any:
            rows = await deliveries(database_url, webhook_id)
            return rows if rows[0]["status"] == "delivered" else None

        rows = await wait_until(delivered, "delivery after the receiver came back")
        assert rows[0]["attempts"] == 2
        assert [b["type"] for b in box.bodies()] == ["secret.created"]
        assert independent_verify(created["secret"], box.requests[0]["headers"],
                                  box.requests[0]["body"])
    finally:
        await box.stop()


async def test_a_delivery_fails_after_its_last_attempt(hook_api: Api, database_url: str,
                                                       receiver: Receiver) -> None:
    api = hook_api
    owner = await api.register("fail_owner")
    team = await api.team(owner)
    created = await add_webhook(api, owner, team, receiver.url, ["secret.created"])
    webhook_id = created["webhook"]["id"]
    receiver.statuses = [500] * 3
    await api.secret(owner, team, "API_KEY", "v-1")

    async def state(attempts: int, status: str) -> Any:
        rows = await deliveries(database_url, webhook_id)
        return rows if rows and rows[0]["attempts"] == attempts and rows[0]["status"] == status \
            and rows[0]["last_status_code"] else None

    await wait_until(lambda: state(1, "pending"), "the first attempt")
    await make_due(database_url, attempts=webhook_sender.MAX_ATTEMPTS - 1)
    rows = await wait_until(lambda: state(webhook_sender.MAX_ATTEMPTS, "failed"), "giving up")
    assert rows[0]["failed_at"] is not None and rows[0]["last_status_code"] == 500
    resp = await api.client.get(f"/api/v1/teams/{team}/webhooks/{webhook_id}/deliveries",
                                headers=api.auth(owner["token"]))
    [entry] = (await resp.json())["deliveries"]
    assert entry["status"] == "failed" and entry["next_attempt_at"] is None
    # A failed delivery is not tried again.
    await make_due(database_url)
    await webhook_sender.deliver_due(*(await _sender_args(database_url)), allow_private=True)
    assert len(receiver.requests) == 2


def test_backoff_spans_about_a_day() -> None:
    total = sum(webhook_sender.retry_delay(n) for n in range(1, webhook_sender.MAX_ATTEMPTS))
    assert 20 * 3600 <= total <= 30 * 3600
    assert webhook_sender.retry_delay(1) < webhook_sender.retry_delay(2) < webhook_sender.retry_delay(3)


async def test_the_test_event_is_a_signed_ping(hook_api: Api, receiver: Receiver) -> None:
    api = hook_api
    owner = await api.register("ping_owner")
    team = await api.team(owner, "pinged")
    created = await add_webhook(api, owner, team, receiver.url, ["share.revoked"])
    webhook_id = created["webhook"]["id"]
    resp = await api.client.post(f"/api/v1/teams/{team}/webhooks/{webhook_id}/test",
                                 headers=api.auth(owner["token"]))
    assert resp.status == 202
    delivery = (await resp.json())["delivery"]
    assert delivery["event"] == "ping" and delivery["status"] == "pending"
    await receiver.arrived.wait()
    [body] = receiver.bodies()
    assert body["type"] == "ping" and body["id"] == delivery["event_id"]
    assert body["data"] == {"object": "webhook", "id": webhook_id}
    assert body["team"]["slug"] == "pinged"
    assert independent_verify(created["secret"], receiver.requests[0]["headers"],
                              receiver.requests[0]["body"])


async def test_the_host_header_is_the_urls_name_while_the_address_is_pinned(
        hook_api: Api, receiver: Receiver) -> None:
    api = hook_api
    owner = await api.register("host_owner")
    team = await api.team(owner)
    created = await add_webhook(api, owner, team, f"http://localhost:{receiver.port}/named",
                                ["secret.created"])
    assert created["webhook"]["url"] == f"http://localhost:{receiver.port}/named"
    await api.secret(owner, team, "API_KEY", "v-1")
    await receiver.arrived.wait()
    assert receiver.requests[0]["host"] == f"localhost:{receiver.port}"
    assert receiver.requests[0]["path"] == "/named"


async def test_the_pinned_resolver_answers_only_the_checked_addresses() -> None:
    resolver = webhook_sender.PinnedResolver("hooks.example", [(socket.AF_INET, "93.184.215.14")])
    [result] = await resolver.resolve("hooks.example", 443, socket.AF_UNSPEC)
    assert result["host"] == "93.184.215.14" and result["hostname"] == "hooks.example"
    assert await resolver.resolve("hooks.example", 443, socket.AF_INET6) == []
    with pytest.raises(OSError):
        await resolver.resolve("other.example", 443)


REFUSED = ["127.0.0.1", "10.1.2.3", "172.16.5.4", "192.168.1.10", "169.254.169.254", "[::1]",
           "[fc00::1]", "[fe80::1]", "[::ffff:127.0.0.1]", "0.0.0.0", "224.0.0.1",
           "[::ffff:10.0.0.1]", "100.64.0.1", "localhost", "127.1", "2130706433"]


@pytest.mark.parametrize("host", REFUSED)
async def test_private_targets_are_refused_at_creation(api: Api, owner: dict, team_id: str,
                                                       host: str) -> None:
    resp = await api.client.post(f"/api/v1/teams/{team_id}/webhooks",
                                 headers=api.auth(owner["token"]),
                                 json={"url": f"http://{host}:8080/hook",
                                       "events": ["secret.created"]})
    assert resp.status == 400, host
    assert (await resp.json())["error"] == webhooks.TARGET_REFUSED


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111",
                                     "93.184.215.14"])
def test_global_addresses_are_allowed(address: str) -> None:
    assert not webhooks.refused_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("url,message", [
    ("ftp://hooks.example/x", webhooks.BAD_URL),
    ("hooks.example/x", webhooks.BAD_URL),
    ("http://user:pw@hooks.example/x", webhooks.URL_CREDENTIALS),
    ("http://hooks.example:99999/x", webhooks.BAD_URL),
    ("http://name.invalid/x", webhooks.UNRESOLVABLE),
])
async def test_malformed_urls_are_refused(api: Api, owner: dict, team_id: str, url: str,
                                          message: str) -> None:
    resp = await api.client.post(f"/api/v1/teams/{team_id}/webhooks",
                                 headers=api.auth(owner["token"]),
                                 json={"url": url, "events": ["secret.created"]})
    assert resp.status == 400
    assert (await resp.json())["error"] == message


@pytest.mark.parametrize("events", [[], ["secret.read"], "secret.created", [1], None])
async def test_event_kinds_are_validated(api: Api, owner: dict, team_id: str,
                                         events: Any) -> None:
    resp = await api.client.post(f"/api/v1/teams/{team_id}/webhooks",
                                 headers=api.auth(owner["token"]),
                                 json={"url": "http://8.8.8.8/hook", "events": events})
    assert resp.status == 400


async def test_the_sender_checks_the_target_again_at_delivery(database_url: str,
                                                              start_client: Any,
                                                              make_settings: Any,
                                                              receiver: Receiver) -> None:
    # Created while private targets were allowed; a sender that does not allow them refuses.
    client = await start_client(make_settings(webhook_allow_private="1"))  # no background jobs
    api = Api(client)
    owner = await api.register("recheck_owner")
    team = await api.team(owner)
    created = await add_webhook(api, owner, team, receiver.url, ["secret.created"])
    await api.secret(owner, team, "API_KEY", "v-1")
    pool, keyring = await _sender_args(database_url)
    assert await webhook_sender.deliver_due(pool, keyring, allow_private=False) == 0
    [row] = await deliveries(database_url, created["webhook"]["id"])
    assert row["last_error"] == "target refused: address not allowed" and row["status"] == "pending"
    assert receiver.requests == []
    await make_due(database_url)
    assert await webhook_sender.deliver_due(pool, keyring, allow_private=True) == 1
    assert len(receiver.requests) == 1


async def test_redirects_are_not_followed(hook_api: Api, database_url: str,
                                          receiver: Receiver) -> None:
    api = hook_api
    owner = await api.register("redirect_owner")
    team = await api.team(owner)
    created = await add_webhook(api, owner, team, receiver.url, ["secret.created"])
    receiver.statuses = [302]
    await api.secret(owner, team, "API_KEY", "v-1")

    async def attempted() -> Any:
        rows = await deliveries(database_url, created["webhook"]["id"])
        return rows if rows and rows[0]["last_status_code"] else None

    [row] = await wait_until(attempted, "the redirected attempt")
    assert row["last_status_code"] == 302 and "redirect not followed" in row["last_error"]
    assert row["status"] == "pending"
    assert [r["path"] for r in receiver.requests] == ["/hook"]  # never /elsewhere


async def test_only_admins_manage_webhooks(api: Api, owner: dict, team_id: str) -> None:
    member, admin, outsider = (await api.register("m_user"), await api.register("a_user"),
                               await api.register("o_user"))
    await api.add_member(owner, team_id, member, "Member")
    await api.add_member(owner, team_id, admin, "Admin")
    base = f"/api/v1/teams/{team_id}/webhooks"
    body = {"url": "http://8.8.8.8/hook", "events": ["secret.created"]}
    resp = await api.client.post(base, headers=api.auth(admin["token"]), json=body)
    assert resp.status == 201
    webhook_id = (await resp.json())["webhook"]["id"]
    calls = [("post", base, body), ("get", base, None), ("delete", f"{base}/{webhook_id}", None),
             ("get", f"{base}/{webhook_id}/deliveries", None),
             ("post", f"{base}/{webhook_id}/test", None)]
    for user, status in ((member, 403), (outsider, 404)):
        for method, path, json_body in calls:
            resp = await getattr(api.client, method)(path, headers=api.auth(user["token"]),
                                                     json=json_body)
            assert resp.status == status, (method, path, user)
    resp = await api.client.get(base, headers=api.auth(admin["token"]))
    assert [w["id"] for w in (await resp.json())["webhooks"]] == [webhook_id]
    resp = await api.client.delete(f"{base}/{webhook_id}", headers=api.auth(admin["token"]))
    assert resp.status == 200
    resp = await api.client.get(f"{base}/{webhook_id}/deliveries",
                                headers=api.auth(admin["token"]))
    assert resp.status == 404


async def test_the_secret_is_shown_once_and_never_listed_logged_or_stored_plain(
        hook_api: Api, database_url: str, receiver: Receiver,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    api = hook_api
    owner = await api.register("once_owner")
    team = await api.team(owner)
    receiver.statuses = [500]
    created = await add_webhook(api, owner, team, receiver.url, ["secret.created"])
    secret = created["secret"]
    webhook_id = created["webhook"]["id"]
    assert "secret" not in created["webhook"]
    await api.secret(owner, team, "API_KEY", "v-1")
    await wait_until(lambda: _ready(receiver.requests), "the first attempt")
    await make_due(database_url)
    await wait_until(lambda: _ready(len(receiver.requests) == 2), "the retry")
    auth = api.auth(owner["token"])
    seen = []
    for path in (f"/api/v1/teams/{team}/webhooks",
                 f"/api/v1/teams/{team}/webhooks/{webhook_id}/deliveries",
                 f"/api/v1/teams/{team}/audit"):
        resp = await api.client.get(path, headers=auth)
        assert resp.status == 200
        seen.append(await resp.text())
    stored = await query(database_url, "SELECT w::text AS row FROM webhooks w")
    stored += await query(database_url, "SELECT d::text AS row FROM webhook_deliveries d")
    stored += await query(database_url, "SELECT a::text AS row FROM audit_logs a")
    assert "webhook_create" in seen[2]
    for text in [*seen, *(r["row"] for r in stored), caplog.text]:
        assert secret not in text
        assert secret.removeprefix("whsec_") not in text
    assert "attempt 1 failed (HTTP 500)" in caplog.text  # the failure was logged, without it


async def test_team_bound_token_events_reach_the_team_and_personal_ones_do_not(
        hook_api: Api, database_url: str, receiver: Receiver) -> None:
    api = hook_api
    owner = await api.register("tok_owner")
    team = await api.team(owner, "tokteam")
    await add_webhook(api, owner, team, receiver.url,
                      ["token.created", "token.revoked", "token.locked"])
    await api.api_token(owner, name="personal")
    bound = await api.api_token(owner, name="bound", team_id=team, allowed_ips=["10.0.0.0/8"])
    for _ in range(5):  # the test client is 127.0.0.1: five refusals lock the token
        resp = await api.client.get("/api/v1/teams", headers=api.auth(bound["token"]))
        assert resp.status == 403
    resp = await api.client.delete(f"/api/v1/tokens/{bound['api_token']['id']}",
                                   headers=api.auth(owner["token"]))
    assert resp.status == 200
    await wait_until(lambda: _ready(len(receiver.requests) >= 3), "three token events")
    bodies = receiver.bodies()
    assert [b["type"] for b in sorted(bodies, key=lambda b: b["created_at"])] \
        == ["token.created", "token.locked", "token.revoked"]
    for body in bodies:
        assert body["data"]["id"] == bound["api_token"]["id"]
        assert body["data"]["token_prefix"] == bound["api_token"]["token_prefix"]
        assert bound["token"] not in json.dumps(body)
    locked = next(b for b in bodies if b["type"] == "token.locked")
    assert locked["actor"] is None and locked["data"]["reason"] == "allowed_ips"


async def test_a_rolled_back_action_sends_nothing(hook_api: Api, database_url: str,
                                                  receiver: Receiver) -> None:
    api = hook_api
    owner = await api.register("rb_owner")
    team = await api.team(owner)
    created = await add_webhook(api, owner, team, receiver.url, ["secret.created"])
    await api.secret(owner, team, "API_KEY", "v-1")
    resp = await api.client.post(f"/api/v1/teams/{team}/secrets",
                                 headers=api.auth(owner["token"]),
                                 json={"name": "API_KEY", "value": "v-2", "environment": "production"})
    assert resp.status == 409  # the duplicate rolls back, its event with it
    rows = await deliveries(database_url, created["webhook"]["id"])
    assert len(rows) == 1


# --- the documented verifiers, against a real delivery --------------------------------------

def _doc_block(language: str) -> str:
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Webhooks\n"):]
    section = section[:section.index("\n## ", 1)]
    match = re.search(rf"```{language}\n(.*?)```", section, re.S)
    assert match, f"no {language} block in {DOCS.name}"
    return match.group(1)


def test_the_documented_verifiers_are_about_ten_lines() -> None:
    for language in ("python", "js"):
        lines = [l for l in _doc_block(language).splitlines() if l.strip()]
        assert len(lines) <= 12, language


async def test_the_documented_verifiers_accept_a_real_delivery_and_refuse_a_forgery(
        hook_api: Api, receiver: Receiver, tmp_path: Path) -> None:
    api = hook_api
    owner = await api.register("doc_owner")
    team = await api.team(owner)
    created = await add_webhook(api, owner, team, receiver.url, ["secret.created"])
    await api.secret(owner, team, "API_KEY", "v-1")
    await receiver.arrived.wait()
    request = receiver.requests[0]
    body, header, secret = request["body"], request["headers"]["Cvsm-Signature"], created["secret"]
    forged = body.replace(b"API_KEY", b"API_KEZ")

    namespace: dict[str, Any] = {}
    exec(compile(_doc_block("python"), str(DOCS), "exec"), namespace)
    verify = namespace["verify"]
    assert verify(body, header, secret) is True
    assert verify(forged, header, secret) is False
    assert verify(body, header, secret + "x") is False
    old = f"t={int(time.time()) - 3600}," + header.split(",", 1)[1]
    assert verify(body, old, secret) is False

    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("node is not installed (CI=true): the Node verifier was not run")
        pytest.skip("node is not installed: the Node verifier was not run")
    (tmp_path / "verify.js").write_text(_doc_block("js"), encoding="utf-8")
    (tmp_path / "body.bin").write_bytes(body)
    (tmp_path / "forged.bin").write_bytes(forged)
    driver = ("const fs = require('fs'); const { verify } = require('./verify.js');"
              "const [file, header, secret] = process.argv.slice(1);"
              "process.stdout.write(String(verify(fs.readFileSync(file), header, secret)));")
    for file, want in (("body.bin", "true"), ("forged.bin", "false")):
        out = subprocess.run([node, "-e", driver, file, header, secret], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60, check=True)
        assert out.stdout == want, (file, out.stderr)


async def _sender_args(database_url: str) -> tuple[Any, Keyring]:
    pool = await db.create_pool(server_url(database_url), maxsize=4)
    _POOLS.append(pool)
    return pool, Keyring(base64.b64decode(MASTER_KEY))


_POOLS: list[Any] = []


@pytest.fixture(autouse=True)
async def _close_pools() -> Any:
    yield
    while _POOLS:
        pool = _POOLS.pop()
        pool.close()
        await pool.wait_closed()


async def test_finished_deliveries_leave_the_log_after_thirty_days(hook_api: Api,
                                                                   database_url: str,
                                                                   receiver: Receiver) -> None:
    api = hook_api
    owner = await api.register("purge_owner")
    team = await api.team(owner)
    created = await add_webhook(api, owner, team, receiver.url, ["secret.created"])
    await api.secret(owner, team, "OLD", "v-1")
    await receiver.arrived.wait()

    async def delivered() -> Any:
        rows = await deliveries(database_url, created["webhook"]["id"])
        return rows if rows and rows[0]["status"] == "delivered" else None

    await wait_until(delivered, "the delivery")
    await query(database_url, "UPDATE webhook_deliveries SET created_at = now() - interval '31 days'")
    await api.secret(owner, team, "NEW", "v-2")  # pending or just delivered: recent, kept
    pool, _ = await _sender_args(database_url)
    assert await webhook_sender.purge_finished(pool) == 1
    rows = await deliveries(database_url, created["webhook"]["id"])
    assert [r["payload"]["data"]["name"] for r in rows] == ["NEW"]
