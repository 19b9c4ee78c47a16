"""The blocking client, :class:`Client`, on ``httpx.Client``.

What to send and how to read the answers lives in ``_base`` and ``_protocol``; this module
only runs those flows with blocking I/O.
"""

from __future__ import annotations

import contextvars
import threading
import time
from types import TracebackType

import httpx

from . import _protocol as proto
from ._base import BaseClient, Flow, T


class Client(BaseClient[httpx.Client]):
    """Read a team's secrets from a cvsm server, caching values for ``cache_ttl`` seconds.

    Every option is keyword-only and falls back to its ``CVSM_*`` variable (see ``__init__``):
    ``token``, ``base_url``, ``team``, ``environment``, ``cache_ttl``, ``timeout``,
    ``max_retries``, ``ca_file``, plus ``verify`` and ``http_client`` (an ``httpx.Client`` the
    caller owns). A missing token, base URL or team raises :class:`ConfigurationError` here.

    Each attempt runs on a short-lived worker thread so that ``timeout`` bounds all of it, body
    included, whatever the server does. A Client is safe to share between threads. Close it
    with :meth:`close` or a ``with`` block.
    """

    _http_class = httpx.Client

    def get(self, name: str) -> str:
        """Return the value of the secret ``name`` in the client's environment.

        Served from the cache when fetched less than ``cache_ttl`` seconds ago. Raise
        :class:`SecretNotFoundError` when no secret has exactly this (case-sensitive) name, or
        when ``name`` is not a valid secret name (then without a request).
        """
        return self._run(self._get_flow(name))

    def get_all(self) -> dict[str, str]:
        """Return every secret of the client's environment as a dict of name -> value.

        One request to the JSON export; the result is cached and answers ``get`` too.
        """
        return self._run(self._get_all_flow())

    def inject(self, *, overwrite: bool = False) -> list[str]:
        """Put every secret of the environment into ``os.environ``; return the names set, sorted.

        A variable that is already set is kept unless ``overwrite`` is true. Every name and
        value is checked before anything is set: one that cannot be set (a name that is not a
        variable name, a value holding NUL) raises :class:`ConfigurationError` and sets nothing.
        """
        return self._run(self._inject_flow(overwrite))

    def close(self) -> None:
        """Release the client's connections (not those of an ``http_client`` passed in)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _new_cache_lock(self) -> threading.Lock:
        return threading.Lock()

    def _new_team_lock(self) -> threading.Lock:
        return threading.Lock()

    def _run(self, flow: Flow[T]) -> T:
        """Take the steps ``flow`` asks for, with blocking I/O, and return its result."""
        try:
            step = next(flow)
            while True:
                if isinstance(step, proto.Call):
                    try:
                        answer = self._attempt(step)
                    except httpx.HTTPError as exc:
                        step = flow.throw(exc)
                    else:
                        step = flow.send(answer)
                elif isinstance(step, proto.Sleep):
                    time.sleep(step.seconds)
                    step = flow.send(None)
                else:
                    step = flow.send(self._team())
        except StopIteration as done:
            result: T = done.value
            return result
        finally:
            flow.close()

    def _team(self) -> str:
        """Return the team id, resolving a slug through ``GET /teams`` once per client."""
        with self._team_lock:
            if self._team_id is None:
                self._team_id = self._run(self._resolve_team_flow())
            return self._team_id

    def _attempt(self, call: proto.Call[object]) -> proto.Answer:
        """Send one attempt of ``call`` and return the whole answer within ``timeout`` seconds.

        httpx bounds each read, not the attempt, so the exchange runs on a worker thread that
        is abandoned at the deadline: it stops at its next chunk, or when its own read timeout
        fires, and closes the response. Raise ``httpx.TimeoutException`` at the deadline.
        """
        request = self._build_request(call)
        outcome: list[proto.Answer | BaseException] = []
        abandoned = threading.Event()
        context = contextvars.copy_context()

        def exchange() -> None:
            try:
                outcome.append(context.run(self._exchange, request, abandoned))
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
                outcome.append(exc)

        worker = threading.Thread(target=exchange, name="cvsm-attempt", daemon=True)
        worker.start()
        worker.join(self._config.timeout)
        if not outcome:
            abandoned.set()
            raise httpx.TimeoutException(
                f"no complete answer within {self._config.timeout:g}s", request=request
            )
        result = outcome[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def _exchange(self, request: httpx.Request, abandoned: threading.Event) -> proto.Answer:
        response = self._http.send(request, stream=True, follow_redirects=False)
        try:
            body = bytearray()
            for chunk in response.iter_bytes():
                if abandoned.is_set():
                    break
                body += chunk
            return proto.Answer(response.status_code, response.headers, body, response.reason_phrase)
        finally:
            response.close()
