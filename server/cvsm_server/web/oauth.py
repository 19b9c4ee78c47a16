"""Sign-in through an identity provider (OAuth 2.0 / OpenID Connect): `GET /auth/{idp}/start`
redirects to the provider, `GET /auth/{idp}/callback` takes its answer, sets the dashboard's
session cookie on that same response and redirects to the dashboard; whatever failed, it
redirects to the sign-in page with one generic message. The flow itself is in `cvsm_server.accounts.oauth`.

The state is also bound to the browser that started the flow (a cookie on `/api/v1/auth/`), so a
callback URL carried to another browser signs no one in there. No session token travels in a
URL, fragment included: a link alone can never sign a browser in (the 0.3 line's `#token=`
hand-off is gone). A user with two-factor on goes to the dashboard's code step instead.
"""

from __future__ import annotations

from aiohttp import web

from ..accounts import oauth
from ..accounts import oauth_providers
from .pages import auth as auth_pages, kit as page_kit
from .request import actor, app_url, connection
from .state import KEYRING, OAUTH, SIGNER

MAX_PARAM = 4096


def found(location: str) -> web.Response:
    """A 302 that no cache keeps and that sends no referrer onward."""
    return web.Response(status=302, headers={"Location": location, "Cache-Control": "no-store",
                                             "Referrer-Policy": "no-referrer"})


def failure_location(base: str, *, link: bool = False) -> str:
    return f"{base}/app/account?oauth=failed" if link else f"{base}/signin?oauth=failed"


async def start(request: web.Request) -> web.StreamResponse:
    app = request.app
    name = request.match_info["idp"]
    app[OAUTH].get(name)  # 404 for an unknown or unconfigured provider
    base = app_url(request)
    try:
        async with connection(request) as conn:
            url, state = await oauth.start(conn, actor(request), app[OAUTH], name, base, app[KEYRING])
    except oauth_providers.OAuthFailure:
        return found(failure_location(base))
    response = found(url)
    auth_pages.bind_oauth_flow(request, response, state)
    return response


async def callback(request: web.Request) -> web.StreamResponse:
    app = request.app
    name = request.match_info["idp"]
    app[OAUTH].get(name)
    base = app_url(request)
    params = {key: value[:MAX_PARAM] for key in ("state", "code", "error")
              if (value := request.query.get(key)) is not None}
    try:
        async with connection(request) as conn:
            outcome = await oauth.callback(conn, actor(request), app[OAUTH], app[KEYRING], app[SIGNER],
                                           name, base, params,
                                           bound_state=request.cookies.get(auth_pages.OAUTH_COOKIE))
    except oauth_providers.OAuthFailure as failure:
        response = found(failure_location(base, link=failure.link))
    else:
        if outcome.linked:
            response = found(f"{base}/app/account?oauth=linked")
        elif outcome.second_factor:
            response = auth_pages.second_factor_redirect(request, outcome.user_id, base)
        else:
            response = found(f"{base}/app/teams")
            page_kit.sign_in_browser(request, response, outcome.token)
    auth_pages.unbind_oauth_flow(request, response)
    return response


# --- OpenAPI: the operations above (`web.schema`), for `web.apidoc` ------------------------------

OPENAPI = {
    "start": {
        "summary": "Start signing in through an identity provider.",
        "description": "Redirects (302) to the provider's consent screen with `state`, PKCE "
                       "(S256) and, for OpenID Connect, a `nonce`; the flow lasts ten minutes. "
                       "Should the provider be unreachable, redirects to "
                       "`{app_url}/signin?oauth=failed`. An unknown or "
                       "unconfigured provider is a 404.",
        "tags": ["accounts"],
        "responses": {302: ("Redirect to the provider (the `Location` header).", None)},
    },
    "callback": {
        "summary": "The provider's redirect back: finish signing in.",
        "description": "Checks the state (single use, bound to the browser that started the "
                       "flow), exchanges the code with the PKCE verifier and verifies the ID "
                       "token (signature, issuer, audience, expiry, nonce). Then sets the "
                       "dashboard's session cookie (`cvsm_session`, HttpOnly) on this answer and "
                       "redirects (302) to `{app_url}/app/teams`; no token is ever put in a URL. "
                       "On any failure it redirects to `{app_url}/signin?oauth=failed`. A user "
                       "with two-factor authentication on is sent to the dashboard's code step "
                       "instead.",
        "tags": ["accounts"],
        "query": [
            {"name": "code", "in": "query", "required": False, "schema": {"type": "string"}},
            {"name": "state", "in": "query", "required": False, "schema": {"type": "string"}},
            {"name": "error", "in": "query", "required": False, "schema": {"type": "string"}},
        ],
        "responses": {302: ("Redirect to the dashboard (the `Location` header), signed in.",
                            None)},
    },
}
