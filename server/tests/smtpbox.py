"""A real SMTP server for the tests (aiosmtpd on a local port) and helpers to read what it got.

The server runs in aiosmtpd's own thread; `Mailbox.receive` waits (asynchronously) for the next
message to an address, and `link_in` follows the link a mail carries, as a reader would.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import re
import socket
import threading
from email.message import EmailMessage

from aiosmtpd.controller import Controller

LINK_RE = re.compile(r"https?://[^\s<>\"']+")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _Handler:
    def __init__(self, box: Mailbox) -> None:
        self.box = box

    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802 (aiosmtpd's name)
        message = email.message_from_bytes(envelope.original_content or envelope.content,
                                           policy=email.policy.default)
        with self.box.lock:
            for recipient in envelope.rcpt_tos:
                self.box.messages.append((recipient.lower(), message))
        return "250 OK"


class Mailbox:
    """Every message the SMTP server accepted, as (recipient, message)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.messages: list[tuple[str, EmailMessage]] = []
        self.lock = threading.Lock()
        self._controller: Controller | None = None

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def start(self) -> Mailbox:
        self._controller = Controller(_Handler(self), hostname="127.0.0.1", port=self.port)
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def to(self, address: str, subject: str | None = None) -> list[EmailMessage]:
        with self.lock:
            return [m for r, m in self.messages
                    if r == address.lower() and (subject is None or m["Subject"].startswith(subject))]

    async def receive(self, address: str, *, count: int = 1, subject: str | None = None,
                      timeout: float = 10.0) -> EmailMessage:
        """The `count`-th message to `address` (whose subject starts with `subject`, when given),
        waiting for it up to `timeout` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            got = self.to(address, subject)
            if len(got) >= count:
                return got[count - 1]
            if loop.time() > deadline:
                raise AssertionError(f"no mail #{count} to {address} within {timeout} s "
                                     f"(got {len(got)})")
            await asyncio.sleep(0.02)


def text_of(message: EmailMessage) -> str:
    return message.get_body(preferencelist=("plain",)).get_content()


def html_of(message: EmailMessage) -> str:
    return message.get_body(preferencelist=("html",)).get_content()


def links_in(message: EmailMessage) -> list[str]:
    return LINK_RE.findall(text_of(message))


def link_in(message: EmailMessage, containing: str = "") -> str:
    """The (first) link in the mail's text whose URL contains `containing`."""
    for link in links_in(message):
        if containing in link:
            return link
    raise AssertionError(f"no link with {containing!r} in the mail {message['Subject']!r}")
