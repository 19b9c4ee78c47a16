"""The route table declares each route's policy (`web.policy`): who may call it, what it counts
against, whether it is a page, its OpenAPI entry. The middlewares read the matched route's
policy; no path prefix decides."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cvsm_server.runtime.app import create_app
from cvsm_server.web import policy
from cvsm_server.web.routes import ROUTES


def test_every_entry_declares_its_policy() -> None:
    assert all(isinstance(route, policy.Route) for route in ROUTES)
    for route in ROUTES:
        assert route.policy.auth in policy.AUTH_KINDS
        if route.openapi is not None:  # a JSON API route: never a page
            assert route.path.startswith("/api/") and not route.policy.page
        if route.policy.page:
            assert route.policy.rate is None and not route.path.startswith("/api/")
    charged_by_handler = {r.handler.__name__ for r in ROUTES if r.policy.own_charge}
    assert charged_by_handler == {"read_secret", "read_secret_by_name"}
    auth = {r.path: r.policy for r in ROUTES if r.method == "POST"}
    assert auth["/api/v1/auth/login"] == policy.Policy(policy.OPEN, "auth", body=policy.SMALL)
    assert auth["/api/v1/auth/verify-email/request"] == policy.Policy(policy.BEARER, "auth", body=policy.EMPTY)
    assert auth["/api/v1/public/newsletter"].rate == "newsletter"
    assert auth["/app/teams"].auth == policy.SESSION and auth["/signin"].auth == policy.OPEN


async def test_a_get_routes_head_twin_has_the_same_policy(client: Any) -> None:
    resp = await client.head("/api/v1/me")
    assert resp.status == 401
    assert (await client.head("/api/v1/health")).status == 200


async def test_the_declared_policy_decides_not_the_path(aiohttp_client: Any, settings: Any,
                                                        api: Any) -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = create_app(settings)
    route = policy.api("GET", "/elsewhere", hello, openapi=None)
    for added in route.add_to(app.router):
        app[policy.POLICIES][added] = route.policy
    client = await aiohttp_client(app)
    resp = await client.get("/elsewhere")
    assert resp.status == 401 and "error" in await resp.json()
    user = await api.register("routes_user")
    resp = await client.get("/elsewhere", headers=api.auth(user["token"]))
    assert resp.status == 200


async def test_pages_redirect_by_route_name(client: Any) -> None:
    router = client.app.router
    assert str(router["secrets.secrets_page"].url_for(team="acme")) == "/app/teams/acme/secrets"
    named = {r.name for r in ROUTES if r.name}
    assert {"auth.signin_page", "teams.teams_page", "tokens.tokens_page"} <= named
    resp = await client.get("/app/tokens", allow_redirects=False)  # signed out
    assert resp.status == 303 and resp.headers["Location"] == "/signin"
