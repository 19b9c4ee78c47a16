"""Account deletion: the request (password or email, the TOTP code, failures counted), cancel,
the mails, the purge job with a clock the test controls, and the account page's form and banner."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pyotp
import pytest
from aiohttp.test_utils import TestClient

from cvsm_server import db
from cvsm_server.accounts import deletion
from cvsm_server.core.config import Settings
from cvsm_server.core.timeutil import parse_iso

from conftest import Api, query, server_url
from smtpbox import html_of, link_in, text_of
from test_dashboard import csrf_of, form_csrf, sign_up
from test_totp import enable_2fa


async def request_deletion(client: TestClient, user: dict[str, Any], **body: Any) -> Any:
    return await client.post("/api/v1/me/delete", headers=Api.auth(user["token"]), json=body)


async def schedule(client: TestClient, user: dict[str, Any]) -> datetime:
    resp = await request_deletion(client, user, password=user["password"])
    assert resp.status == 202, await resp.text()
    return parse_iso((await resp.json())["delete_after"])


async def purge(database_url: str, now: datetime) -> list[uuid.UUID]:
    """Run the job as the server runs it: its own role, its own pool."""
    pool = await db.create_pool(server_url(database_url), maxsize=2)
    try:
        return await deletion.purge_due(pool, now)
    finally:
        pool.close()
        await pool.wait_closed()


async def me(client: TestClient, token: str) -> Any:
    return await client.get("/api/v1/me", headers=Api.auth(token))


# Request and cancel -----------------------------------------------------------------------------

async def test_a_deletion_needs_the_password_and_is_pending_once(client, api: Api, database_url) -> None:
    user = await api.register()
    resp = await request_deletion(client, user)
    assert resp.status == 400 and "password" in (await resp.json())["error"]
    resp = await request_deletion(client, user, password="not the password")
    assert (resp.status, await resp.json()) == (401, {"error": deletion.WRONG_PASSWORD})
    assert (await (await me(client, user["token"])).json())["delete_after"] is None

    resp = await request_deletion(client, user, password=user["password"])
    assert resp.status == 202, await resp.text()
    body = await resp.json()
    assert list(body) == ["delete_after"]
    [row] = await query(database_url, "SELECT delete_after, now() AS now FROM users WHERE id = %s",
                        (user["id"],))
    assert parse_iso(body["delete_after"]) == row["delete_after"]
    # Seven days from the request (the database's clock; a loose bound, not a timing test).
    assert abs(row["delete_after"] - (row["now"] + timedelta(days=7))) < timedelta(minutes=5)
    assert (await (await me(client, user["token"])).json())["delete_after"] == body["delete_after"]

    again = await request_deletion(client, user, password=user["password"])
    assert (again.status, await again.json()) == (409, {"error": deletion.ALREADY_PENDING})
    actions = [r["action"] for r in await query(
        database_url, "SELECT action FROM audit_logs WHERE resource = 'user' AND user_id = %s "
                      "ORDER BY created_at, id", (user["id"],))]
    assert actions.count("account_deletion_failed") == 1
    assert actions.count("account_deletion_requested") == 1


async def test_an_api_token_can_neither_request_nor_cancel_a_deletion(client, api: Api) -> None:
    user = await api.register()
    token = (await api.api_token(user))["token"]
    resp = await client.post("/api/v1/me/delete", headers=Api.auth(token),
                             json={"password": user["password"]})
    assert resp.status == 403
    await schedule(client, user)
    resp = await client.post("/api/v1/me/delete/cancel", headers=Api.auth(token))
    assert resp.status == 403
    assert (await (await me(client, user["token"])).json())["delete_after"] is not None


async def test_with_two_factor_on_the_code_is_needed_and_checked(client, api: Api) -> None:
    user = await api.register()
    secret = await enable_2fa(client, api, user)
    resp = await request_deletion(client, user, password=user["password"])
    assert (resp.status, await resp.json()) == (400, {"error": deletion.CODE_REQUIRED})
    resp = await request_deletion(client, user, password=user["password"], totp_code="000000")
    assert (resp.status, await resp.json()) == (401, {"error": deletion.WRONG_CODE})
    # The code is not looked at before the password is right.
    code = pyotp.TOTP(secret).at(time.time() + 30)  # enabling used the current step
    resp = await request_deletion(client, user, password="wrong password", totp_code=code)
    assert (resp.status, await resp.json()) == (401, {"error": deletion.WRONG_PASSWORD})
    resp = await request_deletion(client, user, password=user["password"], totp_code=code)
    assert resp.status == 202, await resp.text()


async def test_an_account_without_a_password_confirms_with_its_email(client, api: Api,
                                                                      database_url) -> None:
    user = await api.register()  # as if made through an identity provider: no password
    await query(database_url, "UPDATE users SET password_hash = NULL WHERE id = %s RETURNING id",
                (user["id"],))
    resp = await request_deletion(client, user, password="anything at all")
    assert (resp.status, await resp.json()) == (400, {"error": deletion.CONFIRM_REQUIRED})
    resp = await request_deletion(client, user, confirm="someone-else@example.com")
    assert (resp.status, await resp.json()) == (401, {"error": deletion.WRONG_CONFIRM})
    resp = await request_deletion(client, user, confirm=f"  {user['email'].upper()} ")
    assert resp.status == 202, await resp.text()


async def test_every_attempt_counts_against_the_failed_auth_limit(start_client, make_settings) -> None:
    """Past the limit even the right password is 429: a stolen session cannot guess with it."""
    client = await start_client(make_settings(ratelimit_failed_auth="3/3600"))
    user = await Api(client).register()
    resp = await request_deletion(client, user, password=user["password"])
    assert resp.status == 202
    await client.post("/api/v1/me/delete/cancel", headers=Api.auth(user["token"]))
    for _ in range(2):
        resp = await request_deletion(client, user, password="not the password")
        assert resp.status == 401
    resp = await request_deletion(client, user, password=user["password"])
    assert resp.status == 429 and int(resp.headers["Retry-After"]) >= 1
    assert (await (await me(client, user["token"])).json())["delete_after"] is None


async def test_cancel_clears_the_pending_deletion(client, api: Api, database_url) -> None:
    user = await api.register()
    resp = await client.post("/api/v1/me/delete/cancel", headers=api.auth(user["token"]))
    assert (resp.status, await resp.json()) == (409, {"error": deletion.NOTHING_PENDING})
    await schedule(client, user)
    resp = await client.post("/api/v1/me/delete/cancel", headers=api.auth(user["token"]))
    assert (resp.status, await resp.json()) == (200, {"ok": True})
    assert (await (await me(client, user["token"])).json())["delete_after"] is None
    resp = await client.post("/api/v1/me/delete/cancel", headers=api.auth(user["token"]))
    assert resp.status == 409
    # A cancelled account is not purged, however late the job runs.
    assert await purge(database_url, datetime.now().astimezone() + timedelta(days=365)) == []
    assert (await me(client, user["token"])).status == 200
    # And it can ask again.
    await schedule(client, user)


async def test_the_mails_say_when_and_how_to_cancel(mail_client, mailbox) -> None:
    user = await Api(mail_client).register()
    delete_after = await schedule(mail_client, user)
    message = await mailbox.receive(user["email"], subject="Akun cvsm Anda dijadwalkan dihapus")
    when = deletion.format_when(delete_after)
    assert when in text_of(message) and when in html_of(message)
    assert "Batalkan penghapusan" in text_of(message)
    assert link_in(message, "/app/account") == "https://cvsm.test/app/account"

    resp = await mail_client.post("/api/v1/me/delete/cancel", headers=Api.auth(user["token"]))
    assert resp.status == 200
    message = await mailbox.receive(user["email"], subject="Penghapusan akun cvsm Anda dibatalkan")
    assert when in text_of(message)


def test_dates_are_written_the_indonesian_way() -> None:
    at = datetime.fromisoformat("2025-06-12T14:03:59+00:00")
    assert deletion.format_when(at) == "12 Juni 2025 pukul 14.03 UTC"
    assert deletion.format_when(datetime.fromisoformat("2026-01-01T06:30:00+07:00")) == \
        "31 Desember 2025 pukul 23.30 UTC"


# The job ----------------------------------------------------------------------------------------

async def count(database_url: str, sql: str, args: tuple = ()) -> int:
    return (await query(database_url, f"SELECT count(*) AS n FROM ({sql}) AS q", args))[0]["n"]


async def test_the_job_deletes_nothing_before_the_window_ends_and_everything_after(
        client, api: Api, database_url) -> None:
    alice, bob, carol = await api.register(), await api.register(), await api.register()
    solo = await api.team(alice)  # alice is its only Owner; carol is a Member
    await api.add_member(alice, solo, carol, "Member")
    solo_secret = await api.secret(alice, solo, "SOLO_KEY", "solo-value")
    share = await client.post(f"/api/v1/teams/{solo}/secrets/{solo_secret}/shares",
                              headers=api.auth(alice["token"]), json={"max_views": 3})
    assert share.status == 201
    carol_bound = await api.api_token(carol, team_id=solo)
    await query(database_url,
                """INSERT INTO team_invites (team_id, email, role, token_hash, invited_by, expires_at)
                   VALUES (%s, 'dina@example.com', 'Viewer', %s, %s, now() + interval '7 days')
                   RETURNING id""", (solo, b"invite-hash", alice["id"]))
    shared = await api.team(alice)  # bob is a second Owner: the team stays
    await api.add_member(alice, shared, bob, "Owner")
    shared_secret = await api.secret(alice, shared, "SHARED_KEY", "shared-value")
    alice_token = (await api.api_token(alice))["token"]
    await query(database_url,
                """INSERT INTO newsletter_subscriptions (email, status, source)
                   VALUES (%s, 'confirmed', 'register'), ('other@example.com', 'confirmed', 'form')
                   RETURNING id""", (alice["email"].upper(),))
    await query(database_url,
                """INSERT INTO user_identities (provider, subject, user_id, email)
                   VALUES ('github', '42', %s, %s) RETURNING user_id""", (alice["id"], alice["email"]))
    await query(database_url,
                """INSERT INTO mail_tokens (purpose, token_hash, user_id, email, expires_at)
                   VALUES ('verify_email', %s, %s, %s, now() + interval '1 day') RETURNING id""",
                (b"mail-token-hash", alice["id"], alice["email"]))
    by_alice = await count(database_url, "SELECT id FROM audit_logs WHERE user_id = %s", (alice["id"],))
    assert by_alice >= 5

    delete_after = await schedule(client, alice)
    # Before the window ends: nothing goes, and everything keeps working (API tokens included).
    assert await purge(database_url, delete_after - timedelta(seconds=1)) == []
    assert (await me(client, alice["token"])).status == 200
    resp = await client.get(f"/api/v1/teams/{solo}/secrets/{solo_secret}", headers=api.auth(alice_token))
    assert resp.status == 200

    assert await purge(database_url, delete_after) == [uuid.UUID(alice["id"])]
    # The user, and with it every way in: the JWT (cached by this process) and the API token.
    assert (await me(client, alice["token"])).status == 401
    assert (await client.get("/api/v1/teams", headers=api.auth(alice_token))).status == 401
    for table in ("users WHERE id", "sessions WHERE user_id", "api_tokens WHERE user_id",
                  "team_members WHERE user_id", "user_identities WHERE user_id",
                  "mail_tokens WHERE user_id"):
        assert await count(database_url, f"SELECT 1 FROM {table} = %s", (alice["id"],)) == 0, table
    # The team alice alone owned, with its secrets, versions, shares, bound tokens and invites.
    assert await count(database_url, "SELECT 1 FROM teams WHERE id = %s", (solo,)) == 0
    for table in ("secrets", "secret_shares", "team_invites", "api_tokens", "team_members"):
        assert await count(database_url, f"SELECT 1 FROM {table} WHERE team_id = %s", (solo,)) == 0, table
    assert await count(database_url, "SELECT 1 FROM secret_versions WHERE secret_id = %s",
                       (solo_secret,)) == 0
    assert (await client.get("/api/v1/teams", headers=api.auth(carol_bound["token"]))).status == 401
    assert (await me(client, carol["token"])).status == 200  # carol herself stays
    # The team with a second Owner stays, with its secret; bob is its Owner now alone.
    resp = await client.get(f"/api/v1/teams/{shared}/secrets/{shared_secret}", headers=api.auth(bob["token"]))
    assert resp.status == 200 and (await resp.json())["value"] == "shared-value"
    members = await (await client.get(f"/api/v1/teams/{shared}/members", headers=api.auth(bob["token"]))).json()
    assert [(m["user_id"], m["role"]) for m in members["members"]] == [(bob["id"], "Owner")]
    # The newsletter subscription of the address goes; others stay.
    emails = [r["email"] for r in await query(database_url, "SELECT email FROM newsletter_subscriptions")]
    assert emails == ["other@example.com"]
    # Audit entries stay, with the email text and the actor nulled (the guard of 0004 allows it).
    kept = await query(database_url, "SELECT user_id FROM audit_logs WHERE user_email = %s",
                       (alice["email"],))
    assert len(kept) >= by_alice and all(r["user_id"] is None for r in kept)
    # And the job says what it did, as the system.
    done = await query(database_url,
                       """SELECT action, resource_id, user_id, user_email, user_agent, metadata
                          FROM audit_logs WHERE action IN ('account_deleted', 'team_delete')
                          ORDER BY created_at, id""")
    assert [(r["action"], r["resource_id"]) for r in done] == [("team_delete", solo),
                                                                ("account_deleted", alice["id"])]
    assert all(r["user_id"] is None and r["user_email"] is None and r["user_agent"] == "cvsm-server"
               for r in done)
    assert done[1]["metadata"]["email"] == alice["email"]
    assert done[1]["metadata"]["teams_deleted"] == [done[0]["metadata"]["slug"]]
    # A second run has nothing left to do.
    assert await purge(database_url, delete_after + timedelta(days=30)) == []


async def test_concurrent_jobs_delete_each_account_once(client, api: Api, database_url) -> None:
    users = [await api.register() for _ in range(6)]
    co_owned = await api.team(users[0])  # two Owners, both leaving: the team must not survive
    await api.add_member(users[0], co_owned, users[1], "Owner")
    await api.secret(users[1], co_owned, "CO_OWNED", "value")
    latest = max([await schedule(client, user) for user in users])
    first, second = await asyncio.gather(purge(database_url, latest), purge(database_url, latest))
    assert sorted(first + second) == sorted(uuid.UUID(u["id"]) for u in users)
    assert not set(first) & set(second)
    assert await count(database_url, "SELECT 1 FROM users") == 0
    assert await count(database_url, "SELECT 1 FROM teams WHERE id = %s", (co_owned,)) == 0
    assert await count(database_url, "SELECT 1 FROM audit_logs WHERE action = 'account_deleted'") == 6


async def test_an_account_that_cannot_be_deleted_does_not_stop_the_others(client, api: Api,
                                                                         database_url, caplog) -> None:
    stuck, fine = await api.register(), await api.register()
    # The database refuses to delete one of them (as a failure the job cannot foresee would).
    await query(database_url, f"""
        CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF OLD.id = '{stuck["id"]}' THEN RAISE EXCEPTION 'refused by the test'; END IF;
            RETURN OLD;
        END $$;
        CREATE TRIGGER refuse_delete BEFORE DELETE ON users
            FOR EACH ROW EXECUTE FUNCTION refuse_delete();""")
    latest = max([await schedule(client, stuck), await schedule(client, fine)])
    assert await purge(database_url, latest) == [uuid.UUID(fine["id"])]
    assert "retried on the next run" in caplog.text
    # Nothing of the failed one went: it is whole, and still pending for the next run.
    [row] = await query(database_url, "SELECT delete_after FROM users")
    assert row["delete_after"] is not None
    assert await count(database_url, "SELECT 1 FROM audit_logs WHERE action = 'account_deleted'") == 1
    await query(database_url, "DROP TRIGGER refuse_delete ON users")
    assert await purge(database_url, latest) == [uuid.UUID(stuck["id"])]


async def test_the_server_runs_the_job_in_the_background(api: Api, start_client, make_settings,
                                                         database_url) -> None:
    user = await api.register()
    await query(database_url, "UPDATE users SET delete_after = now() - interval '1 second' "
                              "WHERE id = %s RETURNING id", (user["id"],))
    await start_client(make_settings(background_jobs="on"))  # the job runs once at start
    for _ in range(500):
        if not await count(database_url, "SELECT 1 FROM users WHERE id = %s", (user["id"],)):
            break
        await asyncio.sleep(0.02)
    assert await count(database_url, "SELECT 1 FROM users WHERE id = %s", (user["id"],)) == 0


# The account page -------------------------------------------------------------------------------

@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(app_url="")  # as test_dashboard: plain http keeps the cookie


BANNER = "Akun Anda dijadwalkan dihapus pada"


async def test_the_account_page_schedules_shows_and_cancels_a_deletion(client, database_url) -> None:
    web_user = await sign_up(client)
    page = await (await client.get("/app/account")).text()
    assert "Hapus akun" in page and 'action="/app/account/delete"' in page
    assert 'name="password"' in page and 'name="code"' not in page and BANNER not in page
    csrf = csrf_of(page)

    # Without the CSRF token nothing changes; a wrong password shows the page with the message.
    resp = await client.post("/app/account/delete", data={"password": web_user["password"]},
                             allow_redirects=False)
    assert resp.status == 403
    resp = await client.post("/app/account/delete", data={"csrf": csrf, "password": "nope nope"},
                             allow_redirects=False)
    assert resp.status == 401 and deletion.WRONG_PASSWORD in await resp.text()
    assert (await query(database_url, "SELECT delete_after FROM users"))[0]["delete_after"] is None

    resp = await client.post("/app/account/delete", data={"csrf": csrf, "password": web_user["password"]},
                             allow_redirects=False)
    assert (resp.status, resp.headers["Location"]) == (303, "/app/account")
    [row] = await query(database_url, "SELECT delete_after FROM users")
    when = deletion.format_when(row["delete_after"])
    # The banner, with its cancel button, is on every signed-in page.
    for path in ("/app/teams", "/app/tokens", "/app/account"):
        page = await (await client.get(path)).text()
        assert f"{BANNER} {when}." in page, path
        assert 'action="/app/account/delete/cancel"' in page
    assert 'action="/app/account/delete"' not in page  # no second request while one is pending

    resp = await client.post("/app/account/delete/cancel", data={"csrf": "0" * 64}, allow_redirects=False)
    assert resp.status == 403
    resp = await client.post("/app/account/delete/cancel", data={"csrf": csrf_of(page)},
                             allow_redirects=False)
    assert (resp.status, resp.headers["Location"]) == (303, "/app/account")
    page = await (await client.get("/app/teams")).text()
    assert BANNER not in page
    assert (await query(database_url, "SELECT delete_after FROM users"))[0]["delete_after"] is None


async def test_the_account_page_names_the_teams_that_would_go(client, api: Api, database_url) -> None:
    web_user = await sign_up(client)
    csrf = await form_csrf(client, "/app/teams")
    for slug in ("only-mine", "shared-one"):
        resp = await client.post("/app/teams", data={"csrf": csrf, "name": slug.title(), "slug": slug},
                                 allow_redirects=False)
        assert resp.status == 303
    other = await api.register()
    me_row = (await query(database_url, "SELECT id FROM users WHERE email = %s", (web_user["email"],)))[0]
    await query(database_url,
                """INSERT INTO team_members (team_id, user_id, role)
                   SELECT id, %s, 'Owner' FROM teams WHERE slug = 'shared-one' RETURNING user_id""",
                (other["id"],))
    page = await (await client.get("/app/account")).text()
    section = page[page.index("Hapus akun"):]
    assert "only-mine" in section and "shared-one" not in section

    # An account without a password confirms with its email; with two-factor on, the code too.
    await query(database_url, "UPDATE users SET password_hash = NULL, totp_enabled = true "
                              "WHERE id = %s RETURNING id", (me_row["id"],))
    page = await (await client.get("/app/account")).text()
    assert 'name="confirm"' in page and 'name="password"' not in page and 'name="code"' in page


async def test_a_team_that_still_pays_holds_its_only_owners_deletion(client, api: Api,
                                                                      database_url) -> None:
    """A team goes with its only Owner's account; one that pays through billing must not (its
    subscription would go on charging): the request is refused while it pays, and a subscription
    taken during the 7 days holds the purge until it ends."""
    alice, bob = await api.register(), await api.register()
    paying = await api.team(alice, f"paying-{uuid.uuid4().hex[:6]}")
    shared = await api.team(bob)  # bob owns a paying team with alice as a second Owner: no hold
    await api.add_member(bob, shared, alice, "Owner")
    for team, customer in ((paying, "cus_alice"), (shared, "cus_bob")):
        await query(database_url, """INSERT INTO team_billing (team_id, customer_id, status)
                                     VALUES (%s, %s, 'active') RETURNING team_id""",
                    (team, f"{customer}_{uuid.uuid4().hex[:6]}"))

    refused = await request_deletion(client, alice, password=alice["password"])
    assert refused.status == 409, await refused.text()
    slug = (await query(database_url, "SELECT slug FROM teams WHERE id = %s", (paying,)))[0]["slug"]
    assert slug in (await refused.json())["error"] and "portal tagihan" in (await refused.json())["error"]
    assert (await (await me(client, alice["token"])).json())["delete_after"] is None

    await query(database_url, "UPDATE team_billing SET status = 'canceled' WHERE team_id = %s "
                              "RETURNING team_id", (paying,))
    delete_after = await schedule(client, alice)
    # Subscribed again during the 7 days: the purge leaves the account and its team.
    await query(database_url, "UPDATE team_billing SET status = 'past_due' WHERE team_id = %s "
                              "RETURNING team_id", (paying,))
    assert await purge(database_url, delete_after + timedelta(seconds=1)) == []
    assert await count(database_url, "SELECT id FROM teams WHERE id = %s", (paying,)) == 1
    # Once it ends, the account goes, with the team it alone owned; bob's team stays.
    await query(database_url, "UPDATE team_billing SET status = 'canceled' WHERE team_id = %s "
                              "RETURNING team_id", (paying,))
    assert await purge(database_url, delete_after + timedelta(seconds=1)) == [uuid.UUID(alice["id"])]
    assert await count(database_url, "SELECT id FROM teams WHERE id = %s", (paying,)) == 0
    assert await count(database_url, "SELECT id FROM teams WHERE id = %s", (shared,)) == 1
