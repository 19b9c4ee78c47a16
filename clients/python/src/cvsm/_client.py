"""cvsm._client is the blocking client, :class:`Client`, on ``httpx.Client``.

The wire protocol (paths, retries, errors) lives in ``_protocol``; this module only sends.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from types import TracebackType
from typing import Any

import httpx

from . import _protocol as proto
from ._cache import MISSING, ValueCache
from ._config import ClientConfig, resolve_config
from ._errors import AuthenticationError, CvsmError
from ._models import parse_export, parse_secret_list, parse_secret_value, parse_teams

logger = logging.getLogger("cvsm")


class Client:
    """Client reads a team's secrets from a cvsm server, caching values for ``cache_ttl`` seconds.

    Every option is keyword-only and falls back to its environment variable: ``token``
    (``CVSM_TOKEN``), ``base_url`` (``CVSM_BASE_URL``, including ``/api/v1``), ``team``
    (``CVSM_TEAM``, a team id or slug), ``environment`` (``CVSM_ENVIRONMENT``, default
    ``production``), ``cache_ttl`` (``CVSM_CACHE_TTL``, seconds, default 30, 0 = no cache);
    ``timeout`` (seconds per attempt, default 10) and ``max_retries`` (default 2) have no
    variable. A missing token, base URL or team raises :class:`ConfigurationError` here.

    A Client is safe to share between threads. Close it with :meth:`close` or a ``with`` block.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        base_url: str | None = None,
        team: str | None = None,
        environment: str | None = None,
        cache_ttl: int | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
    ) -> None:
        self._token, self._config = resolve_config(
            token=token,
            base_url=base_url,
            team=team,
            environment=environment,
            cache_ttl=cache_ttl,
            timeout=timeout,
            max_retries=max_retries,
            environ=os.environ,
        )
        self._cache = ValueCache(self._config.cache_ttl, lock=threading.Lock())
        self._team_id: str | None = self._config.team if self._config.team_is_id else None
        self._team_lock = threading.Lock()
        self._http = httpx.Client(
            headers=proto.default_headers(self._token),
            timeout=self._config.timeout,
            follow_redirects=False,
        )

    @property
    def config(self) -> ClientConfig:
        """config is the client's effective configuration (never the token)."""
        return self._config

    def get(self, name: str) -> str:
        """get returns the value of the secret ``name`` in the client's environment.

        Served from the cache when fetched less than ``cache_ttl`` seconds ago. Raises
        :class:`SecretNotFoundError` when no secret has exactly this (case-sensitive) name.
        """
        environment = self._config.environment
        cached = self._cache.get_value(environment, name)
        if cached is not MISSING:
            assert isinstance(cached, str)
            return cached
        team_id = self._team()
        listing = parse_secret_list(
            self._get_json(proto.list_path(team_id), {"environment": environment, "search": name})
        )
        secret_id = proto.pick_secret(listing, name, environment)
        value = parse_secret_value(self._get_json(proto.value_path(team_id, secret_id)))
        self._cache.put_value(environment, name, value)
        return value

    def get_all(self) -> dict[str, str]:
        """get_all returns every secret of the client's environment as a dict of name -> value.

        One request to the JSON export; the result is cached and also fills the per-name cache.
        """
        environment = self._config.environment
        cached = self._cache.get_all(environment)
        if cached is not None:
            return cached
        body = self._get_json(
            proto.export_path(self._team()), {"format": "json", "environment": environment}
        )
        values = parse_export(body)
        self._cache.put_all(environment, values)
        return dict(values)

    def inject(self, *, overwrite: bool = False) -> list[str]:
        """inject puts every secret of the environment into ``os.environ``; returns the names set.

        A variable that is already set is kept unless ``overwrite`` is true. Names are sorted.
        """
        names = []
        for name, value in self.get_all().items():
            if overwrite or name not in os.environ:
                os.environ[name] = value
                names.append(name)
        return sorted(names)

    def clear_cache(self) -> None:
        """clear_cache forgets every cached value, so the next call fetches again."""
        self._cache.clear()

    def close(self) -> None:
        """close releases the client's connections."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return proto.describe("Client", self._config)

    def _team(self) -> str:
        """_team returns the team id, resolving a slug through ``GET /teams`` once per client."""
        if self._team_id is not None:
            return self._team_id
        with self._team_lock:
            if self._team_id is None:
                teams = parse_teams(self._get_json(proto.teams_path()))
                self._team_id = proto.pick_team(teams, self._config.team)
            return self._team_id

    def _get_json(self, path: str, params: dict[str, str] | None = None) -> Any:
        """_get_json GETs ``path`` with retries and returns the JSON body, or raises a CvsmError."""
        url = self._config.base_url + path
        attempt = 0
        while True:
            failure: CvsmError
            try:
                response = self._http.get(url, params=params)
            except httpx.HTTPError as exc:
                failure = proto.network_error(exc)
                failure.__cause__ = exc
                logger.debug("GET %s failed: %s", path, type(exc).__name__)
            else:
                logger.debug("GET %s -> %s", path, response.status_code)
                if response.is_success:
                    try:
                        return proto.decode_json(response)
                    except CvsmError as exc:
                        failure = exc
                elif response.status_code in proto.RETRYABLE_STATUSES:
                    failure = proto.error_from_response(response, self._token)
                else:
                    raise self._failed(proto.error_from_response(response, self._token))
            if attempt >= self._config.max_retries:
                raise self._failed(failure)
            delay = proto.backoff_delay(attempt)
            logger.debug("retrying GET %s in %.3fs (retry %d of %d)", path, delay, attempt + 1, self._config.max_retries)
            time.sleep(delay)
            attempt += 1

    def _failed(self, error: CvsmError) -> CvsmError:
        if isinstance(error, AuthenticationError):
            self._cache.clear()
        return error
