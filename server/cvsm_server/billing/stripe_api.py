"""Every call to Stripe, through the official library (`stripe`), in one place: the team's
Customer, a Checkout Session, a Customer Portal session, a subscription's current state, and a
webhook event's signature (`Webhook.construct_event`).

The library's client is synchronous (`requests`); each call runs in a worker thread so the
event loop never waits on Stripe. A failure of Stripe (down, refused key, a network error) is a
503 with an Indonesian message; what Stripe said is logged, never the key. `StripeGateway` is
built once from the settings (`from_settings`, None while billing is off); its repr shows no
key or secret.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import stripe

from ..core.config import Settings
from ..core.errors import ServiceUnavailable

log = logging.getLogger("cvsm.billing")

STRIPE_DOWN = "Layanan pembayaran (Stripe) sedang tidak dapat dihubungi, coba lagi nanti"
# Stripe's default tolerance for a signature's timestamp (seconds), as `construct_event` uses.
TOLERANCE = stripe.Webhook.DEFAULT_TOLERANCE
# (connect, read) seconds: a Stripe that hangs is a 503 long before the library's 80 s (a
# webhook holds its team's billing row meanwhile).
TIMEOUT = (5.0, 20.0)
T = TypeVar("T")


class BadSignature(Exception):
    """A webhook body whose `Stripe-Signature` does not verify (forged, stale, malformed)."""


class StripeGateway:
    """The Stripe account this server bills through."""

    def __init__(self, secret_key: str, webhook_secret: str, prices: Mapping[str, str], *,
                 api_base: str | None = None) -> None:
        base = {"api": api_base} if api_base else None
        # No retries inside a request's time: a failure is the caller's 503 (Stripe retries a
        # webhook delivery that failed on its own).
        self._client = stripe.StripeClient(
            secret_key, base_addresses=base,  # type: ignore[arg-type]
            max_network_retries=0, http_client=stripe.RequestsClient(timeout=TIMEOUT))
        self._webhook_secret = webhook_secret
        self.prices = dict(prices)
        self.plan_of_price = {price: plan for plan, price in self.prices.items()}

    def __repr__(self) -> str:
        return f"StripeGateway(prices={self.prices!r})"

    @classmethod
    def from_settings(cls, settings: Settings) -> StripeGateway | None:
        if settings.billing != "stripe":
            return None
        assert settings.stripe_secret_key and settings.stripe_webhook_secret
        return cls(settings.stripe_secret_key, settings.stripe_webhook_secret,
                   settings.stripe_prices, api_base=settings.stripe_api_base)

    async def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(call)
        except stripe.StripeError as exc:
            # The library's message names the request, never the key.
            log.warning("stripe: %s failed: %s (%s)", what, type(exc).__name__,
                        getattr(exc, "user_message", None) or exc.code or exc.http_status)
            raise ServiceUnavailable(STRIPE_DOWN, retry_after=30) from None

    async def create_customer(self, team_id: uuid.UUID, name: str, email: str | None) -> str:
        """A Customer for the team (its id in the metadata); the same one for the same team
        however often it is asked (Stripe's idempotency key)."""
        params: dict[str, Any] = {"name": name, "metadata": {"cvsm_team_id": str(team_id)}}
        if email:
            params["email"] = email
        customer = await self._call("customer create", lambda: self._client.v1.customers.create(
            params,  # type: ignore[arg-type]
            {"idempotency_key": f"cvsm-team-customer-{team_id}"}))
        return customer.id

    async def checkout_url(self, customer_id: str, plan: str, team_id: uuid.UUID, *,
                           success_url: str, cancel_url: str) -> str:
        """A Checkout Session in subscription mode for `plan`'s Price: its URL."""
        session = await self._call("checkout session", lambda: self._client.v1.checkout.sessions.create({
            "mode": "subscription", "customer": customer_id,
            "client_reference_id": str(team_id),
            "line_items": [{"price": self.prices[plan], "quantity": 1}],
            "subscription_data": {"metadata": {"cvsm_team_id": str(team_id)}},
            "success_url": success_url, "cancel_url": cancel_url,
        }))
        return session.url or ""

    async def portal_url(self, customer_id: str, return_url: str) -> str:
        """A Customer Portal session (card, invoices, cancellation): its URL."""
        session = await self._call("portal session", lambda: self._client.v1.billing_portal.sessions.create(
            {"customer": customer_id, "return_url": return_url}))
        return session.url

    async def subscription(self, subscription_id: str) -> dict | None:
        """The subscription as Stripe has it now (None: Stripe knows no such subscription)."""
        def fetch() -> dict | None:
            try:
                return self._client.v1.subscriptions.retrieve(subscription_id).last_response.data
            except stripe.InvalidRequestError as exc:
                if exc.http_status == 404:
                    return None
                raise
        return await self._call("subscription retrieve", fetch)

    def event(self, payload: bytes, signature: str) -> dict:
        """The event of a webhook body whose `Stripe-Signature` verifies with the endpoint's
        secret within Stripe's tolerance; `BadSignature` otherwise."""
        try:
            stripe.Webhook.construct_event(payload, signature, self._webhook_secret,
                                           tolerance=TOLERANCE)
            event = json.loads(payload)
        except (stripe.SignatureVerificationError, ValueError, UnicodeDecodeError):
            raise BadSignature() from None
        return event if isinstance(event, dict) else {}
