"""Register, login, /me, sessions and logout-all, on the real app and database."""

import asyncio
import base64
import json
import time

import pytest
from joserfc import jwt
from joserfc.jwk import OctKey

from conftest import JWT_SECRET, Api, admin_execute, query


def decode(token: str) -> dict:
    return jwt.decode(token, OctKey.import_key(JWT_SECRET), algorithms=["HS256"]).claims


def encode(claims: dict, secret: str) -> str:
    return jwt.encode({"alg": "HS256"}, claims, OctKey.import_key(secret))


def b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def unsigned(claims: dict) -> str:
    """The same claims with `alg: none` and no signature."""
    return f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64(claims)}."


def claims_of(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


async def test_register_returns_201_with_jwt_and_user(client):
    resp = await client.post("/api/v1/auth/register", json={
        "email": "Ana@Example.com", "username": "ana_1", "password": "password1", "name": "Ana"})
    assert resp.status == 201
    body = await resp.json()
    assert set(body) == {"token", "user"}
    assert set(body["user"]) == {"id", "email", "username", "name"}
    assert body["user"]["username"] == "ana_1"
    claims = decode(body["token"])
    assert {"sub", "iat", "exp", "jti"} <= set(claims)
    assert claims["sub"] == body["user"]["id"]
    assert claims["exp"] - claims["iat"] == 12 * 3600


async def test_duplicate_email_is_409_case_insensitively(client, api: Api):
    await api.register("first", email="same@example.com")
    resp = await client.post("/api/v1/auth/register", json={
        "email": "SAME@example.com", "username": "second", "password": "password1", "name": "S"})
    assert resp.status == 409
    assert "error" in await resp.json()


async def test_duplicate_username_is_409_case_insensitively(client, api: Api):
    await api.register("Budi")
    resp = await client.post("/api/v1/auth/register", json={
        "email": "other@example.com", "username": "bUDI", "password": "password1", "name": "B"})
    assert resp.status == 409


@pytest.mark.parametrize("username", ["admin", "ROOT", "Support", "www", "me", "health"])
async def test_reserved_usernames_are_400(client, username):
    resp = await client.post("/api/v1/auth/register", json={
        "email": f"{username}@example.com", "username": username, "password": "password1", "name": "X"})
    assert resp.status == 400


@pytest.mark.parametrize("username", ["ab", "x" * 41, "has space", "dash-ed", "café", "名字名字", ""])
async def test_invalid_usernames_are_400(client, username):
    resp = await client.post("/api/v1/auth/register", json={
        "email": "valid@example.com", "username": username, "password": "password1", "name": "X"})
    assert resp.status == 400


@pytest.mark.parametrize("body", [
    {"email": "a@example.com", "username": "abc", "password": "short", "name": "A"},
    {"email": "not-an-email", "username": "abc", "password": "password1", "name": "A"},
    {"email": "a@example.com", "username": 123, "password": "password1", "name": "A"},
    {"email": "a@example.com", "username": "abc", "password": "password1"},
    {"email": "a@example.com", "username": "abc", "password": "password1", "name": "A",
     "newsletter_opt_in": "yes"},
    ["not", "an", "object"],
])
async def test_bad_register_input_is_400_with_error_only(client, body):
    resp = await client.post("/api/v1/auth/register", json=body)
    assert resp.status == 400
    assert list(await resp.json()) == ["error"]


async def test_malformed_json_is_400(client):
    resp = await client.post("/api/v1/auth/register", data=b'{"email": ',
                             headers={"Content-Type": "application/json"})
    assert resp.status == 400


async def test_login_by_email_or_username(client, api: Api):
    user = await api.register("citra", password="password99")
    for body in ({"identifier": user["email"].upper(), "password": "password99"},
                 {"identifier": "CITRA", "password": "password99"}):
        resp = await client.post("/api/v1/auth/login", json=body)
        assert resp.status == 200, body
        data = await resp.json()
        assert data["user"]["id"] == user["id"]
        me = await client.get("/api/v1/me", headers=api.auth(data["token"]))
        assert me.status == 200


async def test_the_legacy_email_login_field_is_gone_in_0_4(client, api: Api):
    user = await api.register("citra", password="password99")
    resp = await client.post("/api/v1/auth/login",
                             json={"email": user["email"], "password": "password99"})
    assert resp.status == 400
    assert await resp.json() == {"error": "Kolom 'identifier' wajib diisi"}
    both = await client.post("/api/v1/auth/login", json={
        "identifier": "citra", "email": "someone-else@example.com", "password": "password99"})
    assert both.status == 200  # an unknown field is ignored, as on every route


async def test_login_failures_are_indistinguishable(client, api: Api):
    await api.register("dewi", password="password99")
    wrong_password = await client.post("/api/v1/auth/login", json={"identifier": "dewi", "password": "nope-nope"})
    unknown_user = await client.post("/api/v1/auth/login", json={"identifier": "ghost", "password": "nope-nope"})
    unknown_email = await client.post("/api/v1/auth/login",
                                      json={"identifier": "ghost@example.com", "password": "nope-nope"})
    bodies = [await r.json() for r in (wrong_password, unknown_user, unknown_email)]
    assert {r.status for r in (wrong_password, unknown_user, unknown_email)} == {401}
    assert bodies[0] == bodies[1] == bodies[2]


async def test_failed_and_successful_logins_are_audited_without_password(client, api: Api, database_url):
    user = await api.register("eka", password="password99")
    await client.post("/api/v1/auth/login", json={"identifier": "eka", "password": "wrong-password"})
    await client.post("/api/v1/auth/login", json={"identifier": "eka", "password": "password99"})
    rows = await query(database_url, "SELECT action, user_id, metadata::text AS m FROM audit_logs ORDER BY created_at")
    actions = [(r["action"], str(r["user_id"])) for r in rows]
    assert ("login_failed", user["id"]) in actions and ("login", user["id"]) in actions
    assert all("password99" not in r["m"] and "wrong-password" not in r["m"] for r in rows)


async def test_me_reports_account_flags_and_has_team(client, api: Api):
    user = await api.register("fajar")
    resp = await client.get("/api/v1/me", headers=api.auth(user["token"]))
    body = await resp.json()
    assert body["user_id"] == user["id"] and body["email"] == user["email"]
    assert body["has_team"] is False and body["totp_enabled"] is False
    assert body["is_admin"] is False and body["email_verified"] is False
    await api.team(user)
    body = await (await client.get("/api/v1/me", headers=api.auth(user["token"]))).json()
    assert body["has_team"] is True


async def test_logout_all_rejects_earlier_jwts_and_accepts_one_issued_right_after(client, api: Api):
    user = await api.register("gita", password="password99")
    login = await client.post("/api/v1/auth/login", json={"identifier": "gita", "password": "password99"})
    second = (await login.json())["token"]
    resp = await client.post("/api/v1/me/logout-all", headers=api.auth(user["token"]))
    assert resp.status == 200 and await resp.json() == {"ok": True}
    for old in (user["token"], second):
        assert (await client.get("/api/v1/me", headers=api.auth(old))).status == 401
    # Same second as the logout: still valid, because sessions are rows, not timestamps.
    fresh = (await (await client.post("/api/v1/auth/login",
                                      json={"identifier": "gita", "password": "password99"})).json())["token"]
    assert (await client.get("/api/v1/me", headers=api.auth(fresh))).status == 200


async def test_logout_all_leaves_other_users_sessions_alone(client, api: Api):
    a, b = await api.register("hadi"), await api.register("indah")
    await client.post("/api/v1/me/logout-all", headers=api.auth(a["token"]))
    assert (await client.get("/api/v1/me", headers=api.auth(b["token"]))).status == 200


@pytest.mark.parametrize("token", [
    "garbage", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.", "cvsm_" + "0" * 64, "cvsm_short",
])
async def test_bad_bearer_credentials_are_401(client, token):
    resp = await client.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert resp.status == 401


async def test_jwt_signed_with_another_secret_or_expired_is_401(client, api: Api):
    user = await api.register("joko")
    claims = decode(user["token"])
    forged = encode(claims, "another-secret-another-secret-123456")
    expired = encode({**claims, "exp": claims["iat"] - 1}, JWT_SECRET)
    none_alg = unsigned(claims)
    for token in (forged, expired, none_alg):
        assert (await client.get("/api/v1/me", headers=api.auth(token))).status == 401


async def test_a_jwt_is_verified_once_per_process_and_never_used_past_its_exp(client, api: Api,
                                                                            monkeypatch):
    """The process remembers a JWT whose signature it checked (no second decode): that exact
    token only, and never at or past its `exp`."""
    user = await api.register("wulan")
    claims = decode(user["token"])
    decoded = []
    real_decode = jwt.decode
    monkeypatch.setattr(jwt, "decode", lambda *a, **k: decoded.append(1) or real_decode(*a, **k))
    for _ in range(3):
        assert (await client.get("/api/v1/me", headers=api.auth(user["token"]))).status == 200
    assert len(decoded) == 1
    forged = encode(claims, "another-secret-another-secret-123456")
    assert (await client.get("/api/v1/me", headers=api.auth(forged))).status == 401

    short = encode({**claims, "exp": int(time.time()) + 2}, JWT_SECRET)
    assert (await client.get("/api/v1/me", headers=api.auth(short))).status == 200
    assert (await client.get("/api/v1/me", headers=api.auth(short))).status == 200  # remembered
    await asyncio.sleep(claims_of(short)["exp"] - time.time() + 0.1)
    assert (await client.get("/api/v1/me", headers=api.auth(short))).status == 401


async def test_api_tokens_cannot_manage_credentials(client, api: Api):
    user = await api.register("kiki")
    token = (await api.api_token(user))["token"]
    headers = api.auth(token)
    assert (await client.get("/api/v1/me", headers=headers)).status == 200
    for method, path in (("GET", "/api/v1/tokens"), ("POST", "/api/v1/tokens"),
                         ("POST", "/api/v1/me/logout-all"), ("POST", "/api/v1/me/2fa/setup"),
                         ("POST", "/api/v1/me/2fa/enable"), ("POST", "/api/v1/me/2fa/disable")):
        # (a GET takes no body at all: one would be a 413 before the credential is looked at)
        body = None if method == "GET" else {"name": "x", "code": "123456"}
        resp = await client.request(method, path, headers=headers, json=body)
        assert resp.status == 403, path


async def test_password_is_stored_as_argon2id_hash(client, api: Api, database_url):
    await api.register("lina", password="my secret password")
    rows = await query(database_url, "SELECT password_hash FROM users")
    assert rows[0]["password_hash"].startswith("$argon2id$")
    assert "my secret password" not in rows[0]["password_hash"]


async def test_failed_login_for_unknown_account_is_audited_without_identifier(client, database_url):
    await client.post("/api/v1/auth/login", json={"identifier": "MyPassw0rdTypo", "password": "whatever1"})
    rows = await query(database_url, "SELECT a::text AS row, user_id, action FROM audit_logs a")
    assert [(r["action"], r["user_id"]) for r in rows] == [("login_failed", None)]
    assert "MyPassw0rdTypo" not in rows[0]["row"] and "whatever1" not in rows[0]["row"]


REFUSE_MAIL = """
CREATE FUNCTION test_refuse_mail() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'the mail queue refuses'; END $$;
CREATE TRIGGER test_refuse_mail BEFORE INSERT ON mail_outbox
    FOR EACH ROW EXECUTE FUNCTION test_refuse_mail();
"""


async def test_registering_commits_the_account_with_its_verification_mail_or_neither(
        start_client, make_settings, database_url):
    """The verification mail is queued in the registration's transaction: when the queue
    refuses, no account is left behind (a retry is not a 409), at either door."""
    from test_dashboard import csrf_of
    client = await start_client(make_settings(app_url=""))
    admin_execute(database_url, REFUSE_MAIL)
    body = {"email": "nomail@example.com", "username": "nomail", "password": "correct horse 1",
            "name": "No Mail"}
    assert (await client.post("/api/v1/auth/register", json=body)).status == 500
    page = await client.get("/signup")
    form = {"csrf": csrf_of(await page.text()), "name": "Web User", "email": "webnomail@example.com",
            "username": "webnomail", "password": "correct horse 1"}
    assert (await client.post("/signup", data=form, allow_redirects=False)).status == 500
    assert await query(database_url, "SELECT username FROM users") == []
    admin_execute(database_url, "DROP TRIGGER test_refuse_mail ON mail_outbox")
    assert (await client.post("/api/v1/auth/register", json=body)).status == 201
    resp = await client.post("/signup", data=form, allow_redirects=False)
    assert resp.status == 303
    mails = await query(database_url, "SELECT recipient FROM mail_outbox ORDER BY recipient")
    assert [m["recipient"] for m in mails] == ["nomail@example.com", "webnomail@example.com"]
