"""A client of end-to-end teams for the server tests: what a member's browser or an SDK does
(make key pairs, wrap team keys, seal values) with the Python SDK's `cvsm.e2e`, over the real
HTTP API of the app under test (docs/e2e.md)."""

from __future__ import annotations

import os
import uuid
from typing import Any

from aiohttp.test_utils import TestClient

from cvsm import e2e as crypto


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def cheap_passphrase_wrap() -> str:
    """A `cvsm-pass1` wrap of the right shape made without PBKDF2's 600,000 rounds: the server
    only checks the shape (it cannot open it), so most tests need no real passphrase."""
    b = crypto._b64u  # noqa: SLF001 (the SDK's own base64url)
    return (f"cvsm-pass1.{crypto.MIN_ITERATIONS}.{b(os.urandom(16))}.{b(os.urandom(12))}."
            f"{b(os.urandom(48))}")


class Member:
    """A registered user with an X25519 key pair (set up through the API on `setup_key`)."""

    def __init__(self, user: dict[str, Any]) -> None:
        self.user = user
        self.private_key, self.public_key = crypto.generate_key_pair()

    @property
    def token(self) -> str:
        return self.user["token"]

    @property
    def id(self) -> str:
        return self.user["id"]

    def key_body(self, **extra: Any) -> dict[str, Any]:
        recovery = os.urandom(32)
        return {"public_key": crypto._b64u(self.public_key),  # noqa: SLF001
                "wrapped_private_key": cheap_passphrase_wrap(),
                "recovery_wrapped_private_key": crypto.wrap_private_key_with_recovery(
                    self.private_key, recovery, self.id),
                **extra}

    async def setup_key(self, client: TestClient) -> None:
        resp = await client.put("/api/v1/me/e2e-key", headers=auth(self.token),
                                json=self.key_body())
        assert resp.status == 201, await resp.text()

    async def team_key(self, client: TestClient, team_id: str,
                       key_version: int | None = None) -> tuple[bytes, int]:
        """The team key (and its version), from this member's wrap."""
        params = {"key_version": str(key_version)} if key_version else {}
        resp = await client.get(f"/api/v1/teams/{team_id}/e2e/key", headers=auth(self.token),
                                params=params)
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        return crypto.unwrap_team_key(body["wrapped_key"], body["team_id"], body["key_version"],
                                      self.private_key), body["key_version"]


class E2ETeam:
    """An end-to-end team as its members' clients see it: its id, key and key version."""

    def __init__(self, client: TestClient, team_id: str, key: bytes, key_version: int = 1) -> None:
        self.client = client
        self.id = team_id
        self.key = key
        self.key_version = key_version

    @classmethod
    async def create(cls, client: TestClient, owner: Member, slug: str | None = None) -> E2ETeam:
        key, team_id = crypto.new_team_key(), str(uuid.uuid4())
        resp = await client.post("/api/v1/teams", headers=auth(owner.token), json={
            "name": "Sealed", "slug": slug or f"e2e-{uuid.uuid4().hex[:10]}", "id": team_id,
            "e2e": {"wrapped_key": crypto.wrap_team_key(key, team_id, 1, owner.public_key)}})
        assert resp.status == 201, await resp.text()
        team = (await resp.json())["team"]
        assert team["id"] == team_id and team["e2e"] is True and team["key_version"] == 1
        return cls(client, team_id, key)

    def wrap_for(self, public_key: bytes, key_version: int | None = None,
                 key: bytes | None = None) -> str:
        return crypto.wrap_team_key(key or self.key, self.id, key_version or self.key_version,
                                    public_key)

    async def grant(self, by: Member, to: Member) -> None:
        resp = await self.client.post(
            f"/api/v1/teams/{self.id}/e2e/grants", headers=auth(by.token),
            json={"user_id": to.id, "wrapped_key": self.wrap_for(to.public_key),
                  "public_key": crypto._b64u(to.public_key)})  # noqa: SLF001
        assert resp.status == 200, await resp.text()

    def seal(self, value: str, *, secret_id: str, version: int, name: str,
             environment: str = "production", key_version: int | None = None) -> str:
        return crypto.seal_value(value, self.key, key_version or self.key_version,
                                 team_id=self.id, secret_id=secret_id, version=version,
                                 environment=environment, name=name)

    def open(self, envelope: str, *, name: str, environment: str = "production",
             key: bytes | None = None) -> str:
        return crypto.open_value(envelope, key or self.key, team_id=self.id,
                                 environment=environment, name=name)

    async def create_secret(self, by: Member, name: str, value: str,
                            environment: str = "production") -> str:
        secret_id = str(uuid.uuid4())
        resp = await self.client.post(
            f"/api/v1/teams/{self.id}/secrets", headers=auth(by.token),
            json={"id": secret_id, "name": name, "environment": environment,
                  "value": self.seal(value, secret_id=secret_id, version=1, name=name,
                                     environment=environment)})
        assert resp.status == 201, await resp.text()
        body = (await resp.json())["secret"]
        assert body["id"] == secret_id and body["e2e"] is True
        return secret_id

    async def token(self, by: Member, **extra: Any) -> tuple[str, bytes, dict]:
        """A token bound to the team with its own key pair: (token string with the key part,
        private key, api_token JSON)."""
        private, public = crypto.generate_key_pair()
        resp = await self.client.post("/api/v1/tokens", headers=auth(by.token), json={
            "name": "app", "team_id": self.id,
            "e2e": {"public_key": crypto._b64u(public),  # noqa: SLF001
                    "wrapped_key": self.wrap_for(public)}, **extra})
        assert resp.status == 201, await resp.text()
        body = await resp.json()
        return crypto.join_token(body["token"], private), private, body["api_token"]
