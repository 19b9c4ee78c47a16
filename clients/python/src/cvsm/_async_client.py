"""The asyncio client, :class:`AsyncClient`, on ``httpx.AsyncClient``.

What to send and how to read the answers lives in ``_base`` and ``_protocol``; this module
only runs those flows with asyncio.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

import httpx

from . import _protocol as proto
from ._base import BaseClient, Flow, T


class AsyncClient(BaseClient[httpx.AsyncClient]):
    """Read a team's secrets from a cvsm server without blocking the event loop.

    It takes the same keyword-only options as :class:`cvsm.Client`, with the same environment
    variables and defaults, and raises the same errors; ``http_client`` is an
    ``httpx.AsyncClient``. ``get``, ``get_all`` and ``inject`` are coroutines; ``clear_cache``
    is not (it does no I/O).

    It runs on asyncio. Its cache is safe across the tasks of one event loop. Close it with
    :meth:`aclose` or an ``async with`` block.
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

    async def aclose(self) -> None:
        """Release the client's connections (not those of an ``http_client`` passed in)."""
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
