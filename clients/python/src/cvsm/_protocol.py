"""The wire protocol shared by Client and AsyncClient, without any I/O.

It says which GETs to make (:class:`Call`), reads their complete answers (:class:`Answer`) into
values or typed errors, decides what is retried, what may be answered with a stale value and how
long to wait, checks secret names and what ``inject`` may set, tells a missing secret from a
wrong team out of a case-insensitive search, and opens the values of an end-to-end team. The
clients only add the sending, blocking or async, around it.
"""

from __future__ import annotations

import email.utils
import enum
import json
import math
import os
import random
import re
import time
from collections.abc import Callable, Mapping
from datetime import timezone
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import attrs
import httpx

from . import _rules as rules
from . import e2e
from ._config import ClientConfig, Token, display_url
from ._errors import (
    ApiError,
    AuthenticationError,
    ConfigurationError,
    CvsmError,
    DecryptionError,
    NetworkError,
    PermissionDeniedError,
    RateLimitError,
    SecretNotFoundError,
)
from ._models import (
    SecretRead,
    SecretSummary,
    WrappedTeamKey,
    parse_export,
    parse_secret_list,
    parse_secret_value,
    parse_team_key,
)
from ._version import USER_AGENT

T = TypeVar("T")

RETRYABLE_STATUSES = rules.RETRYABLE_STATUSES
_MAX_SERVER_MESSAGE = rules.MAX_SERVER_MESSAGE
_REDACTED = rules.REDACTED
_SECRET_NAME = re.compile(rules.SECRET_NAME_PATTERN)
_VARIABLE_NAME = re.compile(rules.VARIABLE_NAME_PATTERN)
_DIGITS = re.compile(r"[0-9]+")


class Endpoint(enum.Enum):
    """The four requests the client makes; what an error status means depends on which."""

    BY_NAME = "by_name"
    LISTING = "listing"
    EXPORT = "export"
    TEAM_KEY = "team_key"


@attrs.frozen
class Call(Generic[T]):
    """One GET the client wants answered: where, with which query, and how to read the answer.

    ``parse`` turns the decoded JSON body of a 2xx answer into the result, raising
    :class:`NetworkError` when the body is not the shape the endpoint promises.
    """

    endpoint: Endpoint
    path: str
    params: Mapping[str, str] | None
    parse: Callable[[Any], T]
    name: str | None = None
    environment: str | None = None


@attrs.frozen
class Answer:
    """A complete HTTP answer: its status, headers and whole body, read within the timeout."""

    status: int
    headers: httpx.Headers
    body: bytes | bytearray = attrs.field(repr=lambda body: f"<{len(body)} bytes>")
    reason: str = ""

    @property
    def request_id(self) -> str | None:
        """Return the answer's ``X-Request-Id`` header, or ``None``."""
        return self.headers.get(rules.HEADER_REQUEST_ID) or None


# The header the server sets on an end-to-end team's JSON export (its values are envelopes).
E2E_HEADER = rules.HEADER_E2E


@attrs.frozen
class Reply(Generic[T]):
    """What a successful call returns: the parsed result, the answer's request id and whether
    the answer says its values are an end-to-end team's envelopes (``Cvsm-E2E: 1``)."""

    value: T
    request_id: str | None
    e2e: bool = False


@attrs.frozen
class Sleep:
    """A pause the client must take before the next attempt."""

    seconds: float


@attrs.frozen(eq=False)
class Acquire:
    """A lock the client must take before the flow goes on; the flow releases it itself.

    ``lock`` is of the client's kind: a ``threading.Lock`` for ``Client``, an ``asyncio.Lock``
    for ``AsyncClient`` (whose ``release`` is not a coroutine either).
    """

    lock: Any


def request_headers(token: Token) -> dict[str, str]:
    """Return the headers every request carries."""
    return {
        "Authorization": f"Bearer {token.reveal()}",
        "Accept": rules.ACCEPT_JSON,
        "User-Agent": USER_AGENT,
    }


def by_name_call(team: str, environment: str, name: str) -> Call[SecretRead]:
    """Return the call that reads the value of the secret named exactly ``name``.

    ``team`` is the team id or slug as configured: the server takes either in the path.
    """
    return Call(
        Endpoint.BY_NAME,
        f"/teams/{quote(team, safe='')}/secrets/by-name/{quote(name, safe='')}",
        {"environment": environment},
        parse_secret_value,
        name=name,
        environment=environment,
    )


def listing_call(team: str, environment: str, name: str) -> Call[list[SecretSummary]]:
    """Return the call that searches the environment for ``name`` (case-insensitively)."""
    return Call(
        Endpoint.LISTING,
        f"/teams/{quote(team, safe='')}/secrets",
        {"environment": environment, "search": name},
        parse_secret_list,
        name=name,
        environment=environment,
    )


def export_call(team: str, environment: str) -> Call[dict[str, str]]:
    """Return the call that reads every secret of the environment through the JSON export."""
    return Call(
        Endpoint.EXPORT,
        f"/teams/{quote(team, safe='')}/secrets/export",
        {"format": "json", "environment": environment},
        parse_export,
        environment=environment,
    )


def team_key_call(team: str) -> Call[WrappedTeamKey]:
    """Return the call that fetches the team key of an end-to-end team, wrapped to the token."""
    return Call(Endpoint.TEAM_KEY, f"/teams/{quote(team, safe='')}/e2e/key", None, parse_team_key)


@attrs.frozen(repr=False)
class TeamKey:
    """An end-to-end team's keys, opened with the token's key part and verified against its pin:
    the current one (``key_version``) and those down to the pin (``keys``), with the team's
    links to walk further down for older envelopes. No repr shows a key."""

    team_id: str
    key_version: int
    keys: dict[int, bytes]
    links: dict[int, str]

    def key_for(self, version: int) -> bytes | None:
        """Return the key of ``version``: ``None`` above the current one (fetch again), else
        reached through the links from a verified key; :class:`e2e.E2EError` when a link is
        missing or does not open."""
        if version > self.key_version or version < 1:
            return None
        lowest = min(self.keys)
        if version < lowest:
            self.keys.update(e2e.verify_chain(self.keys[lowest], lowest, self.team_id, self.links, lowest,
                                              e2e.commitment(self.keys[lowest], self.team_id, lowest),
                                              down_to=version))
        return self.keys[version]

    def __repr__(self) -> str:
        return f"TeamKey(team_id={self.team_id!r}, key_version={self.key_version})"


def open_team_key(
    wrapped: WrappedTeamKey, private_key: e2e.PrivateKey, pin: tuple[int, bytes], request_id: str | None
) -> TeamKey:
    """Open the team key the server sent and check that it chains back to the token's pin
    (docs/e2e.md, format 2), or raise :class:`DecryptionError`: a key the server chose, a
    missing, malformed or altered link, a team rolled back below the pin."""
    try:
        links = e2e.parse_links(wrapped.links)
        key = e2e.unwrap_team_key(wrapped.wrapped_key, wrapped.team_id, wrapped.key_version, private_key)
        keys = e2e.verify_chain(key, wrapped.key_version, wrapped.team_id, links, *pin)
    except e2e.E2EError as exc:
        raise DecryptionError(
            f"the team key sent for this token (key version {wrapped.key_version}) is not one a team "
            f"member made for it: {exc}",
            request_id=request_id,
        ) from None
    return TeamKey(wrapped.team_id, wrapped.key_version, keys, links)


def key_version_of(name: str, envelope: str, request_id: str | None) -> int:
    """Return the key version ``envelope`` was sealed under, or raise :class:`DecryptionError`."""
    try:
        return e2e.parse_envelope(envelope).key_version
    except e2e.E2EError as exc:
        raise _undecryptable(name, str(exc), request_id) from None


def open_value(name: str, environment: str, envelope: str, key: TeamKey, request_id: str | None) -> str:
    """Return the value sealed in ``envelope`` for ``name`` in ``environment`` (what was asked for).

    Raise :class:`DecryptionError` naming the secret, never the value or a key, when it does
    not open: tampered, sealed for another secret, environment or team, malformed, or sealed
    under another key version than ``key``'s.
    """
    version = key_version_of(name, envelope, request_id)
    try:
        team_key = key.key_for(version)
        if team_key is None:
            raise _undecryptable(
                name, f"sealed under key version {version}, the team key is version {key.key_version}", request_id
            )
        return e2e.open_value(envelope, team_key, team_id=key.team_id, environment=environment, name=name)
    except e2e.E2EError as exc:
        raise _undecryptable(name, str(exc), request_id) from None


def _undecryptable(name: str, reason: str, request_id: str | None) -> DecryptionError:
    return DecryptionError(
        f"secret {json.dumps(name, ensure_ascii=False)} does not open: {reason}", request_id=request_id
    )


def keyless_end_to_end() -> ConfigurationError:
    """Return the error for a token without its key part reading an end-to-end team."""
    return ConfigurationError(
        f"{rules.MESSAGE_KEYLESS_E2E} (cvsm_<64 hex>.<43 base64url characters), "
        "as it was shown when it was created (token= or CVSM_TOKEN)"
    )


def backoff_delay(attempt: int) -> float:
    """Return the full-jitter pause before retry ``attempt`` (0 for the first retry)."""
    return random.uniform(0.0, rules.RETRY_BACKOFF_BASE_MS / 1000 * 2**attempt)


def read_answer(call: Call[T], answer: Answer, token: Token) -> Reply[T]:
    """Return the result of ``call`` from its ``answer``, or raise the error it amounts to.

    A 2xx answer whose body is not JSON, or not the shape ``call`` promises, raises
    :class:`NetworkError` (see :func:`is_retryable`).
    """
    if not 200 <= answer.status < 300:
        raise error_from_answer(call, answer, token)
    try:
        body = json.loads(answer.body)
    except (ValueError, RecursionError):
        raise NetworkError(
            f"unreadable response: HTTP {answer.status} body is not JSON", request_id=answer.request_id
        ) from None
    try:
        return Reply(call.parse(body), answer.request_id, answer.headers.get(E2E_HEADER) == "1")
    except NetworkError as exc:
        exc.request_id = answer.request_id
        raise


def is_retryable(error: CvsmError) -> bool:
    """Tell whether a failed attempt is tried again: no usable answer, or a 502, 503 or 504."""
    return isinstance(error, NetworkError) or (type(error) is ApiError and error.status in RETRYABLE_STATUSES)


def allows_stale(error: CvsmError) -> bool:
    """Tell whether a failed refresh may be answered with a kept value (rule R14).

    Only when the server could not answer (a network error or unreadable answer, after
    retries), failed (a 5xx, after retries) or asked us to slow down (429). Never for a refused
    token (401, 403: the cache is emptied), a missing secret or a configuration error.
    """
    return (
        isinstance(error, (NetworkError, RateLimitError))
        or (type(error) is ApiError and error.status is not None and 500 <= error.status < 600)
    )


def network_error(exc: httpx.HTTPError) -> NetworkError:
    """Describe a transport failure by its type; the URL holds no token, nor a password."""
    if isinstance(exc, httpx.TimeoutException):
        what = "the request timed out"
    elif isinstance(exc, httpx.ConnectError):
        what = "could not connect to the server"
    elif isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        what = "the connection was dropped"
    elif isinstance(exc, httpx.ProxyError):
        what = "the proxy refused the request"
    else:
        what = "the request failed"
    try:
        request: httpx.Request | None = exc.request
    except RuntimeError:
        request = None
    where = (
        f" ({request.method} {display_url(str(request.url.copy_with(query=None)))})" if request is not None else ""
    )
    error = NetworkError(f"network error: {what}{where}: {type(exc).__name__}")
    error.__cause__ = exc
    return error


def retry_after_seconds(value: str | None) -> int | None:
    """Read ``Retry-After`` as whole seconds.

    A delay in seconds is taken as is; an HTTP date gives the seconds from now until then,
    rounded up, and 0 when it is past; anything else, or no header, gives ``None``.
    """
    if value is None:
        return None
    value = value.strip()
    if _DIGITS.fullmatch(value):
        return int(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": UTC without a claim about local time
        when = when.replace(tzinfo=timezone.utc)
    return max(0, math.ceil(when.timestamp() - time.time()))


def error_from_answer(call: Call[Any], answer: Answer, token: Token) -> CvsmError:
    """Return the error a non-2xx answer to ``call`` amounts to.

    The message is ``HTTP <status>: <the server's "error" text>``, with the token removed
    should a server ever echo it, and a hint where the status means the configuration is wrong.
    """
    status = answer.status
    request_id = answer.request_id
    detail: str | None = None
    try:
        body = json.loads(answer.body)
    except (ValueError, RecursionError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        detail = body["error"]
    if not detail:
        detail = answer.reason or "error"
    detail = detail.replace(token.reveal(), _REDACTED)
    if len(detail) > _MAX_SERVER_MESSAGE:
        detail = detail[:_MAX_SERVER_MESSAGE] + "..."
    message = f"HTTP {status}: {detail}"
    if status == 401:
        return AuthenticationError(message, status=status, request_id=request_id)
    if status == 403:
        return PermissionDeniedError(message, status=status, request_id=request_id)
    if status == 429:
        return RateLimitError(
            message,
            status=status,
            retry_after=retry_after_seconds(answer.headers.get(rules.HEADER_RETRY_AFTER)),
            request_id=request_id,
        )
    if status == 404 and call.endpoint is Endpoint.BY_NAME:
        # Not final: the listing tells a missing secret from a wrong team (see absent_secret).
        return SecretNotFoundError(
            message, name=call.name, environment=call.environment, status=status, request_id=request_id
        )
    if status == 404:
        return ConfigurationError(
            f"{message} (is the base URL the API root, ending in /api/v1, and the team one of yours?)",
            status=status,
            request_id=request_id,
        )
    if status == 400 and call.endpoint is Endpoint.TEAM_KEY:
        return ConfigurationError(
            f"{message} (the token has a key part, but the server says the team is not end-to-end)",
            status=status,
            request_id=request_id,
        )
    if status == 400:
        return ConfigurationError(
            f"{message} (the server rejects the environment {call.environment!r}: CVSM_ENVIRONMENT)",
            status=status,
            request_id=request_id,
        )
    if 300 <= status < 400:
        message += " (redirects are not followed; is the base URL right?)"
    return ApiError(message, status=status, request_id=request_id)


def check_name(name: str, environment: str) -> None:
    """Raise :class:`SecretNotFoundError` when ``name`` is not a valid secret name.

    A valid name is a letter or ``_``, then up to 254 letters, digits or ``_``; no request
    could find any other.
    """
    if not isinstance(name, str):
        raise TypeError(f"a secret name is a str, not {type(name).__name__}")
    if not _SECRET_NAME.fullmatch(name):
        shown = json.dumps(name if len(name) <= 80 else name[:80] + "...", ensure_ascii=False)
        raise SecretNotFoundError(
            rules.MESSAGE_INVALID_SECRET_NAME % shown,
            name=name,
            environment=environment,
        )


def absent_secret(
    secrets: list[SecretSummary], name: str, environment: str, missing: SecretNotFoundError
) -> SecretNotFoundError:
    """Return the not-found error for ``name``, once the by-name read answered 404 (``missing``).

    The listing answered, so the team and base URL are right and the secret is missing. The
    error carries the 404 and the ``request_id`` of the by-name answer; the server's search is
    case-insensitive, names are not, so an entry that differs only in case is suggested.
    """
    folded = name.lower()
    suggestion = next(
        (
            s.name
            for s in secrets
            if s.environment in (None, environment) and s.name != name and s.name.lower() == folded
        ),
        None,
    )
    message = f"secret {json.dumps(name, ensure_ascii=False)} not found in {environment}"
    if suggestion is not None:
        message += rules.MESSAGE_DID_YOU_MEAN % suggestion
    return SecretNotFoundError(
        message,
        name=name,
        environment=environment,
        suggestion=suggestion,
        status=missing.status,
        request_id=missing.request_id,
    )


def to_inject(values: Mapping[str, str], environ: Mapping[str, str], overwrite: bool) -> dict[str, str]:
    """Return the variables ``inject`` sets, after checking that every one of them can be set.

    A variable already in ``environ`` is left out unless ``overwrite`` is true. Raise
    :class:`ConfigurationError`, naming the secret but never showing its value, when a name is
    not a variable name (``[A-Za-z_][A-Za-z0-9_]*``) or a value holds a NUL character or
    cannot be encoded for the environment; the caller then sets nothing.
    """
    chosen: dict[str, str] = {}
    for name, value in values.items():
        shown = json.dumps(name)
        if not _VARIABLE_NAME.fullmatch(name):
            raise ConfigurationError(f"secret {shown} cannot be put in the environment: not a variable name")
        if name in environ and not overwrite:
            continue
        if "\0" in value:
            raise ConfigurationError(
                f"secret {shown} cannot be put in the environment: its value holds a NUL character"
            )
        try:
            os.fsencode(value)
        except UnicodeError:
            raise ConfigurationError(
                f"secret {shown} cannot be put in the environment: its value cannot be encoded"
            ) from None
        chosen[name] = value
    return chosen


def describe(kind: str, config: ClientConfig) -> str:
    """Return the printed form of a client: its configuration, never the token or a value."""
    text = (
        f"<cvsm.{kind} base_url={display_url(config.base_url)!r} team={config.team!r} "
        f"environment={config.environment!r} cache_ttl={config.cache_ttl} "
        f"timeout={config.timeout:g} max_retries={config.max_retries} stale_if_error={config.stale_if_error}"
    )
    if config.ca_file is not None:
        text += f" ca_file={config.ca_file!r}"
    if config.live:
        text += " live=True"
    return text + ">"


def changes_path(team: str) -> str:
    """Return the path of the team's change stream (server-sent events of names and versions)."""
    return f"/teams/{quote(team, safe='')}/secrets/changes"


def stream_headers(token: Token, last_event_id: str | None) -> dict[str, str]:
    """Return the headers of a change-stream request: ``Last-Event-ID`` when an event had an id."""
    headers = request_headers(token)
    headers["Accept"] = "text/event-stream"
    headers["Cache-Control"] = "no-cache"
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    return headers
