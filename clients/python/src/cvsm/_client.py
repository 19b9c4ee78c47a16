"""The blocking client, :class:`Client`, on ``httpx.Client``.

What to send and how to read the answers lives in ``_base`` and ``_protocol``; this module
only runs those flows with blocking I/O.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType

import httpx

from . import _deadline
from . import _live
from . import _protocol as proto
from ._base import BaseClient, Flow, T


class Client(BaseClient[httpx.Client]):
    """Read a team's secrets from a cvsm server, caching values for ``cache_ttl`` seconds.

    Every option is keyword-only and falls back to its ``CVSM_*`` variable (see ``__init__``):
    ``token``, ``base_url``, ``team``, ``environment``, ``cache_ttl``, ``timeout``,
    ``max_retries``, ``stale_if_error``, ``ca_file``, ``live``, plus ``on_stale``, ``verify`` and
    ``http_client`` (an ``httpx.Client`` the caller owns). A missing token, base URL or team
    raises :class:`ConfigurationError` here. With ``live`` (``CVSM_LIVE=1``) one daemon thread
    follows the team's change stream, so a changed value is fetched again as soon as the change
    is announced; :meth:`refresh` reads one name past the cache.

    ``timeout`` bounds each whole attempt, body included, whatever the server does: one watchdog
    thread, shared by every client of the process, cuts an attempt's connection at its deadline.
    A Client is safe to share between threads. Close it with :meth:`close` or a ``with`` block.
    """

    _http_class = httpx.Client

    def get(self, name: str) -> str:
        """Return the value of the secret ``name`` in the client's environment.

        Served from the cache when fetched less than ``cache_ttl`` seconds ago, else read with
        one request (and the team key's, on an end-to-end team's first read). Raise :class:`SecretNotFoundError` when no secret has exactly this
        (case-sensitive) name, or when ``name`` is not a valid secret name (then without a
        request). With ``stale_if_error``, a kept value may answer in place of a failed
        refresh (see ``on_stale``).
        """
        # A cache hit is answered here, before any flow: ValueCache.fresh_value inlined, as a
        # method call would cost as much as the lookup itself. No lock: see ValueCache.
        cache = self._cache
        try:
            fresh_until, value = cache.entries[name]
        except KeyError:
            pass
        else:
            if fresh_until > cache.clock():
                return value
        return self._run(self._get_flow(name))

    def get_all(self) -> dict[str, str]:
        """Return every secret of the client's environment as a dict of name -> value.

        One request to the JSON export; the result is cached and answers ``get`` too. A value
        of an end-to-end team that does not open raises :class:`DecryptionError`.
        """
        return self._run(self._get_all_flow())

    def inject(self, *, overwrite: bool = False) -> list[str]:
        """Put every secret of the environment into ``os.environ``; return the names set, sorted.

        A variable that is already set is kept unless ``overwrite`` is true. Every name and
        value is checked before anything is set: one that cannot be set (a name that is not a
        variable name, a value holding NUL) raises :class:`ConfigurationError` and sets nothing.
        """
        return self._run(self._inject_flow(overwrite))

    def refresh(self, name: str, environment: str | None = None) -> str:
        """Return the value of ``name`` read from the server now, past the cache (one request).

        For the pattern "my database login failed: fetch the credential once more". In the
        client's environment (``environment`` None or the same) the cache then holds the new
        value; another environment's value is returned and not cached. Errors are those of
        :meth:`get`, but no kept value ever answers in place of one (``stale_if_error`` does not
        apply: the caller asked for the current value).
        """
        return self._run(self._refresh_flow(name, environment))

    def close(self) -> None:
        """Stop a live client's change stream and release the client's connections (not those of
        an ``http_client`` passed in)."""
        with self._stream_lock:  # no read opens the stream after this
            self._closed = True
            stream = self._stream
        if stream is not None:
            stream.stop()
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

    def _new_key_lock(self) -> threading.Lock:
        return threading.Lock()

    def _transport_ready(self) -> None:
        # The sockets of the client's own pool, for a deadline that passes before the answer on a
        # keep-alive connection has begun (see _deadline); a caller's http_client is not ours to cut.
        self._deadline_pool = _deadline.Pool() if self._owns_http else None
        self._stream: _StreamThread | None = None
        self._stream_lock = threading.Lock()

    def _live_start(self) -> None:
        if self._live is None or self._stream is not None or self._closed:
            return
        with self._stream_lock:
            if self._stream is None and not self._closed:
                self._stream = _StreamThread(self)

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
                    step.lock.acquire()
                    step = flow.send(None)
        except StopIteration as done:
            result: T = done.value
            return result
        finally:
            flow.close()

    def _attempt(self, call: proto.Call[object]) -> proto.Answer:
        """Send one attempt of ``call`` and return the whole answer within ``timeout`` seconds.

        httpx bounds each read, not the attempt: the attempt has a deadline, which the process's
        one watchdog thread enforces by shutting its connection down (see ``_deadline``), and
        which is checked between the chunks of the body. Raise ``httpx.TimeoutException`` once
        it has passed, whatever failed then.
        """
        request = self._build_request(call)
        deadline = _deadline.Deadline(self._config.timeout, self._deadline_pool)
        request.extensions["trace"] = deadline.trace
        _deadline.WATCHDOG.watch(deadline)
        try:
            response = self._http.send(request, stream=True, follow_redirects=False)
            try:
                if response.extensions.get("http_version") == b"HTTP/2":
                    deadline.shared_connection()
                else:
                    # A keep-alive connection from the pool, which no trace event named.
                    deadline.watch_stream(response.extensions.get("network_stream"))
                body = bytearray()
                for chunk in response.iter_bytes():
                    if deadline.passed():
                        raise deadline.timeout_error(request)
                    body += chunk
                return proto.Answer(response.status_code, response.headers, body, response.reason_phrase)
            finally:
                response.close()
        except httpx.HTTPError as exc:
            if deadline.passed() and not isinstance(exc, httpx.TimeoutException):
                raise deadline.timeout_error(request) from exc
            raise
        finally:
            _deadline.WATCHDOG.done(deadline)


class _StreamThread:
    """A live client's change stream, followed on one daemon thread until :meth:`stop`."""

    def __init__(self, client: Client) -> None:
        assert client._live is not None
        self._client = client
        self._state = client._live
        self._http = client._new_stream_http()
        self._stop = threading.Event()
        self._response: httpx.Response | None = None
        self._thread = threading.Thread(target=self._run, name="cvsm-live", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the stream and wait (briefly) for the thread; idempotent."""
        self._stop.set()
        response = self._response
        if response is not None:
            stream = response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                # Wakes the read blocked on it; the thread then closes the response itself.
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            else:  # a transport without a socket (a caller's mock)
                with contextlib.suppress(Exception):
                    response.close()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self._http is not self._client._http:
            with contextlib.suppress(Exception):
                self._http.close()

    def _run(self) -> None:
        state = self._state
        while not self._stop.is_set():
            refusal: _live.StreamRefused | None = None
            try:
                self._follow()
                reason = "the server closed it"
            except _live.StreamRefused as exc:
                refusal, reason = exc, str(exc)
            except _live.StreamEnded as exc:
                reason = str(exc)
            except Exception as exc:  # noqa: BLE001 - whatever broke it, reconnect later
                reason = type(exc).__name__
            if self._stop.is_set():
                return
            self._stop.wait(state.refused(refusal) if refusal is not None else state.lost(reason))

    def _follow(self) -> None:
        state = self._state
        request = self._client._stream_request(self._http)
        response = self._http.send(request, stream=True, follow_redirects=False)
        self._response = response
        try:
            if self._stop.is_set():
                return
            if response.status_code != 200:
                raise _live.StreamRefused(
                    response.status_code, proto.retry_after_seconds(response.headers.get("Retry-After"))
                )
            decoder = _live.SseDecoder()
            for line in response.iter_lines():
                event = decoder.line(line)
                if decoder.last_id is not None:
                    state.last_event_id = decoder.last_id
                if event is not None:
                    state.event(*event)
                if self._stop.is_set():
                    return
        finally:
            self._response = None
            response.close()
