"""cvsm._protocol is the wire protocol shared by Client and AsyncClient, without any I/O.

It builds request paths and headers, decides what is retried and how long to wait, turns
non-2xx answers into typed errors and picks the exact secret out of a case-insensitive search.
The two clients only add the sending (blocking or async) around it.
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from typing import Any
from urllib.parse import quote

import httpx

from ._config import Token
from ._errors import (
    ApiError,
    AuthenticationError,
    ConfigurationError,
    CvsmError,
    NetworkError,
    PermissionDeniedError,
    RateLimitError,
    SecretNotFoundError,
)
from ._models import SecretSummary, Team
from ._version import USER_AGENT

RETRYABLE_STATUSES = frozenset({502, 503, 504})
_MAX_SERVER_MESSAGE = 300
_REDACTED = "[redacted]"


def default_headers(token: Token) -> dict[str, str]:
    """default_headers are the headers every request carries."""
    return {
        "Authorization": f"Bearer {token.reveal()}",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }


def teams_path() -> str:
    return "/teams"


def list_path(team_id: str) -> str:
    return f"/teams/{quote(team_id, safe='')}/secrets"


def value_path(team_id: str, secret_id: str) -> str:
    return f"/teams/{quote(team_id, safe='')}/secrets/{quote(secret_id, safe='')}"


def export_path(team_id: str) -> str:
    return f"/teams/{quote(team_id, safe='')}/secrets/export"


def backoff_delay(attempt: int) -> float:
    """backoff_delay is the full-jitter pause before retry ``attempt`` (0 for the first retry)."""
    return random.uniform(0.0, 0.1 * 2**attempt)


def decode_json(response: httpx.Response) -> Any:
    """decode_json returns the JSON body of a 2xx answer, or raises NetworkError if unreadable."""
    try:
        return json.loads(response.content)
    except ValueError:
        raise NetworkError(
            f"unreadable response: HTTP {response.status_code} body is not JSON"
        ) from None


def network_error(exc: httpx.HTTPError) -> NetworkError:
    """network_error describes a transport failure by its type; the URL holds no token."""
    if isinstance(exc, httpx.TimeoutException):
        what = "the request timed out"
    elif isinstance(exc, httpx.ConnectError):
        what = "could not connect to the server"
    elif isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        what = "the connection was dropped"
    else:
        what = "the request failed"
    try:
        request: httpx.Request | None = exc.request
    except RuntimeError:
        request = None
    where = f" ({request.method} {request.url.copy_with(query=None)})" if request is not None else ""
    return NetworkError(f"network error: {what}{where}: {type(exc).__name__}")


def retry_after_seconds(value: str | None) -> int | None:
    """retry_after_seconds reads ``Retry-After`` as whole seconds (delta or HTTP date)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0, round(when.timestamp() - time.time()))


def error_from_response(response: httpx.Response, token: Token) -> CvsmError:
    """error_from_response turns a non-2xx answer into the error of its kind.

    The message is ``HTTP <status>: <the server's "error" text>``, with the token removed
    should a server ever echo it.
    """
    status = response.status_code
    detail: str | None = None
    try:
        body = json.loads(response.content)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        detail = body["error"]
    if not detail:
        detail = response.reason_phrase or "error"
    detail = detail.replace(token.reveal(), _REDACTED)
    if len(detail) > _MAX_SERVER_MESSAGE:
        detail = detail[:_MAX_SERVER_MESSAGE] + "..."
    message = f"HTTP {status}: {detail}"
    if status == 401:
        return AuthenticationError(message, status=status)
    if status == 403:
        return PermissionDeniedError(message, status=status)
    if status == 404:
        return SecretNotFoundError(message, status=status)
    if status == 429:
        return RateLimitError(
            message, status=status, retry_after=retry_after_seconds(response.headers.get("Retry-After"))
        )
    return ApiError(message, status=status)


def pick_team(teams: list[Team], slug: str) -> str:
    """pick_team returns the id of the team whose slug is ``slug``, or raises ConfigurationError."""
    for team in teams:
        if team.slug == slug:
            return team.id
    raise ConfigurationError(f"team {slug!r} is not one of your teams (CVSM_TEAM: a team id or slug)")


def pick_secret(secrets: list[SecretSummary], name: str, environment: str) -> str:
    """pick_secret returns the id of the secret named exactly ``name``.

    The server's search is case-insensitive, names are not: an entry that differs only in case
    is not a match, but its name is suggested in the not-found error.
    """
    in_environment = [s for s in secrets if s.environment in (None, environment)]
    for secret in in_environment:
        if secret.name == name:
            return secret.id
    suggestion = next((s.name for s in in_environment if s.name.lower() == name.lower()), None)
    message = f"secret {json.dumps(name, ensure_ascii=False)} not found in {environment}"
    if suggestion is not None:
        message += f"; did you mean {json.dumps(suggestion, ensure_ascii=False)}?"
    raise SecretNotFoundError(message, name=name, environment=environment, suggestion=suggestion)


def describe(kind: str, config: Any) -> str:
    """describe is the printed form of a client: its configuration, never the token or a value."""
    return (
        f"<cvsm.{kind} base_url={config.base_url!r} team={config.team!r} "
        f"environment={config.environment!r} cache_ttl={config.cache_ttl} "
        f"timeout={config.timeout:g} max_retries={config.max_retries}>"
    )
