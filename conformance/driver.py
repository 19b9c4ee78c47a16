"""conformance.driver runs one language's driver process and speaks the line protocol with it.

Every exchange is bounded in time: a driver that does not answer is killed, its case fails and
the next case starts a new process. stderr is collected for the report, never parsed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
from pathlib import Path
from typing import Any

from .cases import CAPABILITIES, REPO_ROOT, DriverSpec

_LINE_LIMIT = 32 * 1024 * 1024


class DriverFailure(Exception):
    """DriverFailure says the driver died, hung or broke the protocol; it must be restarted."""


PROXY_VARIABLES = frozenset(
    {"http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"}
)


def driver_environment() -> dict[str, str]:
    """driver_environment is the harness's environment without ``CVSM_*`` or proxy variables.

    The cases talk to the proxy on loopback; a proxy of the machine's own would stand between.
    """
    return {k: v for k, v in os.environ.items() if not k.startswith("CVSM_") and k not in PROXY_VARIABLES}


class DriverProcess:
    """DriverProcess is one running driver."""

    def __init__(self, spec: DriverSpec, stderr_log: Path) -> None:
        self.spec = spec
        self.stderr_log = stderr_log
        self.stderr_lines: collections.deque[str] = collections.deque(maxlen=400)
        self.stderr_count = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._stderr_task: asyncio.Task[None] | None = None
        self._next_id = 0
        # Variables cases set in this process's environment, unset again before the next case.
        self.touched_env: set[str] = set()
        # What the driver answered to the ``capabilities`` op when it started.
        self.capabilities: frozenset[str] = frozenset()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self, timeout: float = 60) -> None:
        command = list(self.spec.command)
        if not os.path.isabs(command[0]) and os.sep in command[0]:
            command[0] = str(REPO_ROOT / command[0])
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *command,
                cwd=REPO_ROOT,
                env=driver_environment(),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=_LINE_LIMIT,
                start_new_session=True,
            )
        except OSError as exc:
            raise DriverFailure(f"cannot start driver {command}: {exc}") from exc
        self._stderr_task = asyncio.create_task(self._drain_stderr())
        # The first op proves the driver is up and speaking the protocol, and says what it can do.
        response = await self.request("capabilities", {}, timeout=timeout)
        self.capabilities = self._read_capabilities(response)

    def _read_capabilities(self, response: dict[str, Any]) -> frozenset[str]:
        """_read_capabilities checks the answer to ``capabilities``: a list of known names."""
        result = response.get("result")
        reported = result.get("capabilities") if response["ok"] and isinstance(result, dict) else None
        if not isinstance(reported, list) or not all(isinstance(c, str) for c in reported):
            raise DriverFailure(
                "the driver did not answer the capabilities op with {\"capabilities\": [names]} "
                f"(PROTOCOL.md): {str(response)[:300]}"
            )
        unknown = sorted(set(reported) - CAPABILITIES)
        if unknown:
            raise DriverFailure(
                f"the driver reports unknown capabilities {', '.join(unknown)} (known: {', '.join(sorted(CAPABILITIES))})"
            )
        return frozenset(reported)

    async def _drain_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        with self.stderr_log.open("a", encoding="utf-8") as sink:
            while True:
                line = await self._proc.stderr.readline()
                if not line:
                    return
                text = line.decode("utf-8", "replace").rstrip("\n")
                self.stderr_lines.append(text)
                self.stderr_count += 1
                sink.write(text + "\n")
                sink.flush()

    def stderr_since(self, mark: int, limit: int = 30) -> list[str]:
        """stderr_since returns up to ``limit`` last stderr lines written after ``mark``."""
        new = min(self.stderr_count - mark, len(self.stderr_lines))
        lines = list(self.stderr_lines)[-new:] if new > 0 else []
        return lines[-limit:]

    async def request(self, op: str, args: dict[str, Any], timeout: float = 20) -> dict[str, Any]:
        """request sends one op and returns the driver's response object."""
        if not self.alive:
            raise DriverFailure("the driver is not running")
        assert self._proc is not None and self._proc.stdin is not None and self._proc.stdout is not None
        self._next_id += 1
        request_id = self._next_id
        line = json.dumps({"id": request_id, "op": op, "args": args}, ensure_ascii=False) + "\n"
        try:
            self._proc.stdin.write(line.encode("utf-8"))
            await asyncio.wait_for(self._proc.stdin.drain(), timeout)
            raw = await asyncio.wait_for(self._proc.stdout.readline(), timeout)
        except asyncio.TimeoutError:
            await self.kill()
            raise DriverFailure(f"no answer to {op} within {timeout:g}s (driver killed)") from None
        except (ConnectionError, ValueError, asyncio.LimitOverrunError) as exc:
            await self.kill()
            raise DriverFailure(f"lost the driver during {op}: {type(exc).__name__}: {exc}") from None
        if not raw:
            code = await self._exit_code()
            raise DriverFailure(f"the driver exited (code {code}) during {op}")
        try:
            response = json.loads(raw.decode("utf-8"))
        except ValueError:
            await self.kill()
            raise DriverFailure(f"the driver wrote a non-JSON line on stdout: {raw[:200]!r}") from None
        if not isinstance(response, dict) or response.get("id") != request_id:
            await self.kill()
            raise DriverFailure(f"answer out of order: sent id {request_id}, got {str(response)[:200]}")
        if not isinstance(response.get("ok"), bool):
            raise DriverFailure(f"answer without a boolean \"ok\": {str(response)[:200]}")
        return response

    async def _exit_code(self) -> int | None:
        assert self._proc is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._proc.wait(), 5)
        return self._proc.returncode

    async def stop(self) -> int | None:
        """stop asks the driver to shut down, then kills it if it lingers; returns its exit code."""
        if self._proc is None:
            return None
        if self.alive:
            with contextlib.suppress(DriverFailure):
                await self.request("shutdown", {}, timeout=5)
            if self._proc.stdin is not None:
                with contextlib.suppress(Exception):
                    self._proc.stdin.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._proc.wait(), 5)
        if self.alive:
            await self.kill()
        await self._finish_stderr()
        return self._proc.returncode

    async def kill(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, 9)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._proc.wait(), 5)
        await self._finish_stderr()

    async def _finish_stderr(self) -> None:
        if self._stderr_task is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), 2)
            if not self._stderr_task.done():
                self._stderr_task.cancel()
