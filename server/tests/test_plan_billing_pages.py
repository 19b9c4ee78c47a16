"""The plan page's billing (issue 41) over real HTTP, against stripe-mock (`stripe_mock.py`): an
Owner is offered each paid plan with its quotas, a choice is a CSRF-checked POST answered by a
303 to Stripe's Checkout, the plan changes only when the signed webhook says so, then the
portal button sends the Owner to the Customer Portal; a member who is not Owner sees the state
and no control; billing off, the page says nothing about payment; the admin panel's list of
teams shows each team's subscription state."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from cvsm_server.billing import service as billing
from cvsm_server.web.pages.plan import BILLING_CSP
from cvsm_server.web.pages.rendering import CSP

from conftest import Api, query
from stripe_mock import StripeFront, checkout_completed, settings_env, sign, subscription
from test_admin import make_admin
from test_setup_link import CSRF, printed_links, sign_in_as

CHECKOUT_FORM = re.compile(r'action="/app/teams/[a-z0-9-]+/plan/checkout"')
PORTAL_FORM = 'action="/app/teams/paying-team/plan/portal"'


@pytest.fixture
async def billed(start_client: Any, make_settings: Any, stripe_front: StripeFront) -> TestClient:
    """A managed server: billing through the front of stripe-mock, new teams on Starter."""
    return await start_client(make_settings(**settings_env(), stripe_api_base=stripe_front.url,
                                            default_plan="starter", app_url=""))


async def plan_page(client: TestClient, user: dict, team: str = "paying-team",
                    query_string: str = "") -> tuple[str, Any]:
    sign_in_as(client, user)
    resp = await client.get(f"/app/teams/{team}/plan{query_string}")
    html = await resp.text()
    assert resp.status == 200, html
    return html, resp


async def complete_checkout(client: TestClient, stripe_front: StripeFront, database_url: str,
                            team_id: str, plan: str = "professional") -> None:
    """What Stripe does once the Owner paid: the subscription exists, the signed
    `checkout.session.completed` is delivered to the webhook."""
    [row] = await query(database_url, "SELECT customer_id FROM team_billing WHERE team_id = %s",
                        (team_id,))
    stripe_front.subscriptions["sub_paid"] = subscription("sub_paid", row["customer_id"], plan=plan)
    body = checkout_completed(team_id, row["customer_id"], "sub_paid")
    resp = await client.post("/api/v1/billing/stripe/webhook", data=body,
                             headers={"Stripe-Signature": sign(body),
                                      "Content-Type": "application/json"})
    assert resp.status == 200, await resp.text()


async def test_the_owner_chooses_a_paid_plan_pays_on_stripe_and_the_webhook_changes_the_plan(
        billed: TestClient, stripe_front: StripeFront, database_url: str) -> None:
    api = Api(billed)
    owner = await api.register("paying_owner")
    team_id = await api.team(owner, "paying-team")

    html, resp = await plan_page(billed, owner)
    assert resp.headers["Content-Security-Policy"] == BILLING_CSP
    assert "Status langganan: <strong>belum berlangganan</strong>" in html
    assert len(CHECKOUT_FORM.findall(html)) == 2  # each paid plan, not Starter
    assert ">Pilih professional</button>" in html and ">Pilih enterprise</button>" in html
    assert "<li>Secret: 500</li>" in html and "<li>Anggota: 25</li>" in html  # its quotas
    assert PORTAL_FORM not in html  # nothing to manage before a subscription
    csrf = CSRF.search(html).group(1)

    no_csrf = await billed.post("/app/teams/paying-team/plan/checkout",
                                data={"plan": "professional"}, allow_redirects=False)
    assert no_csrf.status == 403
    bad = await billed.post("/app/teams/paying-team/plan/checkout",
                            data={"csrf": csrf, "plan": "starter"}, allow_redirects=False)
    page = await bad.text()
    assert bad.status == 400 and "paket berbayar" in page and "Traceback" not in page
    assert bad.headers["Content-Security-Policy"] == BILLING_CSP  # its buttons still work
    assert stripe_front.calls["POST /v1/checkout/sessions"] == 0

    chosen = await billed.post("/app/teams/paying-team/plan/checkout",
                               data={"csrf": csrf, "plan": "professional"}, allow_redirects=False)
    assert chosen.status == 303, await chosen.text()
    assert chosen.headers["Location"].startswith("https://checkout.stripe.com/")
    assert stripe_front.calls["POST /v1/checkout/sessions"] == 1
    # Back from Checkout, nothing changed yet: the webhook decides.
    html, _ = await plan_page(billed, owner, query_string="?checkout=done")
    assert "Paket tim ini: <strong>starter</strong>" in html and "mengonfirmasi pembayaran" in html

    await complete_checkout(billed, stripe_front, database_url, team_id)
    html, _ = await plan_page(billed, owner)
    assert "Paket tim ini: <strong>professional</strong>" in html
    assert "Status langganan: <strong>aktif</strong>" in html and "Diperpanjang pada" in html
    assert not CHECKOUT_FORM.search(html) and PORTAL_FORM in html  # the portal changes it now
    again = await billed.post("/app/teams/paying-team/plan/checkout",
                              data={"csrf": csrf, "plan": "enterprise"}, allow_redirects=False)
    assert again.status == 409 and billing.ALREADY_SUBSCRIBED in await again.text()

    portal = await billed.post("/app/teams/paying-team/plan/portal", data={"csrf": csrf},
                               allow_redirects=False)
    assert portal.status == 303 and portal.headers["Location"].startswith("https://")
    assert stripe_front.calls["POST /v1/billing_portal/sessions"] == 1


async def test_members_who_are_not_owner_see_the_state_and_no_billing_control(
        billed: TestClient, stripe_front: StripeFront, database_url: str) -> None:
    api = Api(billed)
    owner, admin, viewer = (await api.register("the_owner"), await api.register("the_admin"),
                            await api.register("the_viewer"))
    team_id = await api.team(owner, "paying-team")
    await api.add_member(owner, team_id, admin, "Admin")
    await api.add_member(owner, team_id, viewer, "Viewer")
    html, _ = await plan_page(billed, owner)
    owner_csrf = CSRF.search(html).group(1)
    await billed.post("/app/teams/paying-team/plan/checkout",
                      data={"csrf": owner_csrf, "plan": "enterprise"}, allow_redirects=False)
    await complete_checkout(billed, stripe_front, database_url, team_id, plan="enterprise")

    for member in (admin, viewer):
        html, resp = await plan_page(billed, member)
        assert "Paket tim ini: <strong>enterprise</strong>" in html
        assert "Status langganan: <strong>aktif</strong>" in html
        assert "Hanya Owner tim" in html
        assert not CHECKOUT_FORM.search(html) and PORTAL_FORM not in html
        assert "Kelola tagihan" not in html and "Pilih professional" not in html
        assert resp.headers["Content-Security-Policy"] == CSP
        csrf = CSRF.search(html).group(1)
        for path, form in (("checkout", {"plan": "professional"}), ("portal", {})):
            refused = await billed.post(f"/app/teams/paying-team/plan/{path}",
                                        data={"csrf": csrf, **form}, allow_redirects=False)
            assert refused.status == 403, path
    assert stripe_front.calls["POST /v1/checkout/sessions"] == 1
    assert stripe_front.calls["POST /v1/billing_portal/sessions"] == 0


async def test_billing_off_the_plan_page_says_nothing_about_payment(
        client: TestClient, api: Api, database_url: str) -> None:
    owner = await api.register("self_hosted_owner")
    await api.team(owner, "paying-team")
    html, resp = await plan_page(client, owner)
    for word in ("Langganan", "Stripe", "Kelola tagihan", "Pilih professional", "/plan/checkout",
                 "/plan/portal", "berlangganan"):
        assert word not in html, word
    assert resp.headers["Content-Security-Policy"] == CSP
    csrf = CSRF.search(html).group(1)
    for path in ("checkout", "portal"):
        resp = await client.post(f"/app/teams/paying-team/plan/{path}",
                                 data={"csrf": csrf, "plan": "professional"}, allow_redirects=False)
        assert resp.status == 404 and billing.BILLING_OFF in await resp.text()


async def test_the_admin_list_of_teams_shows_each_teams_subscription_state(
        billed: TestClient, stripe_front: StripeFront, database_url: str) -> None:
    api = Api(billed)
    owner, boss = await api.register("paying_owner"), await api.register("panel_boss")
    await make_admin(database_url, boss)
    team_id = await api.team(owner, "paying-team")
    await api.team(owner, "free-team")
    html, _ = await plan_page(billed, owner)
    await billed.post("/app/teams/paying-team/plan/checkout",
                      data={"csrf": CSRF.search(html).group(1), "plan": "professional"},
                      allow_redirects=False)
    await complete_checkout(billed, stripe_front, database_url, team_id)

    sign_in_as(billed, boss)
    html = await (await billed.get("/app/admin/teams")).text()
    assert '<th scope="col">Langganan</th>' in html
    rows = {slug: row for slug, row in re.findall(
        r'<th scope="row">([a-z-]+)</th>(.*?)</tr>', html, re.S)}
    assert "aktif (diperpanjang 20" in rows["paying-team"]
    assert "belum berlangganan" in rows["free-team"]


async def test_billing_off_the_admin_list_has_no_subscription_column(
        client: TestClient, api: Api, database_url: str) -> None:
    boss = await api.register("panel_boss")
    await make_admin(database_url, boss)
    await api.team(boss, "some-team")
    sign_in_as(client, boss)
    html = await (await client.get("/app/admin/teams")).text()
    assert "some-team" in html and "Langganan" not in html and "berlangganan" not in html


async def test_a_managed_servers_set_up_page_does_not_ask_the_plan(
        start_client: Any, make_settings: Any, stripe_front: StripeFront, database_url: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Billing on is a managed server: new teams start on the operator's plan (Starter unset)
    and pay for more; the set-up page says so and stores no choice, whatever is posted."""
    client = await start_client(make_settings(**settings_env(), stripe_api_base=stripe_front.url,
                                              default_plan="", background_jobs="on"))
    [token] = printed_links(capsys.readouterr().err)
    api = Api(client)
    first = await api.register("managed_admin")
    sign_in_as(client, first)
    html = await (await client.get(f"/setup?token={token}")).text()
    assert "Jadikan akun ini admin" in html and 'name="default_plan"' not in html
    assert "tim baru mulai dengan paket starter" in html
    resp = await client.post("/setup", data={"csrf": CSRF.search(html).group(1), "token": token,
                                             "default_plan": "enterprise"}, allow_redirects=False)
    assert resp.status == 303
    assert await query(database_url, "SELECT * FROM instance_settings") == []
    team_id = await api.team(first)
    [team] = await query(database_url, "SELECT plan FROM teams WHERE id = %s", (team_id,))
    assert team["plan"] == "starter"
