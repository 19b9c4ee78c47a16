"""Rate limits: per IP on /auth and /public, per credential on the API, shared by every server
process on one database, answered with 429 and a whole-second Retry-After."""

import asyncio

from aiohttp.test_utils import TestClient

from cvsm_server.accounts import ratelimit
from cvsm_server.core.config import ConfigError, RateLimit, Settings
from conftest import Api, query

import pytest


async def statuses(coros):
    return [r.status for r in await asyncio.gather(*coros)]


async def test_auth_limit_is_per_ip_with_retry_after(make_settings, start_client):
    client: TestClient = await start_client(make_settings(ratelimit_auth="3/3600", trusted_proxies="127.0.0.1"))
    body = {"identifier": "nobody", "password": "whatever1"}
    results = [await client.post("/api/v1/auth/login", json=body) for _ in range(4)]
    assert [r.status for r in results] == [401, 401, 401, 429]
    retry = results[3].headers["Retry-After"]
    assert retry.isdigit() and 1 <= int(retry) <= 3600
    assert "error" in await results[3].json()
    # another client address has its own budget
    other = await client.post("/api/v1/auth/login", json=body, headers={"X-Forwarded-For": "198.51.100.1"})
    assert other.status == 401


async def test_public_limit_is_per_ip(make_settings, start_client):
    client = await start_client(make_settings(ratelimit_public="2/3600"))
    got = [(await client.get("/api/v1/public/stats")).status for _ in range(3)]
    assert got == [200, 200, 429]
    # /health is for probes and is not limited
    assert all([(await client.get("/api/v1/health")).status == 200 for _ in range(5)])


async def test_api_limit_is_per_credential(make_settings, start_client):
    client = await start_client(make_settings(ratelimit_api="3/3600"))
    api = Api(client)
    user = await api.register()
    first = (await api.api_token(user))["token"]
    second = (await api.api_token(user))["token"]
    got = [(await client.get("/api/v1/me", headers=api.auth(first))).status for _ in range(4)]
    assert got == [200, 200, 200, 429]
    assert (await client.get("/api/v1/me", headers=api.auth(second))).status == 200


async def test_concurrent_requests_never_pass_the_limit(make_settings, start_client):
    client = await start_client(make_settings(ratelimit_api="10/3600"))
    api = Api(client)
    token = (await api.api_token(await api.register()))["token"]
    got = await statuses([client.get("/api/v1/me", headers=api.auth(token)) for _ in range(25)])
    assert got.count(200) == 10 and got.count(429) == 15


async def test_two_server_processes_share_one_limit(make_settings, start_client):
    settings = make_settings(ratelimit_api="4/3600")
    one, two = await start_client(settings), await start_client(settings)
    api = Api(one)
    token = (await api.api_token(await api.register()))["token"]
    got = []
    for client in (one, two, one, two, one, two):
        got.append((await client.get("/api/v1/me", headers=api.auth(token))).status)
    assert got == [200, 200, 200, 200, 429, 429]


def test_rate_limit_settings_parse_and_reject_garbage():
    assert RateLimit.parse("X", "60/60") == RateLimit(60, 60)
    assert RateLimit.parse("X", "off") is None
    for bad in ("60", "a/b", "0/60", "10/0"):
        with pytest.raises(ConfigError, match="X"):
            RateLimit.parse("X", bad)
    defaults = Settings.from_env({})
    assert defaults.rate_limit("auth") == RateLimit(10, 60)
    assert defaults.rate_limit("api") == RateLimit(60, 60)
    assert defaults.rate_limit("public") == RateLimit(30, 60)
    assert defaults.rate_limit("newsletter") == RateLimit(5, 10)


async def test_one_credential_leases_its_api_limit_instead_of_counting_each_request(
        make_settings, start_client, database_url):
    # Each counted request used to lock the credential's counter row until its commit: one
    # credential's reads queued on it. A process now leases units (here 32 at once) and spends
    # them without a statement of their own.
    client = await start_client(make_settings(ratelimit_api="1000/3600"))
    api = Api(client)
    owner = await api.register()
    team_id = await api.team(owner)
    secret_id = await api.secret(owner, team_id, "DB_URL", "postgres://x")
    token = (await api.api_token(owner))["token"]
    read = f"/api/v1/teams/{team_id}/secrets/{secret_id}"
    got = await statuses([client.get(read, headers=api.auth(token)) for _ in range(20)])
    assert got == [200] * 20
    rows = await query(database_url,
                       "SELECT count FROM rate_limit_counters WHERE key LIKE 'api:token:%%'")
    assert [r["count"] for r in rows] == [32]
    reads = await query(database_url, "SELECT count(*) AS n FROM audit_logs WHERE action = 'read'")
    assert reads == [{"n": 20}]


async def test_two_processes_reading_at_once_admit_exactly_the_limit_together(
        make_settings, start_client, database_url):
    settings = make_settings(ratelimit_api="20/3600")
    one, two = await start_client(settings), await start_client(settings)
    api = Api(one)
    owner = await api.register()
    team_id = await api.team(owner)
    secret_id = await api.secret(owner, team_id, "DB_URL", "postgres://x")
    token = (await api.api_token(owner))["token"]
    read = f"/api/v1/teams/{team_id}/secrets/{secret_id}"
    got = await statuses([client.get(read, headers=api.auth(token))
                          for _ in range(30) for client in (one, two)])
    assert got.count(200) == 20 and got.count(429) == 40
    reads = await query(database_url, "SELECT count(*) AS n FROM audit_logs WHERE action = 'read'")
    assert reads == [{"n": 20}]
    # the window is exhausted: refused in each process without asking the database again
    for client in (one, two):
        resp = await client.get(read, headers=api.auth(token))
        assert resp.status == 429 and 1 <= int(resp.headers["Retry-After"]) <= 3600


async def test_leases_renewed_ahead_still_admit_exactly_the_limit_in_one_process(
        make_settings, start_client, database_url):
    client = await start_client(make_settings(ratelimit_api="40/3600"))
    api = Api(client)
    owner = await api.register()
    team_id = await api.team(owner)
    secret_id = await api.secret(owner, team_id, "DB_URL", "postgres://x")
    token = (await api.api_token(owner))["token"]
    read = f"/api/v1/teams/{team_id}/secrets/{secret_id}"
    got = [(await client.get(read, headers=api.auth(token))).status for _ in range(45)]
    assert got == [200] * 40 + [429] * 5
    # the leases (20 units first, then smaller ones taken ahead of need) reached the limit
    rows = await query(database_url,
                       "SELECT count FROM rate_limit_counters WHERE key LIKE 'api:token:%%'")
    assert rows[0]["count"] >= 40


async def test_a_hot_credential_leases_larger_and_larger_units_so_rarely_counts(
        make_settings, start_client, database_url, monkeypatch):
    # Each lease is a statement of its own weight (~1.8 ms against 0.47 for the read): a
    # credential that spends its leases fast gets doubled ones, up to MAX_STEP.
    monkeypatch.setattr(ratelimit, "FAST_LEASE", 3600.0)  # every lease here is spent "fast"
    client = await start_client(make_settings(ratelimit_api="1000000/3600"))
    api = Api(client)
    owner = await api.register()
    team_id = await api.team(owner)
    secret_id = await api.secret(owner, team_id, "DB_URL", "postgres://x")
    token = (await api.api_token(owner))["token"]
    read = f"/api/v1/teams/{team_id}/secrets/{secret_id}"
    for _ in range(100):
        assert (await client.get(read, headers=api.auth(token))).status == 200
    # 32, then 64 taken ahead at 8 units left, then 128 at 16 left: 3 leases for 100 reads
    # (fixed leases of 32 would have taken 4, 128 units)
    rows = await query(database_url,
                       "SELECT count FROM rate_limit_counters WHERE key LIKE 'api:token:%%'")
    assert [r["count"] for r in rows] == [32 + 64 + 128]


def test_a_lease_doubles_while_spent_fast_halves_when_slow_and_stays_in_its_bounds():
    lease = ratelimit.Lease()
    assert lease.adapt(100.0) == ratelimit.FIRST_STEP  # nothing granted yet
    caps = []
    for _ in range(8):
        lease.granted_at = 100.0
        caps.append(lease.adapt(100.0 + ratelimit.FAST_LEASE / 2))
    assert caps == [64, 128, 256, 512, 1024, 1024, 1024, 1024]
    lease.granted_at = 100.0
    assert lease.adapt(100.0 + (ratelimit.FAST_LEASE + ratelimit.SLOW_LEASE) / 2) == 1024
    slow = []
    for _ in range(7):
        lease.granted_at = 100.0
        slow.append(lease.adapt(100.0 + ratelimit.SLOW_LEASE + 1))
    assert slow == [512, 256, 128, 64, 32, 32, 32]


async def test_a_large_lease_stays_bounded_by_half_of_what_is_left_per_process():
    leases = ratelimit.Leases(processes=2)
    charge = ratelimit.Charge("api:token:x", RateLimit(100, 60))
    first = await leases.charge(charge)
    assert first.step == 25  # 100 left / (2 x 2 processes), under the first cap of 32
    lease = first.lease
    lease.granted(first.step - 1, False, 90, 30.0, 60)  # others took 65 meanwhile: 10 left
    lease.cap = ratelimit.MAX_STEP
    lease.units = 0
    second = await leases.charge(charge)
    assert second.step == 2  # 10 left / 4, whatever the cap
    lease.settle()
