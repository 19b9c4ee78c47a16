"""Domain errors and the one middleware that turns every error into `{"error": "..."}`.

Handlers and domain functions raise these; nothing else builds an error response. Messages are
Indonesian and never carry a secret value, a token, or whether an account exists.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

log = logging.getLogger("cvsm.errors")


class DomainError(Exception):
    """An expected failure with an HTTP status and a user-facing Indonesian message."""

    status = 400
    default_message = "Permintaan tidak valid"

    def __init__(self, message: str | None = None, *, headers: dict[str, str] | None = None) -> None:
        self.message = message or self.default_message
        self.headers = headers or {}
        super().__init__(self.message)


class BadRequest(DomainError):
    status = 400


class Unauthorized(DomainError):
    status = 401
    default_message = "Autentikasi gagal"


class Forbidden(DomainError):
    status = 403
    default_message = "Anda tidak memiliki izin untuk tindakan ini"


class NotFound(DomainError):
    status = 404
    default_message = "Tidak ditemukan"


class Conflict(DomainError):
    status = 409
    default_message = "Data sudah ada"


class Gone(DomainError):
    status = 410
    default_message = "Tautan sudah kedaluwarsa atau tidak berlaku lagi"


class PayloadTooLarge(DomainError):
    status = 413
    default_message = "Isi permintaan terlalu besar"


class TooManyRequests(DomainError):
    status = 429
    default_message = "Terlalu banyak permintaan, coba lagi nanti"

    def __init__(self, retry_after: int, message: str | None = None) -> None:
        self.retry_after = max(1, int(retry_after))
        super().__init__(message, headers={"Retry-After": str(self.retry_after)})


class ServiceUnavailable(DomainError):
    status = 503
    default_message = "Layanan sedang tidak tersedia"


# Messages for the errors aiohttp raises itself (unknown route, wrong method, body too large).
_HTTP_MESSAGES = {
    400: "Permintaan tidak valid",
    404: "Tidak ditemukan",
    405: "Metode tidak diizinkan",
    413: "Isi permintaan terlalu besar",
    415: "Jenis konten tidak didukung",
}


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


@web.middleware
async def error_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Answer every failure as `{"error": "<Indonesian message>"}` with the right status."""
    try:
        return await handler(request)
    except DomainError as exc:
        return error_response(exc.status, exc.message, exc.headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = _HTTP_MESSAGES.get(exc.status, "Permintaan tidak dapat diproses")
        headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
        return error_response(exc.status, message, headers)
    except Exception:
        # The traceback names code locations only; request bodies and values are never logged.
        log.exception("unhandled error on %s %s", request.method, request.rel_url.path)
        return error_response(500, "Terjadi kesalahan pada server")
