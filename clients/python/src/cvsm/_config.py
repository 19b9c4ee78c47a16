"""Resolve a client's configuration: explicit options first, then ``CVSM_*`` variables.

This module owns the option names, their defaults, their validation and the configuration
error messages. The token is kept apart from :class:`ClientConfig` so that the configuration
can be shown, logged and compared without ever exposing it.
"""

from __future__ import annotations

import math
import re
import ssl
from collections.abc import Mapping

import attrs
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from . import _rules as rules
from . import e2e
from ._errors import ConfigurationError

ENV_TOKEN = rules.ENV_TOKEN
ENV_BASE_URL = rules.ENV_BASE_URL
ENV_TEAM = rules.ENV_TEAM
ENV_ENVIRONMENT = rules.ENV_ENVIRONMENT
ENV_CACHE_TTL = rules.ENV_CACHE_TTL
ENV_TIMEOUT = rules.ENV_TIMEOUT
ENV_MAX_RETRIES = rules.ENV_MAX_RETRIES
ENV_CA_FILE = rules.ENV_CA_FILE
ENV_STALE_IF_ERROR = rules.ENV_STALE_IF_ERROR
ENV_LIVE = rules.ENV_LIVE

DEFAULT_ENVIRONMENT = rules.DEFAULT_ENVIRONMENT
DEFAULT_CACHE_TTL = rules.DEFAULT_CACHE_TTL_SECONDS
DEFAULT_TIMEOUT = float(rules.DEFAULT_TIMEOUT_SECONDS)
DEFAULT_MAX_RETRIES = rules.DEFAULT_MAX_RETRIES
DEFAULT_STALE_IF_ERROR = rules.DEFAULT_STALE_IF_ERROR_SECONDS

# Trimmed from both ends of a token, so that one read from a mounted file works.
_TOKEN_WHITESPACE = rules.TOKEN_TRIMMED_CHARACTERS
# Visible ASCII only: anything else could not travel in an HTTP header unaltered.
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")
_INTEGER = re.compile(r"\s*[0-9]+\s*")
_NUMBER = re.compile(r"\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)\s*")


_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


def display_url(url: str) -> str:
    """Return ``url`` as it may be printed: a user and password in it become ``***``.

    ``https://user:secret@host/api/v1`` shows as ``https://***@host/api/v1`` (as the other
    SDKs print it), so no repr, log line or error message holds the password.
    """
    return _USERINFO.sub(r"\1***@", url, count=1)


def without_userinfo(url: str) -> str:
    """Return ``url`` without a user and password: the URL every request goes to.

    The client authenticates with its Bearer token only: a user and password in the base URL
    (copied from a proxy's configuration, say) are never sent, neither in the URL nor as the
    ``Authorization: Basic`` header httpx would make of them in place of the token.
    """
    return _USERINFO.sub(r"\1", url, count=1)


@attrs.frozen(kw_only=True)
class ClientConfig:
    """A client's effective configuration, without the token.

    ``base_url`` includes ``/api/v1`` and has no trailing slash; ``team`` is the team id or
    slug as configured (it goes into every path as it is); ``cache_ttl`` is in whole seconds
    (0 = no cache); ``timeout`` is the limit in seconds on each whole attempt; ``max_retries``
    is the number of extra attempts for a failed GET; ``stale_if_error`` is how many seconds
    past ``cache_ttl`` a value is kept to answer when a refresh fails (0 = never); ``ca_file``
    is the PEM bundle trusted instead of the system store, or ``None``; ``live`` says whether the
    client keeps a change-stream connection that drops a cached value as soon as its secret
    changes on the server. Its repr shows the base URL through :func:`display_url`.
    """

    base_url: str = attrs.field(repr=lambda url: repr(display_url(url)))
    team: str
    environment: str
    cache_ttl: int
    timeout: float
    max_retries: int
    stale_if_error: int = DEFAULT_STALE_IF_ERROR
    ca_file: str | None = None
    live: bool = False

    def as_dict(self) -> dict[str, object]:
        """Return the configuration as a plain dict (it never holds the token)."""
        return attrs.asdict(self)


@attrs.frozen(repr=False)
class Token:
    """The API token, wrapped so that no repr, log line or traceback local shows it.

    A token of an end-to-end team carries its X25519 private key and its pin after dots
    (``cvsm_<64 hex>.<private key>.<key version>.<commitment>``): only the part before the first
    dot is ever sent, and the key stays here, for opening the team key (see :mod:`cvsm.e2e`), as
    an ``X25519PrivateKey`` object, whose repr shows no bytes, never as raw bytes; the pin (the
    key version and its commitment, which open nothing) is what the team key must chain back to.
    """

    _value: str
    _private_key: X25519PrivateKey | None = None
    _pin: tuple[int, bytes] | None = None

    def reveal(self) -> str:
        """Return the API token (the part before the dot), for the Authorization header only."""
        return self._value

    def private_key(self) -> X25519PrivateKey | None:
        """Return the token's X25519 private key (its key part), or ``None`` when it has none."""
        return self._private_key

    def pin(self) -> tuple[int, bytes] | None:
        """Return the token's pin, ``(key version, commitment)``, or ``None`` without a key part."""
        return self._pin

    def __repr__(self) -> str:
        return "Token('***')"

    __str__ = __repr__


def _pick(explicit: str | None, environ: Mapping[str, str], variable: str) -> str | None:
    """Return the explicit option when given, else the variable; empty counts as unset."""
    if explicit is not None and explicit != "":
        return explicit
    value = environ.get(variable)
    return value if value else None


def resolve_config(
    *,
    token: str | None,
    base_url: str | None,
    team: str | None,
    environment: str | None,
    cache_ttl: int | None,
    timeout: float | None,
    max_retries: int | None,
    stale_if_error: int | None,
    ca_file: str | None,
    environ: Mapping[str, str],
    live: bool | None = None,
) -> tuple[Token, ClientConfig]:
    """Return the token and the configuration, or raise :class:`ConfigurationError`.

    Each option is taken from its argument when given, else from its ``CVSM_*`` variable in
    ``environ``, else from its default. A ``cvsm_`` token with a dot must be a token with its
    key part (``cvsm_<64 hex>.<43 base64url characters>``); the message never shows it.
    ``ca_file`` is only checked to be a readable PEM bundle here; :func:`tls_context` loads it.
    """
    raw_token = _pick(token, environ, ENV_TOKEN)
    raw_token = raw_token.strip(_TOKEN_WHITESPACE) if raw_token is not None else None
    if not raw_token:
        raise ConfigurationError(f"{ENV_TOKEN} is not set (pass token= or set {ENV_TOKEN})")
    if not _TOKEN_CHARS.fullmatch(raw_token):
        raise ConfigurationError(
            "the token contains whitespace or characters other than visible ASCII "
            f"(token= or {ENV_TOKEN})"
        )

    resolved_token = _split_token(raw_token)

    raw_base_url = _pick(base_url, environ, ENV_BASE_URL)
    if raw_base_url is None:
        raise ConfigurationError(f"{ENV_BASE_URL} is not set (pass base_url= or set {ENV_BASE_URL})")
    raw_base_url = raw_base_url.strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", raw_base_url):
        raise ConfigurationError(
            f"the base URL must start with http:// or https:// and name a host ({ENV_BASE_URL})"
        )

    raw_team = _pick(team, environ, ENV_TEAM)
    if raw_team is None:
        raise ConfigurationError(f"{ENV_TEAM} is not set (pass team= or set {ENV_TEAM})")

    raw_environment = _pick(environment, environ, ENV_ENVIRONMENT) or DEFAULT_ENVIRONMENT

    return resolved_token, ClientConfig(
        base_url=raw_base_url,
        team=raw_team.strip(),
        environment=raw_environment.strip(),
        cache_ttl=_resolve_seconds(cache_ttl, environ, "cache_ttl", ENV_CACHE_TTL, DEFAULT_CACHE_TTL),
        timeout=_resolve_timeout(timeout, environ),
        max_retries=_resolve_max_retries(max_retries, environ),
        stale_if_error=_resolve_seconds(
            stale_if_error, environ, "stale_if_error", ENV_STALE_IF_ERROR, DEFAULT_STALE_IF_ERROR
        ),
        ca_file=_pick(ca_file, environ, ENV_CA_FILE),
        live=_resolve_live(live, environ),
    )


def _split_token(raw_token: str) -> Token:
    """Return the :class:`Token` of ``raw_token``: its API token, and its key part as a key object.

    The key's raw bytes live only inside this call, so no traceback local of a later error
    (this module's, the client's) holds them.
    """
    if not raw_token.startswith("cvsm_"):  # only an API token has a key part; a JWT has dots of its own
        return Token(raw_token)
    try:
        parts = e2e.parse_token(raw_token)
    except e2e.TokenFormatError as exc:
        raise ConfigurationError(f"the token has a key part that cannot be used: {exc} (token= or {ENV_TOKEN})") from None
    if parts is None:
        return Token(raw_token)
    return Token(
        parts.api_token,
        X25519PrivateKey.from_private_bytes(parts.private_key),
        (parts.key_version, parts.commitment),
    )


def tls_context(ca_file: str) -> ssl.SSLContext:
    """Return a TLS context that trusts only the certificates of the PEM bundle ``ca_file``.

    Raise :class:`ConfigurationError` when the file cannot be read or holds no certificate.
    """
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a PEM bundle of certificates"
        raise ConfigurationError(
            f"cannot read the CA bundle {ca_file!r} (ca_file= or {ENV_CA_FILE}): {reason}"
        ) from None


def _resolve_seconds(
    explicit: int | None, environ: Mapping[str, str], option: str, variable: str, default: int
) -> int:
    """Return a whole number of seconds (``cache_ttl``, ``stale_if_error``): 0 or more."""
    if explicit is not None:
        if isinstance(explicit, bool) or not isinstance(explicit, int) or explicit < 0:
            raise ConfigurationError(f"{option} must be a non-negative integer number of seconds")
        return explicit
    raw = environ.get(variable)
    if not raw:
        return default
    if not _INTEGER.fullmatch(raw):
        raise ConfigurationError(f"{variable} must be a non-negative integer number of seconds")
    return int(raw)


def _resolve_timeout(explicit: float | None, environ: Mapping[str, str]) -> float:
    if explicit is not None:
        if (
            isinstance(explicit, bool)
            or not isinstance(explicit, (int, float))
            or not math.isfinite(explicit)
            or not explicit > 0
        ):
            raise ConfigurationError("timeout must be a positive number of seconds")
        return float(explicit)
    raw = environ.get(ENV_TIMEOUT)
    if not raw:
        return DEFAULT_TIMEOUT
    if not _NUMBER.fullmatch(raw) or not float(raw) > 0:
        raise ConfigurationError(f"{ENV_TIMEOUT} must be a positive number of seconds")
    return float(raw)


def _resolve_max_retries(explicit: int | None, environ: Mapping[str, str]) -> int:
    if explicit is not None:
        if isinstance(explicit, bool) or not isinstance(explicit, int) or explicit < 0:
            raise ConfigurationError("max_retries must be a non-negative integer")
        return explicit
    raw = environ.get(ENV_MAX_RETRIES)
    if not raw:
        return DEFAULT_MAX_RETRIES
    if not _INTEGER.fullmatch(raw):
        raise ConfigurationError(f"{ENV_MAX_RETRIES} must be a non-negative integer")
    return int(raw)


_TRUE = frozenset(rules.LIVE_TRUE_WORDS)
_FALSE = frozenset(rules.LIVE_FALSE_WORDS)


def _resolve_live(explicit: bool | None, environ: Mapping[str, str]) -> bool:
    """Return ``live``: the option when given (a bool), else ``CVSM_LIVE`` (1/true/yes/on or
    0/false/no/off, any case), else off."""
    if explicit is not None:
        if not isinstance(explicit, bool):
            raise ConfigurationError("live must be True or False")
        return explicit
    raw = environ.get(ENV_LIVE)
    if not raw:
        return False
    word = raw.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ConfigurationError(f"{ENV_LIVE} must be 1 or 0 (or true/false, yes/no, on/off)")
