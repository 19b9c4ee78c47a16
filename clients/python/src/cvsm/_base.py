"""The part of both clients that does no I/O: configuration, cache, stale-if-error, inject and
the opening of an end-to-end team's values.

:class:`BaseClient` writes each operation once, as a *flow*: a generator that yields the steps
it needs taken (a :class:`~cvsm._protocol.Call` to attempt, a :class:`~cvsm._protocol.Sleep`
before a retry, an :class:`~cvsm._protocol.Acquire` of a lock) and is sent back their outcome,
in the manner of ``httpx.Auth.auth_flow``.
:class:`cvsm.Client` runs the flows with blocking I/O and :class:`cvsm.AsyncClient` with
asyncio; neither holds any other logic (``Client.get`` only inlines the cache hit).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import ssl
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Generic, TypeVar

import attrs
import httpx

from . import _live
from . import _protocol as proto
from ._cache import ValueCache
from ._config import ClientConfig, resolve_config, tls_context, without_userinfo
from ._errors import AuthenticationError, ConfigurationError, CvsmError, PermissionDeniedError, SecretNotFoundError

logger = logging.getLogger("cvsm")

T = TypeVar("T")
Http = TypeVar("Http", httpx.Client, httpx.AsyncClient)
Step = proto.Call[Any] | proto.Sleep | proto.Acquire
Flow = Generator[Step, Any, T]
"""An operation written once for both clients; see the module docstring."""


@attrs.frozen
class StaleEvent:
    """What ``on_stale`` receives when a call answers with a kept value (stale-if-error).

    - ``name``: the secret, or ``None`` when the whole environment was served stale
      (``get_all``, ``inject``);
    - ``environment``: the client's environment;
    - ``age``: seconds since the value was fetched: more than ``cache_ttl``, less than
      ``cache_ttl + stale_if_error``;
    - ``error``: the :class:`~cvsm.CvsmError` the refresh failed with, which the call would
      otherwise have raised.

    It never holds the value.
    """

    name: str | None
    environment: str
    age: float
    error: CvsmError


class BaseClient(Generic[Http]):
    """The configuration, cache and flows a :class:`cvsm.Client` or :class:`cvsm.AsyncClient` share.

    Not used on its own: a subclass names its httpx client class and runs the flows.
    """

    _http_class: ClassVar[type[Any]]
    """The httpx client class the subclass sends with (``http_client`` must be one)."""

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
        stale_if_error: int | None = None,
        on_stale: Callable[[StaleEvent], object] | None = None,
        ca_file: str | None = None,
        verify: ssl.SSLContext | str | bool | None = None,
        http_client: Http | None = None,
        live: bool | None = None,
    ) -> None:
        """Resolve the configuration and prepare the transport; no request is made here.

        Every option is keyword-only and falls back to its environment variable, then to its
        default; an empty variable counts as unset:

        - ``token`` (``CVSM_TOKEN``): the API token; surrounding whitespace is trimmed.
        - ``base_url`` (``CVSM_BASE_URL``): the API root, including ``/api/v1``.
        - ``team`` (``CVSM_TEAM``): a team id or slug, sent in every path as it is.
        - ``environment`` (``CVSM_ENVIRONMENT``, default ``production``).
        - ``cache_ttl`` (``CVSM_CACHE_TTL``, default 30): seconds a value is cached; 0 = no cache.
        - ``timeout`` (``CVSM_TIMEOUT``, default 10): seconds for each whole attempt, from
          connecting to the last byte of the body.
        - ``max_retries`` (``CVSM_MAX_RETRIES``, default 2): extra attempts after a network
          error or a 502, 503 or 504.
        - ``stale_if_error`` (``CVSM_STALE_IF_ERROR``, default 0 = off): seconds past
          ``cache_ttl`` a value is kept, to answer in place of a network error, a 5xx (after
          retries) or a 429; never in place of any other error.
        - ``on_stale``: called with a :class:`StaleEvent` each time a call answers with a kept
          value, before the call returns it (an exception it raises comes out of the call). Each
          name served stale is also logged once (logger ``cvsm``, warning) until it is fetched
          fresh again.
        - ``ca_file`` (``CVSM_CA_FILE``): a PEM bundle trusted instead of the system store.
        - ``verify``: passed to httpx as is (an ``ssl.SSLContext``, or ``False``); not together
          with ``ca_file``.
        - ``http_client``: an ``httpx.Client`` (``httpx.AsyncClient`` for
          :class:`~cvsm.AsyncClient`) the caller owns and closes, used as is for proxies, TLS,
          limits and instrumentation; ``ca_file`` and ``verify`` then do not apply, and
          ``CVSM_CA_FILE`` is ignored.
        - ``live`` (``CVSM_LIVE=1``, default off): keep one connection to the team's change
          stream, opened at the first read and shared by every name read, so that a value
          changed on the server stops being served from the cache as soon as the change is
          announced (within a second), while an unchanged value still costs one request per
          ``cache_ttl``. While the stream is down the cache works as without it, and the client
          reconnects with a growing pause. :meth:`close` (``aclose``) stops it.

        Without ``http_client``, proxies come from ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``
        and ``NO_PROXY`` (either case) as they are now. Raise :class:`~cvsm.ConfigurationError`
        when the token, base URL or team is missing, an option or variable is invalid, or the
        CA bundle cannot be read.
        """
        self._token, config = resolve_config(
            token=token,
            base_url=base_url,
            team=team,
            environment=environment,
            cache_ttl=cache_ttl,
            timeout=timeout,
            max_retries=max_retries,
            stale_if_error=stale_if_error,
            ca_file=ca_file,
            environ=os.environ,
            live=live,
        )
        if on_stale is not None and not callable(on_stale):
            raise TypeError(f"on_stale must be callable, not {type(on_stale).__name__}")
        if http_client is not None:
            if not isinstance(http_client, self._http_class):
                raise TypeError(
                    f"http_client must be an {self._http_class.__module__}.{self._http_class.__name__}, "
                    f"not {type(http_client).__name__}"
                )
            if ca_file is not None or verify is not None:
                raise ConfigurationError(
                    "ca_file= and verify= configure the client's own transport; "
                    "with http_client= configure TLS on that client"
                )
            config = attrs.evolve(config, ca_file=None)
            self._http: Http = http_client
            self._owns_http = False
            self._tls: ssl.SSLContext | str | bool = True
        else:
            tls: ssl.SSLContext | str | bool = True
            if verify is not None:
                if ca_file is not None:
                    raise ConfigurationError("pass ca_file= or verify=, not both")
                config = attrs.evolve(config, ca_file=None)
                tls = verify
            elif config.ca_file is not None:
                tls = tls_context(config.ca_file)
            # trust_env: the proxy variables are read now, while the client is created.
            self._http = self._http_class(verify=tls, timeout=config.timeout, follow_redirects=False, trust_env=True)
            self._owns_http = True
            self._tls = tls
        self._config = config
        # Where requests go: the base URL without a user and password, which are never sent.
        self._api_root = without_userinfo(config.base_url)
        self._on_stale = on_stale
        self._cache = ValueCache(config.cache_ttl, config.stale_if_error, lock=self._new_cache_lock())
        # An end-to-end team's key, once fetched and opened: kept for the client's life, until
        # clear_cache or a refused token, whatever cache_ttl is. One call at a time fetches it
        # (_key_lock: the others wait, then take the key it got); a fetch that began before the
        # key was dropped (_key_generation counts the drops) does not store what it got.
        self._team_key: proto.TeamKey | None = None
        self._key_lock = self._new_key_lock()
        self._key_state_lock = self._new_cache_lock()
        self._key_generation = 0
        self._live = (
            _live.LiveState(self._cache, self._forget, f"team {config.team!r}, environment {config.environment!r}")
            if config.live
            else None
        )
        self._closed = False
        self._transport_ready()

    @property
    def config(self) -> ClientConfig:
        """Return the client's effective configuration (never the token)."""
        return self._config

    @property
    def live_connected(self) -> bool:
        """Tell whether the change stream of a live client is up now (always false without ``live``)."""
        return self._live is not None and self._live.connected

    def clear_cache(self) -> None:
        """Forget every cached value (and an end-to-end team's key), so that the next call fetches again."""
        self._forget()

    def _forget(self) -> None:
        """Empty the cache, kept values included, and drop the team key."""
        self._cache.clear()
        with self._key_state_lock:
            self._key_generation += 1
            self._team_key = None

    def __repr__(self) -> str:
        return proto.describe(type(self).__name__, self._config)

    def _new_cache_lock(self) -> AbstractContextManager[Any]:
        """Return what guards the cache: a real lock where threads share the client."""
        return contextlib.nullcontext()

    def _new_key_lock(self) -> Any:
        """Return the lock one team key fetch at a time holds, of the kind the subclass's I/O takes."""
        raise NotImplementedError

    def _transport_ready(self) -> None:
        """Prepare what the subclass's I/O needs besides ``_http`` (nothing here)."""

    def _live_start(self) -> None:
        """Open the change stream of a live client, once, at its first read (the subclass's I/O)."""

    def _stream_request(self, http: Http) -> httpx.Request:
        """Return the request that opens the change stream of the client's environment."""
        assert self._live is not None
        return http.build_request(
            "GET",
            self._api_root + proto.changes_path(self._config.team),
            params={"environment": self._config.environment},
            headers=proto.stream_headers(self._token, self._live.last_event_id),
            timeout=httpx.Timeout(self._config.timeout, read=_live.READ_TIMEOUT),
        )

    def _new_stream_http(self) -> Http:
        """Return the HTTP client the change stream uses: the caller's ``http_client``, else one
        of its own (so that no deadline of a read ever cuts the stream's connection)."""
        if not self._owns_http:
            return self._http
        return self._http_class(verify=self._tls, follow_redirects=False, trust_env=True)  # type: ignore[no-any-return]

    def _build_request(self, call: proto.Call[Any]) -> httpx.Request:
        """Return the HTTP request for one attempt of ``call``."""
        return self._http.build_request(
            "GET",
            self._api_root + call.path,
            params=call.params,
            headers=proto.request_headers(self._token),
            timeout=self._config.timeout,
        )

    def _get_flow(self, name: str) -> Flow[str]:
        """Return the value of ``name``: fresh from the cache, else read by name (one request).

        Only after a 404 does the listing decide: a listing means the secret is missing (the
        not-found error, with a suggestion), a 404 or 400 to it a wrong team or base URL.
        With a token that has its key part, the value served is an envelope, opened here
        (fetching the team key first when it is not held: a second request).
        """
        environment = self._config.environment
        proto.check_name(name, environment)
        cache = self._cache
        value = cache.fresh_value(name)
        if value is not None:
            return value
        self._live_start()
        mark = cache.mark()
        try:
            value, version = yield from self._read_flow(name, environment)
        except SecretNotFoundError as missing:
            raise (yield from self._absent_flow(name, environment, missing)) from None
        except CvsmError as error:
            kept = cache.kept_value(name)
            if kept is None or not proto.allows_stale(error):
                raise
            return self._serve_stale(name, kept[0], kept[1], error)
        cache.put_value(name, value, mark, version)
        return value

    def _refresh_flow(self, name: str, environment: str | None) -> Flow[str]:
        """Return the value of ``name`` read now, past the cache (one request); in the client's
        environment the cache then holds it. No kept value answers in place of an error."""
        own = self._config.environment
        environment = own if environment is None else environment
        if not isinstance(environment, str) or not environment:
            raise ConfigurationError("refresh: environment must be a non-empty string, or None for the client's own")
        proto.check_name(name, environment)
        self._live_start()
        mark = self._cache.mark()
        try:
            value, version = yield from self._read_flow(name, environment)
        except SecretNotFoundError as missing:
            raise (yield from self._absent_flow(name, environment, missing)) from None
        if environment == own:
            self._cache.put_value(name, value, mark, version)
        return value

    def _read_flow(self, name: str, environment: str) -> Flow[tuple[str, int | None]]:
        """Read ``name`` by name in ``environment`` (opening an end-to-end team's envelope):
        ``(value, version the answer says or None)``. A 404 raises the
        :class:`SecretNotFoundError` that :meth:`_absent_flow` then decides."""
        reply = yield from self._fetch(proto.by_name_call(self._config.team, environment, name))
        if self._token.private_key() is not None:
            opened = yield from self._open_flow({name: reply.value.value}, reply.request_id, environment)
            value = opened[name]
        elif reply.value.e2e:
            raise proto.keyless_end_to_end()
        else:
            value = reply.value.value
        return value, reply.value.version

    def _absent_flow(self, name: str, environment: str, missing: SecretNotFoundError) -> Flow[CvsmError]:
        """Return the error a by-name 404 amounts to: the listing tells a missing secret (the
        not-found error, with a suggestion) from a wrong team or base URL (its own error, raised)."""
        listing = yield from self._fetch(proto.listing_call(self._config.team, environment, name))
        return proto.absent_secret(listing.value, name, environment, missing)

    def _get_all_flow(self) -> Flow[dict[str, str]]:
        """Return every secret of the environment: fresh from the cache, else one export.

        With a token that has its key part, every value of the export is an envelope, opened
        here (after fetching the team key when it is not held). Without it, an export marked
        end-to-end (``Cvsm-E2E: 1``) raises the configuration error a by-name read does.
        """
        cache = self._cache
        cached = cache.fresh_all()
        if cached is not None:
            return cached
        self._live_start()
        mark = cache.mark()
        try:
            reply = yield from self._fetch(proto.export_call(self._config.team, self._config.environment))
            values = reply.value
            if self._token.private_key() is not None:
                values = yield from self._open_flow(values, reply.request_id)
            elif reply.e2e:
                raise proto.keyless_end_to_end()
        except CvsmError as error:
            kept = cache.kept_all()
            if kept is None or not proto.allows_stale(error):
                raise
            return self._serve_stale(None, kept[0], kept[1], error)
        cache.put_all(values, mark)
        return dict(values)

    def _open_flow(
        self, envelopes: dict[str, str], request_id: str | None, environment: str | None = None
    ) -> Flow[dict[str, str]]:
        """Return the values sealed in ``envelopes`` (name -> envelope) of an end-to-end team.

        Each is opened with the team id, the environment asked for (the client's unless
        ``environment`` says) and the name asked for. The
        team key is fetched (and checked against the token's pin) when it is not held, or once
        more when an envelope is sealed under a key version above the held one (after a re-key);
        an older key version is reached through the verified links. A key that does not chain
        to the pin, or a value that still does not open, raises :class:`~cvsm.DecryptionError`,
        which is never retried.
        """
        if not envelopes:
            return {}
        # Malformed envelopes fail before any key request.
        versions = {proto.key_version_of(name, envelope, request_id) for name, envelope in envelopes.items()}
        key = self._team_key
        if key is None or max(versions) > key.key_version:
            key = yield from self._fetch_team_key(versions)
        environment = self._config.environment if environment is None else environment
        return {
            name: proto.open_value(name, environment, envelope, key, request_id)
            for name, envelope in envelopes.items()
        }

    def _fetch_team_key(self, versions: set[int]) -> Flow[proto.TeamKey]:
        """Return the team key for envelopes sealed under ``versions``: fetch the key wrapped to
        this token, open it with the token's key part and keep it.

        One call fetches at a time: a call that waited for another's fetch takes the key it got
        when that key fits ``versions``. The key is kept only if neither ``clear_cache`` nor a
        refused token dropped the held key while it was being fetched.
        """
        lock = self._key_lock
        yield proto.Acquire(lock)
        try:
            held = self._team_key
            if held is not None and max(versions) <= held.key_version:
                return held
            generation = self._key_generation
            private_key = self._token.private_key()  # a key object: its repr shows no bytes
            pin = self._token.pin()
            assert private_key is not None and pin is not None
            reply = yield from self._fetch(proto.team_key_call(self._config.team))
            key = proto.open_team_key(reply.value, private_key, pin, reply.request_id)
            with self._key_state_lock:
                if generation == self._key_generation:
                    self._team_key = key
            return key
        finally:
            lock.release()

    def _inject_flow(self, overwrite: bool) -> Flow[list[str]]:
        values = yield from self._get_all_flow()
        chosen = proto.to_inject(values, os.environ, overwrite)
        for name, value in chosen.items():
            os.environ[name] = value
        return sorted(chosen)

    def _serve_stale(self, name: str | None, value: T, age: float, error: CvsmError) -> T:
        """Return a kept ``value`` in place of ``error``: log it once per name, tell ``on_stale``."""
        if age < self._config.cache_ttl:
            return value  # another call fetched it fresh meanwhile: not stale
        environment = self._config.environment
        if self._cache.first_stale(name):
            what = f"secret {name!r}" if name is not None else "every secret"
            reason = type(error).__name__ + (f" (HTTP {error.status})" if error.status is not None else "")
            logger.warning(
                "serving a stale value of %s in %s, %.1fs old: the refresh failed with %s",
                what,
                environment,
                age,
                reason,
            )
        if self._on_stale is not None:
            self._on_stale(StaleEvent(name, environment, age, error))
        return value

    def _fetch(self, call: proto.Call[T]) -> Flow[proto.Reply[T]]:
        """Attempt ``call`` until it succeeds, fails for good, or retries run out.

        After a network error, an unreadable 2xx answer or a 502, 503 or 504, the flow pauses
        (full jitter) and tries again, at most ``max_retries`` times; any other error is raised
        at once. An :class:`~cvsm.AuthenticationError` or :class:`~cvsm.PermissionDeniedError`
        also empties the cache, kept values included, and drops the team key.
        """
        for attempt in itertools.count():
            failure: CvsmError
            try:
                answer: proto.Answer = yield call
            except httpx.HTTPError as exc:
                logger.debug("GET %s failed: %s", call.path, type(exc).__name__)
                failure = proto.network_error(exc)
            else:
                logger.debug("GET %s -> %s", call.path, answer.status)
                try:
                    return proto.read_answer(call, answer, self._token)
                except CvsmError as exc:
                    failure = exc
            if attempt >= self._config.max_retries or not proto.is_retryable(failure):
                if isinstance(failure, (AuthenticationError, PermissionDeniedError)):
                    self._forget()
                raise failure
            delay = proto.backoff_delay(attempt)
            logger.debug(
                "retrying GET %s in %.3fs (retry %d of %d)", call.path, delay, attempt + 1, self._config.max_retries
            )
            yield proto.Sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover
