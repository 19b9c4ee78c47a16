"""Telling a dead postmaster from a live one in a data dir (its lock file, its processes, its
socket locks), and recovering the data dir a dead one left (stale locks, users of a dead
server), for the embedded PostgreSQL (`db.embedded`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from types import ModuleType

import psutil

log = logging.getLogger("cvsm.db")

class LockFile:
    """`postmaster.pid` or a socket's `.s.PGSQL.<port>.lock`: PostgreSQL writes the same first
    lines to both (PID, data dir, start time, port, socket dir, ...)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.lines = path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            self.lines = []
        self.exists = path.exists()

    def _line(self, index: int) -> str:
        return self.lines[index].strip() if len(self.lines) > index else ""

    @property
    def pid(self) -> int | None:
        try:
            return abs(int(self._line(0)))  # a standalone backend writes its PID negated
        except ValueError:
            return None

    @property
    def data_dir(self) -> Path | None:
        line = self._line(1)
        return Path(os.path.realpath(line)) if line else None

    @property
    def socket_dir(self) -> Path | None:
        line = self._line(4)
        return Path(line) if line else None


def postmaster_alive(pgdata: Path) -> bool:
    """Whether `postmaster.pid` in `pgdata` (resolved) names a running postmaster of it."""
    lock = LockFile(pgdata / "postmaster.pid")
    return lock.exists and is_postmaster_for(lock.pid, pgdata, lock.data_dir)


def is_postmaster_for(pid: int | None, pgdata: Path, lock_data_dir: Path | None = None) -> bool:
    """Whether `pid` is a running PostgreSQL process working in `pgdata` (resolved).

    A dead PID, a zombie (a killed postmaster nobody has reaped yet), or a PID reused by any other
    process (not `postgres`, or `postgres` for another data dir) is not. The check is the process
    name and its working directory (PostgreSQL runs in its data dir), or its `-D` argument where
    the working directory cannot be read; where neither can, the lock file's data dir decides.
    """
    if not pid or pid == os.getpid():
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or proc.name() != "postgres":
            return False
        try:
            return _same_dir(proc.cwd(), pgdata)
        except psutil.AccessDenied:
            pass
        try:
            args = proc.cmdline()
        except psutil.AccessDenied:
            return lock_data_dir == pgdata
        for flag, value in zip(args, args[1:]):
            if flag == "-D":
                return _same_dir(value, pgdata)
        return lock_data_dir == pgdata
    except psutil.NoSuchProcess:  # includes psutil.ZombieProcess
        return False


def _same_dir(path: str, pgdata: Path) -> bool:
    return bool(path) and Path(os.path.realpath(path)) == pgdata


def _is_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _processes_in(pgdata: Path) -> list[int]:
    """The running `postgres` processes whose working directory is `pgdata`."""
    found = []
    for proc in psutil.process_iter(["name", "cwd", "status"], ad_value=None):
        info = proc.info
        if (info["name"] == "postgres" and info["status"] != psutil.STATUS_ZOMBIE
                and info["cwd"] and _same_dir(info["cwd"], pgdata)):
            found.append(proc.pid)
    return found


def recover(pgserver: ModuleType, pgdata: Path) -> None:
    """Clean up after a crash, under the package's lock; logs one warning if there was anything."""
    done = []
    pidfile = LockFile(pgdata / "postmaster.pid")
    if pidfile.exists and not is_postmaster_for(pidfile.pid, pgdata, pidfile.data_dir):
        _wait_for_old_processes(pgdata)
        if pidfile.pid is None:
            done.append("postmaster.pid names no PID")
        elif _is_alive(pidfile.pid):
            done.append(f"postmaster.pid names PID {pidfile.pid}, which is not its PostgreSQL")
        else:
            done.append(f"postmaster.pid names PID {pidfile.pid}, which is not running")
        removed = _remove_stale_socket_locks(pgserver, pgdata, pidfile)
        pidfile.path.unlink(missing_ok=True)
        done.append("removed the stale " + ", ".join(["postmaster.pid", *removed]))
    elif not pidfile.exists and (removed := _remove_stale_socket_locks(pgserver, pgdata, pidfile)):
        done.append("removed the stale " + ", ".join(removed))
    done += _forget_dead_users(pgdata)
    if done:
        log.warning("embedded PostgreSQL in %s: recovering from a crash: %s", pgdata, "; ".join(done))


def _wait_for_old_processes(pgdata: Path) -> None:
    """Children of a killed postmaster exit on their own, soon; PostgreSQL refuses to start while
    any of them still holds the old shared memory."""
    deadline = time.monotonic() + OLD_PROCESSES_TIMEOUT
    while pids := _processes_in(pgdata):
        if time.monotonic() > deadline:
            raise EmbeddedStartError(
                f"cannot start the embedded PostgreSQL in {pgdata}: its postmaster.pid is stale but "
                f"old PostgreSQL processes still run there (PID {', '.join(map(str, pids))}); "
                "stop them and start again")
        time.sleep(0.1)


def _remove_stale_socket_locks(pgserver: ModuleType, pgdata: Path, pidfile: LockFile) -> list[str]:
    """Remove the socket lock files (and sockets) left by a dead postmaster of this data dir.

    Only a lock whose data dir line names this data dir and whose PID is no live postmaster for it
    is removed; the socket dirs looked in are the one `postmaster.pid` names and those the package
    would choose (the data dir, or a hashed one in its runtime dir when that path is too long).
    """
    dirs = [pgdata, pidfile.socket_dir]
    try:
        digest = hashlib.sha256(f"{pgdata}-{pgdata.stat().st_ino}".encode()).hexdigest()
        dirs.append(Path(pgserver.PostgresServer.runtime_path) / digest[:10])
    except OSError:
        pass
    removed = []
    seen = set()
    for directory in dirs:
        if directory is None or directory in seen or not directory.is_dir():
            continue
        seen.add(directory)
        for path in sorted(directory.glob(".s.PGSQL.*.lock")):
            lock = LockFile(path)
            if lock.data_dir != pgdata or is_postmaster_for(lock.pid, pgdata, lock.data_dir):
                continue
            socket_path = path.with_suffix("")
            if socket_path.is_socket():
                socket_path.unlink(missing_ok=True)
            path.unlink(missing_ok=True)
            removed.append(str(path) if directory != pgdata else path.name)
    return removed


def _forget_dead_users(pgdata: Path) -> list[str]:
    """Drop dead PIDs from the package's list of processes using the server, which would
    otherwise keep the last live user from ever stopping it; says what it did."""
    path = pgdata / ".handle_pids.json"
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return []
    try:
        pids = [int(pid) for pid in json.loads(text)] if text else []
    except (ValueError, TypeError):
        path.write_text("[]")
        return [f"reset the unreadable {path.name}"]
    dead = [pid for pid in pids if not _is_alive(pid)]
    if not dead:
        return []
    path.write_text(json.dumps([pid for pid in pids if pid not in dead]))
    return [f"dropped dead PID {', '.join(map(str, dead))} from the processes using it"]


def last_fatal_line(logfile: Path) -> str | None:
    """The last FATAL or PANIC message in the server's log, without its timestamp."""
    try:
        lines = logfile.read_text(errors="replace").splitlines()[-50:]
    except OSError:
        return None
    for line in reversed(lines):
        for level in ("FATAL:", "PANIC:"):
            if level in line:
                return " ".join(line[line.index(level):].split())
    return None


# How long to wait for the processes of a dead postmaster to exit, and for a joined server to
# accept connections (it may still be starting or recovering).
OLD_PROCESSES_TIMEOUT = 10.0


class EmbeddedStartError(RuntimeError):
    """The embedded PostgreSQL could not be started or joined; the message is one line and names
    the data dir."""
