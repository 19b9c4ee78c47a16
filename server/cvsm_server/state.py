"""Typed application and request state (`web.AppKey`, `web.RequestKey`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import aiopg
from aiohttp import web

from .config import Settings
from .crypto import Keyring
from .passwords import PasswordHasher


@dataclass(frozen=True)
class Principal:
    """Who is calling: a user, through a JWT session or an API token."""

    user_id: uuid.UUID
    email: str
    via: str  # "jwt" or "api_token"
    session_id: uuid.UUID | None = None
    token_id: uuid.UUID | None = None


SETTINGS = web.AppKey("settings", Settings)
POOL = web.AppKey("pool", aiopg.Pool)
KEYRING = web.AppKey("keyring", Keyring)
JWT_SECRET = web.AppKey("jwt_secret", str)
PASSWORDS = web.AppKey("passwords", PasswordHasher)

CLIENT_IP = web.RequestKey("client_ip", str)
PRINCIPAL = web.RequestKey("principal", Principal)


def principal(request: web.Request) -> Principal:
    return request[PRINCIPAL]
