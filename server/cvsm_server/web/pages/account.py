"""The account page: e-mail verification, two-factor, end-to-end keys (`web.pages.e2e`), and
the account's deletion.
"""

from __future__ import annotations

from typing import Any

import segno
from aiohttp import web

from ...core import i18n
from ...core.actor import Actor
from ...core.errors import DomainError, TooManyRequests
from ...accounts import deletion, email_verification, oauth, ratelimit, totp, users
from ...e2e import service as e2e
from ..request import app_url
from ..state import KEYRING, PASSWORDS, POOL, SETTINGS
from .e2e import page_context as e2e_context, user_key
from .forms import Form, form_work
from .kit import done, local_path, redirect_to, signed_in
from .rendering import LANGUAGE_COOKIE, render_page
from .session import set_cookie
from ... import db


async def _account_context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    context = {"profile": await users.profile(conn, actor), "setup": None,
               "deletion": await deletion.status(conn, actor),
               "identities": await oauth.identities(conn, actor),
               "oauth_result": request.query.get("oauth"),
               "e2e": await e2e_context(conn, actor, "account")}
    # A two-factor set-up under way (its key kept until a right code turns it on).
    if (pending := await totp.pending_setup(conn, actor, request.app[KEYRING])) is not None:
        secret, url = pending
        # The QR code is drawn here, as SVG in a data: URL: the key never leaves this server.
        qr = segno.make(url, error="m").svg_data_uri(scale=4, dark="#000", light="#fff")
        context["setup"] = {"secret": secret, "qr": qr}
    return context


def _account(request: web.Request, context: dict[str, Any], **kwargs: Any) -> web.Response:
    # A page that shows the two-factor key, or holds the wraps of the end-to-end private key
    # (the passphrase's one could be guessed at offline), is never stored.
    private = context["setup"] is not None or context["e2e"]["pass_wrap"] is not None
    return render_page(request, "account.html", context, private=private, **kwargs)


async def account_refused(request: web.Request, conn: db.Connection, actor: Actor,
                          exc: DomainError) -> web.Response:
    """The account page again with a refusal of the end-to-end keys' form beside it."""
    context = await _account_context(request, conn, actor)
    context["e2e_error"] = exc.message
    response = _account(request, context, status=exc.status)
    response.headers.update(exc.headers)
    return response


@signed_in
async def account_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        return _account(request, await _account_context(request, conn, actor))


@signed_in
async def request_verification(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with form_work(request, actor) as (_form, conn):
        await email_verification.request_link(conn, actor, request.app[KEYRING], app_url(request))
    return done(request, "account.account_page", "verification_sent")


@signed_in
async def totp_setup(request: web.Request, actor: Actor) -> web.StreamResponse:
    """A new key (the account page shows it until a right code turns two-factor on)."""
    async with form_work(request, actor) as (_form, conn):
        await totp.setup(conn, actor, request.app[KEYRING])
    return done(request, "account.account_page")


@signed_in
async def totp_enable(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await Form.posted(request, actor, secret=("code",))
    # A wrong code: the same key again (never stored), the message beside the code's field.
    async with form.attempt(request, "account.html",
                            lambda conn: _account_context(request, conn, actor), field="code",
                            private=True) as conn:
        await totp.enable(conn, actor, request.app[KEYRING], form["code"].strip())
    return done(request, "account.account_page", "totp_enabled")


@signed_in
async def request_deletion(request: web.Request, actor: Actor) -> web.StreamResponse:
    """Schedule the account's deletion in 7 days, confirmed by the password (or, without one,
    the account's email) and the code with two-factor on."""
    form = await Form.posted(request, actor, secret=("password", "code", "confirm"))
    app = request.app
    async with db.connection(app[POOL]) as conn:
        try:
            await deletion.request_deletion(
                conn, actor, app[PASSWORDS], app[KEYRING], form["password"] or None,
                form["code"] or None, app_url(request), confirm=form["confirm"] or None,
                failures=ratelimit.Charge.failed_auth(app[SETTINGS], actor.ip))
        except TooManyRequests:
            raise
        except DomainError as exc:
            context = await _account_context(request, conn, actor)
            context["deletion_error"] = exc.message
            return _account(request, context, status=exc.status)
    return done(request, "account.account_page", "deletion_requested")


@signed_in
async def cancel_deletion(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with form_work(request, actor) as (_form, conn):
        await deletion.cancel_deletion(conn, actor, request.app[KEYRING], app_url(request))
    return done(request, "account.account_page", "deletion_cancelled")


@signed_in
async def save_e2e_key(request: web.Request, actor: Actor) -> web.StreamResponse:
    """End-to-end keys made by the page's script: a new key pair (the set-up), or the same
    public key with its private key wrapped by a new passphrase (the recovery). The passphrase,
    the recovery key and the private key never reach the server."""
    form = await Form.posted(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        existing = await user_key(conn, actor)
        try:
            await e2e.set_user_key(
                conn, actor, public_key=form["public_key"],
                wrapped_private_key=form["wrapped_private_key"],
                recovery_wrapped_private_key=form["recovery_wrapped_private_key"]
                or (existing["recovery_wrapped_private_key"] if existing else ""))
        except TooManyRequests:
            raise
        except DomainError as exc:
            return await account_refused(request, conn, actor, exc)
    return done(request, "account.account_page", "e2e_key_saved" if existing else "e2e_key_set",
                fragment="kunci-e2e")


@signed_in
async def save_language(request: web.Request, actor: Actor) -> web.StreamResponse:
    """The account's language (`id`, `en`, or empty: follow the browser), as `PATCH /me`."""
    async with form_work(request, actor) as (form, conn):
        await users.set_language(conn, actor, form["language"] or None)
    response = done(request, "account.account_page", "language_saved", fragment="bahasa")
    response.del_cookie(LANGUAGE_COOKIE, path="/")  # the account's choice rules from now on
    return response


async def choose_language(request: web.Request) -> web.StreamResponse:
    """`/language/{language}?next=...`: a signed-out browser's language (a cookie, a year), then
    back to the page it came from. Only a preference: no account changes."""
    language = request.match_info["language"]
    response = redirect_to(local_path(request.query.get("next")) or "/signin")
    if language in i18n.LANGUAGES:
        set_cookie(request, response, LANGUAGE_COOKIE, language, max_age=365 * 24 * 3600)
    else:
        response.del_cookie(LANGUAGE_COOKIE, path="/")
    return response
