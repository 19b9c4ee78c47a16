"""The account page: e-mail verification, two-factor, and the account's deletion.
"""

from __future__ import annotations

from typing import Any

import segno
from aiohttp import web

from ... import db, deletion, email_verification, oauth, ratelimit, totp, users
from ...actor import Actor
from ...errors import DomainError, TooManyRequests
from ..request import app_url
from ..state import KEYRING, PASSWORDS, POOL, SETTINGS
from .kit import form_field, redirect_to, render_page, session_csrf, signed_form, signed_in, url_for


async def _account_context(request: web.Request, conn: db.Connection, actor: Actor) -> dict[str, Any]:
    return {"user": actor, "csrf": session_csrf(request, actor),
            "profile": await users.profile(conn, actor), "setup": None,
            "deletion": await deletion.status(conn, actor),
            "identities": await oauth.identities(conn, actor),
            "oauth_result": request.query.get("oauth")}


@signed_in
async def account_page(request: web.Request, actor: Actor) -> web.StreamResponse:
    async with db.connection(request.app[POOL]) as conn:
        return render_page(request, "account.html", await _account_context(request, conn, actor))


@signed_in
async def request_verification(request: web.Request, actor: Actor) -> web.StreamResponse:
    await signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        await email_verification.request_link(conn, actor, request.app[KEYRING], app_url(request))
        context = await _account_context(request, conn, actor)
    context["notice"] = "Tautan verifikasi sudah dikirim ke email Anda (berlaku 48 jam)."
    return render_page(request, "account.html", context)


@signed_in
async def totp_setup(request: web.Request, actor: Actor) -> web.StreamResponse:
    await signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        secret, url = await totp.setup(conn, actor, request.app[KEYRING])
        context = await _account_context(request, conn, actor)
    # The QR code is drawn here, as SVG in a data: URL: the secret never leaves this server.
    qr = segno.make(url, error="m").svg_data_uri(scale=4, dark="#000", light="#fff")
    context["setup"] = {"secret": secret, "qr": qr}
    return render_page(request, "account.html", context, private=True)


@signed_in
async def totp_enable(request: web.Request, actor: Actor) -> web.StreamResponse:
    form = await signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        try:
            await totp.enable(conn, actor, request.app[KEYRING], form_field(form, "code").strip())
        except DomainError as exc:
            context = await _account_context(request, conn, actor)
            context["error"] = exc.message
            return render_page(request, "account.html", context, status=exc.status)
    return redirect_to(url_for(request, "account.account_page"))


@signed_in
async def request_deletion(request: web.Request, actor: Actor) -> web.StreamResponse:
    """Schedule the account's deletion in 7 days, confirmed by the password (or, without one,
    the account's email) and the code with two-factor on."""
    form = await signed_form(request, actor)
    app = request.app
    async with db.connection(app[POOL]) as conn:
        try:
            await deletion.request_deletion(
                conn, actor, app[PASSWORDS], app[KEYRING], form_field(form, "password") or None,
                form_field(form, "code") or None, app_url(request),
                confirm=form_field(form, "confirm") or None,
                failures=ratelimit.Charge.failed_auth(app[SETTINGS], actor.ip))
        except TooManyRequests:
            raise
        except DomainError as exc:
            context = await _account_context(request, conn, actor)
            context["deletion_error"] = exc.message
            return render_page(request, "account.html", context, status=exc.status)
    return redirect_to(url_for(request, "account.account_page"))


@signed_in
async def cancel_deletion(request: web.Request, actor: Actor) -> web.StreamResponse:
    await signed_form(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        await deletion.cancel_deletion(conn, actor, request.app[KEYRING], app_url(request))
    return redirect_to(url_for(request, "account.account_page"))
