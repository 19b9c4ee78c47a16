"""The web dashboard: pages rendered on the server (aiohttp-jinja2) over the same domain functions
as the JSON API, so no rule or SQL exists twice.

- **Session.** Signing in opens the same session row a JWT login opens; the cookie `cvsm_session`
  carries that session's JWT (HttpOnly, SameSite=Lax, Secure when the app URL is https). Signing
  out runs logout-all, so the cookie and every JWT issued before stop working at once.
- **CSRF.** Every state-changing form carries `csrf`: an HMAC of the session id when signed in;
  before that (sign-in, sign-up, the 2FA step) an HMAC of a random pre-session cookie.
- **CSP.** Pages load only this origin's own script and style files: no inline script or style.
- **Values.** A value is on a page only after its owner asked (a POST, audited as a read), on
  a page that is never cached, and never in a URL.
- **Input.** Every form is read by one parser (`web.request.read_form`, through `_form`) and
  every page's query string is checked (`page_errors`): a NUL character, invalid UTF-8, another
  charset or broken multipart is a 400 page with the message, never a 500 or the API's JSON.
- **Without JavaScript** every form works; `app.js` only adds copy buttons.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets as random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp_jinja2
import jinja2
import segno
from aiohttp import web
from multidict import MultiDictProxy

from .. import (audit, bulk, db, deletion, dotenv, email_verification, invites, newsletter, oauth,
               password_reset, ratelimit, roles, secret_rotation, sessions, shares, shell_export,
               teams, tokens, totp, users)
from .. import secrets as domain
from ..actor import Actor
from ..errors import BadRequest, DomainError, Forbidden, NotFound, TooManyRequests, Unauthorized
from .policy import policy_of
from .request import FORM_TOO_LARGE, FormValue, app_url, check_query, path_id, read_form
from .state import (ACTOR, KEYRING, OAUTH, PAGE_STATE, PASSWORDS, POOL, SESSION_COOKIE, SETTINGS,
                    SIGNER)

COOKIE = SESSION_COOKIE
PRE_COOKIE = "cvsm_pre"
PENDING_LIFETIME = 300  # seconds between the password and the code of a two-factor sign-in
FORM_LIMIT = 256 * 1024  # a 65,536-byte value, form-encoded, fits several times over

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")

CSRF_FAILED = "Formulir kedaluwarsa atau tidak sah; muat ulang halaman lalu coba lagi"
PENDING_FAILED = "Langkah verifikasi kedaluwarsa; masuk lagi dengan kata sandi"
ENVIRONMENTS = domain.ENVIRONMENTS

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# A pre-session nonce made for this response (set as a cookie when the page is sent).
NEW_PRE_SESSION = web.RequestKey("cvsm_pre_new", str)


# Signing -------------------------------------------------------------------------------------

def _mac(request: web.Request, purpose: str, text: str) -> str:
    key = request.app[SIGNER].secret.encode()
    return hmac.new(key, f"{purpose}:{text}".encode(), hashlib.sha256).hexdigest()


def _pending_token(request: web.Request, user_id: uuid.UUID) -> str:
    expires = int(time.time()) + PENDING_LIFETIME
    body = f"{user_id}.{expires}"
    return f"{body}.{_mac(request, '2fa', body)}"


def _pending_user(request: web.Request, token: str) -> uuid.UUID:
    body, _, mac = token.rpartition(".")
    user, _, expires = body.partition(".")
    if not hmac.compare_digest(mac, _mac(request, "2fa", body)) or not expires.isdigit() \
            or int(expires) < time.time():
        raise Unauthorized(PENDING_FAILED)
    return uuid.UUID(user)


# Forms and cookies ---------------------------------------------------------------------------

async def _form(request: web.Request, *, max_bytes: int = FORM_LIMIT,
                too_large: str = FORM_TOO_LARGE) -> MultiDictProxy[FormValue]:
    """Every page's form, read by the one parser (`web.request.read_form`): NUL characters,
    invalid UTF-8, another charset and broken multipart are a 400 page, never a 500."""
    return await read_form(request, max_bytes=max_bytes, too_large=too_large)


def _field(form: Mapping[str, Any], name: str, default: str = "") -> str:
    value = form.get(name, default)
    return value if isinstance(value, str) else default


def _secure(request: web.Request) -> bool:
    return app_url(request).startswith("https://")


def _set_cookie(request: web.Request, response: web.StreamResponse, name: str, value: str,
                max_age: int | None = None) -> None:
    response.set_cookie(name, value, httponly=True, samesite="Lax", secure=_secure(request),
                        path="/", max_age=max_age)


def _pre_session(request: web.Request) -> str:
    """The pre-session nonce that CSRF tokens of the signed-out forms are bound to."""
    return request.cookies.get(PRE_COOKIE) or request.get(NEW_PRE_SESSION) or ""


def _anonymous_csrf(request: web.Request) -> str:
    nonce = _pre_session(request)
    if not nonce:
        nonce = random.token_urlsafe(24)
        request[NEW_PRE_SESSION] = nonce
    return _mac(request, "csrf-pre", nonce)


def _check_anonymous_csrf(request: web.Request, form: Mapping[str, Any]) -> None:
    nonce = request.cookies.get(PRE_COOKIE, "")
    if not nonce or not hmac.compare_digest(_field(form, "csrf"), _mac(request, "csrf-pre", nonce)):
        raise Forbidden(CSRF_FAILED)


def _session_csrf(request: web.Request, actor: Actor) -> str:
    return _mac(request, "csrf", str(actor.session_id))


def _check_session_csrf(request: web.Request, actor: Actor, form: Mapping[str, Any]) -> None:
    if not hmac.compare_digest(_field(form, "csrf"), _session_csrf(request, actor)):
        raise Forbidden(CSRF_FAILED)


async def _signed_form(request: web.Request, actor: Actor) -> MultiDictProxy[FormValue]:
    """The posted form of a signed-in page, once its CSRF token is checked."""
    form = await _form(request)
    _check_session_csrf(request, actor, form)
    return form


def _page(request: web.Request, template: str, context: dict[str, Any], *, status: int = 200,
          private: bool = False) -> web.Response:
    state = request.get(PAGE_STATE)  # the signed-in user's banner and nav (`users.page_state`)
    context = {"user": None, "error": None, "form": {},
               "pending_deletion": deletion.format_when(state.delete_after)
               if state is not None and state.delete_after is not None else None,
               "shows_admin": state is not None and state.is_admin, **context}
    response = aiohttp_jinja2.render_template(template, request, context, status=status)
    response.headers["Content-Security-Policy"] = CSP
    # Pages that may hold a value are never stored; the rest are revalidated each time.
    response.headers["Cache-Control"] = "no-store" if private else "no-cache"
    if (nonce := request.get(NEW_PRE_SESSION)) is not None:
        _set_cookie(request, response, PRE_COOKIE, nonce)
    return response


def _redirect(location: str) -> web.Response:
    response = web.Response(status=303, headers={"Location": location})
    response.headers["Cache-Control"] = "no-store"
    return response


def _refused(request: web.Request, template: str, context: dict[str, Any], exc: DomainError, *,
             private: bool = False) -> web.Response:
    """The form's page again with the error's message, status and headers (`Retry-After`)."""
    response = _page(request, template, {**context, "error": exc.message}, status=exc.status,
                     private=private)
    response.headers.update(exc.headers)
    return response


# The account forms (sign-in and its code step, sign-up, forgot and reset password, email
# verification) are limited exactly as /api/v1/auth/*: every post counts under `auth` per client
# address, and each credential they check stands behind the failed-credential throttle
# (`ratelimit.guard`), which refuses before the check.

async def _count_account_form(conn: db.Connection, request: web.Request) -> None:
    settings = request.app[SETTINGS]
    await ratelimit.hit(conn, ratelimit.Charge.of("auth", request[ACTOR].ip or "-",
                                                  settings.rate_limit("auth")))


def _failures(request: web.Request) -> ratelimit.Charge | None:
    return ratelimit.Charge.failed_auth(request.app[SETTINGS], request[ACTOR].ip)


# Signed-in pages ------------------------------------------------------------------------------

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
            response = _redirect("/signin")
            if COOKIE in request.cookies:
                response.del_cookie(COOKIE, path="/")
            return response
        try:
            return await handler(request, actor)
        except DomainError as exc:
            return _error(request, exc, actor)

    return page


def is_page(request: web.Request) -> bool:
    """Whether the request is for one of the dashboard's pages, as its route declares."""
    return policy_of(request).page


@web.middleware
async def page_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A page's query string is checked (`web.request.check_query`) before its handler runs,
    and a refusal that no page handler answered itself (a form that cannot be read, on the
    signed-out pages) is the error page with its status, never the API's JSON."""
    if not is_page(request):
        return await handler(request)
    try:
        check_query(request)
        return await handler(request)
    except DomainError as exc:
        return _error(request, exc, None)


def _error(request: web.Request, exc: DomainError, actor: Actor | None) -> web.Response:
    context = {"message": exc.message, "status": exc.status, "user": actor}
    if actor is not None:
        context["csrf"] = _session_csrf(request, actor)
    response = _page(request, "error.html", context, status=exc.status)
    for name, value in exc.headers.items():
        response.headers[name] = value
    return response


# Handlers: signed out ---------------------------------------------------------------------------

async def index(request: web.Request) -> web.StreamResponse:
    return _redirect("/app/teams" if signed_in_actor(request) else "/signin")


def _local_path(value: object) -> str | None:
    """`value` when it is a path on this site (where to go after signing in), else None: never
    another host (`//host`, `/\\host`, a scheme), never a control character."""
    if not isinstance(value, str) or not value.startswith("/") or len(value) > 2048:
        return None
    if value.startswith("//") or any(c == "\\" or ord(c) < 0x20 or c == "\x7f" for c in value):
        return None
    parts = urlsplit(value)
    return value if not parts.scheme and not parts.netloc else None


def _next_of(request: web.Request, form: Mapping[str, Any] | None = None) -> str | None:
    """The local path to go to after signing in (`next`, in the form or the query)."""
    return _local_path(_field(form, "next") if form is not None else request.query.get("next"))


async def signin_page(request: web.Request) -> web.StreamResponse:
    next_path = _next_of(request)
    if signed_in_actor(request):
        return _redirect(next_path or "/app/teams")
    # `?oauth=failed`: where a provider's sign-in that failed (whatever went wrong) lands.
    error = OAUTH_FAILED if request.query.get("oauth") == "failed" else None
    return _page(request, "signin.html", {"csrf": _anonymous_csrf(request), "next": next_path,
                                          "error": error})


def _signed_in_response(request: web.Request, token: str, location: str = "/app/teams") -> web.Response:
    response = _redirect(location)
    sign_in_browser(request, response, token)
    return response


def sign_in_browser(request: web.Request, response: web.StreamResponse, token: str) -> None:
    """Make `token` (a session this server just opened for this very request) the browser's
    session cookie. Only the handlers that checked a credential themselves call it: a token that
    arrives from elsewhere (a link, a form field) never becomes a session."""
    _set_cookie(request, response, COOKIE, token, max_age=request.app[SIGNER].lifetime_seconds)
    if PRE_COOKIE in request.cookies:
        response.del_cookie(PRE_COOKIE, path="/")


async def signin(request: web.Request) -> web.StreamResponse:
    app = request.app
    form = await _form(request)
    identifier = _field(form, "identifier")
    next_path = _next_of(request, form)
    try:
        _check_anonymous_csrf(request, form)
        async with db.connection(app[POOL]) as conn:
            await _count_account_form(conn, request)
            _user, token = await users.login(
                conn, request[ACTOR], app[PASSWORDS], app[KEYRING], app[SIGNER],
                identifier=identifier, password=_field(form, "password"),
                failures=_failures(request))
    except users.SecondFactorRequired as required:
        # The page holds the signed pending token: never stored by a cache.
        return _page(request, "twofactor.html", {"csrf": _anonymous_csrf(request), "next": next_path,
                                                  "pending": _pending_token(request, required.user_id)},
                     private=True)
    except DomainError as exc:
        return _refused(request, "signin.html", {"csrf": _anonymous_csrf(request),
                                                 "identifier": identifier, "next": next_path}, exc)
    return _signed_in_response(request, token, next_path or "/app/teams")


async def signin_code(request: web.Request) -> web.StreamResponse:
    app = request.app
    form = await _form(request)
    next_path = _next_of(request, form)
    try:
        _check_anonymous_csrf(request, form)
        user_id = _pending_user(request, _field(form, "pending"))
        async with db.connection(app[POOL]) as conn:
            await _count_account_form(conn, request)
            _user, token = await users.complete_login(
                conn, request[ACTOR], app[KEYRING], app[SIGNER], user_id=user_id,
                totp_code=_field(form, "code"), failures=_failures(request))
    except ValueError:  # a pending token that is not ours
        return _page(request, "signin.html", {"csrf": _anonymous_csrf(request),
                                              "error": PENDING_FAILED, "next": next_path}, status=401)
    except DomainError as exc:
        if exc.message == PENDING_FAILED or isinstance(exc, Forbidden):
            return _refused(request, "signin.html", {"csrf": _anonymous_csrf(request),
                                                     "next": next_path}, exc)
        # A wrong code, or a wait: the same step again (its pending token still counts).
        return _refused(request, "twofactor.html", {"csrf": _anonymous_csrf(request),
                                                    "pending": _field(form, "pending"),
                                                    "next": next_path}, exc, private=True)
    return _signed_in_response(request, token, next_path or "/app/teams")


# Sign-in through an identity provider (the flow: `cvsm_server.oauth`, its API: `web.oauth`) -----

OAUTH_COOKIE = "cvsm_oauth"  # the state of the flow this browser started (`web.oauth`)
OAUTH_COOKIE_PATH = "/api/v1/auth/"
PENDING_COOKIE = "cvsm_pending"  # the signed pending-2FA token after a provider's callback
OAUTH_FAILED = "Masuk melalui penyedia identitas gagal. Silakan coba lagi."


def bind_oauth_flow(request: web.Request, response: web.StreamResponse, state: str) -> None:
    """Tie a flow to this browser: the callback must come with the same state in this cookie."""
    response.set_cookie(OAUTH_COOKIE, state, httponly=True, samesite="Lax", secure=_secure(request),
                        path=OAUTH_COOKIE_PATH, max_age=int(oauth.FLOW_LIFETIME.total_seconds()))


def unbind_oauth_flow(request: web.Request, response: web.StreamResponse) -> None:
    if OAUTH_COOKIE in request.cookies:
        response.del_cookie(OAUTH_COOKIE, path=OAUTH_COOKIE_PATH)


def second_factor_redirect(request: web.Request, user_id: uuid.UUID, base: str) -> web.Response:
    """After a provider's callback for a user with two-factor on: the code step, with the same
    signed pending token the password sign-in uses (in a cookie, never in a URL)."""
    response = web.Response(status=302, headers={"Location": f"{base}/signin/oauth-2fa",
                                                 "Cache-Control": "no-store"})
    response.set_cookie(PENDING_COOKIE, _pending_token(request, user_id), httponly=True,
                        samesite="Lax", secure=_secure(request), path="/signin",
                        max_age=PENDING_LIFETIME)
    return response


async def oauth_code_page(request: web.Request) -> web.StreamResponse:
    """The TOTP step of a sign-in through a provider; the form posts to `/signin/2fa`."""
    pending = request.cookies.get(PENDING_COOKIE, "")
    try:
        _pending_user(request, pending)
    except (Unauthorized, ValueError):
        return _page(request, "signin.html", {"csrf": _anonymous_csrf(request), "error": PENDING_FAILED},
                     status=401)
    return _page(request, "twofactor.html", {"csrf": _anonymous_csrf(request), "pending": pending},
                 private=True)


@signed_in
async def oauth_link(request: web.Request, actor: Actor) -> web.StreamResponse:
    """Start linking a provider to the signed-in account (a CSRF-checked POST). The answer is a
    page that goes on to the provider (by script, or a link without it): a form's redirect to
    another origin would break the pages' `form-action 'self'` policy."""
    await _signed_form(request, actor)
    sessions.require_jwt(actor)
    name = request.match_info["idp"]
    base = app_url(request)
    try:
        async with db.connection(request.app[POOL]) as conn:
            url, state = await oauth.start(conn, actor, request.app[OAUTH], name, base,
                                           request.app[KEYRING], link_user_id=actor.user_id)
    except oauth.OAuthFailure:
        return _redirect("/app/account?oauth=failed")
    response = _page(request, "oauth_redirect.html", {"user": actor, "csrf": _session_csrf(request, actor),
                                                      "url": url, "label": oauth.label(name)},
                     private=True)
    bind_oauth_flow(request, response, state)
    return response


async def signup_page(request: web.Request) -> web.StreamResponse:
    next_path = _next_of(request)
    if signed_in_actor(request):
        return _redirect(next_path or "/app/teams")
    return _page(request, "signup.html", {"csrf": _anonymous_csrf(request), "form": {},
                                          "next": next_path})


async def signup(request: web.Request) -> web.StreamResponse:
    app = request.app
    form = await _form(request)
    kept = {k: _field(form, k) for k in ("email", "username", "name", "newsletter")}
    next_path = _next_of(request, form)
    try:
        _check_anonymous_csrf(request, form)
        async with db.connection(app[POOL]) as conn:
            await _count_account_form(conn, request)
            user, token = await users.register(
                conn, app[PASSWORDS], app[SIGNER], email=kept["email"], username=kept["username"],
                password=_field(form, "password"), name=kept["name"],
                newsletter_opt_in=kept["newsletter"] == "on", keyring=app[KEYRING],
                app_url=app_url(request))
    except DomainError as exc:
        return _refused(request, "signup.html", {"csrf": _anonymous_csrf(request), "form": kept,
                                                 "next": next_path}, exc)
    return _signed_in_response(request, token, next_path or "/app/teams")


# Handlers: links from mail (a GET shows a button; only its POST uses the single-use token) ---

SENT_IF_EXISTS = ("Jika alamat itu terdaftar, kami sudah mengirim tautan untuk mengatur ulang kata "
                  "sandi. Tautan berlaku 1 jam.")


async def forgot_page(request: web.Request) -> web.StreamResponse:
    return _page(request, "forgot.html", {"csrf": _anonymous_csrf(request)})


async def forgot(request: web.Request) -> web.StreamResponse:
    app = request.app
    form = await _form(request)
    try:
        _check_anonymous_csrf(request, form)
        async with db.connection(app[POOL]) as conn:
            await _count_account_form(conn, request)
            await password_reset.request_link(conn, request[ACTOR], app[KEYRING],
                                              _field(form, "email"), app_url(request))
    except DomainError as exc:
        return _refused(request, "forgot.html", {"csrf": _anonymous_csrf(request)}, exc)
    return _page(request, "forgot.html", {"csrf": _anonymous_csrf(request), "sent": SENT_IF_EXISTS})


async def reset_page(request: web.Request) -> web.StreamResponse:
    return _page(request, "reset.html", {"csrf": _anonymous_csrf(request),
                                         "token": request.query.get("token", "")}, private=True)


async def reset_password(request: web.Request) -> web.StreamResponse:
    app = request.app
    form = await _form(request)
    token = _field(form, "token")
    try:
        _check_anonymous_csrf(request, form)
        if _field(form, "password") != _field(form, "password_again"):
            raise BadRequest("Kedua kata sandi tidak sama")
        async with db.connection(app[POOL]) as conn:
            await _count_account_form(conn, request)
            await password_reset.reset(conn, request[ACTOR], app[PASSWORDS], app[KEYRING], token,
                                       _field(form, "password"), failures=_failures(request))
    except DomainError as exc:
        return _refused(request, "reset.html", {"csrf": _anonymous_csrf(request), "token": token},
                        exc, private=True)
    response = _page(request, "signin.html", {
        "csrf": _anonymous_csrf(request),
        "notice": "Kata sandi sudah diganti dan semua sesi lama sudah keluar. Masuk dengan kata "
                  "sandi baru."})
    response.del_cookie(COOKIE, path="/")
    return response


async def verify_page(request: web.Request) -> web.StreamResponse:
    return _page(request, "verify.html", {"csrf": _anonymous_csrf(request),
                                          "token": request.query.get("token", "")}, private=True)


async def verify_email(request: web.Request) -> web.StreamResponse:
    app = request.app
    form = await _form(request)
    signed_in_as = signed_in_actor(request)
    try:
        _check_anonymous_csrf(request, form)
        async with db.connection(app[POOL]) as conn:
            await _count_account_form(conn, request)
            # This browser's session stays when it is the account's own (it followed its mail).
            user = await email_verification.verify(
                conn, request[ACTOR], app[KEYRING], _field(form, "token"),
                failures=_failures(request),
                keep_session=signed_in_as.session_id if signed_in_as else None)
    except DomainError as exc:
        return _refused(request, "verify.html", {"csrf": _anonymous_csrf(request)}, exc, private=True)
    kept = signed_in_as is not None and signed_in_as.user_id == user["id"]
    return _page(request, "verify.html", {"verified": True,
                                          "signed_out": user["credentials_ended"] and not kept})


# Handlers: signed in ----------------------------------------------------------------------------

@signed_in
async def signout(request: web.Request, actor: Actor) -> web.StreamResponse:
    await _signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        await sessions.logout_all(conn, actor)
    response = _redirect("/signin")
    response.del_cookie(COOKIE, path="/")
    return response


async def _teams_context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    return {"user": actor, "csrf": _session_csrf(request, actor),
            "teams": await teams.list_teams(conn, actor)}


@signed_in
async def teams_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        return _page(request, "teams.html", await _teams_context(request, conn, actor))


@signed_in
async def create_team(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await _signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        try:
            team = await teams.create_team(conn, actor, _field(form, "name"), _field(form, "slug"),
                                           plan_name=request.app[SETTINGS].default_plan)
        except DomainError as exc:
            context = await _teams_context(request, conn, actor)
            context.update(error=exc.message, form={"name": _field(form, "name"), "slug": _field(form, "slug")})
            return _page(request, "teams.html", context, status=exc.status)
    return _redirect(f"/app/teams/{team['slug']}/secrets")


def _environment(value: str | None) -> str:
    if value in ENVIRONMENTS:
        return value  # type: ignore[return-value]
    if value:
        raise NotFound("Environment tidak dikenal")
    return "production"


async def _secrets_context(request: web.Request, conn: db.Connection, actor: Actor,
                           team_ref: str, environment: str, search: str) -> dict[str, Any]:
    team_id = await teams.resolve(conn, team_ref)
    team = await teams.get_team(conn, actor, team_id)
    rows, total = await domain.list_secrets(conn, actor, team_id, environment=environment,
                                            search=search or None, limit=500)
    return {"user": actor, "csrf": _session_csrf(request, actor), "team": team, "team_ref": team_ref,
            "environment": environment, "environments": ENVIRONMENTS, "types": domain.TYPES, "search": search,
            "secrets": rows, "total": total, "revealed": {}, "form": {"environment": environment}}


@signed_in
async def secrets_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    environment = _environment(request.query.get("environment"))
    search = request.query.get("q", "")[:255]
    async with db.connection(request.app[POOL]) as conn:
        context = await _secrets_context(request, conn, actor, request.match_info["team"],
                                         environment, search)
    return _page(request, "secrets.html", context)


@signed_in
async def create_secret(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await _signed_form(request, actor)
    team_ref = request.match_info["team"]
    environment = _environment(_field(form, "environment"))
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        try:
            item = domain.SecretInput.checked(
                name=_field(form, "name").strip(), value=_field(form, "value"), environment=environment,
                type=_field(form, "type", "credential"), description=_field(form, "description"))
            await domain.create_secret(conn, actor, request.app[KEYRING], team_id, item)
        except DomainError as exc:
            context = await _secrets_context(request, conn, actor, team_ref, environment, "")
            # The value typed is not sent back: the form asks for it again.
            context.update(error=exc.message, form={k: _field(form, k) for k in
                                                    ("name", "environment", "type", "description")})
            return _page(request, "secrets.html", context, status=exc.status)
    return _redirect(f"/app/teams/{team_ref}/secrets?environment={environment}")


@signed_in
async def reveal_secret(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await _signed_form(request, actor)
    team_ref = request.match_info["team"]
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        row, value = await domain.read_secret(conn, actor, request.app[KEYRING], team_id,
                                              path_id(request, "secret_id"))
        context = await _secrets_context(request, conn, actor, team_ref, row["environment"],
                                         _field(form, "q")[:255])
    context["revealed"] = {str(row["id"]): value}
    return _page(request, "secrets.html", context, private=True)


@signed_in
async def delete_secret(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await _signed_form(request, actor)
    team_ref = request.match_info["team"]
    environment = _environment(_field(form, "environment"))
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        await domain.delete_secret(conn, actor, team_id, path_id(request, "secret_id"))
    return _redirect(f"/app/teams/{team_ref}/secrets?environment={environment}")


# One secret: versions, rollback, shares, rotation ----------------------------------------------

async def rotation_context(conn: db.Connection, actor: Actor, team_id: uuid.UUID,
                           secret_id: uuid.UUID, role: str) -> dict[str, Any]:
    """What the secret page shows of rotation (it is shown to every member)."""
    policy, runs = await secret_rotation.get_policy(conn, actor, team_id, secret_id)
    return {"policy": policy, "runs": runs,
            "can_rotate": policy is not None and roles.RANK[role] >= roles.RANK[roles.MEMBER]}


async def _secret_context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    team_ref = request.match_info["team"]
    team_id = await teams.resolve(conn, team_ref)
    team = await teams.get_team(conn, actor, team_id)
    secret, versions = await domain.secret_history(conn, actor, team_id, path_id(request, "secret_id"))
    can_share = roles.RANK[team["role"]] >= roles.RANK[roles.MEMBER]
    share_rows = await shares.list_shares(conn, actor, team_id, secret["id"]) if can_share else []
    rotation = await rotation_context(conn, actor, team_id, secret["id"], team["role"])
    return {"user": actor, "csrf": _session_csrf(request, actor), "team": team, "team_ref": team_ref,
            "secret": secret, "versions": versions, "shares": share_rows, "can_share": can_share,
            "share_url": None, "types": domain.TYPES, "rotation": rotation}


@signed_in
async def secret_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        return _page(request, "secret.html", await _secret_context(request, conn, actor))


def _whole(form: Mapping[str, Any], name: str, default: int) -> int:
    raw = _field(form, name, str(default)).strip()
    if not raw.isdigit() or len(raw) > 9:
        raise BadRequest(f"Kolom '{name}' harus bilangan bulat")
    return int(raw)


@signed_in
async def update_secret(request: web.Request, actor: Actor) -> web.StreamResponse:
    """A new value (left empty: kept), type or description; a changed value becomes a version."""
    form = await _signed_form(request, actor)
    team_ref = request.match_info["team"]
    value = _field(form, "value")
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        try:
            update = domain.SecretUpdate.checked(value=value or None, type=_field(form, "type") or None,
                                                 description=_field(form, "description"))
            await domain.update_secret(conn, actor, request.app[KEYRING], team_id,
                                       path_id(request, "secret_id"), update)
        except DomainError as exc:
            context = await _secret_context(request, conn, actor)
            context["error"] = exc.message  # the value typed is not sent back
            return _page(request, "secret.html", context, status=exc.status)
    return _redirect(f"/app/teams/{team_ref}/secrets/{path_id(request, 'secret_id')}")


@signed_in
async def rollback_secret(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await _signed_form(request, actor)
    team_ref = request.match_info["team"]
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        await domain.rollback(conn, actor, request.app[KEYRING], team_id, path_id(request, "secret_id"),
                              _whole(form, "version", 0))
    return _redirect(f"/app/teams/{team_ref}/secrets/{path_id(request, 'secret_id')}")


@signed_in
async def create_share(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await _signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, request.match_info["team"])
        _row, token = await shares.create_share(
            conn, actor, request.app[KEYRING], team_id, path_id(request, "secret_id"),
            max_views=_whole(form, "max_views", 1), ttl_hours=_whole(form, "ttl_hours", 24))
        context = await _secret_context(request, conn, actor)
    context["share_url"] = f"{app_url(request)}/share/{token}"  # shown once, never stored
    return _page(request, "secret.html", context, private=True)


@signed_in
async def revoke_share(request: web.Request, actor: Actor) -> web.StreamResponse:
    await _signed_form(request, actor)
    team_ref = request.match_info["team"]
    share_id = path_id(request, "share_id")
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        await shares.revoke_share(conn, actor, team_id, path_id(request, "secret_id"), share_id)
    return _redirect(f"/app/teams/{team_ref}/secrets/{path_id(request, 'secret_id')}")


# .env import and export ---------------------------------------------------------------------

@signed_in
async def import_dotenv(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await _form(request, max_bytes=bulk.MAX_DOTENV_BYTES + 64 * 1024,
                       too_large=bulk.DOTENV_TOO_LARGE)
    _check_session_csrf(request, actor, form)
    upload = form.get("file")
    content = _field(form, "content")
    if isinstance(upload, web.FileField) and upload.filename:
        try:
            content = upload.file.read(bulk.MAX_DOTENV_BYTES + 1).decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest("Berkas .env harus UTF-8") from None
    team_ref = request.match_info["team"]
    environment = _environment(_field(form, "environment"))
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        try:
            _parsed, results, summary = await bulk.import_dotenv(
                conn, actor, request.app[KEYRING], team_id, content, environment)
        except DomainError as exc:  # refused whole (a quota): said above the list
            context = await _secrets_context(request, conn, actor, team_ref, environment, "")
            context["error"] = exc.message
            return _page(request, "secrets.html", context, status=exc.status)
        context = await _secrets_context(request, conn, actor, team_ref, environment, "")
    context["imported"] = {"summary": summary, "problems": [r for r in results if not r.get("ok")]}
    return _page(request, "secrets.html", context)


# The dashboard's downloads: a renderer and the file's extension per export format.
_DOWNLOADS = {"dotenv": (dotenv.render, "env"), "shell": (shell_export.render, "sh")}


@signed_in
async def export_dotenv(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await _signed_form(request, actor)
    team_ref = request.match_info["team"]
    environment = _environment(_field(form, "environment"))
    fmt = _field(form, "format", "dotenv")
    if fmt not in _DOWNLOADS:
        raise BadRequest(domain.INVALID_EXPORT_FORMAT)
    render, extension = _DOWNLOADS[fmt]
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        values = await domain.export(conn, actor, request.app[KEYRING], team_id,
                                     environment=environment, fmt=fmt)
    response = web.Response(text=render(values), content_type="text/plain", charset="utf-8")
    response.headers["Content-Disposition"] = f'attachment; filename="{environment}.{extension}"'
    response.headers["Cache-Control"] = "no-store"
    return response


# Members ------------------------------------------------------------------------------------

async def _members_context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    team_ref = request.match_info["team"]
    team_id = await teams.resolve(conn, team_ref)
    team = await teams.get_team(conn, actor, team_id)
    can_invite = roles.RANK[team["role"]] >= roles.RANK[roles.ADMIN]
    return {"user": actor, "csrf": _session_csrf(request, actor), "team_ref": team_ref,
            "team": team, "members": await teams.list_members(conn, actor, team_id),
            "roles": list(roles.RANK), "can_invite": can_invite,
            "invites": await invites.list_invites(conn, actor, team_id) if can_invite else []}


@signed_in
async def members_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        return _page(request, "members.html", await _members_context(request, conn, actor))


@signed_in
async def add_member(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await _signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, request.match_info["team"])
        try:
            await teams.add_member(conn, actor, team_id, _field(form, "identifier"), _field(form, "role"))
        except DomainError as exc:
            context = await _members_context(request, conn, actor)
            context.update(error=exc.message, form={"identifier": _field(form, "identifier")})
            return _page(request, "members.html", context, status=exc.status)
    return _redirect(f"/app/teams/{request.match_info['team']}/members")


@signed_in
async def change_member(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await _signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, request.match_info["team"])
        if _field(form, "action") == "remove":
            await teams.remove_member(conn, actor, team_id, path_id(request, "user_id"))
        else:
            await teams.update_member(conn, actor, team_id, path_id(request, "user_id"), _field(form, "role"))
    return _redirect(f"/app/teams/{request.match_info['team']}/members")


# Invitations ------------------------------------------------------------------------------------

@signed_in
async def create_invite(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await _signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, request.match_info["team"])
        try:
            await invites.create_invite(conn, actor, request.app[KEYRING], team_id,
                                        _field(form, "email"), _field(form, "role"), app_url(request))
        except DomainError as exc:
            context = await _members_context(request, conn, actor)
            context.update(error=exc.message, form={"email": _field(form, "email"),
                                                    "role": _field(form, "role")})
            return _page(request, "members.html", context, status=exc.status)
    return _redirect(f"/app/teams/{request.match_info['team']}/members")


@signed_in
async def revoke_invite(request: web.Request, actor: Actor) -> web.StreamResponse:
    await _signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, request.match_info["team"])
        await invites.revoke_invite(conn, actor, team_id, path_id(request, "invite_id"))
    return _redirect(f"/app/teams/{request.match_info['team']}/members")


async def invite_page(request: web.Request) -> web.StreamResponse:
    """The link from an invitation mail. Opening it changes nothing (a mail scanner may fetch
    it): signed in, a button posts the token; signed out, sign-in and sign-up come back here."""
    token = request.query.get("token", "")
    here = f"/invites/accept?{urlencode({'token': token})}"
    actor = signed_in_actor(request)
    context: dict[str, Any] = {"user": actor, "token": token,
                               "next": urlencode({"next": here})}
    if actor is not None:
        context["csrf"] = _session_csrf(request, actor)
    status = 200
    if not token:
        context["error"], status = invites.INVITE_INVALID, 400
    return _page(request, "invite.html", context, status=status, private=True)


@signed_in
async def accept_invite(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await _signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        team = await invites.accept_invite(conn, actor, request.app[KEYRING], _field(form, "token"))
    return _redirect(f"/app/teams/{team['slug']}/secrets")


# Newsletter (public pages) ----------------------------------------------------------------------

def newsletter_page(request: web.Request, state: str, *, status: int = 200, **context: Any) -> web.Response:
    """The newsletter's page in one of its states: `form`, `sent`, `confirm` (the button that
    posts a confirmation token), `confirmed`, `unsubscribed`, `error`."""
    if state in ("form", "confirm"):
        context["csrf"] = _anonymous_csrf(request)
    return _page(request, "newsletter.html", {"state": state, **context}, status=status,
                 private=state == "confirm")


async def newsletter_form(request: web.Request) -> web.StreamResponse:
    return newsletter_page(request, "form")


async def newsletter_subscribe(request: web.Request) -> web.StreamResponse:
    """The form's POST; counted under the same `newsletter` limit as the API."""
    app = request.app
    form = await _form(request)
    email = _field(form, "email")
    try:
        _check_anonymous_csrf(request, form)
        async with db.connection(app[POOL]) as conn:
            ip = request[ACTOR].ip or "-"
            await ratelimit.hit(conn, ratelimit.Charge.of("newsletter", ip,
                                                          app[SETTINGS].rate_limit("newsletter")))
            await newsletter.subscribe(conn, request[ACTOR], app[KEYRING], email, app_url(request))
    except DomainError as exc:
        response = newsletter_page(request, "form", status=exc.status, error=exc.message,
                                   form={"email": email})
        response.headers.update(exc.headers)
        return response
    return newsletter_page(request, "sent")


async def newsletter_confirm_page(request: web.Request) -> web.StreamResponse:
    token = request.query.get("token", "")
    if not token:
        return newsletter_page(request, "error", status=400, message=newsletter.TOKEN_INVALID)
    return newsletter_page(request, "confirm", token=token)


async def newsletter_confirm(request: web.Request) -> web.StreamResponse:
    app = request.app
    form = await _form(request)
    try:
        _check_anonymous_csrf(request, form)
        async with db.connection(app[POOL]) as conn:
            await newsletter.confirm(conn, request[ACTOR], app[KEYRING], _field(form, "token"))
    except DomainError as exc:
        return newsletter_page(request, "error", status=exc.status, message=exc.message)
    return newsletter_page(request, "confirmed")


# Tokens ---------------------------------------------------------------------------------------

async def _tokens_context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    rows = await tokens.list_tokens(conn, actor)
    your_teams = await teams.list_teams(conn, actor)
    names = {team["id"]: team["slug"] for team in your_teams}
    return {"user": actor, "csrf": _session_csrf(request, actor), "tokens": rows, "teams": your_teams,
            "team_slugs": names, "environments": ENVIRONMENTS, "created": None}


@signed_in
async def tokens_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        return _page(request, "tokens.html", await _tokens_context(request, conn, actor))


@signed_in
async def create_token(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await _signed_form(request, actor)
    environments = [e for e in form.getall("environments", []) if isinstance(e, str)]
    async with db.connection(request.app[POOL]) as conn:
        try:
            row, token = await tokens.create_token(
                conn, actor, request.app[KEYRING], name=_field(form, "name"),
                team=_field(form, "team") or None, environments=environments or None,
                read_only=_field(form, "read_only") == "on")
        except DomainError as exc:
            context = await _tokens_context(request, conn, actor)
            context.update(error=exc.message, form={"name": _field(form, "name")})
            return _page(request, "tokens.html", context, status=exc.status)
        context = await _tokens_context(request, conn, actor)
    # The token is shown this once, on a page that is never stored.
    context["created"] = {"name": row["name"], "token": token}
    return _page(request, "tokens.html", context, private=True)


@signed_in
async def revoke_token(request: web.Request, actor: Actor) -> web.StreamResponse:
    await _signed_form(request, actor)
    token_id = path_id(request, "token_id")
    async with db.connection(request.app[POOL]) as conn:
        await tokens.revoke_token(conn, actor, token_id)
    return _redirect("/app/tokens")


# Audit log ------------------------------------------------------------------------------------

AUDIT_PAGE = 50


@signed_in
async def audit_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    raw = request.query.get("page", "1")
    page = int(raw) if raw.isdigit() and 0 < len(raw) <= 6 and int(raw) > 0 else 1
    team_ref = request.match_info["team"]
    async with db.connection(request.app[POOL]) as conn:
        team_id = await teams.resolve(conn, team_ref)
        team = await teams.get_team(conn, actor, team_id)
        rows, total = await audit.list_entries(conn, actor, team_id, limit=AUDIT_PAGE,
                                               offset=(page - 1) * AUDIT_PAGE)
    pages = max(1, -(-total // AUDIT_PAGE))
    return _page(request, "audit.html", {"user": actor, "csrf": _session_csrf(request, actor),
                                         "team": team, "team_ref": team_ref, "entries": rows,
                                         "total": total, "page": page, "pages": pages})


# Account ----------------------------------------------------------------------------------------

async def _account_context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    return {"user": actor, "csrf": _session_csrf(request, actor),
            "profile": await users.profile(conn, actor), "setup": None,
            "deletion": await deletion.status(conn, actor),
            "identities": await oauth.identities(conn, actor),
            "oauth_result": request.query.get("oauth")}


@signed_in
async def account_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        return _page(request, "account.html", await _account_context(request, conn, actor))


@signed_in
async def request_verification(request: web.Request, actor: Actor) -> web.StreamResponse:
    await _signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        await email_verification.request_link(conn, actor, request.app[KEYRING], app_url(request))
        context = await _account_context(request, conn, actor)
    context["notice"] = "Tautan verifikasi sudah dikirim ke email Anda (berlaku 48 jam)."
    return _page(request, "account.html", context)


@signed_in
async def totp_setup(request: web.Request, actor: Actor) -> web.StreamResponse:
    await _signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        secret, url = await totp.setup(conn, actor, request.app[KEYRING])
        context = await _account_context(request, conn, actor)
    # The QR code is drawn here, as SVG in a data: URL: the secret never leaves this server.
    qr = segno.make(url, error="m").svg_data_uri(scale=4, dark="#000", light="#fff")
    context["setup"] = {"secret": secret, "qr": qr}
    return _page(request, "account.html", context, private=True)


@signed_in
async def totp_enable(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await _signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        try:
            await totp.enable(conn, actor, request.app[KEYRING], _field(form, "code").strip())
        except DomainError as exc:
            context = await _account_context(request, conn, actor)
            context["error"] = exc.message
            return _page(request, "account.html", context, status=exc.status)
    return _redirect("/app/account")


# Account deletion ---------------------------------------------------------------------------

@signed_in
async def request_deletion(request: web.Request, actor: Actor) -> web.StreamResponse:
    """Schedule the account's deletion in 7 days, confirmed by the password (or, without one,
    the account's email) and the code with two-factor on."""
    form = await _signed_form(request, actor)
    app = request.app
    async with db.connection(app[POOL]) as conn:
        try:
            await deletion.request_deletion(
                conn, actor, app[PASSWORDS], app[KEYRING], _field(form, "password") or None,
                _field(form, "code") or None, app_url(request),
                confirm=_field(form, "confirm") or None,
                failures=ratelimit.Charge.failed_auth(app[SETTINGS], actor.ip))
        except TooManyRequests:
            raise
        except DomainError as exc:
            context = await _account_context(request, conn, actor)
            context["deletion_error"] = exc.message
            return _page(request, "account.html", context, status=exc.status)
    return _redirect("/app/account")


@signed_in
async def cancel_deletion(request: web.Request, actor: Actor) -> web.StreamResponse:
    await _signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        await deletion.cancel_deletion(conn, actor, request.app[KEYRING], app_url(request))
    return _redirect("/app/account")


def setup(app: web.Application) -> None:
    """Templates come from the package (`cvsm_server/templates`), autoescaped."""
    env = aiohttp_jinja2.setup(
        app,
        loader=jinja2.PackageLoader("cvsm_server", "templates"),
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
    )
    env.globals["oauth_providers"] = app[OAUTH].choices if OAUTH in app else []
    env.filters["oauth_label"] = oauth.label
