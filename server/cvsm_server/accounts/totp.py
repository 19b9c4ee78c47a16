"""Two-factor login with TOTP (RFC 6238: SHA-1, 6 digits, 30-second steps, one step of drift).

The TOTP secret is encrypted at rest like secret values. A code is accepted at most once: the
step it matched is recorded and a code for that step or an earlier one is refused.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Mapping

import pyotp

from ..audit import log as audit
from .. import db
from ..core.actor import Actor
from ..crypto.sealing import Keyring, totp_aad
from ..core.errors import BadRequest, Conflict, Unauthorized
from ..core.inputs import is_digits
from ..crypto.passwords import PasswordHasher
from .sessions import require_jwt

STEP_SECONDS = 30
DIGITS = 6
DRIFT_STEPS = 1
ISSUER = "cvsm"

# What was wrong with a code, said as it is (a reused code was right once: nothing is learned).
CODE_FORMAT = "Kode autentikasi harus 6 angka dari aplikasi autentikator"
CODE_WRONG = ("Kode autentikasi salah: ketik kode yang sedang tampil di aplikasi autentikator "
              "(periksa juga jam perangkat)")
CODE_REUSED = ("Kode autentikasi ini sudah dipakai: tunggu kode berikutnya (berganti tiap "
               f"{STEP_SECONDS} detik)")
ALREADY_ON = "Autentikasi dua faktor sudah aktif"


def match_step(secret_b32: str, code: str, at: float | None = None) -> int | None:
    """The time step whose code equals `code` (within one step of drift), or None."""
    if not is_digits(code, DIGITS):
        return None
    otp = pyotp.TOTP(secret_b32, digits=DIGITS, interval=STEP_SECONDS)
    current = int((time.time() if at is None else at) // STEP_SECONDS)
    found = None
    for step in range(current - DRIFT_STEPS, current + DRIFT_STEPS + 1):
        if hmac.compare_digest(otp.generate_otp(step), code):
            found = step
    return found


def _open_secret(keyring: Keyring, user: Mapping) -> str | None:
    if user["totp_ciphertext"] is None:
        return None
    return keyring.open(user["totp_key_id"], user["totp_nonce"], user["totp_ciphertext"],
                        totp_aad(user["id"])).decode()


async def consume_code(cur: db.Cursor, keyring: Keyring, user: Mapping, code: str) -> bool:
    """Check `code` for `user` and burn its step; False when wrong or already used."""
    return await code_problem(cur, keyring, user, code) is None


async def code_problem(cur: db.Cursor, keyring: Keyring, user: Mapping, code: str) -> str | None:
    """Check `code` for `user` and burn its step: None when it is right, else what was wrong
    (`CODE_FORMAT`, `CODE_WRONG`, `CODE_REUSED`). Spaces inside the code are ignored."""
    code = code.replace(" ", "") if isinstance(code, str) else ""
    if not is_digits(code, DIGITS):
        return CODE_FORMAT
    secret = _open_secret(keyring, user)
    step = match_step(secret, code) if secret is not None else None
    if step is None:
        return CODE_WRONG
    await cur.execute(
        """UPDATE users SET totp_last_step = %s
           WHERE id = %s AND (totp_last_step IS NULL OR totp_last_step < %s)""",
        (step, user["id"], step),
    )
    return None if cur.rowcount == 1 else CODE_REUSED


_USER = """SELECT id, email, username, password_hash, totp_enabled, totp_key_id, totp_nonce,
                  totp_ciphertext, totp_last_step FROM users WHERE id = %s FOR NO KEY UPDATE"""


async def setup(conn: db.Connection, actor: Actor, keyring: Keyring) -> tuple[str, str]:
    """A new (not yet enabled) TOTP secret and its otpauth:// URL."""
    require_jwt(actor)
    secret = pyotp.random_base32()
    async with db.transaction(conn) as cur:
        user = await db.fetchone(cur, _USER, (actor.user_id,))
        if user["totp_enabled"]:
            raise Conflict(ALREADY_ON)
        sealed = keyring.seal(secret.encode(), totp_aad(actor.user_id))
        await cur.execute(
            """UPDATE users SET totp_key_id = %s, totp_nonce = %s, totp_ciphertext = %s,
                                totp_last_step = NULL WHERE id = %s""",
            (sealed.key_id, sealed.nonce, sealed.ciphertext, actor.user_id),
        )
    url = pyotp.TOTP(secret).provisioning_uri(name=user["email"], issuer_name=ISSUER)
    return secret, url


async def pending_setup(conn: db.Connection, actor: Actor, keyring: Keyring) -> tuple[str, str] | None:
    """The key `setup` made that is not enabled yet, and its otpauth:// URL, else None: a
    mistyped code keeps it, so the entry already scanned into the authenticator still works."""
    async with db.cursor(conn) as cur:
        user = await db.fetchone(cur, """SELECT id, email, totp_enabled, totp_key_id, totp_nonce,
                                                totp_ciphertext FROM users WHERE id = %s""",
                                 (actor.user_id,))
    if user is None or user["totp_enabled"] or user["totp_ciphertext"] is None:
        return None
    secret = _open_secret(keyring, user)
    if secret is None:
        return None
    return secret, pyotp.TOTP(secret).provisioning_uri(name=user["email"], issuer_name=ISSUER)


async def enable(conn: db.Connection, actor: Actor, keyring: Keyring, code: str) -> None:
    """Turn two-factor on once a code from the app matches."""
    require_jwt(actor)
    async with db.transaction(conn) as cur:
        user = await db.fetchone(cur, _USER, (actor.user_id,))
        if user["totp_enabled"]:
            raise Conflict(ALREADY_ON)
        if user["totp_ciphertext"] is None:
            raise BadRequest("Jalankan penyiapan dua faktor terlebih dahulu")
        if (problem := await code_problem(cur, keyring, user, code)) is not None:
            raise BadRequest(problem)
        await cur.execute("UPDATE users SET totp_enabled = true WHERE id = %s", (actor.user_id,))
        await audit.record(cur, actor, "2fa_enable", "user", resource_id=actor.user_id)


async def disable(conn: db.Connection, actor: Actor, keyring: Keyring, hasher: PasswordHasher,
                  code: str, password: str) -> None:
    """Turn two-factor off; needs both a fresh code and the password."""
    require_jwt(actor)
    async with db.transaction(conn) as cur:
        user = await db.fetchone(cur, _USER, (actor.user_id,))
        if not user["totp_enabled"]:
            raise BadRequest("Autentikasi dua faktor belum aktif")
        password_ok = await hasher.verify(password, user["password_hash"])
        if not password_ok or not await consume_code(cur, keyring, user, code):
            raise Unauthorized("Kode dua faktor atau kata sandi salah")
        await cur.execute(
            """UPDATE users SET totp_enabled = false, totp_key_id = NULL, totp_nonce = NULL,
                                totp_ciphertext = NULL, totp_last_step = NULL WHERE id = %s""",
            (actor.user_id,),
        )
        await audit.record(cur, actor, "2fa_disable", "user", resource_id=actor.user_id)
