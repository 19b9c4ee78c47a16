"""Domain errors: an expected failure, its HTTP-neutral kind and an Indonesian message.

Domain functions raise these; the web layer's error middleware (`web.middleware`) turns each
into `{"error": "<message>"}` with its status. Messages never carry a secret value, a token, or
whether an account exists. This module imports nothing from aiohttp, so a CLI command or a
background job raises and catches the same errors.
"""

from __future__ import annotations


class DomainError(Exception):
    """An expected failure with a status and a user-facing Indonesian message."""

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

    def __init__(self, retry_after: float, message: str | None = None) -> None:
        self.retry_after = max(1, int(-(-retry_after // 1)))  # whole seconds, rounded up
        super().__init__(message, headers={"Retry-After": str(self.retry_after)})


class ServerError(DomainError):
    """Something unexpected failed: answered with no detail (the log has the traceback)."""
    status = 500
    default_message = "Terjadi kesalahan pada server"


class ServiceUnavailable(DomainError):
    status = 503
    default_message = "Layanan sedang tidak tersedia, coba lagi nanti"

    def __init__(self, message: str | None = None, *, retry_after: int = 5) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})
