"""Stripe's webhook (issue 41): events signed the way Stripe signs them decide a team's plan from
the subscription's current state (fetched from the front of stripe-mock, `stripe_mock.py`):
forged and stale signatures are 400, a replay is applied once, reordered events end in the
right plan, an unknown customer is logged and ignored, and a failed payment keeps the plan
through the grace period, then Starter, with nothing deleted."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from typing import Any

import pytest

from conftest import Api, query
from cvsm_server import db
from cvsm_server.billing import service as billing
from cvsm_server.core.timeutil import now as utcnow
from stripe_mock import (StripeFront, checkout_completed, event, settings_env, sign,
                         subscription)

WEBHOOK = "/api/v1/billing/stripe/webhook"


@pytest.fixture
async def bapi(start_client: Any, make_settings: Any, stripe_front: StripeFront) -> Api:
    """The app billing through the front of stripe-mock; team webhooks may target this host."""
    return Api(await start_client(make_settings(
        **settings_env(), stripe_api_base=stripe_front.url, webhook_allow_private="1")))


async def paying_team(bapi: Api, database_url: str, slug: str = "paying") -> tuple[dict, str, str]:
    """An Owner, their team (on Starter) after a checkout, and the team's Stripe Customer."""
    owner = await bapi.register(f"owner_{slug.replace('-', '_')}")
    team_id = await bapi.team(owner, slug)
    await query(database_url, "UPDATE teams SET plan = 'starter', max_secrets = 50, "
                              "max_members = 5 WHERE id = %s", (team_id,))
    resp = await bapi.client.post(f"/api/v1/teams/{team_id}/billing/checkout",
                                  headers=bapi.auth(owner["token"]), json={"plan": "professional"})
    assert resp.status == 200, await resp.text()
    (row,) = await query(database_url, "SELECT customer_id FROM team_billing WHERE team_id = %s",
                         (team_id,))
    return owner, team_id, row["customer_id"]


async def deliver(bapi: Api, body: bytes, signature: str | None = None) -> Any:
    resp = await bapi.client.post(WEBHOOK, data=body, headers={
        "Stripe-Signature": signature if signature is not None else sign(body),
        "Content-Type": "application/json"})
    return resp


async def state(bapi: Api, owner: dict, team_id: str) -> dict:
    resp = await bapi.client.get(f"/api/v1/teams/{team_id}/billing",
                                 headers=bapi.auth(owner["token"]))
    assert resp.status == 200
    return (await resp.json())["billing"]


async def plan_changes(database_url: str, team_id: str) -> list[dict]:
    rows = await query(database_url, "SELECT user_id, metadata FROM audit_logs WHERE team_id = %s "
                                     "AND action = 'team_plan_change' ORDER BY created_at, id",
                       (team_id,))
    assert all(r["user_id"] is None for r in rows)
    return [r["metadata"] for r in rows]


async def test_a_paid_checkout_puts_the_team_on_its_plan_once(
        bapi: Api, stripe_front: StripeFront, database_url: str) -> None:
    owner, team_id, customer = await paying_team(bapi, database_url)
    # a team webhook that asked for the plan event gets it, in the same transaction
    resp = await bapi.client.post(f"/api/v1/teams/{team_id}/webhooks",
                                  headers=bapi.auth(owner["token"]),
                                  json={"url": "http://127.0.0.1:9/cvsm",
                                        "events": ["team.plan_changed"]})
    assert resp.status == 201, await resp.text()
    stripe_front.subscriptions["sub_a"] = subscription("sub_a", customer, plan="professional")
    body = checkout_completed(team_id, customer, "sub_a")
    resp = await deliver(bapi, body)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["outcome"] == "applied"
    billing_state = await state(bapi, owner, team_id)
    assert billing_state["plan"] == "professional" and billing_state["status"] == "active"
    assert billing_state["current_period_end"] and billing_state["cancel_at_period_end"] is False
    (change,) = await plan_changes(database_url, team_id)
    assert change["by"] == "billing"
    assert change["from"]["plan"] == "starter" and change["to"] == {
        "plan": "professional", "max_secrets": 500, "max_members": 25}
    deliveries = await query(database_url, "SELECT event_type, payload FROM webhook_deliveries")
    assert [d["event_type"] for d in deliveries] == ["team.plan_changed"]
    assert deliveries[0]["payload"]["data"]["to"]["plan"] == "professional"

    # Stripe delivers it again (a retry, a replay): applied once
    resp = await deliver(bapi, body)
    assert resp.status == 200 and (await resp.json())["outcome"] == "replay"
    assert len(await plan_changes(database_url, team_id)) == 1
    assert stripe_front.calls["GET /v1/subscriptions/sub_a"] == 1


async def test_forged_stale_or_missing_signatures_are_400_and_change_nothing(
        bapi: Api, stripe_front: StripeFront, database_url: str) -> None:
    owner, team_id, customer = await paying_team(bapi, database_url)
    stripe_front.subscriptions["sub_f"] = subscription("sub_f", customer, plan="enterprise")
    body = checkout_completed(team_id, customer, "sub_f")
    stale = int(time.time()) - 600  # Stripe's tolerance is 300 s
    tampered = body.replace(b'"paid"', b'"PAID"')
    for signature, payload in [
            (sign(body, "whsec_another_endpoints_secret"), body),  # forged
            (sign(body, timestamp=stale), body),                  # stale
            (sign(body), tampered),                                 # the body changed
            ("t=1,v1=", body), ("garbage", body), ("", body)]:
        resp = await deliver(bapi, payload, signature)
        assert resp.status == 400, signature
        assert (await resp.json())["error"]
    billing_state = await state(bapi, owner, team_id)
    assert billing_state["plan"] == "starter" and billing_state["status"] is None
    assert not await query(database_url, "SELECT 1 FROM billing_events")
    assert stripe_front.calls["GET /v1/subscriptions/sub_f"] == 0


async def test_no_signature_header_no_body_read_and_the_body_is_capped(
        bapi: Api, stripe_front: StripeFront) -> None:
    resp = await bapi.client.post(WEBHOOK, data=b"{}")
    assert resp.status == 400
    assert "Stripe-Signature" in (await resp.json())["error"]
    big = b'{"id": "evt_x", "pad": "' + b"x" * (300 * 1024) + b'"}'
    resp = await bapi.client.post(WEBHOOK, data=big, headers={"Stripe-Signature": sign(big)})
    assert resp.status == 413

    async def chunks() -> Any:  # no declared length: cut off while it is read
        for _ in range(40):
            yield b"x" * 8192
    resp = await bapi.client.post(WEBHOOK, data=chunks(), headers={"Stripe-Signature": "t=1,v1=0"})
    assert resp.status == 413


async def test_reordered_events_end_in_the_subscriptions_current_plan(
        bapi: Api, stripe_front: StripeFront, database_url: str) -> None:
    """The Owner upgrades to Enterprise in the portal: `updated` arrives before `created` and
    before the checkout's event. Each applies what Stripe holds now: Enterprise."""
    owner, team_id, customer = await paying_team(bapi, database_url)
    stripe_front.subscriptions["sub_r"] = subscription("sub_r", customer, plan="enterprise")
    created = subscription("sub_r", customer, plan="professional")  # the snapshot, now stale
    for body in (event("customer.subscription.updated",
                       subscription("sub_r", customer, plan="enterprise")),
                 event("customer.subscription.created", created),
                 checkout_completed(team_id, customer, "sub_r")):
        resp = await deliver(bapi, body)
        assert resp.status == 200
    assert (await state(bapi, owner, team_id))["plan"] == "enterprise"
    assert [c["to"]["plan"] for c in await plan_changes(database_url, team_id)] == ["enterprise"]

    # cancelled in the portal: the `deleted` event late, after a stale `updated` (active)
    stripe_front.subscriptions["sub_r"] = subscription("sub_r", customer, status="canceled",
                                                       plan="enterprise")
    for body in (event("customer.subscription.deleted", stripe_front.subscriptions["sub_r"]),
                 event("customer.subscription.updated",
                       subscription("sub_r", customer, plan="enterprise"))):
        assert (await deliver(bapi, body)).status == 200
    billing_state = await state(bapi, owner, team_id)
    assert billing_state["plan"] == "starter" and billing_state["status"] == "canceled"
    # a new subscription after the cancelled one governs; the old one's late events do not
    stripe_front.subscriptions["sub_n"] = subscription("sub_n", customer, plan="professional")
    assert (await deliver(bapi, checkout_completed(team_id, customer, "sub_n"))).status == 200
    assert (await deliver(bapi, event("customer.subscription.deleted",
                                      stripe_front.subscriptions["sub_r"]))).status == 200
    assert (await state(bapi, owner, team_id))["plan"] == "professional"


async def test_an_event_for_an_unknown_customer_is_logged_and_ignored(
        bapi: Api, stripe_front: StripeFront, database_url: str,
        caplog: pytest.LogCaptureFixture) -> None:
    owner, team_id, _ = await paying_team(bapi, database_url)
    stripe_front.subscriptions["sub_u"] = subscription("sub_u", "cus_somebody_else")
    body = event("customer.subscription.created", stripe_front.subscriptions["sub_u"])
    resp = await deliver(bapi, body)
    assert resp.status == 200 and (await resp.json())["outcome"] == "unknown_customer"
    assert "cus_somebody_else" in caplog.text
    assert (await state(bapi, owner, team_id))["plan"] == "starter"
    # a checkout naming this team but paid by another customer is not this team's either
    body = checkout_completed(team_id, "cus_somebody_else", "sub_u")
    assert (await (await deliver(bapi, body)).json())["outcome"] == "unknown_customer"
    assert (await state(bapi, owner, team_id))["plan"] == "starter"
    assert stripe_front.calls["GET /v1/subscriptions/sub_u"] == 0
    # event kinds the server does not act on are answered 200 and left alone
    other = event("customer.created", {"id": "cus_new", "object": "customer"})
    resp = await deliver(bapi, other)
    assert resp.status == 200 and (await resp.json())["outcome"] == "ignored"


async def test_a_failed_payment_keeps_the_plan_through_grace_then_starter_deleting_nothing(
        bapi: Api, stripe_front: StripeFront, database_url: str) -> None:
    owner, team_id, customer = await paying_team(bapi, database_url)
    stripe_front.subscriptions["sub_p"] = subscription("sub_p", customer, plan="professional")
    assert (await deliver(bapi, checkout_completed(team_id, customer, "sub_p"))).status == 200
    # on Professional: three environments, 60 secrets, six members
    for i in range(60):
        await bapi.secret(owner, team_id, f"KEY_{i}", f"value-{i}",
                          environment=("development", "staging", "production")[i % 3])
    members = [await bapi.register() for _ in range(5)]
    for member in members:
        await bapi.add_member(owner, team_id, member, "Member")

    # the renewal fails: past due, the plan stays for the grace period (7 days)
    stripe_front.subscriptions["sub_p"] = subscription("sub_p", customer, status="past_due")
    invoice = {"id": "in_1", "object": "invoice", "customer": customer, "status": "open",
               "parent": {"type": "subscription_details",
                          "subscription_details": {"subscription": "sub_p"}}}
    assert (await deliver(bapi, event("invoice.payment_failed", invoice))).status == 200
    billing_state = await state(bapi, owner, team_id)
    assert billing_state["plan"] == "professional" and billing_state["status"] == "past_due"
    assert billing_state["grace_ends_at"]
    async with db.connection(pool := await db.create_pool(database_url, maxsize=1)) as conn:
        assert await billing.expire_grace(conn, grace_days=7,
                                          now=utcnow() + timedelta(days=6)) == 0
        assert (await state(bapi, owner, team_id))["plan"] == "professional"
        # a second failure (Stripe retries the charge) does not restart the grace period
        assert (await deliver(bapi, event("invoice.payment_failed", invoice))).status == 200
        assert await billing.expire_grace(conn, grace_days=7,
                                          now=utcnow() + timedelta(days=7, minutes=1)) == 1
    pool.close()
    await pool.wait_closed()
    billing_state = await state(bapi, owner, team_id)
    assert billing_state["plan"] == "starter" and billing_state["status"] == "past_due"
    changes = await plan_changes(database_url, team_id)
    assert [(c["from"]["plan"], c["to"]["plan"], c["by"]) for c in changes] == [
        ("starter", "professional", "billing"), ("professional", "starter", "billing")]

    # nothing deleted: every secret, member and environment is still there and readable
    auth = bapi.auth(owner["token"])
    resp = await bapi.client.get(f"/api/v1/teams/{team_id}/secrets/export?environment=staging",
                                 headers=auth)
    assert resp.status == 200
    resp = await bapi.client.get(f"/api/v1/teams/{team_id}/secrets/by-name/KEY_59"
                                 "?environment=production", headers=auth)
    assert resp.status == 200 and (await resp.json())["value"] == "value-59"
    resp = await bapi.client.get(f"/api/v1/teams/{team_id}/members", headers=auth)
    assert len((await resp.json())["members"]) == 6
    counts = await query(database_url, "SELECT count(*) AS n, count(DISTINCT environment) AS envs "
                                       "FROM secrets WHERE team_id = %s AND deleted_at IS NULL",
                         (team_id,))
    assert counts[0] == {"n": 60, "envs": 3}
    # only new things are refused, saying why and what lifts it
    resp = await bapi.client.post(f"/api/v1/teams/{team_id}/secrets", headers=auth,
                                  json={"name": "NEW", "value": "v", "environment": "production"})
    assert resp.status == 403
    message = (await resp.json())["error"]
    assert "Pembayaran langganan" in message and "/app/teams/paying/plan" in message
    extra = await bapi.register()
    resp = await bapi.client.post(f"/api/v1/teams/{team_id}/members", headers=auth,
                                  json={"identifier": extra["username"], "role": "Member"})
    assert resp.status == 403 and "Pembayaran langganan" in (await resp.json())["error"]
    # nor is the team deleted while it still pays (past due): its subscription is cancelled first
    resp = await bapi.client.delete(f"/api/v1/teams/{team_id}", headers=auth)
    assert resp.status == 409 and "portal" in (await resp.json())["error"]
    # what exists can still change: a value is updated in place
    (row,) = await query(database_url, "SELECT id FROM secrets WHERE team_id = %s AND name = 'KEY_0'",
                         (team_id,))
    resp = await bapi.client.put(f"/api/v1/teams/{team_id}/secrets/{row['id']}", headers=auth,
                                 json={"value": "changed"})
    assert resp.status == 200

    # the card is fixed: paid again, the plan comes back
    stripe_front.subscriptions["sub_p"] = subscription("sub_p", customer, plan="professional")
    paid = {**invoice, "status": "paid"}
    assert (await deliver(bapi, event("invoice.paid", paid))).status == 200
    billing_state = await state(bapi, owner, team_id)
    assert billing_state["plan"] == "professional" and billing_state["grace_ends_at"] is None


async def test_a_past_due_event_after_the_grace_period_is_starter_at_once(
        bapi: Api, stripe_front: StripeFront, database_url: str) -> None:
    owner, team_id, customer = await paying_team(bapi, database_url)
    stripe_front.subscriptions["sub_g"] = subscription("sub_g", customer, plan="professional")
    assert (await deliver(bapi, checkout_completed(team_id, customer, "sub_g"))).status == 200
    stripe_front.subscriptions["sub_g"] = subscription("sub_g", customer, status="unpaid")
    await query(database_url, "UPDATE team_billing SET past_due_since = now() - interval '8 days', "
                              "status = 'past_due' WHERE team_id = %s", (team_id,))
    body = event("customer.subscription.updated", stripe_front.subscriptions["sub_g"])
    assert (await deliver(bapi, body)).status == 200
    assert (await state(bapi, owner, team_id))["plan"] == "starter"


async def test_stripe_down_while_a_webhook_arrives_is_a_503_and_stripe_retries(
        bapi: Api, stripe_front: StripeFront, database_url: str) -> None:
    owner, team_id, customer = await paying_team(bapi, database_url)
    stripe_front.subscriptions["sub_d"] = subscription("sub_d", customer, plan="enterprise")
    body = checkout_completed(team_id, customer, "sub_d")
    stripe_front.down = True
    resp = await deliver(bapi, body)
    assert resp.status == 503
    assert not await query(database_url, "SELECT 1 FROM billing_events")  # not taken as done
    stripe_front.down = False
    resp = await deliver(bapi, body)
    assert resp.status == 200 and (await resp.json())["outcome"] == "applied"
    assert (await state(bapi, owner, team_id))["plan"] == "enterprise"
    assert json.loads(body)["type"] == "checkout.session.completed"


async def test_the_same_event_delivered_twice_at_once_is_applied_once(
        bapi: Api, stripe_front: StripeFront, database_url: str) -> None:
    owner, team_id, customer = await paying_team(bapi, database_url)
    stripe_front.subscriptions["sub_c"] = subscription("sub_c", customer, plan="enterprise")
    body = checkout_completed(team_id, customer, "sub_c")
    first, second = await asyncio.gather(deliver(bapi, body), deliver(bapi, body))
    outcomes = sorted([(await first.json())["outcome"], (await second.json())["outcome"]])
    assert outcomes == ["applied", "replay"]
    assert [c["to"]["plan"] for c in await plan_changes(database_url, team_id)] == ["enterprise"]
