"""Two-factor login: RFC 6238 vectors, enrolment, the 2fa_required branch, drift, no replay."""

import base64
import time

import pyotp
import pytest

from cvsm_server.accounts.totp import match_step
from conftest import Api, query

# RFC 6238 appendix B, SHA-1 seed "12345678901234567890": (time, 8-digit TOTP).
RFC6238_SHA1 = [(59, "94287082"), (1111111109, "07081804"), (1111111111, "14050471"),
                (1234567890, "89005924"), (2000000000, "69279037"), (20000000000, "65353130")]
RFC_SECRET = base64.b32encode(b"12345678901234567890").decode()


@pytest.mark.parametrize("at,code8", RFC6238_SHA1)
def test_rfc6238_vectors_match_at_their_step_with_six_digits(at, code8):
    assert match_step(RFC_SECRET, code8[-6:], at) == at // 30
    assert match_step(RFC_SECRET, code8[-6:], at + 30) == at // 30  # one step of drift
    assert match_step(RFC_SECRET, code8[-6:], at + 61) is None  # two steps: refused


def test_malformed_codes_never_match():
    for code in ("", "12345", "1234567", "abcdef", "12 456"):
        assert match_step(RFC_SECRET, code, 59) is None


async def enable_2fa(client, api: Api, user) -> str:
    setup = await client.post("/api/v1/me/2fa/setup", headers=api.auth(user["token"]))
    assert setup.status == 200
    body = await setup.json()
    assert body["otpauth_url"].startswith("otpauth://totp/")
    secret = body["secret"]
    code = pyotp.TOTP(secret).now()
    resp = await client.post("/api/v1/me/2fa/enable", headers=api.auth(user["token"]), json={"code": code})
    assert resp.status == 200, await resp.text()
    return secret


async def test_login_with_2fa_needs_the_code(client, api: Api):
    user = await api.register("tari", password="password99")
    secret = await enable_2fa(client, api, user)
    me = await (await client.get("/api/v1/me", headers=api.auth(user["token"]))).json()
    assert me["totp_enabled"] is True
    resp = await client.post("/api/v1/auth/login", json={"identifier": "tari", "password": "password99"})
    assert resp.status == 401 and await resp.json() == {"error": "2fa_required"}
    # the wrong password never reveals that 2FA is on
    resp = await client.post("/api/v1/auth/login", json={"identifier": "tari", "password": "wrong-pass"})
    assert (await resp.json())["error"] != "2fa_required"
    # Enabling used the current step, so an earlier code is a replay; one step ahead is drift.
    code = pyotp.TOTP(secret).at(time.time() + 30)
    resp = await client.post("/api/v1/auth/login",
                             json={"identifier": "tari", "password": "password99", "totp_code": code})
    assert resp.status == 200


async def test_a_code_is_never_accepted_twice(client, api: Api):
    user = await api.register("umar", password="password99")
    secret = await enable_2fa(client, api, user)
    code = pyotp.TOTP(secret).at(time.time() + 30)  # next step: not used by enable
    body = {"identifier": "umar", "password": "password99", "totp_code": code}
    assert (await client.post("/api/v1/auth/login", json=body)).status == 200
    replay = await client.post("/api/v1/auth/login", json=body)
    assert replay.status == 401
    # nor an older step once a newer one was used
    older = {**body, "totp_code": pyotp.TOTP(secret).now()}
    assert (await client.post("/api/v1/auth/login", json=older)).status == 401


async def test_wrong_code_gives_the_generic_login_failure(client, api: Api):
    user = await api.register("vina", password="password99")
    await enable_2fa(client, api, user)
    wrong = await client.post("/api/v1/auth/login",
                              json={"identifier": "vina", "password": "password99", "totp_code": "000000"})
    bad_password = await client.post("/api/v1/auth/login", json={"identifier": "vina", "password": "nope-nope"})
    assert wrong.status == 401 and await wrong.json() == await bad_password.json()


async def test_enable_refuses_wrong_code_and_setup_twice(client, api: Api):
    user = await api.register()
    h = api.auth(user["token"])
    assert (await client.post("/api/v1/me/2fa/enable", headers=h, json={"code": "123456"})).status == 400
    await client.post("/api/v1/me/2fa/setup", headers=h)
    assert (await client.post("/api/v1/me/2fa/enable", headers=h, json={"code": "000000"})).status == 400
    assert (await client.post("/api/v1/me/2fa/enable", headers=h, json={"code": 123456})).status == 400


async def test_disable_needs_code_and_password(client, api: Api):
    user = await api.register("wati", password="password99")
    secret = await enable_2fa(client, api, user)
    h = api.auth(user["token"])
    code = pyotp.TOTP(secret).at(time.time() + 30)
    bad = await client.post("/api/v1/me/2fa/disable", headers=h, json={"code": code, "password": "wrong-pass"})
    assert bad.status == 401
    ok = await client.post("/api/v1/me/2fa/disable", headers=h, json={"code": code, "password": "password99"})
    assert ok.status == 200
    resp = await client.post("/api/v1/auth/login", json={"identifier": "wati", "password": "password99"})
    assert resp.status == 200


async def test_totp_secret_is_encrypted_at_rest(client, api: Api, database_url):
    user = await api.register()
    secret = await enable_2fa(client, api, user)
    rows = await query(database_url, "SELECT u::text AS row FROM users u")
    assert secret not in rows[0]["row"]
    assert base64.b32decode(secret).hex() not in rows[0]["row"]
