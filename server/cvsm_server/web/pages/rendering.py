"""Rendering a dashboard page: its template with what every page shows (the signed-in user, the
CSRF token, the flash message, the deletion banner) and its headers (CSP, caching)."""

from __future__ import annotations

from typing import Any

import aiohttp_jinja2
from aiohttp import web

from ...core import i18n
from ...core.actor import Actor
from ...accounts import deletion
from ..state import ACTOR, PAGE_STATE, SETTINGS
from .session import (FLASH_COOKIE, NEW_PRE_SESSION, PRE_COOKIE, anonymous_csrf, flash, read_flash,
                      session_csrf, set_cookie, ONCE_COOKIE, TOOK_ONCE)


# A signed-out browser's choice of language (the header's links): the account's own setting
# wins once signed in.
LANGUAGE_COOKIE = "cvsm_lang"


def choose_language(request: web.Request) -> str:
    """The page's language, set for the rest of the request (`core.i18n`): the signed-in
    account's choice, else the browser's (its cookie, then `Accept-Language`), else the
    server's `CVSM_DEFAULT_LANGUAGE`."""
    state = request.get(PAGE_STATE)
    if state is not None and state.language in i18n.LANGUAGES:
        language = state.language
    elif request.cookies.get(LANGUAGE_COOKIE) in i18n.LANGUAGES:
        language = request.cookies[LANGUAGE_COOKIE]
    else:
        language = i18n.negotiate(request.headers.get("Accept-Language"),
                                  request.app[SETTINGS].default_language)
    i18n.set_language(language)
    return language


def render_page(request: web.Request, template: str, context: dict[str, Any], *, status: int = 200,
                private: bool = False) -> web.Response:
    """The template with what every page shows (`page_context`); a page that took a value
    shown once (`take_once`) is never stored and deletes that value's cookie."""
    took_once = request.get(TOOK_ONCE, False)
    flash = read_flash(request)
    context = translated({**page_context(request), "flash": flash, **context})
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


# The context's messages (a refusal's, beside a field or above a form, or the error page's): the
# domain's Indonesian texts, shown in the page's language where the catalog translates them
# (the API's JSON keeps them as they are).
MESSAGES = ("error", "message", "notice", "sent", "e2e_error", "deletion_error", "escalate_error")


def translated(context: dict[str, Any]) -> dict[str, Any]:
    for key in MESSAGES:
        if isinstance(context.get(key), str):
            context[key] = i18n.translate(context[key])
    if isinstance(context.get("errors"), dict):
        context["errors"] = {name: i18n.translate(text) if isinstance(text, str) else text
                             for name, text in context["errors"].items()}
    return context


def page_context(request: web.Request) -> dict[str, Any]:
    """The context processor: the signed-in user (or None), the form's CSRF token (the
    session's, or before signing in the pre-session's), the admin link, the deletion banner,
    and the defaults of a form (`form`: kept values, `errors`: a message per field)."""
    state = request.get(PAGE_STATE)  # the signed-in user's banner and nav (`users.page_state`)
    actor = signed_in_actor(request) if ACTOR in request else None
    return {"user": actor, "error": None, "form": {}, "errors": {},
            "lang": choose_language(request),
            # where the signed-out language switch comes back to: the path only, never its
            # query (a one-time link's token stays out of every link on the page)
            "here": request.path,
            "csrf": session_csrf(request, actor) if actor is not None else anonymous_csrf(request),
            "pending_deletion": deletion.format_when(state.delete_after)
            if state is not None and state.delete_after is not None else None,
            "shows_admin": state is not None and state.is_admin}


CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


def signed_in_actor(request: web.Request) -> Actor | None:
    """The signed-in user on a session route (`auth_middleware` read the cookie), else None."""
    actor = request[ACTOR]
    return actor if actor.user_id is not None else None
