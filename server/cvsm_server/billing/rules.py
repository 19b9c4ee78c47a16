"""What a subscription's state, as Stripe has it now, means for a team's plan. Pure functions:
no database, no Stripe.

- `active`, `trialing`: the plan of the subscription's Price.
- `past_due`, `unpaid` (a payment failed): the plan the team has, through the grace period
  counted from when it was first seen so (`past_due_since`), then Starter.
- `canceled`, `incomplete_expired`, `paused`: Starter.
- `incomplete` (the first payment is not through yet): nothing changes.

A team has one subscription that governs it: the one stored, unless another one comes that is
live while the stored one is not (a new subscription after a cancelled one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

FREE_PLAN = "starter"
LIVE = frozenset({"active", "trialing"})
GRACE = frozenset({"past_due", "unpaid"})
ENDED = frozenset({"canceled", "incomplete_expired", "paused"})


@dataclass(frozen=True)
class Subscription:
    """The parts of a Stripe subscription the server keeps."""
    id: str
    customer: str
    status: str
    price_id: str | None
    current_period_end: datetime | None
    cancel_at_period_end: bool


def _id(value: Any) -> str | None:
    """An id Stripe sends either as a string or as the expanded object."""
    if isinstance(value, Mapping):
        value = value.get("id")
    return value if isinstance(value, str) and value else None


def _time(value: Any) -> datetime | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return datetime.fromtimestamp(value, timezone.utc)


def subscription(data: Mapping[str, Any]) -> Subscription:
    """A subscription object (as `stripe_api.subscription` returns it). The paid period's end
    is on its item since Stripe's 2025 API versions, on the subscription before."""
    items = ((data.get("items") or {}).get("data") or [{}])
    item = items[0] if isinstance(items[0], Mapping) else {}
    price = item.get("price")
    return Subscription(
        id=str(data.get("id") or ""), customer=_id(data.get("customer")) or "",
        status=str(data.get("status") or ""), price_id=_id(price),
        current_period_end=_time(item.get("current_period_end"))
        or _time(data.get("current_period_end")),
        cancel_at_period_end=bool(data.get("cancel_at_period_end")))


def subscription_of_event(event_type: str, obj: Mapping[str, Any]) -> str | None:
    """The subscription an event is about: a Checkout Session's, the subscription itself, an
    invoice's (on the invoice before Stripe's 2025 API versions, under `parent` since)."""
    if event_type.startswith("customer.subscription."):
        return _id(obj.get("id"))
    if event_type == "checkout.session.completed":
        return _id(obj.get("subscription"))
    if event_type.startswith("invoice."):
        details = ((obj.get("parent") or {}).get("subscription_details") or {})
        return _id(obj.get("subscription")) or _id(details.get("subscription"))
    return None


def customer_of(obj: Mapping[str, Any]) -> str | None:
    return _id(obj.get("customer"))


def governs(stored_id: str | None, stored_status: str | None, incoming: Subscription) -> bool:
    """Whether `incoming` decides the team's plan: it is the stored subscription, or there is
    none, or the stored one is no longer live and the incoming one is."""
    if stored_id is None or stored_id == incoming.id:
        return True
    stored_live = stored_status in LIVE or stored_status in GRACE
    return not stored_live and (incoming.status in LIVE or incoming.status in GRACE)


def grace_ends(past_due_since: datetime | None, grace_days: int) -> datetime | None:
    return None if past_due_since is None else past_due_since + timedelta(days=grace_days)


def next_plan(current_plan: str, sub: Subscription, plan_of_price: Mapping[str, str], *,
              past_due_since: datetime | None, now: datetime,
              grace_days: int) -> tuple[str, datetime | None]:
    """The team's plan under `sub`, and since when it is past due (None: it is not)."""
    if sub.status in LIVE:
        plan = plan_of_price.get(sub.price_id or "")
        return (plan or current_plan), None
    if sub.status in GRACE:
        since = past_due_since or now
        ends = grace_ends(since, grace_days)
        return (FREE_PLAN if ends is not None and now >= ends else current_plan), since
    if sub.status in ENDED:
        return FREE_PLAN, None
    return current_plan, past_due_since
