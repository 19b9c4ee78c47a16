"""Billing through Stripe (issue 41): the settings, `GET /teams/:id/billing`, the checkout and the
Customer Portal, every Stripe call made against stripe-mock (`stripe_mock.py`)."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import Api, query
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
