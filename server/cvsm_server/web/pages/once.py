"""A value shown once (a new API token, a share link, an import's result), carried from the
POST that made it to the page that shows it: sealed by the keyring (AES-GCM) for this session
and purpose, for two minutes, in a cookie (`kit.ONCE_COOKIE`). Never in a URL or a log; the page
that shows it deletes the cookie and is never stored (`kit.render_page`), so a reload shows it
no more and creates nothing.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from ...core.actor import Actor
from ...crypto.sealing import DecryptionError
from ..state import KEYRING
from .session import ONCE_COOKIE, ONCE_LIFETIME, TOOK_ONCE, set_cookie


def _once_aad(actor: Actor, kind: str) -> bytes:
    return f"cvsm:once:{kind}:{actor.session_id}".encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def keep_once(request: web.Request, response: web.StreamResponse, actor: Actor, kind: str,
              data: Mapping[str, Any]) -> None:
    body = json.dumps({"data": dict(data), "until": int(time.time()) + ONCE_LIFETIME}).encode()
    sealed = request.app[KEYRING].seal(body, _once_aad(actor, kind))
    value = ".".join((_b64(sealed.key_id.encode()), _b64(sealed.nonce), _b64(sealed.ciphertext)))
    set_cookie(request, response, ONCE_COOKIE, value, max_age=ONCE_LIFETIME)


def take_once(request: web.Request, actor: Actor, kind: str) -> dict[str, Any] | None:
    """The value kept for this page (`keep_once`), once: the page's answer deletes it."""
    raw = request.cookies.get(ONCE_COOKIE)
    if not raw:
        return None
    request[TOOK_ONCE] = True
    try:
        key_id, nonce, ciphertext = (_unb64(part) for part in raw.split("."))
        body = json.loads(request.app[KEYRING].open(key_id.decode(), nonce, ciphertext,
                                                    _once_aad(actor, kind)))
    except (ValueError, DecryptionError):  # another session's, another kind, or tampered
        return None
    if not isinstance(body, dict) or not isinstance(body.get("until"), int) \
            or body["until"] < time.time() or not isinstance(body.get("data"), dict):
        return None
    return body["data"]


