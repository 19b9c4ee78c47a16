"""What a route of the table (`web.routes`) declares besides its method, path and handler: who
may call it (`auth`), what it counts against (`rate`), whether it is a page, and its OpenAPI
entry. The middlewares read the matched route's `Policy` (`policy_of`): one dict lookup keyed
by aiohttp's route object, filled once by `web.routes.setup_routes`.

- `auth`: `OPEN` (anyone), `BEARER` (a session JWT or an API token in `Authorization`, checked
  by `web.middleware.auth_middleware`), `SESSION` (a page that reads the session cookie: the
  same middleware builds the signed-in user, and `web.pages.kit.signed_in` sends anyone else to
  the sign-in page), `EITHER` (a bearer credential when one is sent, else the session cookie).
- `rate`: the limit the request counts against (`ratelimit` kinds: `auth`, `public` and
  `newsletter` per client address, `api` per credential), or None.
- `own_charge`: the handler counts the charge inside its own statement (`RATE_CHARGE`).
- `openapi`: the name of the entry in the handler module's `OPENAPI` dict (`web.apidoc`), or
  None for a route outside the JSON API's document.
- `body`: the most bytes of request body the route reads (`web.request.read_json`,
  `read_form`): 0 for a route that reads none (every GET; an API route unless it says), a
  page's form (`FORM`, 256 KiB) for a page's POST unless it says. A declared length above it
  is a 413 before anything else is done (`web.middleware.body_limit_middleware`), a chunked
  body is cut off there while it is read, and a body of a team route is read only once the
  caller is known to be in the team (`body_gate_middleware`).
- `team`: the path parameter naming the team of a team route (`team_id` under
  `/api/v1/teams/{team_id}`, `team` under `/app/teams/{team}`), set by `api` and `page`.
- `admin`: a route of the admin panel (`/api/v1/admin/`, `/app/admin`): its body is read only
  for a site admin.

A GET page is named after its area and handler (`Route.name`), so a page redirects by name
(`web.pages.kit.url_for`), never by a path built by hand.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

OPEN = "open"
BEARER = "bearer"
SESSION = "session"
EITHER = "either"
AUTH_KINDS = (OPEN, BEARER, SESSION, EITHER)
RATE_KINDS = ("auth", "public", "newsletter", "api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Body caps a route declares (`body=`), each sized to what the route can legitimately need; the
# docs/server.md's "Request bodies" table lists them. nginx's `client_max_body_size 48m`
# (deploy/nginx.conf) stays above the largest (`BULK`): the server answers with its own 413.
API_TEAM, PAGE_TEAM = "/api/v1/teams/{team_id}", "/app/teams/{team}"

KiB, MiB = 1024, 1024 * 1024
NONE = 0
EMPTY = 64          # a POST/PUT/DELETE that reads no body: room for the `{}` clients send anyway
TINY = 4 * KiB      # a few short fields: a sign-in, an address, a password, a plan
SMALL = 16 * KiB    # one object of short fields: a team, a member, a webhook, a key pair
FORM = 256 * KiB    # a page's form: one 65,536-byte value, form-encoded, several times over
VALUE = 1 * MiB     # one secret value of 65,536 bytes, even fully \u-escaped, or its envelope
BULK = 40 * MiB     # 500 values of a bulk write, or a re-key's envelopes of every secret


@dataclass(frozen=True, slots=True)
class Policy:
    auth: str = OPEN
    rate: str | None = None
    own_charge: bool = False
    page: bool = False
    body: int = NONE
    team: str | None = None
    admin: bool = False

    def __post_init__(self) -> None:
        if self.auth not in AUTH_KINDS:
            raise ValueError(f"unknown auth {self.auth!r}")
        if self.rate is not None and self.rate not in RATE_KINDS:
            raise ValueError(f"unknown rate-limit kind {self.rate!r}")
        if not 0 <= self.body <= BULK:
            raise ValueError(f"body cap {self.body} outside 0..{BULK}")

    @property
    def needs_bearer(self) -> bool:
        return self.auth in (BEARER, EITHER)


# A request that matched no route (404, 405): the error answer, nothing counted or checked.
UNMATCHED = Policy()


@dataclass(frozen=True, slots=True)
class Route:
    """One entry of the route table."""
    method: str
    path: str
    handler: Handler
    policy: Policy
    openapi: str | None = None

    @property
    def name(self) -> str | None:
        """A page's name for `url_for` (`<area>.<handler>`, e.g. `teams.teams_page`): GET pages
        only, the pages a redirect goes to."""
        if not self.policy.page or self.method != "GET":
            return None
        return f"{self.handler.__module__.rsplit('.', 1)[-1]}.{self.handler.__name__}"

    def add_to(self, router: web.UrlDispatcher) -> list[web.AbstractRoute]:
        """The route, and for a GET its HEAD twin (as `web.get` adds it): both carry the policy."""
        added = []
        if self.method == "GET":
            added.append(router.add_route("HEAD", self.path, self.handler, name=self.name))
        added.append(router.add_route(self.method, self.path, self.handler, name=self.name))
        return added


def api(method: str, path: str, handler: Handler, *, auth: str = BEARER, rate: str | None = "api",
        own_charge: bool = False, openapi: str | None | bool = True,
        body: int | None = None) -> Route:
    """A JSON API route: documented under its handler's name unless `openapi` says otherwise. A
    route that reads no body (`body` unset) refuses any body on GET, and takes up to `EMPTY`
    bytes, never read, on the other methods."""
    if body is None:
        body = NONE if method == "GET" else EMPTY
    name = handler.__name__ if openapi is True else (openapi or None)
    team = "team_id" if path.startswith(f"{API_TEAM}/") or path == API_TEAM else None
    return Route(method, path, handler,
                 Policy(auth, rate, own_charge, body=body, team=team,
                        admin=path.startswith("/api/v1/admin/")), name)


def page(method: str, path: str, handler: Handler, *, auth: str = OPEN,
         body: int | None = None) -> Route:
    """A page for a browser (the dashboard's error pages, the query-string check)."""
    if body is None:
        body = NONE if method == "GET" else FORM
    team = "team" if path.startswith(f"{PAGE_TEAM}/") or path == PAGE_TEAM else None
    return Route(method, path, handler, Policy(auth, None, False, True, body, team,
                                               path.startswith("/app/admin")))


def asset(method: str, path: str, handler: Handler) -> Route:
    """A route for a browser that is not a dashboard page (files, the share page, metrics):
    its errors stay the API's JSON."""
    return Route(method, path, handler, Policy())


POLICIES = web.AppKey("route_policies", dict)


def install(app: web.Application, routes: list[Route]) -> None:
    policies: dict[Any, Policy] = {}
    for route in routes:
        for added in route.add_to(app.router):
            policies[added] = route.policy
    app[POLICIES] = policies


# A request's route never changes once matched: its policy is looked up once, then kept on the
# request (five middlewares and the body readers ask for it).
_POLICY = web.RequestKey("route_policy", Policy)


def policy_of(request: web.Request) -> Policy:
    try:
        return request[_POLICY]
    except KeyError:
        policies: Mapping[Any, Policy] = request.app[POLICIES]
        policy = request[_POLICY] = policies.get(request.match_info.route, UNMATCHED)
        return policy
