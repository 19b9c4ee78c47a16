"""conformance.server runs the reference server in-process and seeds it through its public API.

The server is built with the same ``create_app`` factory as everywhere else, on a fresh
embedded PostgreSQL in a temporary data directory, with rate limits off (the suite makes many
requests with one token). ``Seeder`` registers a user, mints the run's API token and gives every
case a team of its own holding the case's secrets; it also mints per-case tokens on demand.

A case with ``"team": {"e2e": true}`` gets an end-to-end team (docs/e2e.md), set up as a
member's client would through the server's e2e API: the run's user gets a key pair, the team is
created with the team key wrapped to it, the case's secrets are sealed with ``cvsm.e2e`` and a
token scoped to the team is made with a key pair of its own and the team key wrapped to it; the
case's ``{{token}}`` is that token with its key part.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets as random_secrets
import shutil
import socket
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import aiohttp
import attrs
from aiohttp import web

from cvsm import e2e

from .cases import Case

log = logging.getLogger("conformance")


class ServerUnavailable(Exception):
    """ServerUnavailable says the reference server could not be imported or started."""


class ReferenceServer:
    """ReferenceServer is the in-process server; ``url`` is its root (without /api/v1)."""

    def __init__(self, external_url: str | None = None, log_file: Path | None = None) -> None:
        self.external_url = external_url
        self.log_file = log_file
        self.url = external_url.rstrip("/") if external_url else ""
        self.version = "external" if external_url else "unknown"
        self._runner: web.AppRunner | None = None
        self._data_dir: str | None = None

    async def start(self) -> None:
        if self.external_url:
            return
        try:
            from cvsm_server.runtime.app import create_app
            from cvsm_server.core.config import Settings
        except Exception as exc:  # noqa: BLE001 - any import failure means no server
            raise ServerUnavailable(
                f"cannot import the reference server (cvsm_server): {type(exc).__name__}: {exc}. "
                "Install it into the venv (make venv) or pass --server-url."
            ) from exc
        self._data_dir = tempfile.mkdtemp(prefix="cvsm-conformance-")
        settings = Settings.from_env(
            {
                "CVSM_DATA_DIR": self._data_dir,
                "CVSM_RATELIMIT_AUTH": "off",
                "CVSM_RATELIMIT_API": "off",
                "CVSM_RATELIMIT_PUBLIC": "off",
                "CVSM_RATELIMIT_NEWSLETTER": "off",
                # every driver sends wrong tokens from 127.0.0.1 on purpose
                "CVSM_RATELIMIT_FAILED_AUTH": "off",
                "CVSM_APP_URL": "http://127.0.0.1",
                # cases keep secrets in several environments, which a starter team may not
                "CVSM_DEFAULT_PLAN": "professional",
            }
        )
        app = create_app(settings)
        self._runner = web.AppRunner(app, access_log=None)
        try:
            await asyncio.wait_for(self._runner.setup(), 180)
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
        except Exception as exc:
            await self.stop()
            raise ServerUnavailable(f"the reference server did not start: {type(exc).__name__}: {exc}") from exc
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        with contextlib.suppress(Exception):
            async with aiohttp.ClientSession() as session, session.get(f"{self.url}/api/v1/health") as resp:
                self.version = str((await resp.json()).get("version", "unknown"))

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(runner.cleanup(), 60)
        if self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None


@attrs.define
class MintedToken:
    id: str
    token: str
    expires_at: datetime | None


@attrs.define
class E2eSeed:
    """E2eSeed is what a member's client holds for an end-to-end case team: the team key, the
    ids of the sealed secrets and the team's token with its key part."""

    team_key: bytes = attrs.field(repr=False)
    key_version: int
    token: str = attrs.field(repr=False)
    # the team key of version 1 wrapped to the token's public key, as the key answer serves it
    token_wrap: str = attrs.field(default="", repr=False)
    secret_ids: dict[tuple[str, str], str] = attrs.Factory(dict)  # (name, environment): id
    # (name, environment): the envelope seeded (version 1 under key version 1)
    envelopes: dict[tuple[str, str], str] = attrs.Factory(dict)


@attrs.define
class CaseSeed:
    """CaseSeed is what the server holds for one case: its team (and its keys, when end-to-end)."""

    team_id: str
    team_slug: str
    e2e: E2eSeed | None = None


class SeedError(Exception):
    """SeedError says the server refused a seeding call; the message shows the call and answer."""


class Seeder:
    """Seeder talks to the server directly (not through the proxy) with the run's user."""

    def __init__(self, server_url: str) -> None:
        self.api = server_url.rstrip("/") + "/api/v1"
        self.run_id = random_secrets.token_hex(4)
        self.jwt = ""
        self.token = ""
        self.teams: dict[str, CaseSeed] = {}
        self.user_id = ""
        self._member_public_key: bytes | None = None
        self._case_locks: dict[str, asyncio.Lock] = {}
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Seeder:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def call(self, method: str, path: str, body: Any = None, *, expect: int = 200) -> Any:
        assert self._session is not None
        headers = {"Authorization": f"Bearer {self.jwt}"} if self.jwt else {}
        async with self._session.request(method, self.api + path, json=body, headers=headers) as resp:
            text = await resp.text()
            if resp.status != expect:
                raise SeedError(f"{method} {path} answered {resp.status} (expected {expect}): {text[:300]}")
            try:
                return await resp.json(content_type=None)
            except ValueError:
                raise SeedError(f"{method} {path} answered non-JSON: {text[:300]}") from None

    async def seed(self, cases: list[Case]) -> None:
        """seed registers the run's user, mints its token and creates one team per case."""
        password = random_secrets.token_urlsafe(18)
        registered = await self.call(
            "POST",
            "/auth/register",
            {
                "email": f"conformance-{self.run_id}@example.test",
                "username": f"conformance_{self.run_id}",
                "password": password,
                "name": "Conformance Suite",
            },
            expect=201,
        )
        self.jwt = registered["token"]
        self.user_id = registered["user"]["id"]
        self.token = (await self.mint("conformance-run")).token
        if any(case.e2e for case in cases):
            await self.set_up_member_key()
        semaphore = asyncio.Semaphore(4)

        async def seed_case(index: int, case: Case) -> None:
            async with semaphore:
                slug = f"conf-{self.run_id}-{index:03d}"
                if case.e2e:
                    self.teams[case.id] = await self.seed_e2e_case(case, slug)
                    return
                created = await self.call(
                    "POST", "/teams", {"name": f"Conformance {case.id}"[:100], "slug": slug}, expect=201
                )
                team_id = created["team"]["id"]
                for secret in case.secrets:
                    await self.call(
                        "POST",
                        f"/teams/{team_id}/secrets",
                        {
                            "name": secret.name,
                            "value": secret.value,
                            "environment": secret.environment,
                            "type": "credential",
                            "description": f"conformance case {case.id}",
                        },
                        expect=201,
                    )
                self.teams[case.id] = CaseSeed(team_id=team_id, team_slug=slug)

        await asyncio.gather(*(seed_case(i, case) for i, case in enumerate(cases)))

    async def set_up_member_key(self) -> None:
        """set_up_member_key gives the run's user an end-to-end key pair (``PUT /me/e2e-key``), as
        the dashboard's "Set up end-to-end keys" does; its private key is wrapped by a passphrase
        and a recovery key that only this process ever knew."""
        private, public = e2e.generate_key_pair()
        passphrase = random_secrets.token_urlsafe(18)
        wrapped = await asyncio.to_thread(e2e.wrap_private_key_with_passphrase, private, passphrase, self.user_id)
        recovery = e2e.wrap_private_key_with_recovery(private, random_secrets.token_bytes(32), self.user_id)
        await self.call("PUT", "/me/e2e-key", {"public_key": e2e._b64u(public), "wrapped_private_key": wrapped,
                                               "recovery_wrapped_private_key": recovery}, expect=201)
        self._member_public_key = public

    async def seed_e2e_case(self, case: Case, slug: str) -> CaseSeed:
        """seed_e2e_case creates the case's end-to-end team, its sealed secrets and its token."""
        assert self._member_public_key is not None, "set_up_member_key first"
        team_id = str(uuid.uuid4())  # chosen by the client: the wraps are bound to it
        team_key, key_version = e2e.new_team_key(), 1
        await self.call("POST", "/teams", {
            "id": team_id, "name": f"Conformance {case.id}"[:100], "slug": slug,
            "e2e": {"wrapped_key": e2e.wrap_team_key(team_key, team_id, key_version, self._member_public_key),
                    "auth": e2e.recipient_auth(team_key, team_id, key_version, "user", self.user_id,
                                               self._member_public_key)},
        }, expect=201)
        seed = E2eSeed(team_key=team_key, key_version=key_version, token="")
        for secret in case.secrets:
            secret_id = str(uuid.uuid4())
            envelope = e2e.seal_value(secret.value, team_key, key_version, team_id=team_id, secret_id=secret_id,
                                      version=1, environment=secret.environment, name=secret.name)
            await self.call("POST", f"/teams/{team_id}/secrets", {
                "id": secret_id, "name": secret.name, "value": envelope, "environment": secret.environment,
                "type": "credential", "description": f"conformance case {case.id}",
            }, expect=201)
            seed.secret_ids[(secret.name, secret.environment)] = secret_id
            seed.envelopes[(secret.name, secret.environment)] = envelope
        token_private, token_public = e2e.generate_key_pair()
        seed.token_wrap = e2e.wrap_team_key(team_key, team_id, key_version, token_public)
        created = await self.call("POST", "/tokens", {
            "name": f"conformance {case.id}"[:100], "team_id": team_id, "read_only": True,
            "e2e": {"public_key": e2e._b64u(token_public),
                    "wrapped_key": seed.token_wrap,
                    "auth": e2e.recipient_auth(team_key, team_id, key_version, "token", None, token_public),
                    "key_version": key_version},
        }, expect=201)
        seed.token = e2e.join_token(created["token"], token_private, key_version,
                                    e2e.commitment(team_key, team_id, key_version))
        return CaseSeed(team_id=team_id, team_slug=slug, e2e=seed)

    async def forge_team_key(self, case_id: str) -> None:
        """forge_team_key does, through the API, what an operator who writes the database can do
        (issue 37): the team moves to key version 2 under a key that is not chained to version 1
        (no back-link), wrapped to the case token's real public key, and every live secret is
        sealed under it with a value the server chose (``forged-by-the-server``). Once per case
        team: a team already at version 2 was forged by an earlier language's run."""
        seed = self.teams[case_id]
        assert seed.e2e is not None
        listing = await self.call("GET", f"/teams/{seed.team_id}/e2e/members")
        if listing["key_version"] != 1:
            return
        parts = e2e.parse_token(seed.e2e.token)
        assert parts is not None and self._member_public_key is not None
        forged, version = e2e.new_team_key(), 2
        wraps: list[dict[str, Any]] = [{
            "user_id": self.user_id, "public_key": e2e._b64u(self._member_public_key),
            "wrapped_key": e2e.wrap_team_key(forged, seed.team_id, version, self._member_public_key)}]
        for token in listing["tokens"]:
            public = e2e._unb64u(token["public_key"])
            wraps.append({"token_id": token["token_id"],
                          "wrapped_key": e2e.wrap_team_key(forged, seed.team_id, version, public)})
        secrets = []
        for (name, environment), secret_id in seed.e2e.secret_ids.items():
            current = await self.call("GET", f"/teams/{seed.team_id}/secrets/{secret_id}")
            secrets.append({"id": secret_id, "value": e2e.seal_value(
                "forged-by-the-server", forged, version, team_id=seed.team_id, secret_id=secret_id,
                version=current["secret"]["version"] + 1, environment=environment, name=name)})
        await self.call("POST", f"/teams/{seed.team_id}/e2e/rekey",
                        {"key_version": version, "wraps": wraps, "secrets": secrets})

    async def reseal(self, case_id: str, name: str, value: str, sealed_for: str,
                     environment: str = "production") -> None:
        """reseal writes the production secret ``name`` of an end-to-end case team anew as its
        next version: ``value`` sealed for the name ``sealed_for`` in ``environment`` (``name``
        in production restores it)."""
        seed = self.teams[case_id]
        assert seed.e2e is not None
        secret_id = seed.e2e.secret_ids[(name, "production")]
        path = f"/teams/{seed.team_id}/secrets/{secret_id}"
        current = await self.call("GET", path)
        envelope = e2e.seal_value(value, seed.e2e.team_key, seed.e2e.key_version, team_id=seed.team_id,
                                  secret_id=secret_id, version=current["secret"]["version"] + 1,
                                  environment=environment, name=sealed_for)
        await self.call("PUT", path, {"value": envelope})

    async def rekey_team(self, case: Case) -> int:
        """rekey_team moves an end-to-end case team to its next key version as a member's client
        does (docs/e2e.md, re-key): a new team key with its back-link to the current one, wrapped
        (with its recipient auth) to the run's user and to every live token of the team, and every
        live secret sealed anew under it with its seeded value. Returns the new key version."""
        seed = self.teams[case.id]
        assert seed.e2e is not None and self._member_public_key is not None
        listing = await self.call("GET", f"/teams/{seed.team_id}/e2e/members")
        old_key, old_version = seed.e2e.team_key, seed.e2e.key_version
        if listing["key_version"] != old_version:
            raise SeedError(f"the team is at key version {listing['key_version']}, not {old_version}")
        team_key, version = e2e.new_team_key(), old_version + 1
        public = self._member_public_key
        wraps: list[dict[str, Any]] = [{
            "user_id": self.user_id, "public_key": e2e._b64u(public),
            "wrapped_key": e2e.wrap_team_key(team_key, seed.team_id, version, public),
            "auth": e2e.recipient_auth(team_key, seed.team_id, version, "user", self.user_id, public)}]
        for token in listing["tokens"]:
            token_public = e2e._unb64u(token["public_key"])
            wraps.append({"token_id": token["token_id"],
                          "wrapped_key": e2e.wrap_team_key(team_key, seed.team_id, version, token_public),
                          "auth": e2e.recipient_auth(team_key, seed.team_id, version, "token", None,
                                                     token_public)})
        secrets = []
        for (name, environment), secret_id in seed.e2e.secret_ids.items():
            current = await self.call("GET", f"/teams/{seed.team_id}/secrets/{secret_id}")
            secrets.append({"id": secret_id, "value": e2e.seal_value(
                case.value_of(name, environment), team_key, version, team_id=seed.team_id,
                secret_id=secret_id, version=current["secret"]["version"] + 1, environment=environment,
                name=name)})
        await self.call("POST", f"/teams/{seed.team_id}/e2e/rekey", {
            "key_version": version, "wraps": wraps, "secrets": secrets,
            "link": e2e.make_link(team_key, old_key, seed.team_id, version)})
        seed.e2e.team_key, seed.e2e.key_version = team_key, version
        return version

    async def mint(
        self, name: str, *, expires_in: float | None = None, allowed_ips: list[str] | None = None
    ) -> MintedToken:
        """mint creates an API token of the run's user (needs the JWT)."""
        body: dict[str, Any] = {"name": name[:100]}
        expires_at = None
        if expires_in is not None:
            expires_at = datetime.now(timezone.utc) + timedelta(seconds=expires_in)
            body["expires_at"] = expires_at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        if allowed_ips is not None:
            body["allowed_ips"] = allowed_ips
        created = await self.call("POST", "/tokens", body, expect=201)
        return MintedToken(id=created["api_token"]["id"], token=created["token"], expires_at=expires_at)

    async def revoke(self, token: MintedToken) -> None:
        await self.call("DELETE", f"/tokens/{token.id}")

    def case_lock(self, case_id: str) -> asyncio.Lock:
        """case_lock is the lock a case that changes its team's values holds while it runs."""
        return self._case_locks.setdefault(case_id, asyncio.Lock())

    async def secret_path(self, team_id: str, name: str) -> str:
        """secret_path is the API path of the team's production secret ``name``."""
        found = await self.call("GET", f"/teams/{team_id}/secrets?environment=production&search={name}")
        ids = [s["id"] for s in found["secrets"] if s["name"] == name]
        if not ids:
            raise SeedError(f"no production secret {name} in the case's team")
        return f"/teams/{team_id}/secrets/{ids[0]}"

    async def update(self, path: str, value: str) -> None:
        """update gives the secret at ``path`` a new value (a new version); it returns at the 200."""
        await self.call("PUT", path, {"value": value})

    async def rotate(self, team_id: str, name: str, *, timeout: float = 30.0) -> tuple[str, str]:
        """rotate rotates the production secret ``name`` of the team on the server (a rotation
        policy with target ``none``, then "rotate now"), waits until the background job has
        made the new value current, and returns the values before and after."""
        found = await self.call("GET", f"/teams/{team_id}/secrets?environment=production&search={name}")
        ids = [s["id"] for s in found["secrets"] if s["name"] == name]
        if not ids:
            raise SeedError(f"no production secret {name} in the case's team")
        path = f"/teams/{team_id}/secrets/{ids[0]}"
        before = await self.call("GET", path)
        await self.call("PUT", f"{path}/rotation", {"interval_days": 30, "target": {"kind": "none"}})
        await self.call("POST", f"{path}/rotation/rotate", expect=202)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            after = await self.call("GET", path)
            if after["secret"]["version"] > before["secret"]["version"]:
                return before["value"], after["value"]
            await asyncio.sleep(0.1)
        raise SeedError(f"{name} was not rotated within {timeout:g} s (are the server's background jobs on?)")


def unknown_team_id() -> str:
    return str(uuid.uuid4())


def bad_token() -> str:
    """bad_token is well-formed but never issued; a fresh prefix each time avoids prefix locks."""
    return "cvsm_" + random_secrets.token_hex(32)


def refused_port() -> int:
    """refused_port is a loopback port where nothing listens (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
