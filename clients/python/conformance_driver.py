#!/usr/bin/env python3
"""Speak the conformance protocol (conformance/PROTOCOL.md) for cvsm.

One JSON request per line on stdin, one JSON response per line on stdout. With ``--async`` it
drives :class:`cvsm.AsyncClient` on one event loop kept running on a thread of its own for the
whole session (as in an application, so a live client's stream task runs between ops too);
otherwise :class:`cvsm.Client`. Error kinds come from the exception types, never from messages.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Drive the working tree even when the package is not installed.
sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

import cvsm  # noqa: E402
from cvsm import _rules  # noqa: E402

KINDS: list[tuple[type[cvsm.CvsmError], str]] = [
    (cvsm.ConfigurationError, "configuration"),
    (cvsm.AuthenticationError, "authentication"),
    (cvsm.PermissionDeniedError, "permission_denied"),
    (cvsm.SecretNotFoundError, "not_found"),
    (cvsm.RateLimitError, "rate_limited"),
    (cvsm.ApiError, "api"),
    (cvsm.NetworkError, "network"),
    (cvsm.DecryptionError, "decryption"),
]
OPTION_NAMES = (
    "token", "base_url", "team", "environment", "cache_ttl", "timeout", "max_retries", "ca_file", "stale_if_error",
    "live",
)
CONFIG_KEYS = ("base_url", "team", "environment", "cache_ttl", "timeout", "max_retries", "stale_if_error")


class Unsupported(Exception):
    """Raised for an op this driver does not know."""


def error_body(exc: BaseException) -> dict[str, Any]:
    """Return the protocol's error object for ``exc``: the kind by type, the rest from its fields."""
    if isinstance(exc, cvsm.CvsmError):
        kind = next(name for error_type, name in KINDS if isinstance(exc, error_type))
        return {
            "kind": kind,
            "message": exc.message,
            "status": exc.status,
            "retry_after": exc.retry_after,
            "request_id": exc.request_id,
            "suggestion": exc.suggestion,
        }
    kind = "unsupported" if isinstance(exc, Unsupported) else "internal"
    message = str(exc) if kind == "unsupported" else f"{type(exc).__name__}: {exc}"
    return {
        "kind": kind,
        "message": message,
        "status": None,
        "retry_after": None,
        "request_id": None,
        "suggestion": None,
    }


class Driver:
    """The current client, and the ops run on it one at a time.

    ``stale`` is set by the client's ``on_stale`` callback: ops run one at a time, so after a
    ``get`` or ``get_all`` it tells whether that call answered with a kept value.
    """

    def __init__(self, use_async: bool) -> None:
        self.use_async = use_async
        self.loop = asyncio.new_event_loop() if use_async else None
        if self.loop is not None:
            threading.Thread(target=self.loop.run_forever, name="driver-loop", daemon=True).start()
        self.client: cvsm.Client | cvsm.AsyncClient | None = None
        self.stale = False

    def on_stale(self, event: cvsm.StaleEvent) -> None:
        self.stale = True

    def read(self, key: str, fn: Callable[[], Any]) -> dict[str, Any]:
        """Run the read ``fn``; add ``stale: true`` when the SDK said it answered stale."""
        self.stale = False
        result = {key: self.call(fn())}
        if self.stale:
            result["stale"] = True
        return result

    def call(self, value: Any) -> Any:
        """Await ``value`` on the driver's loop when it is a coroutine; return it otherwise."""
        if self.loop is not None and asyncio.iscoroutine(value):
            return asyncio.run_coroutine_threadsafe(value, self.loop).result()
        return value

    def on_loop(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the driver's loop (an AsyncClient is only touched there), else here."""
        if self.loop is None:
            return fn()

        async def run() -> Any:
            return fn()

        return self.call(run())

    def current(self) -> cvsm.Client | cvsm.AsyncClient:
        if self.client is None:
            raise RuntimeError("no client: call new_client first")
        return self.client

    def close_client(self) -> None:
        client, self.client = self.client, None
        if isinstance(client, cvsm.AsyncClient):
            self.call(client.aclose())
        elif client is not None:
            client.close()

    def run(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        if op == "new_client":
            self.close_client()
            options = {k: v for k, v in (args.get("options") or {}).items() if k in OPTION_NAMES}
            options["on_stale"] = self.on_stale
            factory = cvsm.AsyncClient if self.use_async else cvsm.Client
            if self.loop is not None:
                # httpx.AsyncClient wants to be created with the loop running.
                async def make() -> cvsm.AsyncClient:
                    return cvsm.AsyncClient(**options)

                self.client = self.call(make())
            else:
                self.client = factory(**options)
            config = self.client.config.as_dict()
            return {"config": {key: config[key] for key in CONFIG_KEYS}}
        if op == "get":
            return self.read("value", lambda: self.current().get(args["name"]))
        if op == "refresh":
            return {"value": self.call(self.current().refresh(args["name"], args.get("environment")))}
        if op == "get_all":
            return self.read("values", lambda: self.current().get_all())
        if op == "inject":
            return {"names": self.call(self.current().inject(overwrite=bool(args.get("overwrite", False))))}
        if op == "clear_cache":
            self.on_loop(self.current().clear_cache)
            return {}
        if op == "describe":
            return {"text": repr(self.current())}
        if op == "set_env":
            for name, value in (args.get("set") or {}).items():
                os.environ[name] = value
            for name in args.get("unset") or []:
                os.environ.pop(name, None)
            return {}
        if op == "get_env":
            return {"values": {name: os.environ.get(name) for name in args.get("names") or []}}
        if op == "capabilities":
            return {"capabilities": list(_rules.CAPABILITIES)}
        raise Unsupported(f"unknown op {op!r}")


def main() -> int:
    use_async = "--async" in sys.argv[1:]
    sys.stdin.reconfigure(encoding="utf-8")  # type: ignore[union-attr]
    driver = Driver(use_async)
    for line in sys.stdin:
        if not line.strip():
            continue
        request_id = None
        try:
            request = json.loads(line)
            request_id = request.get("id")
            op = request.get("op")
            if op == "shutdown":
                print(json.dumps({"id": request_id, "ok": True, "result": {}}), flush=True)
                break
            result = driver.run(op, request.get("args") or {})
            response = {"id": request_id, "ok": True, "result": result}
        except Exception as exc:  # noqa: BLE001 - every failure becomes a protocol answer
            response = {"id": request_id, "ok": False, "error": error_body(exc)}
        print(json.dumps(response), flush=True)
    driver.close_client()
    return 0


if __name__ == "__main__":
    sys.exit(main())
