"""The pages' kit: what every dashboard page is built with. Pages are rendered on the server
(aiohttp-jinja2) over the same domain functions as the JSON API, so no rule or SQL exists twice.

- **Session.** Signing in opens the same session row a JWT login opens; the cookie `cvsm_session`
  carries that session's JWT (HttpOnly, SameSite=Lax, Secure when the app URL is https). Signing
  out runs logout-all, so the cookie and every JWT issued before stop working at once. The
  signed-in user is built by `web.middleware.auth_middleware` on session routes.
- **CSRF.** Every state-changing form carries `csrf`: an HMAC of the session id when signed in;
  before that (sign-in, sign-up, the 2FA step) an HMAC of a random pre-session cookie.
- **CSP.** Pages load only this origin's own script and style files: no inline script or style.
- **Values.** A value is on a page only after its owner asked (a POST, audited as a read), on
  a page that is never cached, and never in a URL.
- **Input.** Every form is read by one parser (`web.request.read_form`, through
  `read_page_form`) and every page's query string is checked (`page_errors`): a NUL character,
  invalid UTF-8, another charset or broken multipart is a 400 page with the message, never a
  500 or the API's JSON.
- **Forms.** `Form.posted` reads a form and checks its CSRF token (the session's, or the
  pre-session's on the signed-out forms); `Form.attempt` does its work, and a refusal re-renders
  the page with the message beside its field and the values kept, except the secret ones (a
  value, a password, a code), which are asked for again.
- **Post/redirect/get.** A form that changes something answers 303 to a page (`done`, by route
  name) with a flash message from the fixed set `FLASHES` (a signed cookie, shown once by the
  next page, never a value or user input). A value shown once (a new API token, a share link)
  goes to the next page sealed in a short-lived cookie bound to the session (`web.pages.once`):
  never in a URL or a log; the page that shows it deletes the cookie and is
  never stored, so a reload shows it no more and creates nothing.
- **Context.** `render_page` adds what every page needs: the user, the CSRF token, the flash
  message, the admin link and the pending-deletion banner.
- **Errors.** Under a page, every refusal and every failure is the HTML error page with its
  status (`page_errors`): an unknown `/app/...` path (404), a page's path asked with another
  method (405, with `Allow`), a 500 (no traceback), a database outage.
- **Without JavaScript** every form works; `app.js` only adds copy buttons.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp_jinja2
import jinja2
from aiohttp import web

from ...core.i18n import N_
from ...core import i18n
from ...core.actor import Actor
from ...core.errors import DomainError, NotFound
from ...accounts import oauth_providers
from ...secrets import inputs as secret_inputs
from ..middleware import failure_of
from ..policy import policy_of
from ..request import check_query
from ..state import ACTOR, OAUTH, SIGNER
from .forms import Answer
from .rendering import choose_language, render_page, signed_in_actor
from .session import COOKIE, PRE_COOKIE, flash, set_cookie, form_field

PAGE_NOT_FOUND = N_("Halaman tidak ditemukan")
ENVIRONMENTS = secret_inputs.ENVIRONMENTS
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# Flash messages: a key of `FLASHES` in a signed cookie, read (and deleted) by the next page.


def done(request: web.Request, name: str, message: str | None = None,
         query: Mapping[str, str] | None = None, *, fragment: str = "",
         **parts: str) -> web.Response:
    """A form's success: 303 to the page named `name` (`url_for`, then `#fragment`), which
    says `message`."""
    location = url_for(request, name, query, **parts)
    response = redirect_to(f"{location}#{fragment}" if fragment else location)
    if message is not None:
        flash(request, response, message)
    return response


def url_for(request: web.Request, name: str, query: Mapping[str, str] | None = None,
            **parts: str) -> str:
    """The path of the page named `name` (`web.policy.Route.name`, e.g. `teams.secrets_page`)."""
    url = request.app.router[name].url_for(**parts)
    return str(url.with_query(query) if query else url)


def redirect_to(location: str) -> web.Response:
    response = web.Response(status=303, headers={"Location": location})
    response.headers["Cache-Control"] = "no-store"
    return response


def signed_in(handler: Callable[[web.Request, Actor], Awaitable[web.StreamResponse]]) -> Handler:
    """The page's handler runs with the signed-in user (the route's policy is `SESSION`: the
    middleware read the cookie, and retries once on a revocation noticed mid-request); anyone
    else goes to the sign-in page. A domain error becomes the page's error view."""

    async def page(request: web.Request) -> web.StreamResponse:
        actor = signed_in_actor(request)
        choose_language(request)  # now with the account's own choice
        if actor is None:
            response = redirect_to(url_for(request, "auth.signin_page"))
            if COOKIE in request.cookies:
                response.del_cookie(COOKIE, path="/")
            return response
        try:
            return await handler(request, actor)
        except Answer as answer:
            return answer.response
        except DomainError as exc:
            return error_page(request, exc, actor)

    # The page keeps the handler's module and name: its route's name for `url_for`.
    functools.update_wrapper(page, handler, assigned=("__module__", "__name__", "__qualname__",
                                                      "__doc__"), updated=())
    return page


@web.middleware
async def page_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A page's query string is checked (`web.request.check_query`) before its handler runs,
    and a refusal that no page handler answered itself, or any failure (a 500, a database
    outage), is the error page with its status: never the API's JSON, never a traceback."""
    if not policy_of(request).page:  # not one of the dashboard's pages, as its route declares
        return await handler(request)
    try:
        choose_language(request)  # the browser's (the account's, once signed in: `signed_in`)
        check_query(request)
        return await handler(request)
    except Answer as answer:
        return answer.response
    except web.HTTPException:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure under a page is the error page
        actor = signed_in_actor(request) if ACTOR in request else None
        return error_page(request, failure_of(request, exc), actor)


def error_page(request: web.Request, exc: DomainError, actor: Actor | None) -> web.Response:
    response = render_page(request, "error.html", {"message": exc.message, "status": exc.status,
                                                   "user": actor}, status=exc.status)
    for name, value in exc.headers.items():
        response.headers[name] = value
    return response


class MethodNotAllowed(DomainError):
    status = 405
    default_message = N_("Halaman ini tidak menerima metode itu")


async def not_found(request: web.Request) -> web.StreamResponse:
    """Any other path under `/app/` (the table's last route): the 404 error page, or the 405 one
    with `Allow` when the path is a page's asked with another method."""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource is not request.match_info.route.resource:
            _match, methods = await resource.resolve(request)
            allowed |= methods
    if allowed:
        raise MethodNotAllowed(headers={"Allow": ", ".join(sorted(allowed))})
    raise NotFound(PAGE_NOT_FOUND)


def link_page(request: web.Request, template: str, path: str, invalid: str,
              **details: Any) -> web.Response:
    """The page a one-time link opens (`path?token=...`: an invitation, the setup link). Opening
    it changes nothing (a mail scanner or a preview may fetch it): signed in, a button posts the
    token; signed out, sign-in and sign-up (`next`) come back here. `details` (what the caller
    found for the token) go to the template."""
    token = request.query.get("token", "")
    context = {**details, "token": token,
               "next": urlencode({"next": f"{path}?{urlencode({'token': token})}"})}
    if not token:
        return render_page(request, template, {**context, "error": invalid}, status=400,
                           private=True)
    return render_page(request, template, context, private=True)


def local_path(value: object) -> str | None:
    """`value` when it is a path on this site (where to go after signing in), else None: never
    another host (`//host`, `/\\host`, a scheme), never a control character."""
    if not isinstance(value, str) or not value.startswith("/") or len(value) > 2048:
        return None
    if value.startswith("//") or any(c == "\\" or ord(c) < 0x20 or c == "\x7f" for c in value):
        return None
    parts = urlsplit(value)
    return value if not parts.scheme and not parts.netloc else None


def next_of(request: web.Request, form: Mapping[str, Any] | None = None) -> str | None:
    """The local path to go to after signing in (`next`, in the form or the query)."""
    return local_path(form_field(form, "next") if form is not None else request.query.get("next"))


def signed_in_response(request: web.Request, token: str, location: str = "/app/teams") -> web.Response:
    response = redirect_to(location)
    sign_in_browser(request, response, token)
    return response


def sign_in_browser(request: web.Request, response: web.StreamResponse, token: str) -> None:
    """Make `token` (a session this server just opened for this very request) the browser's
    session cookie. Only the handlers that checked a credential themselves call it: a token that
    arrives from elsewhere (a link, a form field) never becomes a session."""
    set_cookie(request, response, COOKIE, token, max_age=request.app[SIGNER].lifetime_seconds)
    if PRE_COOKIE in request.cookies:
        response.del_cookie(PRE_COOKIE, path="/")


def setup(app: web.Application) -> None:
    """Templates come from the package (`cvsm_server/templates`), autoescaped."""
    env = aiohttp_jinja2.setup(
        app,
        loader=jinja2.PackageLoader("cvsm_server", "templates"),
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
        extensions=["jinja2.ext.i18n"],
    )
    # `{{ _("...") }}` and `{% trans %}` in templates: the request's language (core.i18n)
    env.install_gettext_callables(i18n.gettext, i18n.ngettext, newstyle=True,
                                  pgettext=i18n.pgettext, npgettext=i18n.npgettext)
    env.globals["oauth_providers"] = app[OAUTH].choices if OAUTH in app else []
    env.filters["oauth_label"] = oauth_providers.label
