"""Newsletter routes (public): subscribe (its own rate limit, `newsletter`: 5 per 10 s per IP),
confirm, and the unsubscribe link every newsletter mail carries.

The unsubscribe link is opened from a mail: a browser (asking for `text/html`) gets a small
page, anything else JSON; an invalid or used token is the same generic 400 either way."""

from __future__ import annotations

from aiohttp import web

from ..mail import newsletter
from ..core.errors import BadRequest, DomainError
from ..core.inputs import field
from .schema import OK, STRING, answer, obj, query
from .pages.newsletter import newsletter_page
from .request import actor, app_url, connection, read_json
from .state import KEYRING



async def subscribe(request: web.Request) -> web.Response:
    body = await read_json(request)
    email = field(body, "email", str)
    async with connection(request) as conn:
        await newsletter.subscribe(conn, actor(request), request.app[KEYRING], email,
                                   app_url(request))
    return web.json_response({"ok": True}, status=202)


async def confirm(request: web.Request) -> web.Response:
    body = await read_json(request)
    token = field(body, "token", str)
    async with connection(request) as conn:
        await newsletter.confirm(conn, actor(request), request.app[KEYRING], token)
    return web.json_response({"ok": True})


def wants_html(request: web.Request) -> bool:
    return "text/html" in request.headers.get("Accept", "")


async def unsubscribe(request: web.Request) -> web.Response:
    try:
        token = request.query.get("token")
        if token is None:
            raise BadRequest(newsletter.TOKEN_INVALID)
        async with connection(request) as conn:
            await newsletter.unsubscribe(conn, actor(request), request.app[KEYRING], token)
    except DomainError as exc:
        if not wants_html(request) or exc.status >= 500:
            raise
        return newsletter_page(request, "error", status=exc.status, message=exc.message)
    if wants_html(request):
        return newsletter_page(request, "unsubscribed")
    return web.json_response({"ok": True})


# --- OpenAPI: the operations above (`web.schema`), for `web.apidoc` ------------------------------

OPENAPI = {
    "subscribe": {
        "summary": "Subscribe an address to the newsletter (a confirmation mail follows).",
        "description": "Always 202 with the same body: an address already confirmed gets no "
                       "mail. Rate limited to 5 requests per 10 seconds per client IP.",
        "tags": ["newsletter"],
        "body": obj({"email": {"type": "string", "maxLength": 254, "format": "email"}},
                    ("email",)),
        "responses": {202: OK},
    },
    "confirm": {
        "summary": "Confirm a subscription with the token from its mail (single use).",
        "tags": ["newsletter"],
        "body": obj({"token": STRING}, ("token",)),
        "responses": {200: OK},
    },
    "unsubscribe": {
        "summary": "Unsubscribe with the token of a newsletter mail's link (single use).",
        "description": "A client that accepts `text/html` gets a small page instead of JSON.",
        "tags": ["newsletter"],
        "query": [query("token", STRING, "The token from the mail's link.")],
        "responses": {200: ("Unsubscribed.", {"content": {
            "application/json": {"schema": answer({"ok": {"const": True}})},
            "text/html": {"schema": STRING},
        }})},
    },
}
