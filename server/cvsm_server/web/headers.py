"""Response headers on every response (errors and static files included), and CORS.

CORS is a small middleware rather than aiohttp-cors because a preflight must be answered before
authentication and rate limiting, for every route, including ones added later.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from multidict import CIMultiDict

from .state import REQUEST_ID, SETTINGS

SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Strict-Transport-Security": "max-age=63072000; includeSubDomains",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=(), usb=()",
    "Referrer-Policy": "no-referrer",
}
ALLOWED_METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS"
ALLOWED_HEADERS = "Authorization, Content-Type, X-Request-Id"
EXPOSED_HEADERS = "Retry-After, X-Request-Id, Cvsm-E2E"


# Set in one call per response (the names are distinct and new to it: a handler sets none).
_SECURITY = CIMultiDict(SECURITY_HEADERS)


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    headers = response.headers
    for name in _SECURITY:
        if name in headers:
            del headers[name]
    headers.extend(_SECURITY)
    if "Server" in headers:
        del headers["Server"]
    if "X-Powered-By" in headers:
        del headers["X-Powered-By"]
    if (request_id := request.get(REQUEST_ID)) is not None:
        headers["X-Request-Id"] = request_id
    if request.path.startswith("/api/") and "Cache-Control" not in headers:
        headers["Cache-Control"] = "no-store"


def _allowed_origin(request: web.Request) -> str | None:
    origin = request.headers.get("Origin")
    if not origin:
        return None
    allowed = request.app[SETTINGS].cors_origins
    if "*" in allowed:
        return "*"
    return origin if origin in allowed else None


@web.middleware
async def cors_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    origin = _allowed_origin(request)
    if request.method == "OPTIONS" and request.headers.get("Access-Control-Request-Method"):
        response: web.StreamResponse = web.Response(status=204)
        if origin:
            response.headers["Access-Control-Allow-Methods"] = ALLOWED_METHODS
            response.headers["Access-Control-Allow-Headers"] = ALLOWED_HEADERS
            response.headers["Access-Control-Max-Age"] = "600"
    else:
        response = await handler(request)
    if origin:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
        if origin != "*":
            response.headers["Vary"] = "Origin"
    return response
