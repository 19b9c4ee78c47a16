"""The change stream: which secrets of a team (and environment) have a new current version, as
the writes commit, for watchers such as `cvsm run --watch`. Names, environments and version
numbers only, never a value.

- Every write that changes a secret's current version (or deletes or moves it) notifies
  `cvsm_secret_changes` from its own transaction (a trigger, migration 0016), whoever writes:
  the API, the dashboard, bulk and import, rollback, rotation. A revocation notifies
  `cvsm_credential_epoch`.
- `ChangeHub`: one LISTEN connection per server process, opened at the first stream (not a
  pooled one), fans each notification out to the streams of that team in the process. A
  stream holds no database connection while it waits; woken, it takes a pooled one for one
  query (`current`) and compares.
- `open_stream`: what a new stream starts from, with the same role and scope rules as the
  export (a scoped token sees its environments only), audited once per connection as `watch`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field

import aiopg

from ..core.actor import Actor
from ..core.environments import order_sql
from ..accounts import credentials
from ..audit import log as audit
from ..teams import roles
from .inputs import ENVIRONMENTS, check_environment
from .. import db

log = logging.getLogger("cvsm.changes")

CHANNEL = "cvsm_secret_changes"
EPOCH_CHANNEL = "cvsm_credential_epoch"
HEARTBEAT_SECONDS = 15.0  # a comment line on an idle stream; the credential is checked then too
RECONNECT_SECONDS = 1.0  # the LISTEN connection, after a failure
LISTEN_TIMEOUT = 10.0  # a stream's wait for the LISTEN connection at its start

# name -> (environment, version): what a watcher sees of the team.
State = dict[str, tuple[str, int]]

_ENV_ORDER = order_sql()
_STATE = f"""
SELECT name, environment, version, {credentials.EPOCH_SQL} AS epoch FROM secrets
WHERE team_id = %(team_id)s AND deleted_at IS NULL
  AND (%(environment)s::text IS NULL OR environment = %(environment)s)
  AND (%(environments)s::text[] IS NULL OR environment = ANY(%(environments)s::text[]))
ORDER BY name, {_ENV_ORDER}
"""
_EPOCH = f"SELECT {credentials.EPOCH_SQL} AS epoch"


async def _state(cur: db.Cursor, actor: Actor, team_id: uuid.UUID,
                 environment: str | None) -> tuple[State, int]:
    rows = await db.fetchall(cur, _STATE, {"team_id": team_id, "environment": environment,
                                           "environments": actor.environments})
    state: State = {}
    for row in rows:  # the first per name is the highest-precedence environment, as in export
        state.setdefault(row["name"], (row["environment"], row["version"]))
    if rows:
        return state, rows[0]["epoch"]
    return state, (await db.fetchone(cur, _EPOCH))["epoch"]


async def open_stream(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                      environment: str | None) -> State:
    """The versions a new stream starts from, audited as `watch` (Viewer or above; a scoped
    token sees its environments only, as in the export)."""
    if environment is not None:
        check_environment(environment)
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.VIEWER)
        state, _ = await _state(cur, actor, team_id, environment)
        exported_from = {env for env, _ in state.values()}
        await audit.record(cur, actor, "watch", "secret", team_id=team_id,
                           metadata={"environment": environment or "all",
                                     "environments": [e for e in ENVIRONMENTS
                                                      if e in exported_from],
                                     "count": len(state)})
    return state


async def current(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                  environment: str | None) -> tuple[State, int]:
    """The versions now and the credential epoch; 404/403 once the actor left the team."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, roles.VIEWER)
        return await _state(cur, actor, team_id, environment)


def differences(before: State, after: State) -> list[dict]:
    """The `change` events from `before` to `after`, by name."""
    events: list[dict] = []
    for name in sorted(before.keys() | after.keys()):
        if name not in after:
            events.append({"name": name, "deleted": True})
        elif before.get(name) != after[name]:
            environment, version = after[name]
            events.append({"name": name, "environment": environment, "version": version})
    return events


@dataclass(eq=False)
class Subscription:
    """One stream's place in the hub: woken on a change of its team (and environment) or a
    revocation anywhere, ended on shutdown."""

    team_id: uuid.UUID
    environment: str | None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    ended: bool = False

    async def wait(self, timeout: float) -> bool:
        """Until woken (True) or `timeout` passed (False)."""
        try:
            await asyncio.wait_for(self.wake.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        self.wake.clear()
        return True


class ChangeHub:
    """The process's LISTEN connection and the streams it wakes."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.subscriptions: set[Subscription] = set()
        self._listening = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closed = False

    async def subscribe(self, team_id: uuid.UUID, environment: str | None) -> Subscription:
        """A subscription, once the process listens (so no commit after this is missed)."""
        if self._closed:
            raise ConnectionError("the server is shutting down")
        if self._task is None:
            self._task = asyncio.create_task(self._listen())
        sub = Subscription(team_id, environment)
        self.subscriptions.add(sub)
        try:
            await asyncio.wait_for(self._listening.wait(), LISTEN_TIMEOUT)
        except BaseException:
            self.subscriptions.discard(sub)
            raise
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self.subscriptions.discard(sub)

    def _wake(self, matches) -> None:  # type: ignore[no-untyped-def]
        for sub in self.subscriptions:
            if matches(sub):
                sub.wake.set()

    def _dispatch(self, channel: str, payload: str) -> None:
        if channel == EPOCH_CHANNEL:
            self._wake(lambda sub: True)
            return
        team, _, environment = payload.partition(" ")
        try:
            team_id = uuid.UUID(team)
        except ValueError:
            return
        self._wake(lambda sub: sub.team_id == team_id
                   and (sub.environment is None or sub.environment == environment))

    async def _listen(self) -> None:
        outage = db.OutageLog(log, "change stream listener")
        while not self._closed:
            conn = None
            try:
                conn = await aiopg.connect(db.with_keepalives(self.url))
                async with conn.cursor() as cur:
                    await cur.execute(f"LISTEN {CHANNEL}")
                    await cur.execute(f"LISTEN {EPOCH_CHANNEL}")
                outage.ok()
                self._listening.set()
                self._wake(lambda sub: True)  # anything missed while not listening
                while True:
                    note = await conn.notifies.get()
                    self._dispatch(note.channel, note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._listening.clear()
                outage.failed(exc)
                await asyncio.sleep(RECONNECT_SECONDS)
            finally:
                if conn is not None:
                    conn.close()

    async def close(self) -> None:
        """End every stream and stop listening (server shutdown)."""
        self._closed = True
        for sub in self.subscriptions:
            sub.ended = True
            sub.wake.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
