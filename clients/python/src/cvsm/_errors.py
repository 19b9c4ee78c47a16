"""The exception hierarchy: one base error and one subclass per kind.

Callers branch on the type (``except cvsm.SecretNotFoundError``), never on message text.
Messages never contain the token or a secret value.
"""

from __future__ import annotations


class CvsmError(Exception):
    """Base of every error the client raises; catch it to handle them all.

    Every error carries the same fields, ``None`` where they do not apply:

    - ``message``: what went wrong, for people (never the token or a value);
    - ``status``: the HTTP status of the answer that caused the error; ``None`` when there was
      no answer (configuration, network, a name that is not valid);
    - ``request_id``: the ``X-Request-Id`` header of that answer, to quote to the server's
      operators;
    - ``retry_after``: seconds to wait before trying again (:class:`RateLimitError` only);
    - ``suggestion``: the existing name that differs only in case (:class:`SecretNotFoundError`
      only).
    """

    retry_after: int | None = None
    suggestion: str | None = None

    def __init__(self, message: str, *, status: int | None = None, request_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.request_id = request_id

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.status!r}, request_id={self.request_id!r})"


class ConfigurationError(CvsmError):
    """Raised when the client cannot work as configured.

    At construction: the token, base URL or team is missing (the message names the variable,
    e.g. ``CVSM_TOKEN is not set``), an option or variable is invalid, or the CA bundle cannot
    be read; a ``cvsm_`` token with a dot that is not a token with its key part (the message
    never shows it). On use: the server answers that the base URL, the team (id or slug) or the environment
    is wrong (``status`` 404 or 400); a token without its key part reads an end-to-end team.
    From ``inject``: a secret cannot be put in the process environment.
    """


class AuthenticationError(CvsmError):
    """Raised when the server refuses the token (HTTP 401): bad, expired or revoked.

    Raising it also empties the client's cache.
    """


class PermissionDeniedError(CvsmError):
    """Raised when the token may not do this (HTTP 403), e.g. an IP allowlist miss.

    Raising it also empties the client's cache.
    """


class SecretNotFoundError(CvsmError):
    """Raised when no secret has exactly this name in the client's environment.

    ``name`` and ``environment`` say what was looked up; ``suggestion`` is the existing name
    when one differs only in case (names are case-sensitive). ``status`` is 404 and
    ``request_id`` that of the server's answer to the read by name; both are ``None`` when the
    name is not a valid secret name (then no request is made).
    """

    def __init__(
        self,
        message: str,
        *,
        name: str | None = None,
        environment: str | None = None,
        suggestion: str | None = None,
        status: int | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message, status=status, request_id=request_id)
        self.name = name
        self.environment = environment
        self.suggestion = suggestion


class RateLimitError(CvsmError):
    """Raised when the server rate limits the token (HTTP 429); it is never retried.

    ``retry_after`` is the ``Retry-After`` header in whole seconds (an HTTP date counts from
    now, rounded up; a past date is 0), or ``None`` when the header is absent or unreadable.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = 429,
        retry_after: int | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message, status=status, request_id=request_id)
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, status={self.status!r}, "
            f"request_id={self.request_id!r}, retry_after={self.retry_after!r})"
        )


class ApiError(CvsmError):
    """Raised for any other non-2xx answer: a redirect, a 5xx after retries; see ``status``."""


class NetworkError(CvsmError):
    """Raised when no usable answer arrived after retries.

    The connection was refused or dropped, an attempt did not complete within ``timeout``, TLS
    failed, or a 2xx answer was unreadable (not JSON, or not the shape the request promises).
    """


class DecryptionError(CvsmError):
    """Raised when a value of an end-to-end team does not open with the team key; never retried.

    The envelope the server sent was tampered with, sealed for another secret, environment or
    team, or malformed; or the team key sent for the token does not open with the token's key
    part, or is not the key version the value was sealed under (after one fetch of the key).
    The message names the secret, never a value or a key; ``status`` is ``None`` and
    ``request_id`` is that of the answer which carried the value (or the key).
    """
