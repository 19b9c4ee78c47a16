"""The dashboard's browser session: cookies (secure flag, the pre-session, flash messages), CSRF
tokens (anonymous and per session) and the two-factor sign-in's pending step, all keyed MACs."""

from __future__ import annotations

import hashlib
import hmac
import secrets as random
import time
import uuid
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from ...accounts import devices
from ...core.i18n import N_
from ...core import i18n
from ...core.actor import Actor
from ...core.errors import Forbidden, Unauthorized
from ...core.inputs import decimal
from ..request import app_url
from ..state import KEYRING, SESSION_COOKIE, SIGNER
from .messages import FLASHES

COOKIE = SESSION_COOKIE
PRE_COOKIE = "cvsm_pre"
PENDING_LIFETIME = 300  # seconds between the password and the code of a two-factor sign-in
CSRF_FAILED = N_("Formulir kedaluwarsa atau tidak sah; muat ulang halaman lalu coba lagi")
PENDING_FAILED = N_("Langkah verifikasi kedaluwarsa; masuk lagi dengan kata sandi")
# A pre-session nonce made for this response (set as a cookie when the page is sent).
NEW_PRE_SESSION = web.RequestKey("cvsm_pre_new", str)
FLASH_COOKIE = "cvsm_flash"


def keyed_mac(request: web.Request, purpose: str, text: str) -> str:
    key = request.app[SIGNER].secret.encode()
    return hmac.new(key, f"{purpose}:{text}".encode(), hashlib.sha256).hexdigest()


def same_mac(given: str, expected: str) -> bool:
    """Whether `given` (from a form or a cookie: any text) is `expected`, in constant time.
    `hmac.compare_digest` raises TypeError for text with a non-ASCII character; bytes never."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


def pending_token(request: web.Request, user_id: uuid.UUID) -> str:
    expires = int(time.time()) + PENDING_LIFETIME
    body = f"{user_id}.{expires}"
    return f"{body}.{keyed_mac(request, '2fa', body)}"


def pending_user(request: web.Request, token: str) -> uuid.UUID:
    body, _, mac = token.rpartition(".")
    user, _, expires = body.partition(".")
    expires_at = decimal(expires)
    if not same_mac(mac, keyed_mac(request, "2fa", body)) or expires_at is None \
            or expires_at < time.time():
        raise Unauthorized(PENDING_FAILED)
    return uuid.UUID(user)


def is_secure(request: web.Request) -> bool:
    return app_url(request).startswith("https://")


def set_cookie(request: web.Request, response: web.StreamResponse, name: str, value: str,
               max_age: int | None = None) -> None:
    response.set_cookie(name, value, httponly=True, samesite="Lax", secure=is_secure(request),
                        path="/", max_age=max_age)


def device_of(request: web.Request) -> devices.Device | None:
    """The browser's device cookie when it is valid (accounts/devices.py), else None."""
    return devices.read(request.app[KEYRING], request.cookies.get(devices.COOKIE))


def remember_device(request: web.Request, response: web.StreamResponse,
                    user: Mapping[str, Any]) -> None:
    """After a complete sign-in: a new device cookie for the account (a year; HttpOnly,
    SameSite=Lax, Secure under https), so this browser is spared the account's wait."""
    set_cookie(request, response, devices.COOKIE,
               devices.mint(request.app[KEYRING], user["id"], user["device_generation"]),
               max_age=devices.LIFETIME)


def pre_session(request: web.Request) -> str:
    """The pre-session nonce that CSRF tokens of the signed-out forms are bound to."""
    return request.cookies.get(PRE_COOKIE) or request.get(NEW_PRE_SESSION) or ""


def anonymous_csrf(request: web.Request) -> str:
    nonce = pre_session(request)
    if not nonce:
        nonce = random.token_urlsafe(24)
        request[NEW_PRE_SESSION] = nonce
    return keyed_mac(request, "csrf-pre", nonce)


def check_anonymous_csrf(request: web.Request, form: Mapping[str, Any]) -> None:
    nonce = request.cookies.get(PRE_COOKIE, "")
    expected = keyed_mac(request, "csrf-pre", nonce)
    if not nonce or not same_mac(form_field(form, "csrf"), expected):
        raise Forbidden(CSRF_FAILED)


def session_csrf(request: web.Request, actor: Actor) -> str:
    return keyed_mac(request, "csrf", str(actor.session_id))


def check_session_csrf(request: web.Request, actor: Actor, form: Mapping[str, Any]) -> None:
    if not same_mac(form_field(form, "csrf"), session_csrf(request, actor)):
        raise Forbidden(CSRF_FAILED)


def flash(request: web.Request, response: web.StreamResponse, key: str) -> None:
    if key not in FLASHES:
        raise KeyError(key)  # a programming error: only the fixed messages are said
    set_cookie(request, response, FLASH_COOKIE, f"{key}.{keyed_mac(request, 'flash', key)}",
               max_age=ONCE_LIFETIME)


def read_flash(request: web.Request) -> dict[str, str] | None:
    key, _, mac = request.cookies.get(FLASH_COOKIE, "").partition(".")
    if key not in FLASHES or not same_mac(mac, keyed_mac(request, "flash", key)):
        return None
    kind, text = FLASHES[key]
    return {"kind": kind, "text": i18n.gettext(text)}  # in the page's language


# The page read the one-time cookie (`take_once`): its answer deletes it and is never stored.
TOOK_ONCE = web.RequestKey("cvsm_took_once", bool)
ONCE_COOKIE = "cvsm_once"
ONCE_LIFETIME = 120  # seconds between a value's POST and the page that shows it


def form_field(form: Mapping[str, Any], name: str, default: str = "") -> str:
    value = form.get(name, default)
    return value if isinstance(value, str) else default
