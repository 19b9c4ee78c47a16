"""Mail, sent: the background job that delivers the outbox `mail` queues.

- `MailSender` claims due messages (`FOR UPDATE SKIP LOCKED`, so several processes never send one
  twice), delivers them through SMTP (`aiosmtplib`) or, without `CVSM_SMTP_URL`, as `.eml` files
  in the outbox directory, and deletes each one delivered. A failure (SMTP down, refused) moves
  the next attempt back exponentially, up to `MAX_ATTEMPTS`; only the mail waits.
- No link token reaches a log: the outbox logs each link with its token cut out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

import aiosmtplib

from .. import db
from ..db import queues
from ..core.config import Settings
from ..crypto.sealing import Keyring, mail_aad
from .messages import CHANNEL, Message

log = logging.getLogger("cvsm.mail")

MAX_ATTEMPTS = 12  # with the backoff below: about a day and a half of retries
RETRY_BASE_SECONDS = 10
RETRY_MAX_SECONDS = 3600
# A claimed message is someone's for this long: a process that died mid-send frees it then.
LEASE = timedelta(minutes=5)
BATCH = 20
SMTP_TIMEOUT = 30


class Transport(Protocol):
    async def deliver(self, message: Message, mail_id: uuid.UUID) -> None: ...


class SmtpTransport:
    """Delivery through an SMTP server: `smtp://[user:password@]host[:port][?starttls=true]`
    or `smtps://` (implicit TLS). Its repr never shows the password."""

    def __init__(self, url: str, sender: str) -> None:
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        self._host = parts.hostname or "localhost"
        self._implicit_tls = parts.scheme == "smtps"
        self._port = parts.port or (465 if self._implicit_tls else 25)
        self._start_tls = query.get("starttls", "").lower() in ("1", "true", "yes")
        self._username = unquote(parts.username) if parts.username else None
        self._password = unquote(parts.password) if parts.password else None
        self._sender = sender

    def __repr__(self) -> str:
        return f"SmtpTransport(host={self._host!r}, port={self._port})"

    async def deliver(self, message: Message, mail_id: uuid.UUID) -> None:
        await aiosmtplib.send(
            message.to_email(self._sender), hostname=self._host, port=self._port,
            username=self._username, password=self._password, use_tls=self._implicit_tls,
            start_tls=True if self._start_tls else False, timeout=SMTP_TIMEOUT,
        )


class OutboxTransport:
    """Without SMTP: each message is an `.eml` file (mode 0600) in the outbox directory, and the
    log says where, with the message's links minus their tokens."""

    def __init__(self, directory: Path, sender: str) -> None:
        self.directory = directory
        self._sender = sender

    async def deliver(self, message: Message, mail_id: uuid.UUID) -> None:
        await asyncio.to_thread(self._write, message, mail_id)

    def _write(self, message: Message, mail_id: uuid.UUID) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        name = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{mail_id}.eml"
        path = self.directory / name
        partial = path.with_suffix(".part")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(message.to_email(self._sender).as_bytes())
        os.replace(partial, path)
        links = " ".join(message.redacted_links) or "-"
        log.info("mail %r to %s written to %s (links: %s)", message.subject, message.to, path, links)


def transport_for(settings: Settings) -> Transport:
    if settings.smtp_url:
        return SmtpTransport(settings.smtp_url, settings.mail_from)
    return OutboxTransport(settings.outbox_dir, settings.mail_from)


def _retry_delay(attempts: int) -> float:
    return min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** max(0, attempts - 1))


async def deliver_due(pool: db.Pool, keyring: Keyring, transport: Transport) -> int:
    """Deliver the messages that are due now; returns how many were delivered."""
    delivered = 0
    while True:
        async with db.cursor(pool) as cur:
            rows = await db.fetchall(
                cur,
                """UPDATE mail_outbox SET attempts = attempts + 1, next_attempt_at = now() + %s
                   WHERE id IN (SELECT id FROM mail_outbox
                                WHERE failed_at IS NULL AND next_attempt_at <= now()
                                ORDER BY next_attempt_at LIMIT %s FOR UPDATE SKIP LOCKED)
                   RETURNING id, recipient, purpose, key_id, nonce, ciphertext, attempts,
                             created_at""",
                (LEASE, BATCH),
            )
        if not rows:
            return delivered
        # In the order they were queued (RETURNING keeps no order): a reset asked just after
        # signing up arrives after the verification mail.
        rows.sort(key=lambda row: row["created_at"])
        for row in rows:
            delivered += await _deliver_one(pool, keyring, transport, row)


async def _deliver_one(pool: db.Pool, keyring: Keyring, transport: Transport, row: dict) -> int:
    try:
        payload = json.loads(keyring.open(row["key_id"], row["nonce"], row["ciphertext"],
                                          mail_aad(row["id"])))
        message = Message(to=payload["to"], subject=payload["subject"], text=payload["text"],
                          html=payload["html"], redacted_links=tuple(payload.get("links", ())))
        await transport.deliver(message, row["id"])
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure is this message's, and is retried
        error = f"{type(exc).__name__}: {exc}"[:500]
        give_up = row["attempts"] >= MAX_ATTEMPTS
        async with db.cursor(pool) as cur:
            await cur.execute(
                """UPDATE mail_outbox SET last_error = %s, next_attempt_at = now() + %s,
                          failed_at = CASE WHEN %s THEN now() END
                   WHERE id = %s""",
                (error, timedelta(seconds=_retry_delay(row["attempts"])), give_up, row["id"]),
            )
        level = logging.ERROR if give_up else logging.WARNING
        log.log(level, "mail %s (%s) to %s: attempt %d failed (%s)%s", row["id"], row["purpose"],
                row["recipient"], row["attempts"], type(exc).__name__,
                "; giving up" if give_up else "; will retry")
        return 0
    async with db.cursor(pool) as cur:
        await cur.execute("DELETE FROM mail_outbox WHERE id = %s", (row["id"],))
    return 1


class MailSender(queues.QueueWorker):
    """The background job that sends the outbox (see `queues.QueueWorker` for when it wakes)."""

    channel = CHANNEL
    name = "mail"
    next_due_sql = """SELECT extract(epoch FROM min(next_attempt_at) - now()) AS seconds
                      FROM mail_outbox WHERE failed_at IS NULL"""

    def __init__(self, pool: db.Pool, keyring: Keyring, transport: Transport, *,
                 poll_seconds: float = 30.0) -> None:
        super().__init__(pool, poll_seconds=poll_seconds)
        self.keyring = keyring
        self.transport = transport

    async def deliver_due(self) -> int:
        return await deliver_due(self.pool, self.keyring, self.transport)
