"""Signing in (password, two-factor, identity providers), signing up, signing out, and the
links from mail (password reset, e-mail verification).
"""

from __future__ import annotations

import uuid

from aiohttp import web

from ...core.i18n import N_
from ...core.actor import Actor
from ...core.errors import BadRequest, DomainError, Forbidden, Unauthorized
from ...accounts import email_verification, oauth, password_reset, sessions, users
from ...accounts import oauth_providers
from ...accounts import oauth_providers
from ..request import app_url
from ..state import ACTOR, KEYRING, OAUTH, PASSWORDS, POOL, SIGNER
from .forms import Form, beside, count_form, failures_of, form_work
from .kit import done, next_of, redirect_to, signed_in, signed_in_response, url_for
from .rendering import signed_in_actor, render_page
from .session import (COOKIE, PENDING_FAILED, PENDING_LIFETIME, device_of, flash, is_secure,
                      pending_token, pending_user, remember_device)
from ... import db


async def index(request: web.Request) -> web.StreamResponse:
    return redirect_to(url_for(request, "teams.teams_page" if signed_in_actor(request)
                               else "auth.signin_page"))


async def signin_page(request: web.Request) -> web.StreamResponse:
    next_path = next_of(request)
    if signed_in_actor(request):
        return redirect_to(next_path or url_for(request, "teams.teams_page"))
    # `?oauth=failed`: where a provider's sign-in that failed (whatever went wrong) lands.
    error = OAUTH_FAILED if request.query.get("oauth") == "failed" else None
    return render_page(request, "signin.html", {"next": next_path, "error": error})


async def signin(request: web.Request) -> web.StreamResponse:
    app = request.app
    form = await Form.posted(request, secret=("password",))
    next_path = next_of(request, form.data)
    async with form.attempt(request, "signin.html", {"next": next_path}, rate="auth") as conn:
        try:
            user, token = await users.login(
                conn, request[ACTOR], app[PASSWORDS], app[KEYRING], app[SIGNER],
                identifier=form["identifier"], password=form["password"],
                failures=failures_of(request), device=device_of(request))
        except users.SecondFactorRequired as required:
            # The page holds the signed pending token: never stored by a cache.
            return render_page(request, "twofactor.html", {
                "next": next_path, "pending": pending_token(request, required.user_id)},
                private=True)
    response = signed_in_response(request, token, next_path or "/app/teams")
    remember_device(request, response, user)
    return response


async def signin_code(request: web.Request) -> web.StreamResponse:
    app = request.app
    form = await Form.posted(request, secret=("code", "pending"))
    next_path = next_of(request, form.data)
    try:
        user_id = pending_user(request, form["pending"])
        async with db.connection(app[POOL]) as conn:
            await count_form(conn, request)
            user, token = await users.complete_login(
                conn, request[ACTOR], app[KEYRING], app[SIGNER], user_id=user_id,
                totp_code=form["code"], failures=failures_of(request), device=device_of(request))
    except ValueError:  # a pending token that is not ours
        return render_page(request, "signin.html", {"error": PENDING_FAILED, "next": next_path},
                           status=401)
    except DomainError as exc:
        if exc.message == PENDING_FAILED or isinstance(exc, Forbidden):
            return form.refused(request, "signin.html", {"next": next_path}, exc)
        # A wrong, reused or mistyped code, or a wait: the same step again (its pending token
        # still counts), what was wrong said beside the code's field.
        return form.refused(request, "twofactor.html", {"pending": form["pending"],
                                                        "next": next_path},
                            exc, field="code", private=True)
    response = signed_in_response(request, token, next_path or "/app/teams")
    remember_device(request, response, user)
    return response


OAUTH_COOKIE = "cvsm_oauth"  # the state of the flow this browser started (`web.oauth`)
OAUTH_COOKIE_PATH = "/api/v1/auth/"
PENDING_COOKIE = "cvsm_pending"  # the signed pending-2FA token after a provider's callback
OAUTH_FAILED = N_("Masuk melalui penyedia identitas gagal. Silakan coba lagi.")


def bind_oauth_flow(request: web.Request, response: web.StreamResponse, state: str) -> None:
    """Tie a flow to this browser: the callback must come with the same state in this cookie."""
    response.set_cookie(OAUTH_COOKIE, state, httponly=True, samesite="Lax", secure=is_secure(request),
                        path=OAUTH_COOKIE_PATH, max_age=int(oauth.FLOW_LIFETIME.total_seconds()))


def unbind_oauth_flow(request: web.Request, response: web.StreamResponse) -> None:
    if OAUTH_COOKIE in request.cookies:
        response.del_cookie(OAUTH_COOKIE, path=OAUTH_COOKIE_PATH)


def second_factor_redirect(request: web.Request, user_id: uuid.UUID, base: str) -> web.Response:
    """After a provider's callback for a user with two-factor on: the code step, with the same
    signed pending token the password sign-in uses (in a cookie, never in a URL)."""
    response = web.Response(status=302, headers={"Location": f"{base}/signin/oauth-2fa",
                                                 "Cache-Control": "no-store"})
    response.set_cookie(PENDING_COOKIE, pending_token(request, user_id), httponly=True,
                        samesite="Lax", secure=is_secure(request), path="/signin",
                        max_age=PENDING_LIFETIME)
    return response


async def oauth_code_page(request: web.Request) -> web.StreamResponse:
    """The TOTP step of a sign-in through a provider; the form posts to `/signin/2fa`."""
    pending = request.cookies.get(PENDING_COOKIE, "")
    try:
        pending_user(request, pending)
    except (Unauthorized, ValueError):
        return render_page(request, "signin.html", {"error": PENDING_FAILED}, status=401)
    return render_page(request, "twofactor.html", {"pending": pending}, private=True)


@signed_in
async def oauth_link(request: web.Request, actor: Actor) -> web.StreamResponse:
    """Start linking a provider to the signed-in account (a CSRF-checked POST). The answer is a
    page that goes on to the provider (by script, or a link without it): a form's redirect to
    another origin would break the pages' `form-action 'self'` policy."""
    await Form.posted(request, actor)
    sessions.require_jwt(actor)
    name = request.match_info["idp"]
    base = app_url(request)
    try:
        async with db.connection(request.app[POOL]) as conn:
            url, state = await oauth.start(conn, actor, request.app[OAUTH], name, base,
                                           request.app[KEYRING], link_user_id=actor.user_id)
    except oauth_providers.OAuthFailure:
        return redirect_to("/app/account?oauth=failed")
    response = render_page(request, "oauth_redirect.html", {"url": url, "label": oauth_providers.label(name)},
                           private=True)
    bind_oauth_flow(request, response, state)
    return response


async def signup_page(request: web.Request) -> web.StreamResponse:
    next_path = next_of(request)
    if signed_in_actor(request):
        return redirect_to(next_path or url_for(request, "teams.teams_page"))
    return render_page(request, "signup.html", {"next": next_path})


async def signup(request: web.Request) -> web.StreamResponse:
    app = request.app
    form = await Form.posted(request, secret=("password",))
    next_path = next_of(request, form.data)
    async with form.attempt(request, "signup.html", {"next": next_path}, field=_signup_field,
                            rate="auth") as conn:
        _user, token = await users.register(
            conn, app[PASSWORDS], app[SIGNER], email=form["email"], username=form["username"],
            password=form["password"], name=form["name"],
            newsletter_opt_in=form["newsletter"] == "on", keyring=app[KEYRING],
            app_url=app_url(request))
    # The account's verification mail was queued with it (`users.register`): said on arrival.
    response = signed_in_response(request, token, next_path or "/app/teams")
    flash(request, response, "signed_up")
    return response


# Which field of the sign-up form a refusal of `users.register` is about, by its message's start
# (a wait, a refused CSRF token: above the form).
_SIGNUP_FIELDS = (("Email", "email"), ("Alamat email", "email"), ("Username", "username"),
                  ("Kata sandi", "password"), ("Kolom 'name'", "name"))


def _signup_field(exc: DomainError) -> str | None:
    if exc.status not in (400, 409):
        return None
    return next((field for start, field in _SIGNUP_FIELDS if exc.message.startswith(start)), None)


SENT_IF_EXISTS = N_("Jika alamat itu terdaftar, kami sudah mengirim tautan untuk mengatur ulang "
                    "kata sandi. Tautan berlaku 1 jam.")


async def forgot_page(request: web.Request) -> web.StreamResponse:
    return render_page(request, "forgot.html", {})


async def forgot(request: web.Request) -> web.StreamResponse:
    app = request.app
    form = await Form.posted(request)
    async with form.attempt(request, "forgot.html", {}, field=beside("email", 400),
                            rate="auth") as conn:
        await password_reset.request_link(conn, request[ACTOR], app[KEYRING], form["email"],
                                          app_url(request))
    return render_page(request, "forgot.html", {"sent": SENT_IF_EXISTS})


PASSWORDS_DIFFER = N_("Kedua kata sandi tidak sama")


async def reset_page(request: web.Request) -> web.StreamResponse:
    return render_page(request, "reset.html", {"token": request.query.get("token", "")}, private=True)


async def reset_password(request: web.Request) -> web.StreamResponse:
    app = request.app
    form = await Form.posted(request, secret=("token", "password", "password_again"))
    context = {"token": form["token"]}  # the link's token, posted again with the next try
    if form["password"] != form["password_again"]:
        return form.refused(request, "reset.html", context, BadRequest(PASSWORDS_DIFFER),
                            field="password_again", private=True)
    async with form.attempt(request, "reset.html", context, private=True, rate="auth",
                            field=lambda exc: "password" if exc.message == password_reset.PASSWORD_RULE
                            else None) as conn:
        await password_reset.reset(conn, request[ACTOR], app[PASSWORDS], app[KEYRING],
                                   form["token"], form["password"], failures=failures_of(request))
    response = done(request, "auth.signin_page", "password_reset")
    response.del_cookie(COOKIE, path="/")
    return response


async def verify_page(request: web.Request) -> web.StreamResponse:
    return render_page(request, "verify.html", {"token": request.query.get("token", "")}, private=True)


async def verify_email(request: web.Request) -> web.StreamResponse:
    app = request.app
    # The link's page is an open one: its form carries the pre-session's token even when signed in.
    form = await Form.posted(request, secret=("token",))
    signed_in_as = signed_in_actor(request)
    async with form.attempt(request, "verify.html", {}, private=True, rate="auth") as conn:
        # This browser's session stays when it is the account's own (it followed its mail).
        user = await email_verification.verify(
            conn, request[ACTOR], app[KEYRING], form["token"], failures=failures_of(request),
            keep_session=signed_in_as.session_id if signed_in_as else None)
    kept = signed_in_as is not None and signed_in_as.user_id == user["id"]
    return render_page(request, "verify.html", {"verified": True,
                                                "signed_out": user["credentials_ended"] and not kept})


@signed_in
async def signout(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with form_work(request, actor) as (_form, conn):
        await sessions.logout_all(conn, actor)
    response = done(request, "auth.signin_page", "signed_out")
    response.del_cookie(COOKIE, path="/")
    return response
