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

import contextlib
import functools
import hashlib
import hmac
import re
import secrets as random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp_jinja2
import jinja2
from aiohttp import web
from multidict import MultiDictProxy

from ... import db
from ...accounts import deletion, oauth
from ...core import ratelimit
from ...secrets import service as domain
from ...core.actor import Actor
from ...core.errors import DomainError, Forbidden, NotFound, Unauthorized
from ...core.inputs import decimal
from ..middleware import failure_of
from ..policy import policy_of
from ..request import FORM_TOO_LARGE, FormValue, app_url, check_query, read_form
from ..state import ACTOR, OAUTH, PAGE_STATE, POOL, SESSION_COOKIE, SETTINGS, SIGNER
from .messages import FLASHES


COOKIE = SESSION_COOKIE
PRE_COOKIE = "cvsm_pre"
PENDING_LIFETIME = 300  # seconds between the password and the code of a two-factor sign-in
FORM_LIMIT = 256 * 1024  # a 65,536-byte value, form-encoded, fits several times over
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
CSRF_FAILED = "Formulir kedaluwarsa atau tidak sah; muat ulang halaman lalu coba lagi"
PENDING_FAILED = "Langkah verifikasi kedaluwarsa; masuk lagi dengan kata sandi"
PAGE_NOT_FOUND = "Halaman tidak ditemukan"
ENVIRONMENTS = domain.ENVIRONMENTS
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# A pre-session nonce made for this response (set as a cookie when the page is sent).
NEW_PRE_SESSION = web.RequestKey("cvsm_pre_new", str)
# The page read the one-time cookie (`take_once`): its answer deletes it and is never stored.
TOOK_ONCE = web.RequestKey("cvsm_took_once", bool)
FLASH_COOKIE = "cvsm_flash"
ONCE_COOKIE = "cvsm_once"
ONCE_LIFETIME = 120  # seconds between a value's POST and the page that shows it



def keyed_mac(request: web.Request, purpose: str, text: str) -> str:
    key = request.app[SIGNER].secret.encode()
    return hmac.new(key, f"{purpose}:{text}".encode(), hashlib.sha256).hexdigest()


def same_mac(given: str, expected: str) -> bool:
    """Whether `given` (from a form or a cookie: any text) is `expected`, in constant time.
    `hmac.compare_digest` raises TypeError for text with a non-ASCII character; bytes never."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


def page_number(raw: str | None) -> int:
    """A list page's `page` query parameter: 1 when missing or not a number from 1 to 999,999
    in ASCII digits (a link that went stale, not an error worth a page)."""
    number = decimal(raw, max_digits=6)
    return number if number is not None and number >= 1 else 1


def pending_token(request: web.Request, user_id: uuid.UUID) -> str:
    expires = int(time.time()) + PENDING_LIFETIME
    body = f"{user_id}.{expires}"
    return f"{body}.{keyed_mac(request, '2fa', body)}"


def pending_user(request: web.Request, token: str) -> uuid.UUID:
    body, _, mac = token.rpartition(".")
    user, _, expires = body.partition(".")
    expires_at = decimal(expires)
    if not same_mac(mac, keyed_mac(request, "2fa", body)) or expires_at is None \
            or expires_at < time.time():
        raise Unauthorized(PENDING_FAILED)
    return uuid.UUID(user)


async def read_page_form(request: web.Request, *, max_bytes: int = FORM_LIMIT,
                         too_large: str = FORM_TOO_LARGE) -> MultiDictProxy[FormValue]:
    """Every page's form, read by the one parser (`web.request.read_form`): NUL characters,
    invalid UTF-8, another charset and broken multipart are a 400 page, never a 500."""
    return await read_form(request, max_bytes=max_bytes, too_large=too_large)


def form_field(form: Mapping[str, Any], name: str, default: str = "") -> str:
    value = form.get(name, default)
    return value if isinstance(value, str) else default


def is_secure(request: web.Request) -> bool:
    return app_url(request).startswith("https://")


def set_cookie(request: web.Request, response: web.StreamResponse, name: str, value: str,
               max_age: int | None = None) -> None:
    response.set_cookie(name, value, httponly=True, samesite="Lax", secure=is_secure(request),
                        path="/", max_age=max_age)


def pre_session(request: web.Request) -> str:
    """The pre-session nonce that CSRF tokens of the signed-out forms are bound to."""
    return request.cookies.get(PRE_COOKIE) or request.get(NEW_PRE_SESSION) or ""


def anonymous_csrf(request: web.Request) -> str:
    nonce = pre_session(request)
    if not nonce:
        nonce = random.token_urlsafe(24)
        request[NEW_PRE_SESSION] = nonce
    return keyed_mac(request, "csrf-pre", nonce)


def check_anonymous_csrf(request: web.Request, form: Mapping[str, Any]) -> None:
    nonce = request.cookies.get(PRE_COOKIE, "")
    expected = keyed_mac(request, "csrf-pre", nonce)
    if not nonce or not same_mac(form_field(form, "csrf"), expected):
        raise Forbidden(CSRF_FAILED)


def session_csrf(request: web.Request, actor: Actor) -> str:
    return keyed_mac(request, "csrf", str(actor.session_id))


def check_session_csrf(request: web.Request, actor: Actor, form: Mapping[str, Any]) -> None:
    if not same_mac(form_field(form, "csrf"), session_csrf(request, actor)):
        raise Forbidden(CSRF_FAILED)


def render_page(request: web.Request, template: str, context: dict[str, Any], *, status: int = 200,
                private: bool = False) -> web.Response:
    """The template with what every page shows (`page_context`); a page that took a value
    shown once (`take_once`) is never stored and deletes that value's cookie."""
    took_once = request.get(TOOK_ONCE, False)
    flash = read_flash(request)
    context = {**page_context(request), "flash": flash, **context}
    response = aiohttp_jinja2.render_template(template, request, context, status=status)
    response.headers["Content-Security-Policy"] = CSP
    # Pages that may hold a value are never stored; the rest are revalidated each time.
    response.headers["Cache-Control"] = "no-store" if private or took_once else "no-cache"
    if (nonce := request.get(NEW_PRE_SESSION)) is not None:
        set_cookie(request, response, PRE_COOKIE, nonce)
    if flash is not None or FLASH_COOKIE in request.cookies:
        response.del_cookie(FLASH_COOKIE, path="/")
    if took_once:
        response.del_cookie(ONCE_COOKIE, path="/")
    return response


def page_context(request: web.Request) -> dict[str, Any]:
    """The context processor: the signed-in user (or None), the form's CSRF token (the
    session's, or before signing in the pre-session's), the admin link, the deletion banner,
    and the defaults of a form (`form`: kept values, `errors`: a message per field)."""
    state = request.get(PAGE_STATE)  # the signed-in user's banner and nav (`users.page_state`)
    actor = signed_in_actor(request) if ACTOR in request else None
    return {"user": actor, "error": None, "form": {}, "errors": {},
            "csrf": session_csrf(request, actor) if actor is not None else anonymous_csrf(request),
            "pending_deletion": deletion.format_when(state.delete_after)
            if state is not None and state.delete_after is not None else None,
            "shows_admin": state is not None and state.is_admin}


# Flash messages: a key of `FLASHES` in a signed cookie, read (and deleted) by the next page.

def flash(request: web.Request, response: web.StreamResponse, key: str) -> None:
    if key not in FLASHES:
        raise KeyError(key)  # a programming error: only the fixed messages are said
    set_cookie(request, response, FLASH_COOKIE, f"{key}.{keyed_mac(request, 'flash', key)}",
               max_age=ONCE_LIFETIME)


def read_flash(request: web.Request) -> dict[str, str] | None:
    key, _, mac = request.cookies.get(FLASH_COOKIE, "").partition(".")
    if key not in FLASHES or not same_mac(mac, keyed_mac(request, "flash", key)):
        return None
    kind, text = FLASHES[key]
    return {"kind": kind, "text": text}


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


class Answer(Exception):
    """A page's answer given from deep inside its handler (a form refused in `Form.attempt`):
    `signed_in` and `page_errors` send it as it is."""

    def __init__(self, response: web.Response) -> None:
        super().__init__("answered")
        self.response = response


_LINE_BREAK = re.compile(r"\r\n?")

# Fields whose typed value a page never shows again, whatever form they are in (a form names
# any other secret field itself: `Form.posted(..., secret=...)`).
NEVER_KEPT = frozenset({"csrf", "value", "content", "password", "password_again", "confirm",
                        "code", "token", "pending"})


class Form:
    """A posted form of a page, read by the one parser and CSRF-checked (`posted`). Its fields
    are strings (`form["name"]`, "" when absent); a refusal (`refused`) puts the message beside
    its field (`errors`) and keeps what was typed (`kept`), never the fields named `secret`."""

    def __init__(self, data: MultiDictProxy[FormValue], secret: tuple[str, ...] = ()) -> None:
        self.data = data
        self.secret = secret

    @classmethod
    async def posted(cls, request: web.Request, actor: Actor | None = None, *,
                     secret: tuple[str, ...] = (), max_bytes: int = FORM_LIMIT,
                     too_large: str = FORM_TOO_LARGE) -> Form:
        """The form, once its CSRF token is checked: the session's when `actor` is given,
        else the pre-session's (a refusal is the 403 error page)."""
        data = await read_page_form(request, max_bytes=max_bytes, too_large=too_large)
        if actor is not None:
            check_session_csrf(request, actor, data)
        else:
            check_anonymous_csrf(request, data)
        return cls(data, secret)

    def __getitem__(self, name: str) -> str:
        return form_field(self.data, name)

    def get(self, name: str, default: str = "") -> str:
        return form_field(self.data, name, default)

    def text(self, name: str) -> str:
        """A text field as the person typed it: a browser sends a textarea's line breaks as
        CRLF (HTML's form encoding), so CRLF and a lone CR are LF here (a PEM pasted into a
        value comes back from the API and the export with LF only). The API's values are
        stored as sent."""
        return _LINE_BREAK.sub("\n", self[name])

    def getall(self, name: str) -> list[str]:
        return [v for v in self.data.getall(name, []) if isinstance(v, str)]

    def kept(self) -> dict[str, str]:
        return {name: self[name] for name in self.data
                if name not in NEVER_KEPT and name not in self.secret}

    @contextlib.asynccontextmanager
    async def attempt(self, request: web.Request, template: str,
                      context: Mapping[str, Any] | Callable[[db.Connection], Awaitable[dict[str, Any]]],
                      *, field: str | Callable[[DomainError], str | None] | None = None,
                      private: bool = False, rate: str | None = None,
                      raising: tuple[int, ...] = ()) -> AsyncIterator[db.Connection]:
        """A connection for the form's work, counted first against the `rate` limit when given
        (the signed-out forms: `auth`, `newsletter`). A refusal in it is the page again
        (`refused`, with `context`, or `context(conn)`, the message beside `field`: a name, or a
        function of the error), answered at once (`Answer`): the handler goes on only when the
        work was done. A refusal with a status in `raising` (the page itself cannot be shown: a
        403, a 404) is the error page instead."""
        async with db.connection(request.app[POOL]) as conn:
            try:
                if rate is not None:
                    await count_form(conn, request, rate)
                yield conn
            except DomainError as exc:
                if exc.status in raising:
                    raise
                where = field(exc) if callable(field) else field
                shown = dict(context) if isinstance(context, Mapping) else await context(conn)
                raise Answer(self.refused(request, template, shown, exc, field=where,
                                          private=private)) from None

    def refused(self, request: web.Request, template: str, context: dict[str, Any],
                exc: DomainError, *, field: str | None = None, private: bool = False) -> web.Response:
        """The page again, `exc`'s message beside `field` (else above the form), with its
        status and headers, and the values typed except the secret ones."""
        context = {**context, "form": {**context.get("form", {}), **self.kept()}}
        if field:
            context["errors"] = {field: exc.message}
        else:
            context["error"] = exc.message
        response = render_page(request, template, context, status=exc.status, private=private)
        response.headers.update(exc.headers)
        return response


@contextlib.asynccontextmanager
async def form_work(request: web.Request,
                    actor: Actor) -> AsyncIterator[tuple[Form, db.Connection]]:
    """A signed-in form that changes something and shows no page again (a button: revoke,
    cancel, close...): the form once its CSRF token is checked, and a connection for its work.
    A refusal is the error page (`signed_in`)."""
    form = await Form.posted(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        yield form, conn


async def count_form(conn: db.Connection, request: web.Request, rate: str = "auth") -> None:
    """A signed-out form counted against the `rate` limit of the caller's address."""
    await ratelimit.hit(conn, ratelimit.Charge.of(rate, request[ACTOR].ip or "-",
                                                  request.app[SETTINGS].rate_limit(rate)))


def failures_of(request: web.Request) -> ratelimit.Charge | None:
    return ratelimit.Charge.failed_auth(request.app[SETTINGS], request[ACTOR].ip)


def signed_in_actor(request: web.Request) -> Actor | None:
    """The signed-in user on a session route (`auth_middleware` read the cookie), else None."""
    actor = request[ACTOR]
    return actor if actor.user_id is not None else None


def signed_in(handler: Callable[[web.Request, Actor], Awaitable[web.StreamResponse]]) -> Handler:
    """The page's handler runs with the signed-in user (the route's policy is `SESSION`: the
    middleware read the cookie, and retries once on a revocation noticed mid-request); anyone
    else goes to the sign-in page. A domain error becomes the page's error view."""

    async def page(request: web.Request) -> web.StreamResponse:
        actor = signed_in_actor(request)
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
    default_message = "Halaman ini tidak menerima metode itu"


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


def beside(field: str, *statuses: int) -> Callable[[DomainError], str | None]:
    """For `Form.attempt`: a refusal with one of `statuses` is said beside `field`, any other
    (a wait, a conflict of state) above the form."""
    return lambda exc: field if exc.status in statuses else None


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
    )
    env.globals["oauth_providers"] = app[OAUTH].choices if OAUTH in app else []
    env.filters["oauth_label"] = oauth.label
