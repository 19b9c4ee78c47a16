"""The change stream route: `GET /teams/:team/secrets/changes`, server-sent events over
`changes` (names, environments and versions; never a value).

The stream counts once against the API rate limit, when it connects (the middleware), and is
audited once (`watch`). While idle it holds no database connection: the process's `ChangeHub`
wakes it on a commit that touches its team, on a revocation anywhere, and every
`HEARTBEAT_SECONDS`; each time it reads the versions (one pooled connection, one query) and
sends what changed. Its credential is checked again on every heartbeat and whenever the
revocation epoch moved, so a revoked token or a logged-out session ends the stream. Server
shutdown ends every stream with an `end` event.
"""

from __future__ import annotations

import json

from aiohttp import web

from ..secrets import changes
from .. import db
from ..core.actor import Actor
from ..core.errors import DomainError, ServiceUnavailable
from .schema import ENVIRONMENT, query
from .middleware import authenticate_credential, bearer
from .request import actor, connection, query_text, team_of
from .state import CHANGE_HUB, CREDENTIALS

EVENT_STREAM = "text/event-stream"


def _event(name: str, data: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _snapshot(state: changes.State) -> dict:
    return {"secrets": {name: {"environment": env, "version": version}
                        for name, (env, version) in sorted(state.items())}}


async def secret_changes(request: web.Request) -> web.StreamResponse:
    environment = query_text(request, "environment")
    who = actor(request)
    hub = request.app[CHANGE_HUB]
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
    try:
        sub = await hub.subscribe(team_id, environment)
    except (ConnectionError, TimeoutError, OSError):
        raise ServiceUnavailable() from None
    try:
        async with connection(request) as conn:
            state = await changes.open_stream(conn, who, team_id, environment)
        # The epoch the credential is known good at: a cached one's, confirmed by the request's
        # rate-limit statement; otherwise none yet, so the first wake checks it before any change
        # goes out (a revocation between the credential check and the snapshot is not missed).
        confirmed = who.epoch if who.epoch is not None else -1
        response = web.StreamResponse(headers={
            "Content-Type": EVENT_STREAM, "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # a proxy passes each event on at once
        })
        await response.prepare(request)
        await response.write(_event("snapshot", _snapshot(state)))
        await _follow(request, response, sub, who, state, confirmed)
        return response
    finally:
        hub.unsubscribe(sub)


async def _follow(request: web.Request, response: web.StreamResponse,
                  sub: changes.Subscription, who: Actor, state: changes.State,
                  confirmed: int) -> None:
    """Send changes until the client leaves, the credential or membership ends, or shutdown."""
    app = request.app
    credential = bearer(request)
    client = Actor.anonymous(who.ip, who.user_agent)
    try:
        while True:
            woken = await sub.wait(changes.HEARTBEAT_SECONDS)
            if sub.ended:
                await response.write(_event("end", {"reason": "shutdown"}))
                return
            async with connection(request) as conn:
                now, epoch = await changes.current(conn, who, sub.team_id, sub.environment)
            if epoch != confirmed or not woken:
                # A revocation somewhere, or a heartbeat: is the credential still good? (A
                # newer epoch empties the process's cache, so this asks the database.)
                app[CREDENTIALS].stale(epoch)
                await authenticate_credential(app, credential, client)
                confirmed = epoch
            for event in changes.differences(state, now):
                await response.write(_event("change", event))
            state = now
            if not woken:
                await response.write(b": heartbeat\n\n")
    except DomainError as exc:  # the credential or the membership ended
        await _end(response, exc.status)
    except db.UNAVAILABLE:
        await _end(response, ServiceUnavailable.status)
    except ConnectionError:
        pass  # the client left


async def _end(response: web.StreamResponse, status: int) -> None:
    try:
        await response.write(_event("end", {"status": status}))
    except ConnectionError:
        pass


def _event_schema(name: str, *shapes: dict) -> dict:
    """One event of the stream as Server-Sent Events define it: its name and its data, a JSON
    object of one of `shapes`."""
    data = shapes[0] if len(shapes) == 1 else {"oneOf": list(shapes)}
    return {"type": "object", "required": ["event", "data"],
            "properties": {"event": {"const": name},
                           "data": {"type": "string", "contentMediaType": "application/json",
                                    "contentSchema": data}}}


def _closed(required: list[str], **properties: dict) -> dict:
    return {"type": "object", "required": required, "properties": properties,
            "additionalProperties": False}


_NAME = {"type": "string"}
_VERSION = {"type": "integer", "minimum": 1}
# Each event of the stream (`itemSchema`, as OpenAPI 3.2 and Schemathesis read an event stream):
# the document's `schema` stays the stream as text, as the 0.4 document says.
EVENT = {"oneOf": [
    _event_schema("snapshot", _closed(["secrets"], secrets={
        "type": "object", "additionalProperties": _closed(
            ["environment", "version"], environment=ENVIRONMENT, version=_VERSION)})),
    _event_schema("change",
                  _closed(["name", "environment", "version"], name=_NAME,
                          environment=ENVIRONMENT, version=_VERSION),
                  _closed(["name", "deleted"], name=_NAME, deleted={"const": True})),
    _event_schema("end", _closed(["reason"], reason={"const": "shutdown"}),
                  _closed(["status"], status={"type": "integer"})),
]}

OPENAPI = {
    "secret_changes": {
        "summary": "A stream of version changes (server-sent events; never a value).",
        "description": (
            "`text/event-stream`. On connect an event `snapshot`, `{\"secrets\": {NAME: "
            "{\"environment\", \"version\"}}}`: the names the caller can read (a scoped token: "
            "its environments) with their current version and, without `environment`, the "
            "environment whose value an export takes (production, then staging, then "
            "development). Then an event `change` within a second of each commit that gives a "
            "name a new current version (an update, a rollback, a rotation, a move), "
            "`{\"name\", \"environment\", \"version\"}`, or `{\"name\", \"deleted\": true}` when "
            "the name is gone; a comment line every 15 s. An event `end` comes before the "
            "server closes the stream: at shutdown, or with the `status` of the refusal once the "
            "credential is revoked or the caller has left the team. Counted once against the "
            "API rate limit, audited once as `watch`."),
        "tags": ["secrets"],
        "query": [query("environment", ENVIRONMENT)],
        "responses": {200: ("The events.", {"content": {EVENT_STREAM: {
            "schema": {"type": "string"}, "itemSchema": EVENT}}})},
    },
}
