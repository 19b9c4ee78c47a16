"""cvsm._errors owns the exception hierarchy: one base error and one subclass per kind.

Callers branch on the type (``except cvsm.SecretNotFoundError``), never on message text.
Messages never contain the token or a secret value.
"""

from __future__ import annotations


class CvsmError(Exception):
    """CvsmError is the base of every error the client raises; catch it to handle them all.

    ``status`` is the HTTP status of the answer that caused the error, or ``None`` when there
    was no answer (configuration, network) or no single status (a name absent from a listing).
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.status!r})"


class ConfigurationError(CvsmError):
    """ConfigurationError says the client cannot work as configured.

    Raised at construction when the token, base URL or team is missing (the message names the
    variable, e.g. ``CVSM_TOKEN is not set``) or an option is invalid, and on first use when a
    team slug matches none of the caller's teams.
    """


class AuthenticationError(CvsmError):
    """AuthenticationError says the server refused the token (HTTP 401): bad, expired or revoked.

    Raising it also empties the client's cache.
    """


class PermissionDeniedError(CvsmError):
    """PermissionDeniedError says the token may not do this (HTTP 403), e.g. an IP allowlist miss."""


class SecretNotFoundError(CvsmError):
    """SecretNotFoundError says no secret has exactly this name in the client's environment.

    ``name`` and ``environment`` say what was looked up; ``suggestion`` is the existing name
    when one differs only in case (names are case-sensitive). ``status`` is 404 when the server
    answered 404, ``None`` when the listing simply held no such name.
    """

    def __init__(
        self,
        message: str,
        *,
        name: str | None = None,
        environment: str | None = None,
        suggestion: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message, status=status)
        self.name = name
        self.environment = environment
        self.suggestion = suggestion


class RateLimitError(CvsmError):
    """RateLimitError says the server is rate limiting the token (HTTP 429); it is never retried.

    ``retry_after`` is the ``Retry-After`` header in whole seconds, or ``None`` when absent.
    """

    def __init__(self, message: str, *, status: int | None = 429, retry_after: int | None = None) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, status={self.status!r}, "
            f"retry_after={self.retry_after!r})"
        )


class ApiError(CvsmError):
    """ApiError says the server answered any other non-2xx status (5xx after retries); see ``status``."""


class NetworkError(CvsmError):
    """NetworkError says no usable answer arrived after retries.

    The connection was refused or dropped, an attempt timed out, or the response was unreadable.
    """
