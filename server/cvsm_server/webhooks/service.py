"""Webhooks: a team's HTTP endpoints told about what happens in it, with signed deliveries.

- `create_webhook` (Admin or above) stores the URL, the event kinds wanted and a signing secret
  (`whsec_...`) sealed with the keyring (AAD `crypto.webhook_aad`): the server signs with it, so
  it is kept, but it is shown only once, in the answer to the creation.
- Events are queued by `audit.record` itself (`webhook_events.emit`, the outbox written from the
  audit insert): an action that maps to an event kind (`ACTIONS`) queues one delivery per
  matching webhook of the team in the same transaction.
- Token events reach team webhooks only for team-bound tokens (`POST /tokens` with `team_id`): a
  personal token belongs to a user, not to a team, and its events go to no webhook.
- Targets: `http(s)://` only, no user or password in the URL, and (unless
  `CVSM_WEBHOOK_ALLOW_PRIVATE=1`) every address the host resolves to must be global: private,
  loopback, link-local, multicast, reserved and unspecified addresses, IPv4-mapped, 6to4 and
  Teredo forms of them included, are refused at creation and again at each delivery, which then
  connects to the addresses it checked (no second lookup: no DNS rebinding).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import secrets as random
import socket
import uuid
from typing import Any
from urllib.parse import urlsplit

from psycopg2.extras import Json

from ..audit import log as audit
from .. import db
from ..teams import roles
from ..core.actor import Actor
from ..crypto.sealing import Keyring, webhook_aad
from ..core.errors import BadRequest, NotFound
from ..core.i18n import N_, Text
from ..core.timeutil import iso
# The event kinds and the channel live with the outbox; they stay importable from here.
from .events import ACTIONS, CHANNEL, EVENTS, PING, QUEUE_FOR_WEBHOOK, payload

SECRET_PREFIX = "whsec_"
MAX_WEBHOOKS = 20
MAX_URL_LENGTH = 2048
MAX_DESCRIPTION = 500
RESOLVE_TIMEOUT = 5.0
DEFAULT_LIMIT = 50
MAX_LIMIT = 200

WEBHOOK_NOT_FOUND = "Webhook tidak ditemukan"
BAD_URL = "URL webhook harus berupa URL http:// atau https:// yang valid"
URL_CREDENTIALS = "URL webhook tidak boleh memuat nama pengguna atau kata sandi"
TARGET_REFUSED = ("Alamat tujuan webhook tidak diizinkan: jaringan privat, loopback, link-local, "
                  "multicast, atau alamat khusus")
UNRESOLVABLE = "Nama host URL webhook tidak dapat di-resolve"
NO_EVENTS = "Kolom 'events' harus berisi setidaknya satu jenis event"
TOO_MANY = N_("Satu tim paling banyak memiliki {n} webhook")


class TargetRefused(BadRequest):
    """The URL's host is, or resolves to, an address webhooks may not reach (or none at all)."""


# --- targets -------------------------------------------------------------------------------

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def refused_address(ip: Address) -> bool:
    """Whether a webhook may not connect to `ip`: anything but a global unicast address."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None and refused_address(embedded):
            return True
        if ip.is_site_local:
            return True
    return (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast
            or ip.is_reserved or ip.is_unspecified or not ip.is_global)


def parse_url(url: str) -> tuple[str, int]:
    """The host and port of a webhook URL; 400 unless a plain `http(s)://host[:port]/...`."""
    if not isinstance(url, str) or len(url) > MAX_URL_LENGTH or any(c in url for c in " \t\r\n\\"):
        raise BadRequest(BAD_URL)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise BadRequest(BAD_URL) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest(BAD_URL)
    if parts.username is not None or parts.password is not None:
        raise BadRequest(URL_CREDENTIALS)
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


async def resolve_target(url: str, *, allow_private: bool) -> tuple[str, list[tuple[int, str]]]:
    """The URL's host name and the addresses to connect to, `(family, address)`, resolved once.

    Without `allow_private`, one refused address among them refuses the whole target (a name
    that resolves to a public and a private address is refused, whichever a client would pick).
    Raises `TargetRefused` (a 400) with a message that never names what the host resolved to."""
    host, port = parse_url(url)
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP),
            RESOLVE_TIMEOUT)
    except (OSError, asyncio.TimeoutError, UnicodeError):
        raise TargetRefused(UNRESOLVABLE) from None
    addresses: list[tuple[int, str]] = []
    for family, _, _, _, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        text = str(sockaddr[0]).split("%", 1)[0]
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            raise TargetRefused(TARGET_REFUSED) from None
        if not allow_private and refused_address(ip):
            raise TargetRefused(TARGET_REFUSED)
        if (family, sockaddr[0]) not in addresses:
            addresses.append((family, sockaddr[0]))
    if not addresses:
        raise TargetRefused(UNRESOLVABLE)
    return host, addresses


# --- signing ---------------------------------------------------------------------------------

def generate_secret() -> str:
    return SECRET_PREFIX + random.token_urlsafe(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The `Cvsm-Signature` header: `t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">` (Stripe's
    scheme), keyed with the whole `whsec_...` string."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def open_secret(keyring: Keyring, row: dict) -> str:
    return keyring.open(row["key_id"], row["nonce"], row["ciphertext"],
                        webhook_aad(row["id"])).decode()


# --- the API's domain functions --------------------------------------------------------------

_COLUMNS = "id, team_id, url, events, description, created_at"
_DELIVERY_COLUMNS = """id, webhook_id, event_id, event_type, status, attempts, last_status_code,
    last_error, created_at, last_attempt_at, next_attempt_at, delivered_at, failed_at"""


def webhook_json(row: dict) -> dict:
    return {"id": str(row["id"]), "url": row["url"], "events": list(row["events"]),
            "description": row["description"], "created_at": iso(row["created_at"])}


def delivery_json(row: dict) -> dict:
    return {
        "id": str(row["id"]), "webhook_id": str(row["webhook_id"]),
        "event_id": str(row["event_id"]), "event": row["event_type"], "status": row["status"],
        "attempts": row["attempts"], "last_status_code": row["last_status_code"],
        "last_error": row["last_error"], "created_at": iso(row["created_at"]),
        "last_attempt_at": iso(row["last_attempt_at"]),
        "next_attempt_at": iso(row["next_attempt_at"]) if row["status"] == "pending" else None,
        "delivered_at": iso(row["delivered_at"]), "failed_at": iso(row["failed_at"]),
    }


def check_events(events: Any) -> list[str]:
    """The event kinds asked for, known and without repeats, in `EVENTS` order."""
    if not isinstance(events, list) or not events:
        raise BadRequest(NO_EVENTS)
    for kind in events:
        if not isinstance(kind, str):
            raise BadRequest("Kolom 'events' harus berupa daftar teks")
        if kind not in EVENTS:
            raise BadRequest(Text("Jenis event tidak dikenal: {kind}", kind=repr(kind[:64])))
    return [kind for kind in EVENTS if kind in events]


async def create_webhook(conn: db.Connection, actor: Actor, keyring: Keyring, team_id: uuid.UUID,
                         *, url: str, events: Any, description: str = "",
                         allow_private: bool = False) -> tuple[dict, str]:
    """A new webhook (Admin or above); returns its row and its signing secret (shown once)."""
    kinds = check_events(events)
    description = description.strip()
    if len(description) > MAX_DESCRIPTION:
        raise BadRequest(Text("Kolom '{name}' paling banyak {n} karakter", name="description",
                              n=MAX_DESCRIPTION))
    parse_url(url)
    async with db.cursor(conn) as cur:  # the role first: no lookup on anyone else's behalf
        await roles.require(cur, team_id, actor, roles.ADMIN)
    await resolve_target(url, allow_private=allow_private)
    secret = generate_secret()
    webhook_id = uuid.uuid4()
    sealed = keyring.seal(secret.encode(), webhook_aad(webhook_id))
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN)
        await cur.execute("SELECT 1 FROM teams WHERE id = %s FOR NO KEY UPDATE", (team_id,))
        count = await db.fetchone(cur, "SELECT count(*) AS n FROM webhooks WHERE team_id = %s",
                                  (team_id,))
        if count["n"] >= MAX_WEBHOOKS:
            raise BadRequest(Text(TOO_MANY, n=MAX_WEBHOOKS))
        row = await db.fetchone(
            cur,
            f"""INSERT INTO webhooks (id, team_id, url, events, description, key_id, nonce,
                                      ciphertext, created_by)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}""",
            (webhook_id, team_id, url, kinds, description, sealed.key_id, sealed.nonce,
             sealed.ciphertext, actor.user_id),
        )
        await audit.record(cur, actor, "webhook_create", "webhook", team_id=team_id,
                           resource_id=webhook_id, metadata={"url": url, "events": kinds})
    return row, secret


async def list_webhooks(conn: db.Connection, actor: Actor, team_id: uuid.UUID) -> list[dict]:
    """The team's webhooks, oldest first, without their secrets (Admin or above)."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN, reading=True)
        return await db.fetchall(
            cur, f"SELECT {_COLUMNS} FROM webhooks WHERE team_id = %s ORDER BY created_at, id",
            (team_id,))


async def _load(cur: db.Cursor, team_id: uuid.UUID, webhook_id: uuid.UUID) -> dict:
    row = await db.fetchone(cur, f"SELECT {_COLUMNS} FROM webhooks WHERE id = %s AND team_id = %s",
                            (webhook_id, team_id))
    if row is None:
        raise NotFound(WEBHOOK_NOT_FOUND)
    return row


async def delete_webhook(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                         webhook_id: uuid.UUID) -> None:
    """Delete a webhook and its delivery log (Admin or above); nothing more is sent to it."""
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN)
        row = await _load(cur, team_id, webhook_id)
        await cur.execute("DELETE FROM webhooks WHERE id = %s", (webhook_id,))
        await audit.record(cur, actor, "webhook_delete", "webhook", team_id=team_id,
                           resource_id=webhook_id, metadata={"url": row["url"]})


async def list_deliveries(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                          webhook_id: uuid.UUID, *, limit: int = DEFAULT_LIMIT,
                          offset: int = 0) -> list[dict]:
    """The webhook's deliveries, newest first (Admin or above): kind, status, attempts, the
    last answer's status code and error, times; never a body."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN, reading=True)
        await _load(cur, team_id, webhook_id)
        return await db.fetchall(
            cur,
            f"""SELECT {_DELIVERY_COLUMNS} FROM webhook_deliveries WHERE webhook_id = %s
                ORDER BY created_at DESC, id DESC LIMIT %s OFFSET %s""",
            (webhook_id, min(limit, MAX_LIMIT), offset))


async def send_test(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                    webhook_id: uuid.UUID) -> dict:
    """Queue a `ping` event to this webhook alone (Admin or above); returns the delivery."""
    async with db.transaction(conn) as cur:
        await roles.require(cur, team_id, actor, roles.ADMIN)
        await _load(cur, team_id, webhook_id)
        event_id = uuid.uuid4()
        queued = await db.fetchone(cur, QUEUE_FOR_WEBHOOK, {
            "event_id": event_id, "type": PING, "team_id": team_id, "webhook_id": webhook_id,
            "payload": Json(payload(event_id, PING, actor,
                                     {"object": "webhook", "id": str(webhook_id)})),
        })
        return await db.fetchone(
            cur, f"SELECT {_DELIVERY_COLUMNS} FROM webhook_deliveries WHERE id = %s",
            (queued["id"],))
