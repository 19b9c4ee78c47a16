"""Web pages: the share-link page that the API's links point at, and the API reference.

`POST .../shares` answers `url = {CVSM_APP_URL}/share/shr_<token>`; with the default app URL that
is this server. The page is the same for every link (only its language differs): the server
never reads, logs or embeds the token, and loading the page consumes nothing (so a chat app that
previews the link does not burn a view).
Its script reveals the value only when the recipient asks, through `GET /public/share/:token`,
and renders it as text, never as HTML.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import aiohttp_jinja2
from aiohttp import web

from ...core.errors import NotFound
from .rendering import choose_language

STATIC_DIR = Path(str(resources.files("cvsm_server") / "static"))

# The page runs only its own script and style and talks only to this origin (its icon is an
# empty `data:` one, so no request for a favicon is made).
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
            "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


async def share_page(request: web.Request) -> web.StreamResponse:
    """The share page in the recipient's language (`choose_language`: a signed-in account's
    choice, the language cookie, `Accept-Language`, the server's default); its script's texts
    follow `<html lang>`. Nothing of the request but its language reaches the page."""
    html = aiohttp_jinja2.render_string("share.html", request, {"lang": choose_language(request)})
    response = web.Response(text=html, content_type="text/html")
    response.headers["Content-Security-Policy"] = PAGE_CSP
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Robots-Tag"] = "noindex, nofollow"
    return response


# The API reference: a page whose script renders `/api/v1/openapi.json` client-side.
DOCS_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
            "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


async def docs_page(request: web.Request) -> web.StreamResponse:
    """The API reference, its chrome (title, headings, navigation, the language switch) in the
    page's language (`choose_language`), its script's labels following `<html lang>`; the
    OpenAPI document's own descriptions stay English."""
    html = aiohttp_jinja2.render_string("docs.html", request, {
        "lang": choose_language(request), "here": request.path})
    response = web.Response(text=html, content_type="text/html")
    response.headers["Content-Security-Policy"] = DOCS_CSP
    response.headers["Cache-Control"] = "no-cache"
    response.headers["Vary"] = "Accept-Language, Cookie"
    return response


# The only files served: an allowlist, so no path can reach anything else.
ASSETS = {"share.js": "text/javascript", "share.css": "text/css",
          "docs.js": "text/javascript", "docs.css": "text/css",
          "app.js": "text/javascript", "app.css": "text/css",
          "oauth.js": "text/javascript", "support.js": "text/javascript",
          "e2e.js": "text/javascript", "e2e-dotenv.js": "text/javascript",
          "e2e-pages.js": "text/javascript"}


async def asset(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name not in ASSETS:
        raise NotFound()
    response = web.FileResponse(STATIC_DIR / name)
    response.content_type = ASSETS[name]
    response.headers["Cache-Control"] = "no-cache"
    return response
