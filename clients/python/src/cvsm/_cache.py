"""Hold fetched values: fresh for ``cache_ttl`` seconds, then kept ``stale_if_error`` more.

One cache belongs to one client, and so to one environment: entries are keyed by name. A whole
``get_all`` result is kept as one entry and also answers per-name lookups (its values are shared,
not copied), so a ``get`` after ``get_all`` makes no request and the export is held in memory once.
Only successes are stored: errors are never cached.

A fresh entry answers without a request. A kept entry (no longer fresh, younger than
``cache_ttl + stale_if_error``) answers only when a refresh fails in a way that allows it
(rule R14); past that it is forgotten. Nothing is ever written to disk.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

_clock: Callable[[], float] = time.monotonic
"""The cache's time (a seam for tests that must not sleep; read when a cache is created)."""

Entry = tuple[float, str]
"""A per-name entry: ``(fresh_until, value)``, times on the cache's clock."""


class ValueCache:
    """One client's cache of secret values.

    ``ttl`` is how long an entry is fresh, ``keep`` how much longer it is kept for
    stale-if-error; both 0 disable the cache. ``lock`` guards every change: a
    ``threading.Lock`` makes the cache safe across threads (``Client``); the default no-op lock
    suits ``AsyncClient``, whose cache is only touched between awaits.

    Reads take no lock. :attr:`entries` is only ever changed in place under the lock, and a
    single lookup in it is atomic, so a reader sees an entry whole or not at all; this is what
    lets ``Client.get`` answer a cache hit with one lookup and one clock read. Slots keep those
    two attribute reads quick.
    """

    __slots__ = (
        "_all",
        "_enabled",
        "_generation",
        "_lock",
        "_next_sweep",
        "_stale_reported",
        "clock",
        "entries",
        "keep",
        "ttl",
    )

    def __init__(self, ttl: int, keep: int = 0, *, lock: AbstractContextManager[object] | None = None) -> None:
        self.ttl = ttl
        self.keep = keep
        self.clock = _clock
        self.entries: dict[str, Entry] = {}  # name -> (fresh_until, value); changed under the lock only
        self._enabled = ttl > 0 or keep > 0
        self._all: tuple[float, dict[str, str]] | None = None
        self._stale_reported: set[str | None] = set()
        self._generation = 0
        self._next_sweep = 0.0
        self._lock: AbstractContextManager[object] = lock if lock is not None else contextlib.nullcontext()

    @property
    def generation(self) -> int:
        """Count the times the cache was emptied; a fetch started before one stores nothing."""
        return self._generation

    def fresh_value(self, name: str) -> str | None:
        """Return the value of ``name`` while it is fresh, else ``None``."""
        entry = self.entries.get(name)
        if entry is not None and entry[0] > self.clock():
            return entry[1]
        return None

    def fresh_all(self) -> dict[str, str] | None:
        """Return a copy of the ``get_all`` result while it is fresh, else ``None``."""
        kept = self._all
        if kept is not None and kept[0] > self.clock():
            return dict(kept[1])
        return None

    def kept_value(self, name: str) -> tuple[str, float] | None:
        """Return ``(value, age in seconds)`` of ``name`` while it is kept, else ``None``."""
        entry = self.entries.get(name)
        age = self._kept_age(entry[0]) if entry is not None else None
        return (entry[1], age) if entry is not None and age is not None else None

    def kept_all(self) -> tuple[dict[str, str], float] | None:
        """Return ``(a copy of the get_all result, its age)`` while it is kept, else ``None``."""
        kept = self._all
        age = self._kept_age(kept[0]) if kept is not None else None
        return (dict(kept[1]), age) if kept is not None and age is not None else None

    def put_value(self, name: str, value: str, generation: int) -> None:
        """Store one value fetched by a call that began at ``generation``."""
        if not self._enabled:
            return
        with self._lock:
            if generation != self._generation:
                return
            now = self.clock()
            self._sweep(now)
            self.entries[name] = (now + self.ttl, value)
            self._stale_reported.discard(name)

    def put_all(self, values: dict[str, str], generation: int) -> None:
        """Store a ``get_all`` result fetched by a call that began at ``generation``.

        The cache keeps ``values`` itself, not a copy: the caller must not change it afterwards.
        """
        if not self._enabled:
            return
        with self._lock:
            if generation != self._generation:
                return
            now = self.clock()
            self._sweep(now)
            fresh_until = now + self.ttl
            self._all = (fresh_until, values)
            self.entries.update((name, (fresh_until, value)) for name, value in values.items())
            self._stale_reported.clear()

    def first_stale(self, name: str | None) -> bool:
        """Tell whether ``name`` (``None``: the get_all result) is served stale for the first time.

        It is again after it has been fetched fresh, or the cache emptied.
        """
        with self._lock:
            if name in self._stale_reported:
                return False
            self._stale_reported.add(name)
            return True

    def clear(self) -> None:
        """Forget every value, fresh or kept."""
        with self._lock:
            self._generation += 1
            self.entries.clear()
            self._all = None
            self._stale_reported.clear()

    def _kept_age(self, fresh_until: float) -> float | None:
        """Return the age of an entry fresh until ``fresh_until`` while it is kept, else ``None``."""
        now = self.clock()
        return now - (fresh_until - self.ttl) if now < fresh_until + self.keep else None

    def _sweep(self, now: float) -> None:
        """Drop what is past its bound, at most once a bound (called under the lock)."""
        if now < self._next_sweep:
            return
        horizon = now - self.keep
        for name in [name for name, entry in self.entries.items() if entry[0] <= horizon]:
            del self.entries[name]
        if self._all is not None and self._all[0] <= horizon:
            self._all = None
        self._next_sweep = now + max(self.ttl + self.keep, 1)

    def __len__(self) -> int:
        horizon = self.clock() - self.keep
        return sum(1 for entry in list(self.entries.values()) if entry[0] > horizon)

    def __repr__(self) -> str:
        # A count only: a cached value must never show up in a printed client.
        return f"ValueCache(entries={len(self)})"
