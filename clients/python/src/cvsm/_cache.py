"""Hold fetched values for ``cache_ttl`` seconds, per environment and name.

A whole ``get_all`` result is kept per environment as one entry, and a per-name lookup reads
it too, so a ``get`` after ``get_all`` makes no request and the export is held in memory once.
Only successes are stored: errors are never cached.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from cachetools import TTLCache

_MAXSIZE = 10_000


def _clock() -> float:
    """Return the cache's time (a seam for tests that must not sleep)."""
    return time.monotonic()


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()
"""What :meth:`ValueCache.get_value` returns on a miss (an empty string is a value)."""


class ValueCache:
    """One client's cache of secret values.

    ``ttl`` 0 disables it. ``lock`` guards every operation: a ``threading.Lock`` makes the cache
    safe across threads (``Client``); the default no-op lock suits ``AsyncClient``, whose cache
    is only touched between awaits and so is safe across the tasks of one event loop.
    """

    def __init__(
        self,
        ttl: int,
        *,
        timer: Callable[[], float] | None = None,
        lock: AbstractContextManager[object] | None = None,
    ) -> None:
        self._enabled = ttl > 0
        self._entries: TTLCache[tuple[str, ...], object] = TTLCache(
            _MAXSIZE, max(ttl, 1), timer=timer or (lambda: _clock())
        )
        self._lock: AbstractContextManager[object] = lock if lock is not None else contextlib.nullcontext()

    def get_value(self, environment: str, name: str) -> str | _Missing:
        """Return the cached value of ``name`` in ``environment``, or ``MISSING``."""
        if not self._enabled:
            return MISSING
        with self._lock:
            values = self._entries.get(("all", environment))
            value = values.get(name, MISSING) if isinstance(values, dict) else MISSING
            if value is MISSING:
                value = self._entries.get(("value", environment, name), MISSING)
        return value if isinstance(value, str) else MISSING

    def put_value(self, environment: str, name: str, value: str) -> None:
        """Store one value for the TTL."""
        if self._enabled:
            with self._lock:
                self._entries[("value", environment, name)] = value

    def get_all(self, environment: str) -> dict[str, str] | None:
        """Return a copy of the cached whole-environment result, or ``None``."""
        if not self._enabled:
            return None
        with self._lock:
            values = self._entries.get(("all", environment))
        return dict(values) if isinstance(values, dict) else None

    def put_all(self, environment: str, values: dict[str, str]) -> None:
        """Store a whole-environment result for the TTL; it answers per-name lookups too.

        The cache keeps ``values`` itself, not a copy: the caller must not change it afterwards.
        """
        if self._enabled:
            with self._lock:
                self._entries[("all", environment)] = values

    def clear(self) -> None:
        """Empty the cache."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            self._entries.expire()
            return len(self._entries)

    def __repr__(self) -> str:
        # A count only: a cached value must never show up in a printed client.
        return f"ValueCache(entries={len(self)})"
