"""Stripe for the billing tests: stripe-mock (Stripe's own mock of its API, `go install
github.com/stripe/stripe-mock@latest`; `.ci/run` installs it) on a free port, a small front of it
whose subscriptions the test sets (stripe-mock keeps no state: it answers every retrieve with
the same fixture), and webhook events signed the way Stripe signs them.

- `stripe_mock_url()`: the running stripe-mock (one per test process); skipped with the reason
  when it is not installed, a failure under `CI=true`.
- `StripeFront`: serves `GET /v1/subscriptions/{id}` from `subscriptions` (what the test says
  Stripe holds now), answers everything else by stripe-mock, and counts the calls by path.
- `sign(payload, secret, timestamp=None)`: the `Stripe-Signature` header of a body
  (`t=<unix time>,v1=<hex HMAC-SHA256 of "t.payload" under the endpoint's secret>`).
- `event(...)`, `subscription(...)`: a Stripe event and subscription as Stripe sends them.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

WEBHOOK_SECRET = "whsec_test_" + "c" * 32
SECRET_KEY = "sk_test_" + "d" * 24
PRICES = {"professional": "price_test_professional", "enterprise": "price_test_enterprise"}
INSTALL = "go install github.com/stripe/stripe-mock@latest"

_RUNNING: dict[str, Any] = {}


def stripe_mock_binary() -> str | None:
    found = shutil.which("stripe-mock")
    if found:
        return found
    gopath = os.environ.get("GOPATH") or str(Path.home() / "go")
    candidate = Path(gopath) / "bin" / "stripe-mock"
    return str(candidate) if candidate.is_file() else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stripe_mock_url() -> str:
    """The base URL of this process's stripe-mock, started at the first call."""
    if "url" in _RUNNING:
        return _RUNNING["url"]
    binary = stripe_mock_binary()
    if binary is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"stripe-mock is missing under CI=true (.ci/run runs `{INSTALL}`)")
        pytest.skip(f"stripe-mock is not installed (`{INSTALL}`, then it is in $(go env "
                    "GOPATH)/bin): the billing tests run against it")
    port = _free_port()
    process = subprocess.Popen([binary, "-http-port", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    atexit.register(process.terminate)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if process.poll() is not None:
                pytest.fail(f"stripe-mock exited with {process.returncode}")
            time.sleep(0.1)
    else:
        process.terminate()
        pytest.fail("stripe-mock did not listen within 30 s")
    _RUNNING["url"] = f"http://127.0.0.1:{port}"
    _RUNNING["process"] = process
    return _RUNNING["url"]


class StripeFront:
    """stripe-mock behind a front whose subscriptions the test sets (`subscriptions[id]`)."""

    def __init__(self, mock_url: str) -> None:
        self.mock_url = mock_url
        self.subscriptions: dict[str, dict] = {}
        self.calls: Counter[str] = Counter()
        self.down = False
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._handle)
        self.server = TestServer(app, host="127.0.0.1")
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        await self.server.start_server()
        self._session = aiohttp.ClientSession()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        await self.server.close()

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        self.calls[f"{request.method} {path}"] += 1
        if self.down:
            return web.json_response({"error": {"type": "api_error", "message": "down"}},
                                     status=500)
        if request.method == "GET" and path.startswith("/v1/subscriptions/"):
            found = self.subscriptions.get(path.rsplit("/", 1)[1])
            if found is None:
                return web.json_response({"error": {"type": "invalid_request_error",
                                                    "message": "No such subscription"}},
                                         status=404)
            return web.json_response(found)
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in ("authorization", "content-type", "stripe-version",
                                    "idempotency-key")}
        async with self._session.request(request.method, self.mock_url + request.rel_url.path_qs,
                                         data=await request.read(), headers=headers) as upstream:
            return web.Response(body=await upstream.read(), status=upstream.status,
                                content_type="application/json")


def sign(payload: bytes, secret: str = WEBHOOK_SECRET, timestamp: int | None = None) -> str:
    """The `Stripe-Signature` header Stripe sends with `payload`."""
    t = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"{t}.".encode() + payload, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def subscription(sub_id: str, customer: str, *, status: str = "active",
                 plan: str = "professional", period_end: int | None = None,
                 cancel_at_period_end: bool = False) -> dict:
    """A subscription as Stripe's API (2025 versions) returns it."""
    end = period_end or int(time.time()) + 30 * 86400
    return {"id": sub_id, "object": "subscription", "customer": customer, "status": status,
            "cancel_at_period_end": cancel_at_period_end,
            "items": {"object": "list", "data": [{
                "id": "si_" + sub_id, "object": "subscription_item",
                "current_period_end": end, "current_period_start": end - 30 * 86400,
                "price": {"id": PRICES.get(plan, plan), "object": "price"}}]}}


def event(event_type: str, obj: dict, *, event_id: str | None = None) -> bytes:
    """A webhook body: the event as Stripe sends it."""
    return json.dumps({
        "id": event_id or f"evt_{uuid.uuid4().hex[:24]}", "object": "event",
        "api_version": "2026-02-25.clover", "created": int(time.time()), "livemode": False,
        "pending_webhooks": 1, "type": event_type, "data": {"object": obj},
    }).encode()


def checkout_completed(team_id: str, customer: str, sub_id: str, **kw: Any) -> bytes:
    return event("checkout.session.completed", {
        "id": f"cs_test_{uuid.uuid4().hex[:16]}", "object": "checkout.session",
        "mode": "subscription", "client_reference_id": team_id, "customer": customer,
        "subscription": sub_id, "payment_status": "paid", "status": "complete"}, **kw)


def settings_env() -> dict[str, str]:
    """`make_settings` overrides for a server that bills through the front (its URL added)."""
    return {"billing": "stripe", "stripe_secret_key": SECRET_KEY,
            "stripe_webhook_secret": WEBHOOK_SECRET,
            "stripe_price_professional": PRICES["professional"],
            "stripe_price_enterprise": PRICES["enterprise"]}
