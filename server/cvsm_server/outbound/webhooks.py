"""Webhook delivery: the background sender that posts the queued events (`webhook_deliveries`,
queued by `webhook_events.emit` in the transaction of each action).

- Claims due deliveries with `FOR UPDATE SKIP LOCKED` (several processes never send one twice;
  a claim is a lease, so a process that died mid-send frees it after `LEASE`), wakes on
  `NOTIFY cvsm_webhooks`, and otherwise polls.
- Each attempt resolves the URL's host, refuses non-global addresses (unless
  `CVSM_WEBHOOK_ALLOW_PRIVATE=1`, see `webhooks.resolve_target`) and connects to exactly the
  addresses it checked (`PinnedResolver`): the Host header and the TLS server name stay the
  URL's, and a second DNS answer cannot switch the target. Redirects are not followed; the
  answer's body is read at most `MAX_ANSWER_BYTES` and dropped; `TIMEOUT` seconds in all.
- A 2xx answer is success. Anything else is retried with exponential backoff (30 s doubling,
  at most 4 h apart): `MAX_ATTEMPTS` attempts span about a day, then the delivery is `failed`.
- The body is signed at each attempt: `Cvsm-Signature: t=<unix>,v1=<hex HMAC-SHA256 of
  "<t>.<body>">`; `Cvsm-Event-Id` is the event's id (the same for every webhook and attempt).
  No signing secret reaches a log, an error or the delivery log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from datetime import timedelta

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from .. import __version__, db
from ..db import queues
from ..webhooks import service as webhooks
from ..crypto.sealing import Keyring

log = logging.getLogger("cvsm.webhooks")

MAX_ATTEMPTS = 15  # 30 s, 1, 2, 4 ... 128 min, then 4 h five times: about 24 h of retries
RETRY_BASE_SECONDS = 30
RETRY_MAX_SECONDS = 4 * 3600
LEASE = timedelta(minutes=5)
# Delivered and failed deliveries stay in the delivery log this long.
KEEP_FINISHED = timedelta(days=30)
BATCH = 10
TIMEOUT = 10.0
MAX_ANSWER_BYTES = 64 * 1024
USER_AGENT = f"cvsm-webhooks/{__version__}"
BODY_KEYS = ("id", "type", "created_at", "team", "actor", "data")


def retry_delay(attempts: int) -> float:
    """Seconds until the next attempt after `attempts` failed ones."""
    return min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** max(0, attempts - 1))


class PinnedResolver(AbstractResolver):
    """A resolver that knows one host: it answers with the addresses checked beforehand and
    never asks DNS again."""

    def __init__(self, host: str, addresses: list[tuple[int, str]]) -> None:
        self.host = host
        self.addresses = addresses

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        if host != self.host:
            raise OSError(f"no pinned address for {host!r}")
        return [ResolveResult(hostname=host, host=address, port=port, family=fam, proto=0,
                              flags=socket.AI_NUMERICHOST)
                for fam, address in self.addresses
                if family in (socket.AF_UNSPEC, fam)]

    async def close(self) -> None:
        return None


def body_of(payload: dict) -> bytes:
    """The JSON body as sent (and signed): the documented keys in their documented order."""
    return json.dumps({k: payload.get(k) for k in BODY_KEYS}, separators=(",", ":"),
                      ensure_ascii=False).encode()


class Outcome:
    """What one attempt gave: the answer's status (None without an answer) and, for a failure,
    a short error for the delivery log."""

    def __init__(self, status: int | None, error: str | None) -> None:
        self.status = status
        self.error = error

    @property
    def ok(self) -> bool:
        return self.error is None


async def post(url: str, body: bytes, headers: dict[str, str], *,
               allow_private: bool) -> Outcome:
    """One attempt: resolve and check the target, pin it, POST `body`, read a bounded answer."""
    try:
        host, addresses = await webhooks.resolve_target(url, allow_private=allow_private)
    except webhooks.TargetRefused as exc:
        return Outcome(None, "target refused: " + ("unresolvable host"
                                                   if exc.message == webhooks.UNRESOLVABLE
                                                   else "address not allowed"))
    connector = aiohttp.TCPConnector(resolver=PinnedResolver(host, addresses),
                                     use_dns_cache=False, force_close=True)
    try:
        async with aiohttp.ClientSession(connector=connector, trust_env=False,
                                         timeout=aiohttp.ClientTimeout(total=TIMEOUT),
                                         auto_decompress=False) as session:
            async with session.post(url, data=body, headers=headers,
                                    allow_redirects=False) as resp:
                left = MAX_ANSWER_BYTES
                while left > 0:
                    chunk = await resp.content.read(min(left, 16 * 1024))
                    if not chunk:
                        break
                    left -= len(chunk)
                status = resp.status
    except asyncio.CancelledError:
        raise
    except asyncio.TimeoutError:
        return Outcome(None, f"timeout after {TIMEOUT:.0f} s")
    except aiohttp.ClientError as exc:
        return Outcome(None, f"connection failed: {type(exc).__name__}")
    except OSError as exc:
        return Outcome(None, f"connection failed: {type(exc).__name__}")
    if 200 <= status < 300:
        return Outcome(status, None)
    if 300 <= status < 400:
        return Outcome(status, f"HTTP {status}: redirect not followed")
    return Outcome(status, f"HTTP {status}")


_CLAIM = """
UPDATE webhook_deliveries d
SET attempts = d.attempts + 1, next_attempt_at = now() + %s, last_attempt_at = now()
FROM webhooks w
WHERE w.id = d.webhook_id
  AND d.id IN (SELECT id FROM webhook_deliveries
               WHERE status = 'pending' AND next_attempt_at <= now()
               ORDER BY next_attempt_at LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING d.id, d.webhook_id, d.event_id, d.event_type, d.payload, d.attempts,
          w.url, w.key_id, w.nonce, w.ciphertext
"""


async def deliver_due(pool: db.Pool, keyring: Keyring, *, allow_private: bool) -> int:
    """Attempt every delivery that is due now; returns how many succeeded."""
    delivered = 0
    while True:
        async with db.cursor(pool) as cur:
            rows = await db.fetchall(cur, _CLAIM, (LEASE, BATCH))
        if not rows:
            return delivered
        results = await asyncio.gather(*(_deliver_one(pool, keyring, row, allow_private)
                                         for row in rows))
        delivered += sum(results)


async def _deliver_one(pool: db.Pool, keyring: Keyring, row: dict, allow_private: bool) -> int:
    body = body_of(row["payload"])
    try:
        secret = webhooks.open_secret(keyring, {**row, "id": row["webhook_id"]})
    except Exception as exc:  # noqa: BLE001 - a key problem is this delivery's, and is logged
        outcome = Outcome(None, f"signing secret unavailable: {type(exc).__name__}")
    else:
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Cvsm-Event-Id": str(row["event_id"]),
            "Cvsm-Signature": webhooks.signature(secret, int(time.time()), body),
        }
        outcome = await post(row["url"], body, headers, allow_private=allow_private)
    async with db.cursor(pool) as cur:
        if outcome.ok:
            await cur.execute(
                """UPDATE webhook_deliveries SET status = 'delivered', delivered_at = now(),
                          last_status_code = %s, last_error = NULL
                   WHERE id = %s""",
                (outcome.status, row["id"]))
            return 1
        give_up = row["attempts"] >= MAX_ATTEMPTS
        await cur.execute(
            """UPDATE webhook_deliveries SET last_status_code = %s, last_error = %s,
                      next_attempt_at = now() + %s,
                      status = CASE WHEN %s THEN 'failed' ELSE 'pending' END,
                      failed_at = CASE WHEN %s THEN now() END
               WHERE id = %s""",
            (outcome.status, outcome.error[:500],
             timedelta(seconds=retry_delay(row["attempts"])), give_up, give_up, row["id"]))
    level = logging.ERROR if give_up else logging.WARNING
    log.log(level, "webhook %s delivery %s (%s): attempt %d failed (%s)%s", row["webhook_id"],
            row["id"], row["event_type"], row["attempts"], outcome.error,
            "; giving up" if give_up else "; will retry")
    return 0


async def purge_finished(pool: db.Pool) -> int:
    """Drop delivered and failed deliveries older than `KEEP_FINISHED`; returns how many."""
    async with db.cursor(pool) as cur:
        await cur.execute(
            """DELETE FROM webhook_deliveries
               WHERE status <> 'pending' AND created_at < now() - %s""", (KEEP_FINISHED,))
        return cur.rowcount


class WebhookSender(queues.QueueWorker):
    """The background job that delivers events (see `queues.QueueWorker` for when it wakes)."""

    channel = webhooks.CHANNEL
    name = "webhooks"
    next_due_sql = """SELECT extract(epoch FROM min(next_attempt_at) - now()) AS seconds
                      FROM webhook_deliveries WHERE status = 'pending'"""

    def __init__(self, pool: db.Pool, keyring: Keyring, *, allow_private: bool = False,
                 poll_seconds: float = 30.0) -> None:
        super().__init__(pool, poll_seconds=poll_seconds)
        self.keyring = keyring
        self.allow_private = allow_private

    async def deliver_due(self) -> int:
        return await deliver_due(self.pool, self.keyring, allow_private=self.allow_private)
