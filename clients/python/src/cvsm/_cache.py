"""cvsm._cache holds fetched values for ``cache_ttl`` seconds, per environment and name.

A whole ``get_all`` result is kept per environment too, and filling it also fills the per-name
entries, so a ``get`` after ``get_all`` makes no request. Only successes are stored: errors are
never cached.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import ContextManager

from cachetools import TTLCache

_MAXSIZE = 10_000


def _clock() -> float:
    """_clock is the cache's time source (a seam for tests that must not sleep)."""
    return time.monotonic()


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()
"""MISSING is what :meth:`ValueCache.get_value` returns on a miss (an empty string is a value)."""


class ValueCache:
    """ValueCache is one client's cache of secret values.

    ``ttl`` 0 disables it. ``lock`` guards every operation: a ``threading.Lock`` makes the cache
    safe across threads (``Client``); the default no-op lock suits ``AsyncClient``, whose cache
    is only touched between awaits and so is safe across the tasks of one event loop.
    """

    def __init__(
        self,
        ttl: int,
        *,
        timer: Callable[[], float] | None = None,
        lock: ContextManager[object] | None = None,
    ) -> None:
        self._enabled = ttl > 0
        self._entries: TTLCache[tuple[str, ...], object] = TTLCache(
            _MAXSIZE, max(ttl, 1), timer=timer or (lambda: _clock())
        )
        self._lock: ContextManager[object] = lock if lock is not None else contextlib.nullcontext()

    def get_value(self, environment: str, name: str) -> str | _Missing:
        """get_value returns the cached value of ``name`` in ``environment``, or MISSING."""
        if not self._enabled:
            return MISSING
        with self._lock:
            value = self._entries.get(("value", environment, name), MISSING)
        return value if isinstance(value, str) else MISSING

    def put_value(self, environment: str, name: str, value: str) -> None:
        """put_value stores one value for the TTL."""
        if self._enabled:
            with self._lock:
                self._entries[("value", environment, name)] = value

    def get_all(self, environment: str) -> dict[str, str] | None:
        """get_all returns a copy of the cached whole-environment result, or None."""
        if not self._enabled:
            return None
        with self._lock:
            values = self._entries.get(("all", environment))
        return dict(values) if isinstance(values, dict) else None

    def put_all(self, environment: str, values: Mapping[str, str]) -> None:
        """put_all stores a whole-environment result and each of its values for the TTL."""
        if not self._enabled:
            return
        with self._lock:
            self._entries[("all", environment)] = dict(values)
            for name, value in values.items():
                self._entries[("value", environment, name)] = value

    def clear(self) -> None:
        """clear empties the cache."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            self._entries.expire()
            return len(self._entries)

    def __repr__(self) -> str:
        # Names only: a cached value must never show up in a printed client.
        return f"ValueCache(entries={len(self)})"
