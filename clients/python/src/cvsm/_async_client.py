"""cvsm._async_client is the asyncio client, :class:`AsyncClient`, on ``httpx.AsyncClient``.

It mirrors :class:`cvsm.Client` call for call; the wire protocol lives in ``_protocol``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from types import TracebackType
from typing import Any

import httpx

from . import _protocol as proto
from ._cache import MISSING, ValueCache
from ._config import ClientConfig, resolve_config
from ._errors import AuthenticationError, CvsmError
from ._models import parse_export, parse_secret_list, parse_secret_value, parse_teams

logger = logging.getLogger("cvsm")


class AsyncClient:
    """AsyncClient reads a team's secrets from a cvsm server without blocking the event loop.

    It takes the same keyword-only options as :class:`cvsm.Client`, with the same environment
    variables and defaults, and raises the same errors. ``get``, ``get_all`` and ``inject`` are
    coroutines; ``clear_cache`` is not (it does no I/O).

    Its cache is safe across the tasks of one event loop. Close it with :meth:`aclose` or an
    ``async with`` block.
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
        # The cache is only read and written between awaits, so tasks cannot interleave in it.
        self._cache = ValueCache(self._config.cache_ttl)
        self._team_id: str | None = self._config.team if self._config.team_is_id else None
        self._team_lock = asyncio.Lock()
        self._http = httpx.AsyncClient(
            headers=proto.default_headers(self._token),
            timeout=self._config.timeout,
            follow_redirects=False,
        )

    @property
    def config(self) -> ClientConfig:
        """config is the client's effective configuration (never the token)."""
        return self._config

    async def get(self, name: str) -> str:
        """get returns the value of the secret ``name`` in the client's environment.

        Served from the cache when fetched less than ``cache_ttl`` seconds ago. Raises
        :class:`SecretNotFoundError` when no secret has exactly this (case-sensitive) name.
        """
        environment = self._config.environment
        cached = self._cache.get_value(environment, name)
        if cached is not MISSING:
            assert isinstance(cached, str)
            return cached
        team_id = await self._team()
        listing = parse_secret_list(
            await self._get_json(proto.list_path(team_id), {"environment": environment, "search": name})
        )
        secret_id = proto.pick_secret(listing, name, environment)
        value = parse_secret_value(await self._get_json(proto.value_path(team_id, secret_id)))
        self._cache.put_value(environment, name, value)
        return value

    async def get_all(self) -> dict[str, str]:
        """get_all returns every secret of the client's environment as a dict of name -> value.

        One request to the JSON export; the result is cached and also fills the per-name cache.
        """
        environment = self._config.environment
        cached = self._cache.get_all(environment)
        if cached is not None:
            return cached
        body = await self._get_json(
            proto.export_path(await self._team()), {"format": "json", "environment": environment}
        )
        values = parse_export(body)
        self._cache.put_all(environment, values)
        return dict(values)

    async def inject(self, *, overwrite: bool = False) -> list[str]:
        """inject puts every secret of the environment into ``os.environ``; returns the names set.

        A variable that is already set is kept unless ``overwrite`` is true. Names are sorted.
        """
        names = []
        for name, value in (await self.get_all()).items():
            if overwrite or name not in os.environ:
                os.environ[name] = value
                names.append(name)
        return sorted(names)

    def clear_cache(self) -> None:
        """clear_cache forgets every cached value, so the next call fetches again."""
        self._cache.clear()

    async def aclose(self) -> None:
        """aclose releases the client's connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return proto.describe("AsyncClient", self._config)

    async def _team(self) -> str:
        """_team returns the team id, resolving a slug through ``GET /teams`` once per client."""
        if self._team_id is not None:
            return self._team_id
        async with self._team_lock:
            if self._team_id is None:
                teams = parse_teams(await self._get_json(proto.teams_path()))
                self._team_id = proto.pick_team(teams, self._config.team)
            return self._team_id

    async def _get_json(self, path: str, params: dict[str, str] | None = None) -> Any:
        """_get_json GETs ``path`` with retries and returns the JSON body, or raises a CvsmError."""
        url = self._config.base_url + path
        attempt = 0
        while True:
            failure: CvsmError
            try:
                response = await self._http.get(url, params=params)
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
            await asyncio.sleep(delay)
            attempt += 1

    def _failed(self, error: CvsmError) -> CvsmError:
        if isinstance(error, AuthenticationError):
            self._cache.clear()
        return error
