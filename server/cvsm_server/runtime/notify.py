"""systemd's readiness protocol (sd_notify) without libsystemd: one datagram to `$NOTIFY_SOCKET`.

Under `Type=notify` (deploy/cvsm.service) systemd passes the socket's address in `NOTIFY_SOCKET`
and waits for `READY=1` before `systemctl start` returns. Unset (not under systemd), nothing is
sent. The embedded PostgreSQL does not inherit the variable (`embedded.postgres_environment`).
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("cvsm")


def notify(state: str) -> bool:
    """Send `state` (e.g. "READY=1\\nSTATUS=...") to systemd; False when not under systemd."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    elif not address.startswith("/"):
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(state.encode(), address)
    except OSError as exc:
        log.warning("cannot notify systemd at %s: %s", address.lstrip("\0"),
                    exc.strerror or exc)
        return False
    return True


def ready(status: str) -> bool:
    """The server answers on its port: `systemctl start` may return."""
    return notify(f"READY=1\nSTATUS={' '.join(status.split())}")


def stopping() -> bool:
    return notify("STOPPING=1")
