"""Billing through Stripe (issue 41): the settings, `GET /teams/:id/billing`, the checkout and the
Customer Portal, every Stripe call made against stripe-mock (`stripe_mock.py`)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from conftest import Api, query
from cvsm_server.billing import rules
from cvsm_server.core.config import ConfigError, Settings
from cvsm_server.web.state import STRIPE
from stripe_mock import PRICES, SECRET_KEY, WEBHOOK_SECRET, StripeFront, settings_env

BASE = {"CVSM_BILLING": "stripe", "CVSM_STRIPE_SECRET_KEY": SECRET_KEY,
        "CVSM_STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "CVSM_STRIPE_PRICE_PROFESSIONAL": PRICES["professional"]}


def test_billing_is_off_unless_set() -> None:
    settings = Settings.from_env({})
    assert settings.billing is None and settings.stripe_prices == {}
    assert settings.billing_grace_days == 7


def test_billing_settings_are_read_and_never_shown() -> None:
    settings = Settings.from_env({**BASE, "CVSM_STRIPE_PRICE_ENTERPRISE": "price_ent",
                                  "CVSM_BILLING_GRACE_DAYS": "3"})
    assert settings.billing == "stripe" and settings.billing_grace_days == 3
    assert settings.stripe_prices == {"professional": PRICES["professional"],
                                      "enterprise": "price_ent"}
    assert SECRET_KEY not in repr(settings) and WEBHOOK_SECRET not in repr(settings)


@pytest.mark.parametrize(("change", "named"), [
    ({"CVSM_BILLING": "paypal"}, "CVSM_BILLING"),
    ({"CVSM_STRIPE_SECRET_KEY": ""}, "CVSM_STRIPE_SECRET_KEY"),
    ({"CVSM_STRIPE_SECRET_KEY": "pk_test_publishable"}, "CVSM_STRIPE_SECRET_KEY"),
    ({"CVSM_STRIPE_WEBHOOK_SECRET": ""}, "CVSM_STRIPE_WEBHOOK_SECRET"),
    ({"CVSM_STRIPE_PRICE_PROFESSIONAL": ""}, "CVSM_STRIPE_PRICE_PROFESSIONAL"),
    ({"CVSM_STRIPE_PRICE_PROFESSIONAL": "prod_123"}, "CVSM_STRIPE_PRICE_PROFESSIONAL"),
    ({"CVSM_STRIPE_PRICE_STARTER": "price_free"}, "CVSM_STRIPE_PRICE_STARTER"),
    ({"CVSM_STRIPE_PRICE_ENTERPRISE": PRICES["professional"]}, "CVSM_STRIPE_PRICE_"),
    ({"CVSM_BILLING_GRACE_DAYS": "-1"}, "CVSM_BILLING_GRACE_DAYS"),
    ({"CVSM_BILLING_GRACE_DAYS": "91"}, "CVSM_BILLING_GRACE_DAYS"),
    ({"CVSM_STRIPE_API_BASE": "ftp://x"}, "CVSM_STRIPE_API_BASE"),
])
def test_a_bad_billing_setting_names_its_variable(change: dict, named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({**BASE, **change})
    assert named in str(caught.value)
    assert SECRET_KEY not in str(caught.value) and WEBHOOK_SECRET not in str(caught.value)


async def test_billing_off_the_state_says_so_and_payment_routes_are_404(
        api: Api, owner: dict, team_id: str) -> None:
    client, auth = api.client, api.auth(owner["token"])
    resp = await client.get(f"/api/v1/teams/{team_id}/billing", headers=auth)
    assert resp.status == 200
    assert (await resp.json())["billing"] == {
        "enabled": False, "plan": "professional", "status": None, "current_period_end": None,
        "cancel_at_period_end": False, "grace_ends_at": None, "plans": []}
    for path in ("checkout", "portal"):
        resp = await client.post(f"/api/v1/teams/{team_id}/billing/{path}", headers=auth,
                                 json={"plan": "professional"})
        assert resp.status == 404, path
        assert "Penagihan" in (await resp.json())["error"]
    resp = await client.post("/api/v1/billing/stripe/webhook", data=b"{}",
                             headers={"Stripe-Signature": "t=1,v1=00"})
    assert resp.status == 404


@pytest.fixture
def bapi(billing_client: Any) -> Api:
    return Api(billing_client)


async def test_checkout_makes_the_customer_once_and_returns_stripes_url(
        bapi: Api, stripe_front: StripeFront, database_url: str) -> None:
    owner = await bapi.register("billing_owner")
    team_id = await bapi.team(owner, "paying")
    auth = bapi.auth(owner["token"])
    resp = await bapi.client.get(f"/api/v1/teams/{team_id}/billing", headers=auth)
    state = (await resp.json())["billing"]
    assert state["enabled"] is True and state["status"] is None
    assert state["plans"] == ["professional", "enterprise"]

    urls = []
    for plan in ("professional", "enterprise"):
        resp = await bapi.client.post("/api/v1/teams/paying/billing/checkout", headers=auth,
                                      json={"plan": plan})
        assert resp.status == 200, await resp.text()
        urls.append((await resp.json())["url"])
    assert all(url.startswith("https://checkout.stripe.com/") for url in urls)
    # one Customer, made at the first checkout and kept; a Session per checkout
    assert stripe_front.calls["POST /v1/customers"] == 1
    assert stripe_front.calls["POST /v1/checkout/sessions"] == 2
    rows = await query(database_url,
                       "SELECT customer_id, status FROM team_billing WHERE team_id = %s",
                       (team_id,))
    assert len(rows) == 1 and rows[0]["customer_id"].startswith("cus_") and rows[0]["status"] is None
    # the plan is the webhook's to change, never the checkout's
    resp = await bapi.client.get(f"/api/v1/teams/{team_id}", headers=auth)
    assert (await resp.json())["team"]["plan"] == "professional"

    resp = await bapi.client.post(f"/api/v1/teams/{team_id}/billing/portal", headers=auth)
    assert resp.status == 200
    assert (await resp.json())["url"].startswith("https://")
    assert stripe_front.calls["POST /v1/billing_portal/sessions"] == 1


async def test_checkout_sends_the_session_what_stripe_needs(
        bapi: Api, stripe_front: StripeFront, monkeypatch: pytest.MonkeyPatch) -> None:
    """subscription mode, the plan's Price, client_reference_id = the team's id, the way back
    to the plan page."""
    from cvsm_server.billing import stripe_api
    seen: list[dict] = []
    gateway = bapi.client.app[STRIPE]
    create = gateway._client.v1.checkout.sessions.create

    def spy(params: dict, *args: Any) -> Any:
        seen.append(params)
        return create(params, *args)
    monkeypatch.setattr(gateway._client.v1.checkout.sessions, "create", spy)
    owner = await bapi.register()
    team_id = await bapi.team(owner, "spied")
    resp = await bapi.client.post(f"/api/v1/teams/{team_id}/billing/checkout",
                                  headers=bapi.auth(owner["token"]), json={"plan": "enterprise"})
    assert resp.status == 200
    (params,) = seen
    assert params["mode"] == "subscription" and params["client_reference_id"] == team_id
    assert params["line_items"] == [{"price": PRICES["enterprise"], "quantity": 1}]
    assert params["success_url"] == "https://cvsm.test/app/teams/spied/plan?checkout=done"
    assert params["cancel_url"] == "https://cvsm.test/app/teams/spied/plan"
    assert stripe_api.StripeGateway.__name__ in repr(gateway) and SECRET_KEY not in repr(gateway)


async def test_only_the_owner_pays_and_bad_plans_are_400(bapi: Api, stripe_front: StripeFront) -> None:
    owner = await bapi.register()
    admin, viewer, stranger = await bapi.register(), await bapi.register(), await bapi.register()
    team_id = await bapi.team(owner)
    await bapi.add_member(owner, team_id, admin, "Admin")
    await bapi.add_member(owner, team_id, viewer, "Viewer")
    for path in ("checkout", "portal"):
        for user, status in ((admin, 403), (viewer, 403), (stranger, 404)):
            resp = await bapi.client.post(f"/api/v1/teams/{team_id}/billing/{path}",
                                          headers=bapi.auth(user["token"]),
                                          json={"plan": "professional"})
            assert resp.status == status, (path, status)
    # every member reads the state; a stranger does not
    resp = await bapi.client.get(f"/api/v1/teams/{team_id}/billing",
                                 headers=bapi.auth(viewer["token"]))
    assert resp.status == 200
    resp = await bapi.client.get(f"/api/v1/teams/{team_id}/billing",
                                 headers=bapi.auth(stranger["token"]))
    assert resp.status == 404
    auth = bapi.auth(owner["token"])
    for body in ({"plan": "starter"}, {"plan": "gold"}, {"plan": 3}, {}):
        resp = await bapi.client.post(f"/api/v1/teams/{team_id}/billing/checkout", headers=auth,
                                      json=body)
        assert resp.status == 400, body
        assert (await resp.json())["error"]
    # the portal before any checkout: nothing to manage yet
    resp = await bapi.client.post(f"/api/v1/teams/{team_id}/billing/portal", headers=auth)
    assert resp.status == 409
    assert "checkout" in (await resp.json())["error"]
    assert stripe_front.calls["POST /v1/customers"] == 0


async def test_stripe_unreachable_is_a_503_that_names_no_key(
        bapi: Api, stripe_front: StripeFront, caplog: pytest.LogCaptureFixture,
        database_url: str) -> None:
    owner = await bapi.register()
    team_id = await bapi.team(owner)
    stripe_front.down = True
    resp = await bapi.client.post(f"/api/v1/teams/{team_id}/billing/checkout",
                                  headers=bapi.auth(owner["token"]), json={"plan": "professional"})
    assert resp.status == 503
    assert "Stripe" in (await resp.json())["error"] and resp.headers["Retry-After"]
    assert SECRET_KEY not in caplog.text
    assert not await query(database_url,
                           "SELECT 1 FROM team_billing")


async def test_an_api_token_of_the_owner_pays_unless_read_only(bapi: Api, stripe_front: StripeFront) -> None:
    owner = await bapi.register()
    team_id = await bapi.team(owner)
    token = (await bapi.api_token(owner, team_id=team_id, read_only=True))["token"]
    resp = await bapi.client.post(f"/api/v1/teams/{team_id}/billing/checkout",
                                  headers=bapi.auth(token), json={"plan": "professional"})
    assert resp.status == 403
    resp = await bapi.client.get(f"/api/v1/teams/{team_id}/billing", headers=bapi.auth(token))
    assert resp.status == 200


def test_settings_env_is_what_the_fixture_serves() -> None:
    env = {f"CVSM_{k.upper()}": v for k, v in settings_env().items()}
    assert Settings.from_env(env).billing == "stripe"


NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)
PLAN_OF_PRICE = {price: plan for plan, price in PRICES.items()}


@pytest.mark.parametrize(("status", "price", "since", "expected"), [
    ("active", PRICES["enterprise"], None, ("enterprise", None)),
    ("trialing", PRICES["professional"], None, ("professional", None)),
    ("active", "price_nobody_configured", None, ("starter", None)),  # the plan stays
    ("incomplete", PRICES["enterprise"], None, ("starter", None)),    # not paid yet
    ("past_due", PRICES["enterprise"], None, ("starter", NOW)),       # grace starts now
    ("unpaid", PRICES["enterprise"], NOW - timedelta(days=6), ("starter", NOW - timedelta(days=6))),
    ("canceled", PRICES["enterprise"], NOW - timedelta(days=1), ("starter", None)),
    ("incomplete_expired", PRICES["enterprise"], None, ("starter", None)),
])
def test_next_plan_from_a_starter_team(status: str, price: str, since: Any, expected: tuple) -> None:
    sub = rules.Subscription("sub_1", "cus_1", status, price, None, False)
    assert rules.next_plan("starter", sub, PLAN_OF_PRICE, past_due_since=since, now=NOW,
                           grace_days=7) == expected


def test_past_due_keeps_a_paid_plan_until_the_grace_period_ends() -> None:
    sub = rules.Subscription("sub_1", "cus_1", "past_due", PRICES["enterprise"], None, False)
    def plan(days: float) -> str:
        return rules.next_plan("enterprise", sub, PLAN_OF_PRICE, now=NOW, grace_days=7,
                               past_due_since=NOW - timedelta(days=days))[0]
    assert [plan(0), plan(6.9), plan(7), plan(30)] == ["enterprise", "enterprise", "starter",
                                                       "starter"]


def test_which_subscription_governs() -> None:
    def sub(sub_id: str, status: str) -> rules.Subscription:
        return rules.Subscription(sub_id, "cus_1", status, None, None, False)
    assert rules.governs(None, None, sub("sub_a", "canceled"))
    assert rules.governs("sub_a", "active", sub("sub_a", "canceled"))
    assert not rules.governs("sub_a", "active", sub("sub_b", "active"))  # one at a time
    assert not rules.governs("sub_a", "canceled", sub("sub_b", "canceled"))
    assert rules.governs("sub_a", "canceled", sub("sub_b", "active"))


def test_the_subscription_an_event_names_in_each_api_version() -> None:
    assert rules.subscription_of_event("invoice.paid", {"subscription": "sub_old"}) == "sub_old"
    assert rules.subscription_of_event("invoice.paid", {"parent": {"subscription_details": {
        "subscription": "sub_new"}}}) == "sub_new"
    assert rules.subscription_of_event("customer.subscription.updated", {"id": "sub_s"}) == "sub_s"
    assert rules.subscription_of_event("checkout.session.completed",
                                       {"subscription": {"id": "sub_x"}}) == "sub_x"
    assert rules.subscription_of_event("checkout.session.completed", {"subscription": None}) is None
    old = rules.subscription({"id": "s", "customer": "c", "status": "active",
                              "current_period_end": 1_800_000_000,
                              "items": {"data": [{"price": {"id": "p"}}]}})
    assert old.current_period_end == datetime.fromtimestamp(1_800_000_000, timezone.utc)
