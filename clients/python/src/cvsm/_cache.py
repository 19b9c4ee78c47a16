"""Hold fetched values: fresh for ``cache_ttl`` seconds, then kept ``stale_if_error`` more.

One cache belongs to one client, and so to one environment: entries are keyed by name. A whole
``get_all`` result is kept as one entry and also answers per-name lookups (its values are shared,
not copied), so a ``get`` after ``get_all`` makes no request and the export is held in memory once.
Only successes are stored: errors are never cached.

A fresh entry answers without a request. A kept entry (no longer fresh, younger than
``cache_ttl + stale_if_error``) answers only when a refresh fails in a way that allows it
(rule R14); past that it is forgotten. Nothing is ever written to disk.

A live client (``live=True``) also tells the cache what its change stream says: a ``snapshot``
of every name's current version when the stream (re)connects, and each ``change`` after. A
value whose secret changed stops being fresh at once (it is still kept for stale-if-error), and a
fetch that began before the change does not store what it got (:meth:`ValueCache.mark`). Each
entry remembers the version it holds when that is known (the read by name says it; a value
fetched while the stream is up holds at least the version the stream last announced), so a
reconnection's snapshot drops only what changed meanwhile.
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

Mark = tuple[int, int]
"""When a fetch began: ``(generation, change stamp)``; see :meth:`ValueCache.mark`."""


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
        "_all_stale",
        "_changed",
        "_enabled",
        "_generation",
        "_latest",
        "_lock",
        "_next_sweep",
        "_stale_only",
        "_stale_reported",
        "_stamp",
        "_versions",
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
        # Live caches only: what the change stream said, and what it made stop being fresh.
        self._stamp = 0  # counts the changes applied
        self._changed: dict[str, int] = {}  # name -> the stamp of its last change
        self._latest: dict[str, int] | None = None  # name -> version, from the stream; None before any snapshot
        self._versions: dict[str, int] = {}  # name -> the version its entry holds (at least), when known
        self._stale_only: dict[str, Entry] = {}  # entries no longer fresh since a change, kept for stale-if-error
        self._all_stale: tuple[float, dict[str, str]] | None = None
        self._next_sweep = 0.0
        self._lock: AbstractContextManager[object] = lock if lock is not None else contextlib.nullcontext()

    @property
    def generation(self) -> int:
        """Count the times the cache was emptied; a fetch started before one stores nothing."""
        return self._generation

    def mark(self) -> Mark:
        """Return when a fetch begins: it stores nothing if the cache is emptied, or (for its name;
        for ``get_all`` any name) a change arrives, before it ends."""
        return (self._generation, self._stamp)

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
        entry = self.entries.get(name) or self._stale_only.get(name)
        age = self._kept_age(entry[0]) if entry is not None else None
        return (entry[1], age) if entry is not None and age is not None else None

    def kept_all(self) -> tuple[dict[str, str], float] | None:
        """Return ``(a copy of the get_all result, its age)`` while it is kept, else ``None``."""
        kept = self._all or self._all_stale
        age = self._kept_age(kept[0]) if kept is not None else None
        return (dict(kept[1]), age) if kept is not None and age is not None else None

    def put_value(self, name: str, value: str, mark: Mark, version: int | None = None) -> None:
        """Store one value fetched by a call that began at ``mark``; ``version``: the one it is,
        when the answer said."""
        if not self._enabled:
            return
        with self._lock:
            if mark[0] != self._generation:
                return
            latest = self._latest.get(name) if self._latest is not None else None
            if version is not None and latest is not None:
                if version < latest:
                    return  # older than what the stream already announced
            elif self._changed.get(name, 0) > mark[1]:
                return  # it changed while this was fetched: what was read may be older
            now = self.clock()
            self._sweep(now)
            self.entries[name] = (now + self.ttl, value)
            self._stale_only.pop(name, None)
            held = version if version is not None else latest
            if held is not None:
                self._versions[name] = held
            else:
                self._versions.pop(name, None)
            self._stale_reported.discard(name)

    def put_all(self, values: dict[str, str], mark: Mark) -> None:
        """Store a ``get_all`` result fetched by a call that began at ``mark``.

        The cache keeps ``values`` itself, not a copy: the caller must not change it afterwards.
        """
        if not self._enabled:
            return
        with self._lock:
            if mark[0] != self._generation or self._stamp > mark[1]:
                return
            now = self.clock()
            self._sweep(now)
            fresh_until = now + self.ttl
            self._all = (fresh_until, values)
            self._all_stale = None
            self.entries.update((name, (fresh_until, value)) for name, value in values.items())
            latest = self._latest
            for name in values:
                self._stale_only.pop(name, None)
                held = latest.get(name) if latest is not None else None
                if held is not None:
                    self._versions[name] = held
                else:
                    self._versions.pop(name, None)
            self._stale_reported.clear()

    def snapshot(self, versions: dict[str, int]) -> list[str]:
        """Take the change stream's ``snapshot`` (every name's current version, on each connect).

        An entry whose version is unknown or differs stops being fresh, and so does the
        ``get_all`` result unless every name of it is still current; return the names dropped.
        """
        with self._lock:
            before, self._latest = self._latest, dict(versions)
            self._stamp += 1
            # A fetch under way may have read a value older than this: it stores nothing.
            for name in versions.keys() | (before.keys() if before is not None else set()):
                if before is None or before.get(name) != versions.get(name):
                    self._changed[name] = self._stamp
            dropped = [
                name for name in list(self.entries)
                if self._versions.get(name) is None or self._versions.get(name) != versions.get(name)
            ]
            for name in dropped:
                self._drop(name)
            if self._all is not None and (
                set(self._all[1]) != set(versions) or any(name in dropped for name in self._all[1])
            ):
                self._drop_all()
            return dropped

    def change(self, name: str, version: int | None) -> bool:
        """Take a ``change`` event: ``name`` is now at ``version`` (``None``: deleted).

        Its entry stops being fresh unless it already holds that version; the ``get_all``
        result always does (a new name changes it). Return whether the entry was dropped.
        """
        with self._lock:
            if self._latest is not None:
                if version is None:
                    self._latest.pop(name, None)
                else:
                    self._latest[name] = version
            self._stamp += 1
            self._drop_all()
            if version is not None and name in self.entries and self._versions.get(name) == version:
                return False
            self._changed[name] = self._stamp
            if name not in self.entries:
                return False
            self._drop(name)
            return True

    def stream_lost(self) -> None:
        """Forget the versions the stream said: until its next snapshot nothing is known."""
        with self._lock:
            self._latest = None

    def _drop(self, name: str) -> None:
        """Make ``name``'s entry stop being fresh, kept for stale-if-error (under the lock)."""
        self._changed[name] = self._stamp
        entry = self.entries.pop(name, None)
        self._versions.pop(name, None)
        if entry is not None and self.keep > 0:
            self._stale_only[name] = entry

    def _drop_all(self) -> None:
        """Make the ``get_all`` result stop being fresh, kept for stale-if-error (under the lock)."""
        if self._all is not None:
            if self.keep > 0:
                self._all_stale = self._all
            self._all = None

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
            self._versions.clear()
            self._stale_only.clear()
            self._all_stale = None

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
            self._versions.pop(name, None)
        for name in [name for name, entry in self._stale_only.items() if entry[0] <= horizon]:
            del self._stale_only[name]
        if self._all is not None and self._all[0] <= horizon:
            self._all = None
        if self._all_stale is not None and self._all_stale[0] <= horizon:
            self._all_stale = None
        self._next_sweep = now + max(self.ttl + self.keep, 1)

    def __len__(self) -> int:
        horizon = self.clock() - self.keep
        entries = list(self.entries.values()) + list(self._stale_only.values())
        return sum(1 for entry in entries if entry[0] > horizon)

    def __repr__(self) -> str:
        # A count only: a cached value must never show up in a printed client.
        return f"ValueCache(entries={len(self)})"
