"""Billing's domain functions: a team's billing state (members), a checkout and the Customer
Portal (the Owner), the webhook's events (Stripe), and the end of a grace period (a job).

Webhooks decide, never the redirect back from Checkout: an event's signature is checked, its id
is stored and applied once, and the team's plan follows the subscription's current state,
fetched from Stripe (not the event's snapshot), so events arriving out of order, late or twice
end in the same plan. `gateway` is the Stripe account (`stripe_api.StripeGateway`), None while
billing is off.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

from .. import db
from ..audit import log as audit
from ..core.actor import Actor
from ..core.errors import BadRequest, Conflict, NotFound
from ..core.i18n import N_, Text
from ..core.timeutil import iso, now as utcnow
from ..teams import roles
from ..teams.roles import OWNER, VIEWER
from . import queries, rules
from .stripe_api import BadSignature, StripeGateway

log = logging.getLogger("cvsm.billing")

BILLING_OFF = "Penagihan tidak diaktifkan di server ini"
BAD_PLAN = N_("Kolom 'plan' harus salah satu paket berbayar: {plans}")
ALREADY_SUBSCRIBED = ("Tim ini sudah berlangganan; ubah paket, kartu, atau batalkan langganan "
                      "lewat portal tagihan (POST /teams/:id/billing/portal)")
NO_CUSTOMER = ("Tim ini belum pernah berlangganan; pilih paket dulu "
               "(POST /teams/:id/billing/checkout)")
BAD_SIGNATURE = "Tanda tangan Stripe-Signature tidak valid atau kedaluwarsa"
BAD_EVENT = "Event Stripe tidak valid"
# The events the webhook acts on (docs/billing.md lists them for the endpoint's set-up).
EVENTS = ("checkout.session.completed", "customer.subscription.created",
          "customer.subscription.updated", "customer.subscription.deleted", "invoice.paid",
          "invoice.payment_failed")


def billing_json(team: dict, row: dict | None, gateway: StripeGateway | None,
                 grace_days: int) -> dict:
    """`{enabled, plan, status, current_period_end, cancel_at_period_end}` (the contract's),
    with `grace_ends_at` (past due: when the team falls to Starter) and `plans` (the paid plans
    a checkout offers)."""
    row = row or {}
    past_due_since = row.get("past_due_since")
    return {
        "enabled": gateway is not None,
        "plan": team["plan"],
        "status": row.get("status"),
        "current_period_end": iso(row["current_period_end"])
        if row.get("current_period_end") else None,
        "cancel_at_period_end": bool(row.get("cancel_at_period_end")),
        "grace_ends_at": iso(rules.grace_ends(past_due_since, grace_days))
        if past_due_since else None,
        "plans": list(gateway.prices) if gateway is not None else [],
    }


async def billing_state(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                        gateway: StripeGateway | None, *, grace_days: int = 7) -> dict:
    """The team's plan and subscription state (`billing_json`): any member."""
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, VIEWER)
        team = await db.fetchone(cur, "SELECT plan FROM teams WHERE id = %s", (team_id,))
        row = await queries.billing_row(cur, team_id)
    return billing_json(team, row, gateway, grace_days)


def _require_on(gateway: StripeGateway | None) -> StripeGateway:
    if gateway is None:
        raise NotFound(BILLING_OFF)
    return gateway


async def _owner_team(conn: db.Connection, actor: Actor, team_id: uuid.UUID) -> tuple[dict, dict | None]:
    async with db.cursor(conn) as cur:
        await roles.require(cur, team_id, actor, OWNER)
        team = await db.fetchone(cur, "SELECT id, slug, name, plan FROM teams WHERE id = %s",
                                 (team_id,))
        row = await queries.billing_row(cur, team_id)
    return team, row


def plan_page_url(app_url: str, slug: str) -> str:
    return f"{app_url.rstrip('/')}/app/teams/{slug}/plan"


async def start_checkout(conn: db.Connection, actor: Actor, team_id: uuid.UUID, plan: object,
                         gateway: StripeGateway | None, *, app_url: str) -> str:
    """A Checkout Session (subscription mode) for the team on `plan`: its URL, where the Owner
    pays. The team's Customer is made at its first checkout and kept. The plan changes only when
    Stripe's webhook says the subscription is paid (`handle_event`). 404 while billing is off;
    409 while the team has a subscription (the portal changes that one)."""
    gateway = _require_on(gateway)
    if not isinstance(plan, str) or plan not in gateway.prices:
        raise BadRequest(Text(BAD_PLAN, plans=", ".join(gateway.prices)))
    team, row = await _owner_team(conn, actor, team_id)
    if row is not None and (row["status"] in rules.LIVE or row["status"] in rules.GRACE):
        raise Conflict(ALREADY_SUBSCRIBED)
    if row is None:
        customer = await gateway.create_customer(team_id, team["name"], actor.email)
        async with db.transaction(conn) as cur:
            row = await queries.add_customer(cur, team_id, customer)
    page = plan_page_url(app_url, team["slug"])
    url = await gateway.checkout_url(row["customer_id"], plan, team_id,
                                     success_url=f"{page}?checkout=done", cancel_url=page)
    async with db.transaction(conn) as cur:
        await audit.record(cur, actor, "billing_checkout", "team", team_id=team_id,
                           resource_id=team_id, metadata={"plan": plan})
    return url


async def open_portal(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                      gateway: StripeGateway | None, *, app_url: str) -> str:
    """A Customer Portal session for the team's Customer (card, invoices, plan, cancellation):
    its URL. The Owner; 404 while billing is off, 409 before the team's first checkout."""
    gateway = _require_on(gateway)
    team, row = await _owner_team(conn, actor, team_id)
    if row is None:
        raise Conflict(NO_CUSTOMER)
    return await gateway.portal_url(row["customer_id"], plan_page_url(app_url, team["slug"]))


async def handle_event(conn: db.Connection, gateway: StripeGateway | None, payload: bytes,
                       signature: str, *, grace_days: int = 7,
                       now: datetime | None = None) -> str:
    """Apply one webhook delivery: what happened, in a word (`applied`, `replay`, `ignored`,
    `unknown_customer`) for the log. 400 for a signature that does not verify (forged, stale,
    another endpoint's secret); 503 when Stripe cannot be asked (Stripe delivers it again)."""
    gateway = _require_on(gateway)
    try:
        event = gateway.event(payload, signature)
    except BadSignature:
        raise BadRequest(BAD_SIGNATURE) from None
    event_id, event_type = event.get("id"), event.get("type")
    obj = (event.get("data") or {}).get("object")
    if not isinstance(event_id, str) or not isinstance(event_type, str) or not isinstance(obj, dict):
        raise BadRequest(BAD_EVENT)
    if event_type not in EVENTS:
        return "ignored"
    async with db.cursor(conn) as cur:
        if await queries.event_seen(cur, event_id):
            return "replay"
        customer = rules.customer_of(obj)
        team_id = await queries.team_of_customer(cur, customer) if customer else None
    if team_id is None:
        log.warning("stripe event %s (%s) for a customer this server does not know (%s): "
                    "ignored", event_id, event_type, customer)
        async with db.transaction(conn) as cur:
            await queries.claim_event(cur, event_id, event_type, None)
        return "unknown_customer"
    reference = obj.get("client_reference_id")
    if event_type == "checkout.session.completed" and reference not in (None, str(team_id)):
        log.warning("stripe event %s: checkout for team %s paid by the customer of team %s: "
                    "ignored", event_id, reference, team_id)
        async with db.transaction(conn) as cur:
            await queries.claim_event(cur, event_id, event_type, team_id)
        return "ignored"
    subscription_id = rules.subscription_of_event(event_type, obj)
    async with db.transaction(conn) as cur:
        if not await queries.claim_event(cur, event_id, event_type, team_id):
            return "replay"
        # The team's billing row stays locked from before the fetch to the write: deliveries
        # for one team apply one after the other, each with what Stripe held after the one
        # before (the team's own row is locked only for the write: its secrets never wait on
        # Stripe). A failure of Stripe rolls the claim back: Stripe delivers the event again.
        row = await queries.billing_row(cur, team_id, lock=True)
        data = await gateway.subscription(subscription_id) if subscription_id else None
        sub = rules.subscription(data) if data is not None else None
        if row is None or sub is None or sub.customer != customer:
            log.warning("stripe event %s (%s): no subscription of its customer to apply",
                        event_id, event_type)
            return "ignored"
        return await _apply(cur, gateway, team_id, row, sub, grace_days=grace_days,
                            now=now or utcnow())


async def _apply(cur: db.Cursor, gateway: StripeGateway, team_id: uuid.UUID, row: dict,
                 sub: rules.Subscription, *, grace_days: int, now: datetime) -> str:
    if not rules.governs(row["subscription_id"], row["status"], sub):
        return "ignored"
    team = await queries.lock_team(cur, team_id)
    if team is None:
        return "ignored"
    if sub.status in rules.LIVE and sub.price_id not in gateway.plan_of_price:
        log.warning("stripe subscription %s of team %s has a price no plan is set to (%s): "
                    "the plan stays", sub.id, team_id, sub.price_id)
    plan, past_due_since = rules.next_plan(
        team["plan"], sub, gateway.plan_of_price, past_due_since=row["past_due_since"],
        now=now, grace_days=grace_days)
    await queries.save_subscription(cur, team_id, sub, past_due_since)
    if plan != team["plan"]:
        await queries.change_plan(cur, team, plan, status=sub.status)
    return "applied"


async def expire_grace(conn: db.Connection, *, grace_days: int,
                       now: datetime | None = None) -> int:
    """Put on Starter every team whose subscription has been past due for the grace period;
    how many. (A background job, while billing is on.)"""
    moment = now or utcnow()
    async with db.transaction(conn) as cur:
        teams = await queries.past_due_teams(cur, rules.grace_ends(moment, -grace_days))
        for team in teams:
            await queries.change_plan(cur, team, rules.FREE_PLAN, status=team["status"])
    return len(teams)


async def team_states(conn: db.Connection, team_ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    """Each team's subscription state by id (`status`, `current_period_end`,
    `cancel_at_period_end`, `past_due_since`), for teams that have a Stripe Customer: for lists
    whose caller is already checked (the admin panel)."""
    async with db.cursor(conn) as cur:
        rows = await queries.states(cur, team_ids)
    return {team_id: {"status": row["status"], "current_period_end": row["current_period_end"],
                      "cancel_at_period_end": row["cancel_at_period_end"],
                      "past_due_since": row["past_due_since"]}
            for team_id, row in rows.items()}
