"""Typed application and request state (`web.AppKey`, `web.RequestKey`)."""

from __future__ import annotations

import aiopg
from aiohttp import web

from ..core.actor import Actor
from ..billing.stripe_api import StripeGateway
from ..audit.chain import CheckpointSigner
from ..secrets.changes import ChangeHub
from ..core.config import Settings
from ..accounts.credentials import CredentialCache
from ..crypto.sealing import Keyring
from ..accounts.oauth_providers import Providers
from ..crypto.passwords import PasswordHasher
from ..accounts.ratelimit import Charge, Leases
from ..accounts.sessions import JwtSigner
from ..accounts.users import PageState
from .outage import RequestOutage

SETTINGS = web.AppKey("settings", Settings)
POOL = web.AppKey("pool", aiopg.Pool)
KEYRING = web.AppKey("keyring", Keyring)
SIGNER = web.AppKey("jwt_signer", JwtSigner)
PASSWORDS = web.AppKey("passwords", PasswordHasher)
CREDENTIALS = web.AppKey("credentials", CredentialCache)
# This process's leases of the per-credential rate limit (`ratelimit.Leases`).
LEASES = web.AppKey("rate_leases", Leases)
# This process's requests' side of a database outage (`web.outage`: its two log lines).
REQUEST_OUTAGE = web.AppKey("request_outage", RequestOutage)
# The address `cvsm-server serve` listens on (set before start-up when CVSM_APP_URL is unset).
APP_URL = web.AppKey("app_url", str)
# The identity providers (`oauth.Providers`: settings, discovery and JWKS caches).
OAUTH = web.AppKey("oauth", Providers)
# The audit checkpoint key (set at start-up, once the keyring holds the database's hash key).
CHECKPOINT_SIGNER = web.AppKey("checkpoint_signer", CheckpointSigner)
# The process's LISTEN connection for the change streams (`changes.ChangeHub`).
CHANGE_HUB = web.AppKey("change_hub", ChangeHub)

# The Stripe account billing goes through (`billing.stripe_api`); None while billing is off.
STRIPE = web.AppKey("stripe", StripeGateway | None)  # type: ignore[arg-type]

# The dashboard's session cookie: a session JWT, read by `auth_middleware` on session routes.
SESSION_COOKIE = "cvsm_session"

REQUEST_ID = web.RequestKey("request_id", str)
ACTOR = web.RequestKey("actor", Actor)
# Set instead of counting when the handler counts the rate limit in its own statement.
RATE_CHARGE = web.RequestKey("rate_charge", Charge)
# What every signed-in page shows (`users.page_state`), read with the session on session routes.
PAGE_STATE = web.RequestKey("page_state", PageState)
