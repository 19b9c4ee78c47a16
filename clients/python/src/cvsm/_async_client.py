"""The asyncio client, :class:`AsyncClient`, on ``httpx.AsyncClient``.

What to send and how to read the answers lives in ``_base`` and ``_protocol``; this module
only runs those flows with asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

import httpx

from . import _live
from . import _protocol as proto
from ._base import BaseClient, Flow, T


class AsyncClient(BaseClient[httpx.AsyncClient]):
    """Read a team's secrets from a cvsm server without blocking the event loop.

    It takes the same keyword-only options as :class:`cvsm.Client`, with the same environment
    variables and defaults, and raises the same errors; ``http_client`` is an
    ``httpx.AsyncClient``. ``get``, ``get_all`` and ``inject`` are coroutines; ``clear_cache``
    is not (it does no I/O).

    It runs on asyncio. Its cache is safe across the tasks of one event loop. Close it with
    :meth:`aclose` or an ``async with`` block. With ``live``, the change stream is one task on
    the event loop of the client's first read.
    """

    _http_class = httpx.AsyncClient

    async def get(self, name: str) -> str:
        """Return the value of the secret ``name`` in the client's environment.

        Served from the cache when fetched less than ``cache_ttl`` seconds ago, else read with
        one request (and the team key's, on an end-to-end team's first read). Raise :class:`SecretNotFoundError` when no secret has exactly this
        (case-sensitive) name, or when ``name`` is not a valid secret name (then without a
        request). With ``stale_if_error``, a kept value may answer in place of a failed
        refresh (see ``on_stale``).
        """
        return await self._run(self._get_flow(name))

    async def get_all(self) -> dict[str, str]:
        """Return every secret of the client's environment as a dict of name -> value.

        One request to the JSON export; the result is cached and answers ``get`` too. A value
        of an end-to-end team that does not open raises :class:`DecryptionError`.
        """
        return await self._run(self._get_all_flow())

    async def inject(self, *, overwrite: bool = False) -> list[str]:
        """Put every secret of the environment into ``os.environ``; return the names set, sorted.

        A variable that is already set is kept unless ``overwrite`` is true. Every name and
        value is checked before anything is set: one that cannot be set (a name that is not a
        variable name, a value holding NUL) raises :class:`ConfigurationError` and sets nothing.
        """
        return await self._run(self._inject_flow(overwrite))

    async def refresh(self, name: str, environment: str | None = None) -> str:
        """Return the value of ``name`` read from the server now, past the cache (one request).

        As :meth:`cvsm.Client.refresh`: in the client's environment the cache then holds it; no
        kept value answers in place of an error.
        """
        return await self._run(self._refresh_flow(name, environment))

    async def aclose(self) -> None:
        """Stop a live client's change stream and release the client's connections (not those of
        an ``http_client`` passed in)."""
        self._closed = True
        task, self._stream_task = self._stream_task, None
        if task is not None and not task.done():
            task.cancel()
            if task.get_loop() is asyncio.get_running_loop():
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._stream_http is not None and self._stream_http is not self._http:
            await self._stream_http.aclose()
        self._stream_http = None
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _new_key_lock(self) -> asyncio.Lock:
        return asyncio.Lock()

    def _transport_ready(self) -> None:
        self._stream_task: asyncio.Task[None] | None = None
        self._stream_http: httpx.AsyncClient | None = None

    def _live_start(self) -> None:
        if self._live is None or self._closed:
            return
        loop = asyncio.get_running_loop()
        task = self._stream_task
        if task is not None and not task.done() and task.get_loop() is loop:
            return
        if self._stream_http is None:
            self._stream_http = self._new_stream_http()
        self._stream_task = loop.create_task(self._follow_stream(), name="cvsm-live")

    async def _follow_stream(self) -> None:
        """Follow the change stream until the client is closed (the task is cancelled)."""
        state = self._live
        assert state is not None and self._stream_http is not None
        while True:
            refusal: _live.StreamRefused | None = None
            try:
                await self._follow_once(state, self._stream_http)
                reason = "the server closed it"
            except _live.StreamRefused as exc:
                refusal, reason = exc, str(exc)
            except _live.StreamEnded as exc:
                reason = str(exc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - whatever broke it, reconnect later
                reason = type(exc).__name__
            await asyncio.sleep(state.refused(refusal) if refusal is not None else state.lost(reason))

    async def _follow_once(self, state: _live.LiveState, http: httpx.AsyncClient) -> None:
        response = await http.send(self._stream_request(http), stream=True, follow_redirects=False)
        try:
            if response.status_code != 200:
                raise _live.StreamRefused(
                    response.status_code, proto.retry_after_seconds(response.headers.get("Retry-After"))
                )
            decoder = _live.SseDecoder()
            async for line in response.aiter_lines():
                event = decoder.line(line)
                if decoder.last_id is not None:
                    state.last_event_id = decoder.last_id
                if event is not None:
                    state.event(*event)
        finally:
            await response.aclose()

    async def _run(self, flow: Flow[T]) -> T:
        """Take the steps ``flow`` asks for, with asyncio, and return its result."""
        try:
            step = next(flow)
            while True:
                if isinstance(step, proto.Call):
                    try:
                        answer = await self._attempt(step)
                    except httpx.HTTPError as exc:
                        step = flow.throw(exc)
                    else:
                        step = flow.send(answer)
                elif isinstance(step, proto.Sleep):
                    await asyncio.sleep(step.seconds)
                    step = flow.send(None)
                else:
                    await step.lock.acquire()
                    step = flow.send(None)
        except StopIteration as done:
            result: T = done.value
            return result
        finally:
            flow.close()

    async def _attempt(self, call: proto.Call[object]) -> proto.Answer:
        """Send one attempt of ``call`` and return the whole answer within ``timeout`` seconds.

        httpx bounds each read, not the attempt; the attempt is cancelled at the deadline.
        Raise ``httpx.TimeoutException`` then.
        """
        request = self._build_request(call)
        try:
            return await asyncio.wait_for(self._exchange(request), self._config.timeout)
        except asyncio.TimeoutError:
            raise httpx.TimeoutException(
                f"no complete answer within {self._config.timeout:g}s", request=request
            ) from None

    async def _exchange(self, request: httpx.Request) -> proto.Answer:
        response = await self._http.send(request, stream=True, follow_redirects=False)
        try:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
            return proto.Answer(response.status_code, response.headers, body, response.reason_phrase)
        finally:
            await response.aclose()
