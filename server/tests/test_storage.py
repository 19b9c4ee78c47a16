"""Storage: migrations (including the historic username migration), durability across restarts,
the master-key check, and the embedded default started the way `make serve` starts it."""

import asyncio
import base64
import os
import re
import shutil
import socket
import stat
import subprocess
import sys

import aiohttp
import pytest
from aiohttp import web

from cvsm_server import db
from cvsm_server.runtime.app import create_app
from cvsm_server.crypto.keys import KeyMismatch
from conftest import Api, postgres_home, query


async def test_migrations_are_recorded_and_idempotent(database_url):
    rows = await query(database_url, "SELECT version, name FROM schema_migrations ORDER BY version")
    assert [r["version"] for r in rows] == [n for n, _, _ in db.migration_files()]
    pool = await db.create_pool(database_url, maxsize=1)
    try:
        assert await db.migrate(pool) == []
    finally:
        pool.close()
        await pool.wait_closed()


async def test_username_migration_derives_valid_unique_usernames_from_existing_users(fresh_database):
    url = fresh_database(empty=True)
    pool = await db.create_pool(url, maxsize=2)
    try:
        assert await db.migrate(pool, upto=1) == [1]
        emails = ["john.doe@a.com", "John-Doe@b.com", "john_doe@c.com", "admin@d.com", "x@e.com",
                  "ünïcode@f.com", ("a" * 60) + "@g.com", ("a" * 60) + "@h.com"]
        async with db.cursor(pool) as cur:
            for i, email in enumerate(emails):
                await cur.execute(
                    "INSERT INTO users (email, name, created_at) VALUES (%s, 'n', now() + make_interval(secs => %s))",
                    (email, i))
        assert await db.migrate(pool) == [n for n, _, _ in db.migration_files() if n > 1]
    finally:
        pool.close()
        await pool.wait_closed()
    rows = await query(url, "SELECT email, username FROM users ORDER BY created_at")
    names = {r["email"]: r["username"] for r in rows}
    assert names["john.doe@a.com"] == "john_doe"
    assert names["John-Doe@b.com"] == "John_Doe_2"
    assert names["john_doe@c.com"] == "john_doe_3"
    assert names["admin@d.com"] == "admin_1"
    assert names["x@e.com"] == "x__"
    assert names["ünïcode@f.com"] == "_n_code"
    assert names[("a" * 60) + "@g.com"] == "a" * 40
    assert names[("a" * 60) + "@h.com"] == "a" * 38 + "_2"
    lowered = [n.lower() for n in names.values()]
    assert len(set(lowered)) == len(lowered)
    assert all(re.fullmatch(r"[A-Za-z0-9_]{3,40}", n) for n in names.values())


async def test_secrets_survive_a_restart(make_settings, start_client):
    settings = make_settings()
    first = await start_client(settings)
    api = Api(first)
    user = await api.register("durable", password="password99")
    team = await api.team(user)
    sid = await api.secret(user, team, "KEEP", "still here")
    await first.close()
    second = await start_client(settings)
    login = await second.post("/api/v1/auth/login", json={"identifier": "durable", "password": "password99"})
    token = (await login.json())["token"]
    resp = await second.get(f"/api/v1/teams/{team}/secrets/{sid}", headers=Api.auth(token))
    assert (await resp.json())["value"] == "still here"


async def test_start_up_refuses_a_master_key_that_does_not_match_the_data(make_settings, start_client):
    first = await start_client(make_settings())
    api = Api(first)
    user = await api.register()
    await api.secret(user, await api.team(user), "K", "v")
    await first.close()
    wrong = make_settings(master_key=base64.b64encode(b"\x01" * 32).decode())
    runner = web.AppRunner(create_app(wrong))
    with pytest.raises(KeyMismatch, match="does not match"):
        await runner.setup()
    await runner.cleanup()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_cvsm_server_serve_starts_on_embedded_postgres_with_generated_keys():
    """What `make serve` does: no database URL, no keys; the server makes them in the data dir."""
    home = postgres_home()
    data_dir = home / "data"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
    env["CVSM_DATA_DIR"] = str(data_dir)
    proc = subprocess.Popen([sys.executable, "-m", "cvsm_server.runtime.cli", "serve", "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        body = None
        async with aiohttp.ClientSession() as session:
            for _ in range(120):
                try:
                    async with session.get(f"http://127.0.0.1:{port}/api/v1/health") as resp:
                        body = await resp.json()
                        break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.25)
        assert body == {"status": "ok", "version": "0.4.0"}
        for name in ("master.key", "jwt.secret"):
            mode = stat.S_IMODE((data_dir / name).stat().st_mode)
            assert mode == 0o600, name
        assert (data_dir / "pg" / "PG_VERSION").exists()
    finally:
        proc.terminate()
        output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 0, output
    key = (data_dir / "master.key").read_text().strip()
    assert key not in output  # the generated key is never logged
    assert "generated a master key" in output
    shutil.rmtree(home, ignore_errors=True)


def test_create_app_reads_its_settings_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CVSM_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("CVSM_RATELIMIT_API", "5/10")
    app = create_app()
    from cvsm_server.web.state import SETTINGS
    assert app[SETTINGS].rate_limit("api").limit == 5
    assert app[SETTINGS].rate_limit("auth").limit == 10
