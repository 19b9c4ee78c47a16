"""Billing routes (`CVSM_BILLING=stripe`, docs/billing.md): a team's billing state, a checkout
and the Customer Portal for its Owner, and Stripe's webhook. Parse, call `billing.service`,
shape the answer."""

from __future__ import annotations

import logging

from aiohttp import web

from ..billing import service as billing
from ..core.errors import BadRequest, NotFound
from ..core.inputs import field
from .request import actor, app_url, connection, read_bytes, read_json, team_of
from .schema import BOOL, STRING, TIME, answer, nullable, obj
from .state import SETTINGS, STRIPE

log = logging.getLogger("cvsm.billing")

# A Stripe event as delivered: an invoice with many lines stays well under it.
WEBHOOK_BODY = 256 * 1024
NO_SIGNATURE = "Header Stripe-Signature wajib ada"
MAX_SIGNATURE = 2048


async def get_billing(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        state = await billing.billing_state(conn, actor(request), team_id, request.app[STRIPE],
                                            grace_days=request.app[SETTINGS].billing_grace_days)
    return web.json_response({"billing": state})


async def billing_checkout(request: web.Request) -> web.Response:
    if request.app[STRIPE] is None:  # before the body: billing off is the same 404 everywhere
        raise NotFound(billing.BILLING_OFF)
    body = await read_json(request)
    plan = field(body, "plan", str)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        url = await billing.start_checkout(conn, actor(request), team_id, plan,
                                           request.app[STRIPE], app_url=app_url(request))
    return web.json_response({"url": url})


async def billing_portal(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        url = await billing.open_portal(conn, actor(request), team_id, request.app[STRIPE],
                                        app_url=app_url(request))
    return web.json_response({"url": url})


async def stripe_webhook(request: web.Request) -> web.Response:
    """Stripe's signature is the only credential: without its header nothing is read, and the
    body is read at most `WEBHOOK_BODY` (its cap in the route table)."""
    gateway = request.app[STRIPE]
    if gateway is None:
        raise NotFound(billing.BILLING_OFF)
    signature = request.headers.get("Stripe-Signature", "")
    if not signature or len(signature) > MAX_SIGNATURE:
        raise BadRequest(NO_SIGNATURE)
    payload = await read_bytes(request)
    async with connection(request) as conn:
        outcome = await billing.handle_event(
            conn, gateway, payload, signature,
            grace_days=request.app[SETTINGS].billing_grace_days)
    log.info("stripe webhook: %s", outcome)
    return web.json_response({"received": True, "outcome": outcome})


_STATE = obj({
    "enabled": {**BOOL, "description": "Whether this server bills through Stripe "
                                       "(`CVSM_BILLING=stripe`)."},
    "plan": {"type": "string", "enum": ["starter", "professional", "enterprise"]},
    "status": {**nullable(STRING), "description":
               "Stripe's status of the team's subscription (`active`, `trialing`, `past_due`, "
               "`unpaid`, `canceled`, `incomplete`, ...); null before any subscription."},
    "current_period_end": {**nullable(TIME), "description": "The end of the paid period."},
    "cancel_at_period_end": {**BOOL, "description": "The subscription ends with its period."},
    "grace_ends_at": {**nullable(TIME), "description":
                      "Past due: when the team falls to Starter unless the payment goes through."},
    "plans": {"type": "array", "items": STRING,
              "description": "The paid plans a checkout offers (empty while billing is off)."},
}, ("enabled", "plan", "status", "current_period_end", "cancel_at_period_end"))
_URL = answer({"url": {"type": "string", "description": "Where to send the Owner's browser."}})

OPENAPI = {
    "get_billing": {
        "summary": "The team's plan and subscription state (any member).",
        "tags": ["billing"],
        "description": "With billing off (`CVSM_BILLING` unset), `enabled` is false and the plan is "
                       "the operator's. docs/billing.md says what each state means for a team.",
        "responses": {200: answer({"billing": _STATE})},
    },
    "billing_checkout": {
        "summary": "Start paying for a plan: a Stripe Checkout URL (Owner).",
        "tags": ["billing"],
        "description": "A Checkout Session in subscription mode for the plan's Price; the team's "
                       "Stripe Customer is made at its first checkout. The plan changes when "
                       "Stripe's webhook reports the subscription, never on the way back from "
                       "Checkout. 404 while billing is off; 409 while the team has a subscription "
                       "(the portal changes or cancels it); 503 when Stripe cannot be reached.",
        "body": obj({"plan": {"type": "string", "enum": ["professional", "enterprise"],
                              "description": "A paid plan this server has a Price for."}},
                    ("plan",)),
        "responses": {200: _URL},
        "errors": [409, 503],
    },
    "billing_portal": {
        "summary": "A Stripe Customer Portal URL: card, invoices, plan, cancellation (Owner).",
        "tags": ["billing"],
        "description": "404 while billing is off; 409 before the team's first checkout; 503 "
                       "when Stripe cannot be reached.",
        "responses": {200: _URL},
        "errors": [409, 503],
    },
    "stripe_webhook": {
        "summary": "Stripe's webhook endpoint (Stripe's signature, no other credential).",
        "tags": ["billing"],
        "description": "The body is the event exactly as Stripe sent it, signed in the "
                       "`Stripe-Signature` header with the endpoint's secret "
                       "(`CVSM_STRIPE_WEBHOOK_SECRET`); a forged or stale signature is a 400. "
                       "Each event id is applied once, and the team's plan follows the "
                       "subscription's current state fetched from Stripe. 404 while billing is "
                       "off; 503 when Stripe cannot be reached (Stripe delivers it again).",
        "body": {"type": "object", "description": "A Stripe event."},
        "responses": {200: answer({"received": {"const": True}, "outcome": STRING})},
        "errors": [404, 503],
    },
}
