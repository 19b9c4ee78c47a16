"""cvsm._config resolves a client's configuration: explicit options first, then CVSM_* variables.

It owns the option names, their defaults, their validation and the configuration error
messages. The token is kept apart from :class:`ClientConfig` so that the configuration can be
shown, logged and compared without ever exposing it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from ._errors import ConfigurationError

ENV_TOKEN = "CVSM_TOKEN"
ENV_BASE_URL = "CVSM_BASE_URL"
ENV_TEAM = "CVSM_TEAM"
ENV_ENVIRONMENT = "CVSM_ENVIRONMENT"
ENV_CACHE_TTL = "CVSM_CACHE_TTL"

DEFAULT_ENVIRONMENT = "production"
DEFAULT_CACHE_TTL = 30
DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_RETRIES = 2

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
# Visible ASCII only: anything else could not travel in an HTTP header unaltered.
_TOKEN_CHARS = re.compile(r"^[\x21-\x7e]+$")


@attrs.frozen(kw_only=True)
class ClientConfig:
    """ClientConfig is a client's effective configuration, without the token.

    ``base_url`` includes ``/api/v1`` and has no trailing slash; ``team`` is the team id or
    slug as configured; ``cache_ttl`` is in whole seconds (0 = no cache); ``timeout`` is in
    seconds per attempt; ``max_retries`` is the number of extra attempts for a failed GET.
    """

    base_url: str
    team: str
    environment: str
    cache_ttl: int
    timeout: float
    max_retries: int

    @property
    def team_is_id(self) -> bool:
        """team_is_id tells whether ``team`` is a team id (a UUID) rather than a slug."""
        return bool(_UUID.match(self.team))

    def as_dict(self) -> dict[str, object]:
        """as_dict returns the configuration as a plain dict (it never holds the token)."""
        return attrs.asdict(self)


@attrs.frozen(repr=False)
class Token:
    """Token wraps the API token so that no repr, log line or traceback local shows it."""

    _value: str

    def reveal(self) -> str:
        """reveal returns the token itself, for the Authorization header only."""
        return self._value

    def __repr__(self) -> str:
        return "Token('***')"

    __str__ = __repr__


def _pick(explicit: str | None, environ: Mapping[str, str], variable: str) -> str | None:
    """_pick returns the explicit option when given, else the variable; empty counts as unset."""
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
    environ: Mapping[str, str],
) -> tuple[Token, ClientConfig]:
    """resolve_config returns the token and configuration, or raises ConfigurationError.

    Each option is taken from its argument when given, else from its ``CVSM_*`` variable in
    ``environ``, else from its default; ``timeout`` and ``max_retries`` have no variable.
    """
    raw_token = _pick(token, environ, ENV_TOKEN)
    if raw_token is None:
        raise ConfigurationError(f"{ENV_TOKEN} is not set (pass token= or set {ENV_TOKEN})")
    if not _TOKEN_CHARS.match(raw_token):
        raise ConfigurationError("the token contains spaces or characters not allowed in an HTTP header")

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

    return Token(raw_token), ClientConfig(
        base_url=raw_base_url,
        team=raw_team.strip(),
        environment=raw_environment.strip(),
        cache_ttl=_resolve_cache_ttl(cache_ttl, environ),
        timeout=_resolve_timeout(timeout),
        max_retries=_resolve_max_retries(max_retries),
    )


def _resolve_cache_ttl(explicit: int | None, environ: Mapping[str, str]) -> int:
    if explicit is not None:
        if isinstance(explicit, bool) or not isinstance(explicit, int) or explicit < 0:
            raise ConfigurationError("cache_ttl must be a non-negative integer number of seconds")
        return explicit
    raw = environ.get(ENV_CACHE_TTL)
    if raw is None or raw == "":
        return DEFAULT_CACHE_TTL
    if not re.fullmatch(r"\s*[0-9]+\s*", raw):
        raise ConfigurationError(f"{ENV_CACHE_TTL} must be a non-negative integer number of seconds")
    return int(raw)


def _resolve_timeout(explicit: float | None) -> float:
    if explicit is None:
        return DEFAULT_TIMEOUT
    if isinstance(explicit, bool) or not isinstance(explicit, (int, float)) or not explicit > 0:
        raise ConfigurationError("timeout must be a positive number of seconds")
    return float(explicit)


def _resolve_max_retries(explicit: int | None) -> int:
    if explicit is None:
        return DEFAULT_MAX_RETRIES
    if isinstance(explicit, bool) or not isinstance(explicit, int) or explicit < 0:
        raise ConfigurationError("max_retries must be a non-negative integer")
    return explicit
