"""Shared fixtures: the shared stub API, a fake cvsm API on respx, one way to drive both clients.

``stub`` is conformance/stub.py (the one stub every SDK's own tests share) in a process of its
own for the session, reset before each test: ``add`` stores secrets, ``fault`` queues its
scripted faults, ``requests``/``kinds`` read what it recorded, ``push`` drives its open change
streams; a test that asks for it and ``sdk`` gets clients pointed at it.
``FakeApi`` (test_e2e.py's) answers the endpoints the SDK uses (the read by name, the listing, the export and an
end-to-end team's key) from an in-memory store, takes the team by id or slug as the server does,
records every request, and plays queued faults (responses or exceptions) before answering
normally. ``E2eTeam`` makes it an end-to-end team: values stored sealed, the key wrapped to a
token's key pair.
``sdk`` runs every test against ``Client`` and ``AsyncClient`` alike.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
import respx

import cvsm
from cvsm import _cache, _protocol, e2e

BASE_URL = "http://cvsm.test/api/v1"
TEAM_ID = "5b0c2c9e-8d5e-4a55-9a40-0d7f3f3e1a11"
TEAM_SLUG = "acme"
TOKEN = "cvsm_" + "5e" * 32
CVSM_VARIABLES = tuple(f"CVSM_{name}" for name in (
    "TOKEN", "BASE_URL", "TEAM", "ENVIRONMENT", "CACHE_TTL", "TIMEOUT", "MAX_RETRIES", "CA_FILE", "STALE_IF_ERROR",
    "LIVE"))
PROXY_VARIABLES = tuple(
    name for base in ("http_proxy", "https_proxy", "all_proxy", "no_proxy") for name in (base, base.upper())
)

# Matched on the raw (still percent-encoded) path, as a server routes it.
_PATHS = [
    ("export", re.compile(r"^/api/v1/teams/(?P<team>[^/]+)/secrets/export$")),
    ("list", re.compile(r"^/api/v1/teams/(?P<team>[^/]+)/secrets$")),
    ("changes", re.compile(r"^/api/v1/teams/(?P<team>[^/]+)/secrets/changes$")),
    ("by_name", re.compile(r"^/api/v1/teams/(?P<team>[^/]+)/secrets/by-name/(?P<name>[^/]+)$")),
    ("e2e_key", re.compile(r"^/api/v1/teams/(?P<team>[^/]+)/e2e/key$")),
]


def _raw_path(request: httpx.Request) -> str:
    return request.url.raw_path.decode("ascii").partition("?")[0]


def kind_of(request: httpx.Request | str) -> str:
    """Return the kind of a request (or of a raw path): "by_name", "export", "list", ..."""
    path = request if isinstance(request, str) else _raw_path(request)
    return next((kind for kind, pattern in _PATHS if pattern.match(path)), "other")


STUB = Path(__file__).resolve().parents[3] / "conformance" / "stub.py"
FAULT_PATHS = {"any": "/api/", "by_name": f"/api/v1/teams/{TEAM_ID}/secrets/by-name/",
               "export": f"/api/v1/teams/{TEAM_ID}/secrets/export",
               "changes": f"/api/v1/teams/{TEAM_ID}/secrets/changes"}


class Stub:
    """conformance/stub.py on 127.0.0.1 (HTTPS with ``cert``/``key``), driven over its /_stub API."""

    def __init__(self, folder: Path, cert: str | None = None, key: str | None = None) -> None:
        port_file = folder / "port"
        self.process = subprocess.Popen([sys.executable, str(STUB), str(port_file), *filter(None, (cert, key))],
                                        stderr=subprocess.DEVNULL)  # the clients it drips to hang up
        deadline = time.monotonic() + 10
        while not port_file.exists():
            assert time.monotonic() < deadline and self.process.poll() is None, "the stub did not start"
            time.sleep(0.02)
        self.root = f"{'https' if cert else 'http'}://127.0.0.1:{port_file.read_text()}"
        self.url = self.root + "/api/v1"
        self._http = httpx.Client(base_url=self.root, verify=False, trust_env=False)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        content = None if body is None else json.dumps(body)
        return self._http.request(method, path, content=content).raise_for_status().json()

    def reset(self) -> None:
        teams = [{"id": TEAM_ID, "slug": TEAM_SLUG, "name": "Acme", "plan": "starter"}]
        self._call("POST", "/_stub/reset", {"token": TOKEN, "teams": teams, "secrets": []})

    def add(self, name: str, value: str, environment: str = "production") -> None:
        """Store ``value`` at the next version of ``name`` (1 for a new one), announcing nothing."""
        self.push({"name": name, "environment": environment, "value": value, "silent": True})

    def push(self, *items: dict[str, Any]) -> None:
        """Apply /_stub/changes items: a change (announced on open streams), raw text, a close."""
        self._call("POST", "/_stub/changes", list(items))

    def fault(self, kind: str, count: int = 1, **fault: Any) -> None:
        """Queue a fault for ``count`` requests of ``kind`` (a FAULT_PATHS key), e.g. status=503."""
        self._call("POST", "/_stub/faults", [{"path": FAULT_PATHS[kind], "count": count, **fault}])

    def requests(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self._call("GET", "/_stub/requests") if kind in (None, kind_of(r["path"]))]

    def kinds(self, since: int = 0) -> list[str]:
        """Return the kinds of the requests recorded, from the ``since``-th on."""
        return [kind_of(r["path"]) for r in self.requests()[since:]]

    def streams(self) -> dict[str, int]:
        return self._call("GET", "/_stub/streams")  # type: ignore[no-any-return]

    def stop(self) -> None:
        self._http.close()
        self.process.terminate()
        self.process.wait()


@pytest.fixture(scope="session")
def stub_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stub]:
    server = Stub(tmp_path_factory.mktemp("stub"))
    yield server
    server.stop()


@pytest.fixture
def stub(stub_server: Stub, request: pytest.FixtureRequest) -> Stub:
    stub_server.reset()
    if "sdk" in request.fixturenames:
        request.getfixturevalue("sdk").base_url = stub_server.url
    return stub_server


class E2eTeam:
    """An end-to-end team's keys, as its members' browsers make them (``docs/e2e.md``).

    ``token`` is the token with its key part and pin (the key version at its creation), for the
    client; ``api_token`` the part the server knows. ``seal`` seals a value for a secret id,
    version, environment and name; ``rekey`` makes the next key version and its back-link.
    """

    def __init__(self, team_id: str = TEAM_ID, key_version: int = 1) -> None:
        self.team_id = team_id
        self.key_version = key_version
        self.team_key = e2e.new_team_key()
        self.keys = {key_version: self.team_key}
        self.links: dict[int, str] = {}
        self.api_token = "cvsm_" + "e2" * 32
        self.private_key, self.public_key = e2e.generate_key_pair()
        self.token = e2e.join_token(self.api_token, self.private_key, key_version,
                                    e2e.commitment(self.team_key, team_id, key_version))
        self.key_part = self.token.partition(".")[2]

    def wrapped_key(self) -> str:
        return e2e.wrap_team_key(self.team_key, self.team_id, self.key_version, self.public_key)

    def key_answer(self, **changes: Any) -> dict[str, Any]:
        """``GET .../e2e/key``'s answer for the token: its wrap of the current key and the links."""
        return {"team_id": self.team_id, "key_version": self.key_version, "wrapped_key": self.wrapped_key(),
                "auth": None, "links": [{"key_version": v, "link": link} for v, link in sorted(self.links.items())],
                **changes}

    def seal(self, value: str, secret_id: str, environment: str, name: str, version: int = 1) -> str:
        return e2e.seal_value(value, self.team_key, self.key_version, team_id=self.team_id,
                              secret_id=secret_id, version=version, environment=environment, name=name)

    def rekey(self) -> None:
        """Make key version ``key_version + 1`` and its back-link, as an Admin's re-key does."""
        old = self.team_key
        self.key_version += 1
        self.team_key = e2e.new_team_key()
        self.keys[self.key_version] = self.team_key
        self.links[self.key_version] = e2e.make_link(self.team_key, old, self.team_id, self.key_version)


class FakeApi:
    """An in-memory cvsm API behind respx."""

    def __init__(self) -> None:
        self.token = TOKEN
        self.e2e: E2eTeam | None = None
        self.secrets: list[dict[str, str]] = []
        self.requests: list[httpx.Request] = []
        self._faults: list[tuple[str, Any]] = []

    def add(self, name: str, value: str, environment: str = "production") -> str:
        secret_id = str(uuid.uuid4())
        self.secrets.append({"id": secret_id, "name": name, "value": value, "environment": environment})
        return secret_id

    def end_to_end(self, team: E2eTeam | None = None) -> E2eTeam:
        """Make the team end-to-end: ``add_sealed`` stores envelopes, the token is ``team.api_token``."""
        self.e2e = team if team is not None else E2eTeam()
        self.token = self.e2e.api_token
        return self.e2e

    def add_sealed(self, name: str, value: str, environment: str = "production") -> str:
        """Store ``value`` sealed under the team key, as a member's client would write it."""
        assert self.e2e is not None
        secret_id = str(uuid.uuid4())
        envelope = self.e2e.seal(value, secret_id, environment, name)
        self.secrets.append({"id": secret_id, "name": name, "value": envelope, "environment": environment})
        return secret_id

    def fail(self, kind: str, *outcomes: Any) -> None:
        """Queue outcomes for ``kind`` (or "any"): an httpx.Response, an exception, a status int,
        or a function of the request, run before it is answered normally."""
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
                if callable(outcome):
                    outcome(request)
                    break
                if isinstance(outcome, BaseException):
                    raise outcome
                if isinstance(outcome, int):
                    return httpx.Response(outcome, json={"error": f"kesalahan {outcome}"})
                return outcome
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return httpx.Response(401, json={"error": "token tidak valid"})
        match = next(p.match(_raw_path(request)) for k, p in _PATHS if k == kind) if kind != "other" else None
        if match is None or kind == "changes" or unquote(match.group("team")) not in (TEAM_ID, TEAM_SLUG):
            return httpx.Response(404, json={"error": "tidak ditemukan"})
        environment = request.url.params.get("environment")
        if kind == "e2e_key":
            if self.e2e is None:
                return httpx.Response(400, json={"error": "tim ini bukan tim end-to-end"})
            return httpx.Response(200, json=self.e2e.key_answer())
        if kind == "list":  # after a 404: the suggestions (none here)
            return httpx.Response(200, json={"secrets": [], "total": 0})
        if kind == "export":
            return httpx.Response(
                200,
                json={s["name"]: s["value"] for s in self.secrets if environment in (None, s["environment"])},
                headers={"Cvsm-E2E": "1"} if self.e2e is not None else None,  # as the server marks it
            )
        wanted = (unquote(match.group("name")), environment or "production")
        for secret in (s for s in self.secrets if (s["name"], s["environment"]) == wanted):
            meta = {k: v for k, v in secret.items() if k != "value"}
            if self.e2e is not None:
                meta["e2e"] = True
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
    """Build a Client or an AsyncClient, and await calls only when the flavour needs it.

    What it built, and what ``owned`` holds, is closed after the test."""

    def __init__(self, flavour: str) -> None:
        self.flavour = flavour
        self.cls: type[Any] = cvsm.AsyncClient if flavour == "async" else cvsm.Client
        self.base_url = BASE_URL
        self.owned: list[Any] = []

    def client(self, **options: Any) -> Any:
        defaults: dict[str, Any] = {"token": TOKEN, "base_url": self.base_url, "team": TEAM_ID}
        defaults.update(options)
        self.owned.append(self.cls(**{k: v for k, v in defaults.items() if v is not None}))
        return self.owned[-1]

    @staticmethod
    async def call(value: Any) -> Any:
        return await value if inspect.isawaitable(value) else value


@pytest.fixture(params=["sync", "async"])
async def sdk(request: pytest.FixtureRequest) -> AsyncIterator[Sdk]:
    made = Sdk(request.param)
    yield made
    for owned in made.owned:  # real sockets to the stub: a client left open would warn
        await made.call(owned.aclose() if hasattr(owned, "aclose") else owned.close())
