"""Shared fixtures: a fake cvsm API on respx and one way to drive both clients.

``FakeApi`` answers the four endpoints the SDK uses from an in-memory store, records every
request, and plays queued faults (responses or exceptions) before answering normally.
``sdk`` runs every test against ``Client`` and ``AsyncClient`` alike.
"""

from __future__ import annotations

import inspect
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx

import cvsm
from cvsm import _cache, _protocol

BASE_URL = "http://cvsm.test/api/v1"
TEAM_ID = "5b0c2c9e-8d5e-4a55-9a40-0d7f3f3e1a11"
TEAM_SLUG = "acme"
TOKEN = "cvsm_" + "5e" * 32
CVSM_VARIABLES = (
    "CVSM_TOKEN",
    "CVSM_BASE_URL",
    "CVSM_TEAM",
    "CVSM_ENVIRONMENT",
    "CVSM_CACHE_TTL",
    "CVSM_TIMEOUT",
    "CVSM_MAX_RETRIES",
    "CVSM_CA_FILE",
)
PROXY_VARIABLES = tuple(
    name for base in ("http_proxy", "https_proxy", "all_proxy", "no_proxy") for name in (base, base.upper())
)

_PATHS = [
    ("teams", re.compile(r"^/api/v1/teams$")),
    ("export", re.compile(r"^/api/v1/teams/(?P<team>[^/]+)/secrets/export$")),
    ("list", re.compile(r"^/api/v1/teams/(?P<team>[^/]+)/secrets$")),
    ("value", re.compile(r"^/api/v1/teams/(?P<team>[^/]+)/secrets/(?P<id>[^/]+)$")),
]


def kind_of(request: httpx.Request) -> str:
    for kind, pattern in _PATHS:
        if pattern.match(request.url.path):
            return kind
    return "other"


class FakeApi:
    """An in-memory cvsm API behind respx."""

    def __init__(self) -> None:
        self.secrets: list[dict[str, str]] = []
        self.teams = [{"id": TEAM_ID, "slug": TEAM_SLUG, "name": "Acme", "plan": "starter"}]
        self.requests: list[httpx.Request] = []
        self._faults: list[tuple[str, Any]] = []

    def add(self, name: str, value: str, environment: str = "production") -> str:
        secret_id = str(uuid.uuid4())
        self.secrets.append({"id": secret_id, "name": name, "value": value, "environment": environment})
        return secret_id

    def fail(self, kind: str, *outcomes: Any) -> None:
        """Queue outcomes (an httpx.Response, an exception, or a status int) for ``kind``."""
        for outcome in outcomes:
            self._faults.append((kind, outcome))

    def kinds(self) -> list[str]:
        return [kind_of(r) for r in self.requests]

    def reset_requests(self) -> None:
        self.requests.clear()

    def handle(self, request: httpx.Request) -> httpx.Response:
        """Answer ``request``; every answer carries ``X-Request-Id: req-<n>`` (n counts from 1)."""
        self.requests.append(request)
        response = self._answer(request)
        response.headers.setdefault("X-Request-Id", f"req-{len(self.requests)}")
        return response

    def _answer(self, request: httpx.Request) -> httpx.Response:
        kind = kind_of(request)
        for i, (fault_kind, outcome) in enumerate(self._faults):
            if fault_kind in (kind, "any"):
                del self._faults[i]
                if isinstance(outcome, BaseException):
                    raise outcome
                if isinstance(outcome, int):
                    return httpx.Response(outcome, json={"error": f"kesalahan {outcome}"})
                return outcome
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return httpx.Response(401, json={"error": "token tidak valid"})
        match = next(p.match(request.url.path) for k, p in _PATHS if k == kind) if kind != "other" else None
        if kind == "teams":
            return httpx.Response(200, json={"teams": self.teams})
        if match is None or match.group("team") != TEAM_ID:
            return httpx.Response(404, json={"error": "tidak ditemukan"})
        environment = request.url.params.get("environment")
        if kind == "list":
            search = request.url.params.get("search", "").lower()
            items = [
                {k: v for k, v in s.items() if k != "value"}
                for s in self.secrets
                if (environment is None or s["environment"] == environment) and search in s["name"].lower()
            ]
            return httpx.Response(200, json={"secrets": items, "total": len(items)})
        if kind == "export":
            return httpx.Response(
                200,
                json={s["name"]: s["value"] for s in self.secrets if environment in (None, s["environment"])},
            )
        for secret in self.secrets:
            if secret["id"] == match.group("id"):
                meta = {k: v for k, v in secret.items() if k != "value"}
                return httpx.Response(200, json={"secret": meta, "value": secret["value"]})
        return httpx.Response(404, json={"error": "rahasia tidak ditemukan"})


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CVSM_VARIABLES + PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make retries immediate and record the attempts they were computed for."""
    attempts: list[int] = []

    def instant(attempt: int) -> float:
        attempts.append(attempt)
        return 0.0

    monkeypatch.setattr(_protocol, "backoff_delay", instant)
    return attempts


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Replace the cache's time source; advance it with ``clock[0] += seconds``."""
    now = [1000.0]
    monkeypatch.setattr(_cache, "_clock", lambda: now[0])
    return now


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    with respx.mock(assert_all_called=False) as router:
        router.route(host="cvsm.test").mock(side_effect=fake.handle)
        yield fake


class Sdk:
    """Build a Client or an AsyncClient, and await calls only when the flavour needs it."""

    def __init__(self, flavour: str) -> None:
        self.flavour = flavour
        self.cls: type[Any] = cvsm.AsyncClient if flavour == "async" else cvsm.Client

    def client(self, **options: Any) -> Any:
        defaults: dict[str, Any] = {"token": TOKEN, "base_url": BASE_URL, "team": TEAM_ID}
        defaults.update(options)
        return self.cls(**{k: v for k, v in defaults.items() if v is not None})

    @staticmethod
    async def call(value: Any) -> Any:
        return await value if inspect.isawaitable(value) else value


@pytest.fixture(params=["sync", "async"])
def sdk(request: pytest.FixtureRequest) -> Sdk:
    return Sdk(request.param)
