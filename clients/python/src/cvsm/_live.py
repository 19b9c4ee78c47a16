"""Live caches (``live=True``, ``CVSM_LIVE=1``): the part of the change stream that does no I/O.

A live client keeps one connection to the team's change stream,
``GET {base_url}/teams/{team}/secrets/changes?environment={env}``: server-sent events of names
and versions, never values. It is opened at the client's first read and shared by every name
the client reads. Its ``snapshot`` (on each connect) and each ``change`` tell the cache which
values stopped being current (:meth:`ValueCache.snapshot`, :meth:`ValueCache.change`); the next
read of such a name fetches it. So an update is seen as soon as its event arrives, while a name
that does not change costs what it costs without ``live`` (one request per ``cache_ttl``).

While the stream is down the cache works as without ``live`` (``cache_ttl``, stale-if-error),
and the client reconnects after a jittered, growing pause (:func:`reconnect_delay`), sending
``Last-Event-ID`` when an event carried an ``id``. The snapshot a reconnection opens with is
compared with the versions the cache holds, so a change missed while the stream was down is
caught then. An ``end`` event that carries a refusal (401, 403: the credential is revoked;
404: the team is gone) empties the cache, as a refused read does.

:class:`cvsm.Client` runs the stream on one daemon thread per client, :class:`cvsm.AsyncClient`
as one task on its event loop; both stop it when the client is closed.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from typing import Any

from . import _rules as rules
from ._cache import ValueCache

logger = logging.getLogger("cvsm")

READ_TIMEOUT = float(rules.LIVE_READ_TIMEOUT_SECONDS)
"""Seconds without a byte after which the stream counts as lost (the server sends a comment
every 15 s while idle)."""
MAX_BACKOFF = float(rules.LIVE_MAX_BACKOFF_SECONDS)
REFUSED_BACKOFF = float(rules.LIVE_REFUSED_BACKOFF_SECONDS)
"""The pause after the stream was refused (401, 403, 404): a revoked token is not tried again
every few seconds, which would also lock its prefix."""
_REFUSED = frozenset(rules.LIVE_REFUSED_STATUSES)


def reconnect_delay(attempt: int) -> float:
    """Return the pause before reconnection ``attempt`` (0 for the first): 0.5 s doubling up
    to 30 s, each taken at random between half and all of it."""
    return random.uniform(0.5, 1.0) * min(MAX_BACKOFF, rules.LIVE_BACKOFF_BASE_MS / 1000 * 2**attempt)


class StreamRefused(Exception):
    """The change stream answered with a status other than 200."""

    def __init__(self, status: int, retry_after: int | None = None) -> None:
        super().__init__(f"the change stream answered HTTP {status}")
        self.status = status
        self.retry_after = retry_after


class StreamEnded(Exception):
    """The server ended the stream with an ``end`` event."""


class SseDecoder:
    """Decode the lines of a ``text/event-stream`` into ``(event, data)`` pairs.

    Comments (``:``) are skipped; ``id`` is remembered in :attr:`last_id`, for ``Last-Event-ID``.
    """

    def __init__(self) -> None:
        self.last_id: str | None = None
        self._event = ""
        self._data: list[str] = []

    def line(self, line: str) -> tuple[str, str] | None:
        """Take one line (without its line ending); return an event when a blank line ends one."""
        if line == "":
            event, data = self._event or "message", self._data
            self._event, self._data = "", []
            return (event, "\n".join(data)) if data else None
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        elif field == "id" and "\0" not in value:
            self.last_id = value
        return None


class LiveState:
    """What one client's stream knows: whether it is up, the last event id, the pause to come.

    ``forget`` empties the client's cache and team key (an ``end`` that carries a refusal).
    """

    def __init__(self, cache: ValueCache, forget: Callable[[], None], describe: str) -> None:
        self.cache = cache
        self.forget = forget
        self.describe = describe  # "team T, environment E": what log lines name, never a token
        self.last_event_id: str | None = None
        self.connected = False
        self.connections = 0  # snapshots received: one per connection that got that far
        self._attempt = 0
        self._outage_logged = False

    def event(self, name: str, data: str) -> None:
        """Apply one event; raise :class:`StreamEnded` on ``end``."""
        try:
            payload: Any = json.loads(data)
        except ValueError:
            return
        if not isinstance(payload, dict):
            return
        if name == "snapshot":
            secrets = payload.get("secrets")
            versions = {
                key: item["version"]
                for key, item in (secrets.items() if isinstance(secrets, dict) else ())
                if isinstance(item, dict) and isinstance(item.get("version"), int)
            }
            dropped = self.cache.snapshot(versions)
            self.connections += 1
            self._attempt = 0
            if self._outage_logged:
                logger.info(
                    "live cache of %s: the change stream is back (%d cached value(s) changed meanwhile)",
                    self.describe, len(dropped),
                )
            self._outage_logged = False
            self.connected = True
        elif name == "change":
            secret = payload.get("name")
            if not isinstance(secret, str):
                return
            version = payload.get("version")
            if payload.get("deleted") is True:
                self.cache.change(secret, None)
            elif isinstance(version, int) and not isinstance(version, bool):
                self.cache.change(secret, version)
        elif name == "end":
            status = payload.get("status")
            if status in _REFUSED:
                self.forget()
            raise StreamEnded(f"the server ended the change stream ({payload.get('reason') or status})")

    def lost(self, reason: str) -> float:
        """Note that the stream is down (``reason``: no token, no value); return the pause before
        the next attempt."""
        self.connected = False
        if not self._outage_logged:
            logger.warning(
                "live cache of %s: the change stream is down (%s); values are cached for cache_ttl "
                "until it is back; reconnecting",
                self.describe, reason,
            )
            self._outage_logged = True
        delay = reconnect_delay(self._attempt)
        self._attempt += 1
        return delay

    def refused(self, refusal: StreamRefused) -> float:
        """Note that the stream was refused; return the pause before the next attempt."""
        delay = self.lost(str(refusal))
        if refusal.status in (401, 403):
            self.forget()  # as a refused read does
        if refusal.status in _REFUSED:
            delay = max(delay, REFUSED_BACKOFF)
        if refusal.retry_after is not None:
            delay = max(delay, float(refusal.retry_after))
        return delay
