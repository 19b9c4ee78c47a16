"""Credentials cached per process: a revoked, expired, locked or logged-out credential fails on
every process from the moment its change commits. Two real server processes share one database:
this test's app (A) and a `cvsm-server serve` child (B)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone

import aiohttp
import pytest

from conftest import JWT_SECRET, MASTER_KEY, Api, query, server_url
from test_storage import free_port


@contextlib.asynccontextmanager
async def second_process(database_url: str, tmp_path, api_limit: str) -> AsyncIterator[tuple]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
    env.update({"CVSM_DATABASE_URL": server_url(database_url), "CVSM_MASTER_KEY": MASTER_KEY,
                "CVSM_JWT_SECRET": JWT_SECRET, "CVSM_DATA_DIR": str(tmp_path / "b"),
                "CVSM_RATELIMIT_API": api_limit, "CVSM_BACKGROUND_JOBS": "off",
                "CVSM_TRUSTED_PROXIES": "127.0.0.1"})
    proc = subprocess.Popen([sys.executable, "-m", "cvsm_server.runtime.cli", "serve", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}/api/v1"
        async with aiohttp.ClientSession() as session:
            for _ in range(160):
                try:
                    async with session.get(f"{base}/health") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.25)
            yield session, base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def status(session: aiohttp.ClientSession, url: str, token: str, **headers: str) -> int:
    async with session.get(url, headers={**Api.auth(token), **headers}) as resp:
        return resp.status


@pytest.mark.parametrize("api_limit", ["60/60", "off"])
async def test_revocations_on_one_process_fail_at_once_on_another(make_settings, start_client, database_url,
                                                                   tmp_path, api_limit):
    client = await start_client(make_settings(trusted_proxies="127.0.0.1"))
    api = Api(client)
    owner = await api.register("owner_x")
    team_id = await api.team(owner, "acme")
    secret_id = await api.secret(owner, team_id, "DB_URL", "postgres://x")
    token = (await api.api_token(owner))["token"]
    locked = (await api.api_token(owner, allowed_ips=["10.0.0.1"]))["token"]
    async with second_process(database_url, tmp_path, api_limit) as (b, base):
        read_url = f"{base}/teams/{team_id}/secrets/{secret_id}"
        for _ in range(2):  # the second request of each is served from B's cache
            assert await status(b, f"{base}/me", owner["token"]) == 200
            assert await status(b, read_url, owner["token"]) == 200
            assert await status(b, f"{base}/me", token) == 200
            assert await status(b, f"{base}/me", locked, **{"X-Forwarded-For": "10.0.0.1"}) == 200

        token_id = (await (await client.get("/api/v1/tokens", headers=api.auth(owner["token"]))).json())
        revoked_id = next(t["id"] for t in token_id["tokens"] if t["token_prefix"] == token[:13])
        assert (await client.delete(f"/api/v1/tokens/{revoked_id}", headers=api.auth(owner["token"]))).status == 200
        assert await status(b, f"{base}/me", token) == 401

        for _ in range(5):  # five misses on A lock the token for an hour
            resp = await client.get("/api/v1/me", headers={**api.auth(locked), "X-Forwarded-For": "10.9.9.9"})
            assert resp.status == 403
        assert await status(b, f"{base}/me", locked, **{"X-Forwarded-For": "10.0.0.1"}) == 401

        reads_before = await query(database_url, "SELECT count(*) AS n FROM audit_logs WHERE action = 'read'")
        assert (await client.post("/api/v1/me/logout-all", headers=api.auth(owner["token"]))).status == 200
        assert await status(b, read_url, owner["token"]) == 401
        assert await status(b, f"{base}/me", owner["token"]) == 401
        reads_after = await query(database_url, "SELECT count(*) AS n FROM audit_logs WHERE action = 'read'")
        assert reads_after == reads_before  # the refused read wrote nothing


async def test_an_expired_token_fails_on_a_process_that_cached_it(make_settings, start_client, database_url,
                                                                  tmp_path):
    client = await start_client(make_settings())
    api = Api(client)
    owner = await api.register("owner_y")
    async with second_process(database_url, tmp_path, "off") as (b, base):
        expires = (datetime.now(timezone.utc) + timedelta(seconds=3)).isoformat()
        token = (await api.api_token(owner, expires_at=expires))["token"]
        assert await status(b, f"{base}/me", token) == 200
        assert await status(b, f"{base}/me", token) == 200  # cached
        await asyncio.sleep(3.5)
        assert await status(b, f"{base}/me", token) == 401
