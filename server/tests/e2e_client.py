"""A client of end-to-end teams for the server tests: what a member's browser or an SDK does
(make key pairs, wrap team keys, seal values) with the Python SDK's `cvsm.e2e`, over the real
HTTP API of the app under test (docs/e2e.md), in format 2: every wrap carries its recipient's
auth, a token its pin, a re-key its back-link and checks every recipient's auth first, and a
member's client keeps its anchor."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
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
        self.recovery_key = os.urandom(32)
        return {"public_key": crypto._b64u(self.public_key),  # noqa: SLF001
                "wrapped_private_key": cheap_passphrase_wrap(),
                "recovery_wrapped_private_key": crypto.wrap_private_key_with_recovery(
                    self.private_key, self.recovery_key, self.id),
                **extra}

    async def setup_key(self, client: TestClient) -> None:
        resp = await client.put("/api/v1/me/e2e-key", headers=auth(self.token),
                                json=self.key_body())
        assert resp.status == 201, await resp.text()

    async def open_team(self, client: TestClient, team_id: str) -> tuple[bytes, int]:
        """What a member's client does to open the team key (format 2): unwrap the current key,
        walk the links down to the member's anchor and check its commitment (raising
        `crypto.E2EError` otherwise), or trust on first use without an anchor; then move the
        anchor forward."""
        resp = await client.get(f"/api/v1/teams/{team_id}/e2e/key", headers=auth(self.token))
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        current = body["key_version"]
        key = crypto.unwrap_team_key(body["wrapped_key"], body["team_id"], current,
                                     self.private_key)
        links = {link["key_version"]: link["link"] for link in body["links"]}
        resp = await client.get(f"/api/v1/teams/{team_id}/e2e/anchor", headers=auth(self.token))
        anchored = None
        if resp.status == 200:
            anchored = crypto.open_anchor((await resp.json())["anchor"], self.private_key,
                                          self.id, team_id)
            crypto.verify_chain(key, current, team_id, links, *anchored)
        else:
            assert resp.status == 404, await resp.text()
        if anchored is None or anchored[0] < current:
            await self.store_anchor(client, team_id, current, key)
        return key, current

    async def store_anchor(self, client: TestClient, team_id: str, key_version: int,
                           key: bytes) -> None:
        anchor = crypto.seal_anchor(self.private_key, self.id, team_id, key_version,
                                    crypto.commitment(key, team_id, key_version))
        resp = await client.put(f"/api/v1/teams/{team_id}/e2e/anchor", headers=auth(self.token),
                                json={"anchor": anchor})
        assert resp.status in (200, 201), await resp.text()

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
        self.keys = {key_version: key}  # every key version the clients made, for old envelopes

    def commitment(self, key_version: int | None = None) -> bytes:
        version = key_version or self.key_version
        return crypto.commitment(self.keys[version], self.id, version)

    def auth_for(self, kind: str, public_key: bytes, user_id: str | None = None,
                 key_version: int | None = None) -> str:
        version = key_version or self.key_version
        return crypto.recipient_auth(self.keys[version], self.id, version, kind, user_id,
                                     public_key)

    @classmethod
    async def create(cls, client: TestClient, owner: Member, slug: str | None = None) -> E2ETeam:
        key, team_id = crypto.new_team_key(), str(uuid.uuid4())
        resp = await client.post("/api/v1/teams", headers=auth(owner.token), json={
            "name": "Sealed", "slug": slug or f"e2e-{uuid.uuid4().hex[:10]}", "id": team_id,
            "e2e": {"wrapped_key": crypto.wrap_team_key(key, team_id, 1, owner.public_key),
                    "auth": crypto.recipient_auth(key, team_id, 1, "user", owner.id,
                                                  owner.public_key)}})
        assert resp.status == 201, await resp.text()
        team = (await resp.json())["team"]
        assert team["id"] == team_id and team["e2e"] is True and team["key_version"] == 1
        await owner.store_anchor(client, team_id, 1, key)
        return cls(client, team_id, key)

    def wrap_for(self, public_key: bytes, key_version: int | None = None,
                 key: bytes | None = None) -> str:
        return crypto.wrap_team_key(key or self.key, self.id, key_version or self.key_version,
                                    public_key)

    async def grant(self, by: Member, to: Member) -> None:
        resp = await self.client.post(
            f"/api/v1/teams/{self.id}/e2e/grants", headers=auth(by.token),
            json={"user_id": to.id, "wrapped_key": self.wrap_for(to.public_key),
                  "public_key": crypto._b64u(to.public_key),  # noqa: SLF001
                  "auth": self.auth_for("user", to.public_key, to.id)})
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
        """A token bound to the team with its own key pair: (token string with the key part and
        its pin, private key, api_token JSON)."""
        private, public = crypto.generate_key_pair()
        resp = await self.client.post("/api/v1/tokens", headers=auth(by.token), json={
            "name": "app", "team_id": self.id,
            "e2e": {"public_key": crypto._b64u(public),  # noqa: SLF001
                    "wrapped_key": self.wrap_for(public), "key_version": self.key_version,
                    "auth": self.auth_for("token", public)}, **extra})
        assert resp.status == 201, await resp.text()
        body = await resp.json()
        return (crypto.join_token(body["token"], private, self.key_version, self.commitment()),
                private, body["api_token"])

    async def rekey(self, by: Member, *, add: tuple[Member, ...] = ()) -> dict:
        """What an Admin's client does to re-key (format 2): list the recipients, check every
        one's auth with the current key (`crypto.E2EError` before anything is sent when one is
        missing or wrong), make the next key, wrap it with a new auth to each (and to the members
        of `add`, compared out of band), make the back-link, re-seal every live secret's value,
        and move the re-keyer's anchor forward. Returns the answer's JSON."""
        client, current, key = self.client, self.key_version, self.key
        resp = await client.get(f"/api/v1/teams/{self.id}/e2e/members", headers=auth(by.token))
        assert resp.status == 200, await resp.text()
        listing = await resp.json()
        assert listing["key_version"] == current
        new_key, version = crypto.new_team_key(), current + 1
        wraps = []
        for member in listing["members"]:
            if not member["has_access"]:
                continue
            public = crypto._unb64u(member["public_key"])  # noqa: SLF001
            if member["user_id"] == by.id:
                if public != by.public_key:
                    raise crypto.E2EError("my own public key was swapped")
            else:
                crypto.check_recipient_auth(member["auth"], key, self.id, current, "user",
                                            member["user_id"], public)
            wraps.append((member["user_id"], None, public))
        for token in listing["tokens"]:
            public = crypto._unb64u(token["public_key"])  # noqa: SLF001
            crypto.check_recipient_auth(token["auth"], key, self.id, current, "token", None,
                                        public)
            wraps.append((None, token["token_id"], public))
        wraps += [(m.id, None, m.public_key) for m in add]
        self.keys[version] = new_key
        items = []
        for user_id, token_id, public in wraps:
            item = {"wrapped_key": crypto.wrap_team_key(new_key, self.id, version, public),
                    "auth": self.auth_for("user" if user_id else "token", public, user_id,
                                          version)}
            if user_id:
                item.update(user_id=user_id, public_key=crypto._b64u(public))  # noqa: SLF001
            else:
                item["token_id"] = token_id
            items.append(item)
        secrets = []
        resp = await client.get(f"/api/v1/teams/{self.id}/secrets", headers=auth(by.token))
        for secret in (await resp.json())["secrets"]:
            read = await (await client.get(f"/api/v1/teams/{self.id}/secrets/{secret['id']}",
                                           headers=auth(by.token))).json()
            under = crypto.parse_envelope(read["value"]).key_version
            value = crypto.open_value(read["value"], self.keys[under], team_id=self.id,
                                      environment=secret["environment"], name=secret["name"])
            secrets.append({"id": secret["id"], "value": crypto.seal_value(
                value, new_key, version, team_id=self.id, secret_id=secret["id"],
                version=read["secret"]["version"] + 1, environment=secret["environment"],
                name=secret["name"])})
        resp = await client.post(f"/api/v1/teams/{self.id}/e2e/rekey", headers=auth(by.token),
                                 json={"key_version": version, "wraps": items, "secrets": secrets,
                                       "link": crypto.make_link(new_key, key, self.id, version)})
        assert resp.status == 200, await resp.text()
        self.key, self.key_version = new_key, version
        await by.store_anchor(client, self.id, version, new_key)
        return await resp.json()


async def keyed(api: Any, client: TestClient, name: str | None = None) -> "Member":
    """A new account with its key pair set up, as a member's browser does once."""
    member = Member(await api.register(name))
    await member.setup_key(client)
    return member


# The fixtures the e2e test modules share (each imports them by name).
@pytest.fixture
async def alice(api: Any, client: TestClient) -> "Member":
    return await keyed(api, client, "alice")


@pytest.fixture
async def team(client: TestClient, alice: "Member") -> "E2ETeam":
    return await E2ETeam.create(client, alice)
