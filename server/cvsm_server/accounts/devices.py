"""Device cookies (OWASP, "Slow down online guessing attacks with device cookies").

A successful sign-in (the password, and the code when two-factor is on) gives the browser a
cookie signed with the server's token-hash key: `v1.<user id>.<generation>.<nonce>.<issued at>.
<signature>`. While an account is in its wait after repeated wrong passwords (ratelimit.py), a
sign-in that comes with a valid cookie for THAT account is checked as usual instead of being
refused with 429, so nobody can keep the owner out by guessing; a guesser without one still
waits. The cookie's own wrong passwords count against the cookie (`throttle_key`, the same
progressive delay as an account's); after `MAX_FAILURES` consecutive ones within a day the
cookie is no longer trusted and its browser waits like any other. A cookie is valid while its
signature holds, it is under `LIFETIME` old, and its generation is the account's
`device_generation`: a password reset, "sign out everywhere" and every other end of all an
account's credentials bump it (`forget_all`), and every cookie issued before stops counting.

The cookie is no credential: it never signs anyone in, it only spares its browser the wait.
"""

from __future__ import annotations

import base64
import hmac
import os
import re
import time
import uuid
from dataclasses import dataclass

from .. import db
from ..crypto.sealing import Keyring

COOKIE = "cvsm_device"
LIFETIME = 365 * 24 * 3600
# A cookie's consecutive wrong passwords (a day without one forgets them) before it is no
# longer trusted.
MAX_FAILURES = 5
# How far in the future an issue time may lie (clocks of several processes differ a little).
_SKEW = 300
_FORMAT = re.compile(r"v1\.([0-9a-f]{32})\.([0-9]{1,9})\.([A-Za-z0-9_-]{22})\.([0-9]{1,12})"
                     r"\.([A-Za-z0-9_-]{43})\Z")


@dataclass(frozen=True, slots=True)
class Device:
    """A device cookie whose signature and age are valid (not yet checked against the
    account's generation)."""

    user_id: uuid.UUID
    generation: int
    nonce: str
    issued_at: int

    @property
    def throttle_key(self) -> str:
        """The cookie's row in `auth_throttle` (its own wrong passwords)."""
        return f"device:{self.nonce}"


def _signature(keyring: Keyring, payload: str) -> str:
    # The token-hash key signs; the prefix keeps these apart from every token it hashes.
    digest = keyring.token_hash("cvsm-device-cookie\x00" + payload)
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def mint(keyring: Keyring, user_id: uuid.UUID, generation: int, *,
         issued_at: int | None = None) -> str:
    """A new cookie value for `user_id` at `generation` (a fresh nonce each time)."""
    nonce = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
    issued = int(time.time()) if issued_at is None else issued_at
    payload = f"v1.{user_id.hex}.{generation}.{nonce}.{issued}"
    return f"{payload}.{_signature(keyring, payload)}"


def read(keyring: Keyring, value: str | None) -> Device | None:
    """The device a cookie value names, when it is well formed, signed by this server and under
    `LIFETIME` old; else None (a forged, mangled or old cookie is simply no device cookie)."""
    if not value or len(value) > 200:
        return None
    match = _FORMAT.match(value)
    if match is None:
        return None
    payload = value.rsplit(".", 1)[0]
    if not hmac.compare_digest(_signature(keyring, payload), match.group(5)):
        return None
    issued = int(match.group(4))
    if not time.time() - LIFETIME < issued <= time.time() + _SKEW:
        return None
    return Device(uuid.UUID(match.group(1)), int(match.group(2)), match.group(3), issued)


async def trusted(conn: db.Connection, device: Device | None, *, user_sql: str,
                  user_args: tuple) -> bool:
    """Whether `device` is a valid cookie for the account `user_sql` (a condition on `u`, with
    `user_args`) names: the same account, its current generation, not disabled, and the cookie
    under `MAX_FAILURES` consecutive wrong passwords. Reads only."""
    if device is None:
        return False
    async with db.cursor(conn) as cur:
        row = await db.fetchone(
            cur,
            f"""SELECT 1 AS ok FROM users u
                WHERE u.id = %s AND u.device_generation = %s AND u.disabled_at IS NULL
                  AND ({user_sql})
                  AND NOT EXISTS (
                      SELECT 1 FROM auth_throttle t
                      WHERE t.key = %s AND t.failures >= %s
                        AND t.last_failed_at > clock_timestamp() - interval '1 day')""",
            (device.user_id, device.generation, *user_args, device.throttle_key, MAX_FAILURES),
        )
    return row is not None


async def forget_all(cur: db.Cursor, user_id: uuid.UUID) -> None:
    """Every device cookie of `user_id` stops counting (in the caller's transaction)."""
    await cur.execute("UPDATE users SET device_generation = device_generation + 1 WHERE id = %s",
                      (user_id,))
