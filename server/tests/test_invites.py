"""Team invitations by email: the invitation mail arrives at a real SMTP server (aiosmtpd) and
the tests follow its link, through the JSON API and through the dashboard over HTTP."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from aiohttp.test_utils import TestClient

from conftest import Api, query
from smtpbox import link_in, text_of

from cvsm_server.core.config import Settings
from cvsm_server.teams.invites import INVITE_INVALID
from cvsm_server.teams.service import MEMBER_QUOTA

CSRF_RE = re.compile(r'name="csrf" value="([0-9a-f]{64})"')
GENERIC = {"error": INVITE_INVALID}


def auth(user: dict[str, Any]) -> dict[str, str]:
    return Api.auth(user["token"])


def token_of(link: str) -> str:
    return parse_qs(urlsplit(link).query)["token"][0]


def local(link: str) -> str:
    """The link's path and query, to follow on the test client."""
    parts = urlsplit(link)
    return f"{parts.path}?{parts.query}"


# Registering sends a verification mail too: the tests pick the invitation by its subject.
INVITE_SUBJECT = "Undangan bergabung ke tim "


async def invite(client: TestClient, user: dict[str, Any], team_id: str, email: str,
                 role: str = "Member") -> Any:
    return await client.post(f"/api/v1/teams/{team_id}/invites", headers=auth(user),
                             json={"email": email, "role": role})


async def invited(client: TestClient, mailbox: Any, user: dict[str, Any], team_id: str, email: str,
                  role: str = "Member", *, count: int = 1) -> tuple[dict, str]:
    """(invite, token from the mail's link) of a new invitation."""
    resp = await invite(client, user, team_id, email, role)
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    message = await mailbox.receive(email, count=count, subject=INVITE_SUBJECT)
    return body["invite"], token_of(link_in(message, "/invites/accept"))


async def accept(client: TestClient, user: dict[str, Any], token: str) -> Any:
    return await client.post("/api/v1/invites/accept", headers=auth(user), json={"token": token})


@pytest.fixture
def mail_api(mail_client: TestClient) -> Api:
    return Api(mail_client)


async def test_owner_invites_by_mail_and_the_invitee_joins_with_the_role(
        mail_client: TestClient, mail_api: Api, mailbox: Any, database_url: str) -> None:
    owner = await mail_api.register("inv_owner")
    team_id = await mail_api.team(owner, "inv-team")
    resp = await invite(mail_client, owner, team_id, "New.Person@example.com", "Admin")
    assert resp.status == 201
    body = await resp.json()
    assert set(body["invite"]) >= {"id", "email", "role", "invited_by", "expires_at", "created_at"}
    assert body["invite"]["email"] == "New.Person@example.com"
    assert body["invite"]["role"] == "Admin"
    assert body["invite"]["invited_by"] == owner["email"]

    message = await mailbox.receive("new.person@example.com")
    link = link_in(message, "/invites/accept")
    assert link.startswith("https://cvsm.test/invites/accept?token=")
    token = token_of(link)
    assert token not in str(body)
    assert "Team" in message["Subject"] and "Admin" in text_of(message)
    [stored] = await query(database_url, "SELECT token_hash, expires_at - created_at AS life "
                                         "FROM team_invites")
    assert token.encode() not in bytes(stored["token_hash"])
    assert stored["life"].days == 7

    listed = await (await mail_client.get(f"/api/v1/teams/{team_id}/invites", headers=auth(owner))).json()
    assert [i["id"] for i in listed["invites"]] == [body["invite"]["id"]]
    assert "token" not in str(listed).lower().replace("token_", "")

    # The invitee registers with that address (another case) and accepts.
    invitee = await mail_api.register("inv_new", email="new.person@EXAMPLE.com")
    resp = await accept(mail_client, invitee, token)
    assert resp.status == 200, await resp.text()
    team = (await resp.json())["team"]
    assert (team["id"], team["role"]) == (team_id, "Admin")
    members = await (await mail_client.get(f"/api/v1/teams/{team_id}/members", headers=auth(owner))).json()
    assert {m["username"]: m["role"] for m in members["members"]} == {"inv_owner": "Owner", "inv_new": "Admin"}
    me = await (await mail_client.get("/api/v1/me", headers=auth(invitee))).json()
    assert me["email_verified"] is True
    listed = await (await mail_client.get(f"/api/v1/teams/{team_id}/invites", headers=auth(owner))).json()
    assert listed["invites"] == []

    audit = await query(database_url, "SELECT action, metadata::text AS meta FROM audit_logs "
                                      "WHERE action LIKE 'invite_%' ORDER BY created_at")
    assert [a["action"] for a in audit] == ["invite_created", "invite_accepted"]
    assert all(token not in a["meta"] for a in audit)


async def test_only_an_owner_invites_admins_and_owners(client: TestClient, api: Api) -> None:
    owner = await api.register("own_a")
    admin = await api.register("adm_a")
    member = await api.register("mem_a")
    outsider = await api.register("out_a")
    team_id = await api.team(owner)
    await api.add_member(owner, team_id, admin, "Admin")
    await api.add_member(owner, team_id, member, "Member")
    for role in ("Admin", "Owner"):
        resp = await invite(client, admin, team_id, f"{role.lower()}@example.com", role)
        assert resp.status == 403
    assert (await invite(client, admin, team_id, "viewer@example.com", "Viewer")).status == 201
    assert (await invite(client, owner, team_id, "admin@example.com", "Admin")).status == 201
    assert (await invite(client, member, team_id, "m2@example.com", "Viewer")).status == 403
    assert (await client.get(f"/api/v1/teams/{team_id}/invites", headers=auth(member))).status == 403
    assert (await invite(client, outsider, team_id, "o@example.com", "Viewer")).status == 404
    # An Admin cannot revoke what only an Owner could make.
    listed = await (await client.get(f"/api/v1/teams/{team_id}/invites", headers=auth(admin))).json()
    by_role = {i["role"]: i["id"] for i in listed["invites"]}
    resp = await client.delete(f"/api/v1/teams/{team_id}/invites/{by_role['Admin']}", headers=auth(admin))
    assert resp.status == 403
    resp = await client.delete(f"/api/v1/teams/{team_id}/invites/{by_role['Viewer']}", headers=auth(admin))
    assert resp.status == 200


async def test_bad_email_or_role_is_400(client: TestClient, api: Api, owner: dict, team_id: str) -> None:
    for email in ("not-an-email", "a@b", "x" * 250 + "@example.com", ""):
        assert (await invite(client, owner, team_id, email)).status == 400
    assert (await invite(client, owner, team_id, "ok@example.com", "Boss")).status == 400
    resp = await client.post(f"/api/v1/teams/{team_id}/invites", headers=auth(owner),
                             json={"email": 5, "role": "Member"})
    assert resp.status == 400


async def test_a_pending_invite_or_a_member_is_a_conflict(client: TestClient, api: Api, owner: dict,
                                                          team_id: str, database_url: str) -> None:
    member = await api.register("conf_member")
    await api.add_member(owner, team_id, member, "Member")
    assert (await invite(client, owner, team_id, member["email"].upper())).status == 409
    assert (await invite(client, owner, team_id, "dup@example.com")).status == 201
    assert (await invite(client, owner, team_id, "DUP@example.com", "Viewer")).status == 409
    # Once expired, the address can be invited again.
    await query(database_url, "UPDATE team_invites SET expires_at = now() - interval '1 second' RETURNING id")
    assert (await invite(client, owner, team_id, "dup@example.com")).status == 201


async def test_pending_invites_count_toward_max_members(client: TestClient, api: Api, owner: dict,
                                                        team_id: str, database_url: str) -> None:
    await query(database_url, "UPDATE teams SET max_members = 3 RETURNING id")
    assert (await invite(client, owner, team_id, "q1@example.com")).status == 201
    assert (await invite(client, owner, team_id, "q2@example.com")).status == 201
    resp = await invite(client, owner, team_id, "q3@example.com")
    assert resp.status == 403 and (await resp.json())["error"].startswith(MEMBER_QUOTA + ". ")
    # Adding a member directly counts the pending invites too.
    extra = await api.register("quota_extra")
    resp = await client.post(f"/api/v1/teams/{team_id}/members", headers=auth(owner),
                             json={"identifier": extra["username"], "role": "Member"})
    assert resp.status == 403 and (await resp.json())["error"].startswith(MEMBER_QUOTA + ". ")
    # ... except the invite of the very person being added (their seat is the one filled).
    q1 = await api.register("quota_q1", email="q1@example.com")
    await api.add_member(owner, team_id, q1, "Viewer")
    listed = await (await client.get(f"/api/v1/teams/{team_id}/invites", headers=auth(owner))).json()
    assert [i["email"] for i in listed["invites"]] == ["q2@example.com"]
    assert (await invite(client, owner, team_id, "q3@example.com")).status == 403
    # Revoking frees the seat; an expired invite holds none.
    resp = await client.delete(f"/api/v1/teams/{team_id}/invites/{listed['invites'][0]['id']}",
                               headers=auth(owner))
    assert resp.status == 200
    assert (await invite(client, owner, team_id, "q3@example.com")).status == 201
    await query(database_url, "UPDATE team_invites SET expires_at = now() - interval '1 second' "
                              "WHERE email = 'q3@example.com' RETURNING id")
    assert (await invite(client, owner, team_id, "q4@example.com")).status == 201


async def test_a_quota_reached_at_accept_time_is_a_clear_403_and_keeps_the_invite(
        mail_client: TestClient, mail_api: Api, mailbox: Any, database_url: str) -> None:
    owner = await mail_api.register("late_owner")
    team_id = await mail_api.team(owner)
    _, token = await invited(mail_client, mailbox, owner, team_id, "late@example.com")
    await query(database_url, "UPDATE teams SET max_members = 1 RETURNING id")  # a plan change
    invitee = await mail_api.register("late_user", email="late@example.com")
    resp = await accept(mail_client, invitee, token)
    assert resp.status == 403 and (await resp.json())["error"].startswith(MEMBER_QUOTA + ". ")
    await query(database_url, "UPDATE teams SET max_members = 2 RETURNING id")
    assert (await accept(mail_client, invitee, token)).status == 200


async def test_every_token_problem_is_the_same_generic_400(
        mail_client: TestClient, mail_api: Api, mailbox: Any, database_url: str) -> None:
    owner = await mail_api.register("gen_owner")
    team_id = await mail_api.team(owner)
    user = await mail_api.register("gen_user", email="gen@example.com")
    other = await mail_api.register("gen_other", email="other@example.com")

    async def generic(who: dict, token: object) -> None:
        resp = await mail_client.post("/api/v1/invites/accept", headers=auth(who), json={"token": token})
        assert (resp.status, await resp.json()) == (400, GENERIC)

    await generic(user, "x" * 43)  # unknown
    await generic(user, "not a token!")  # malformed
    # Another account (a different email) cannot use it, and trying does not spend it.
    _, token = await invited(mail_client, mailbox, owner, team_id, "gen@example.com")
    await generic(other, token)
    assert (await accept(mail_client, user, token)).status == 200
    await generic(user, token)  # used (and already a member)
    # Revoked.
    invite_row, token = await invited(mail_client, mailbox, owner, team_id, "other@example.com")
    resp = await mail_client.delete(f"/api/v1/teams/{team_id}/invites/{invite_row['id']}", headers=auth(owner))
    assert resp.status == 200
    await generic(other, token)
    resp = await mail_client.delete(f"/api/v1/teams/{team_id}/invites/{invite_row['id']}", headers=auth(owner))
    assert resp.status == 404  # revoked is no longer pending
    # Expired.
    _, token = await invited(mail_client, mailbox, owner, team_id, "other@example.com", count=2)
    await query(database_url, "UPDATE team_invites SET expires_at = now() - interval '1 second' "
                              "WHERE accepted_at IS NULL AND revoked_at IS NULL RETURNING id")
    await generic(other, token)
    # Already a member: added directly while the invite was pending.
    third = await mail_api.register("gen_third", email="third@example.com")
    _, token = await invited(mail_client, mailbox, owner, team_id, "third@example.com")
    await mail_api.add_member(owner, team_id, third, "Viewer")
    await generic(third, token)
    # An API token is not enough: accepting needs the session JWT.
    api_token = (await mail_api.api_token(other))["token"]
    _, token = await invited(mail_client, mailbox, owner, team_id, "other@example.com", count=3)
    resp = await mail_client.post("/api/v1/invites/accept", headers={"Authorization": f"Bearer {api_token}"},
                                  json={"token": token})
    assert resp.status == 403
    assert (await accept(mail_client, other, token)).status == 200
    missing = await mail_client.post("/api/v1/invites/accept", headers=auth(other), json={})
    assert missing.status == 400


async def test_unknown_invite_id_is_404(client: TestClient, owner: dict, team_id: str) -> None:
    for invite_id in ("00000000-0000-4000-8000-000000000000",):
        resp = await client.delete(f"/api/v1/teams/{team_id}/invites/{invite_id}", headers=auth(owner))
        assert resp.status == 404
    resp = await client.delete(f"/api/v1/teams/{team_id}/invites/not-a-uuid", headers=auth(owner))
    assert resp.status == 404


async def test_registered_and_unknown_addresses_get_the_same_answer_and_mail(
        mail_client: TestClient, mail_api: Api, mailbox: Any) -> None:
    owner = await mail_api.register("same_owner")
    team_id = await mail_api.team(owner)
    await mail_api.register("same_known", email="known@example.com")

    def shape(body: dict, email: str) -> dict:
        out = dict(body["invite"])
        for key in ("id", "created_at", "expires_at"):
            out.pop(key)
        out["email"] = out["email"].replace(email, "<email>")
        return out

    answers, texts = [], []
    for email in ("known@example.com", "unknown@example.com"):
        resp = await invite(mail_client, owner, team_id, email)
        answers.append((resp.status, dict(resp.headers).keys() - {"Date", "X-Request-Id", "Content-Length"},
                        shape(await resp.json(), email)))
        message = await mailbox.receive(email, subject=INVITE_SUBJECT)
        token = token_of(link_in(message, "/invites/accept"))
        texts.append((message["Subject"], text_of(message).replace(token, "<token>"), message.keys()))
    assert answers[0] == answers[1]
    assert texts[0] == texts[1]


# --- the dashboard ------------------------------------------------------------------------------

@pytest.fixture
async def web_client(start_client: Callable[..., Any], make_settings: Callable[..., Settings],
                     mailbox: Any) -> TestClient:
    """The app with mail to `mailbox` and no app URL (links use the address asked; plain http
    keeps the cookies), as the dashboard tests run it."""
    return await start_client(make_settings(app_url="", smtp_url=mailbox.url, background_jobs="on",
                                            mail_poll_seconds="1"))


def csrf_of(html: str) -> str:
    match = CSRF_RE.search(html)
    assert match, "the page has no CSRF field"
    return match.group(1)


async def sign_up(client: TestClient, username: str, email: str, next_path: str | None = None) -> Any:
    page = await client.get("/signup" + (f"?next={next_path}" if next_path else ""))
    assert page.status == 200
    html = await page.text()
    form = {"csrf": csrf_of(html), "name": username.title(), "email": email,
            "username": username, "password": "correct horse 1"}
    form.update(re.findall(r'name="(next)" value="([^"]*)"', html))  # the page's own hidden field
    return await client.post("/signup", data=form, allow_redirects=False)


async def test_dashboard_invite_form_mail_link_sign_up_and_accept(
        web_client: TestClient, mailbox: Any, database_url: str, caplog: Any) -> None:
    caplog.set_level(logging.DEBUG)
    client = web_client
    resp = await sign_up(client, "web_owner", "web_owner@example.com")
    assert resp.status == 303
    page = await client.get("/app/teams")
    resp = await client.post("/app/teams", data={"csrf": csrf_of(await page.text()), "name": "Web",
                                                 "slug": "web-team"}, allow_redirects=False)
    assert resp.status == 303
    page = await client.get("/app/teams/web-team/members")
    html = await page.text()
    assert "Undang lewat email" in html and "Tidak ada undangan yang tertunda" in html
    csrf = csrf_of(html)
    # No CSRF token: nothing happens.
    resp = await client.post("/app/teams/web-team/invites", data={"email": "x@example.com", "role": "Member"},
                             allow_redirects=False)
    assert resp.status == 403
    resp = await client.post("/app/teams/web-team/invites", allow_redirects=False,
                             data={"csrf": csrf, "email": "joiner@example.com", "role": "Viewer"})
    assert (resp.status, resp.headers["Location"]) == (303, "/app/teams/web-team/members")
    resp = await client.post("/app/teams/web-team/invites",
                             data={"csrf": csrf, "email": "JOINER@example.com", "role": "Viewer"})
    assert resp.status == 409 and "sudah memiliki undangan" in await resp.text()
    resp = await client.post("/app/teams/web-team/invites",
                             data={"csrf": csrf, "email": "drop@example.com", "role": "Member"})
    assert resp.status == 200
    html = await (await client.get("/app/teams/web-team/members")).text()
    assert "joiner@example.com" in html and "drop@example.com" in html
    [drop] = await query(database_url, "SELECT id FROM team_invites WHERE email = 'drop@example.com'")
    resp = await client.post(f"/app/teams/web-team/invites/{drop['id']}/revoke", data={"csrf": csrf},
                             allow_redirects=False)
    assert resp.status == 303
    assert "drop@example.com" not in await (await client.get("/app/teams/web-team/members")).text()

    # The invitee follows the mail's link, signed out: sign-up comes back to the page.
    link = link_in(await mailbox.receive("joiner@example.com"), "/invites/accept")
    assert link.startswith(str(client.make_url("/invites/accept")))
    client.session.cookie_jar.clear()
    page = await client.get(local(link))
    assert page.status == 200 and page.headers["Cache-Control"] == "no-store"
    html = await page.text()
    assert "Terima undangan" not in html
    [signup_href] = re.findall(r'href="(/signup\?next=[^"]+)"', html)
    assert re.findall(r'href="(/signin\?next=[^"]+)"', html)
    next_path = parse_qs(urlsplit(signup_href.replace("&amp;", "&")).query)["next"][0]
    assert next_path == local(link)
    resp = await sign_up(client, "web_joiner", "joiner@example.com", signup_href.split("next=", 1)[1])
    assert (resp.status, resp.headers["Location"]) == (303, local(link))
    # Opening the page spends nothing; its button posts the token.
    page = await client.get(local(link))
    html = await page.text()
    assert "Terima undangan" in html and "joiner@example.com" in html
    resp = await client.post("/invites/accept", data={"csrf": csrf_of(html), "token": token_of(link)},
                             allow_redirects=False)
    assert (resp.status, resp.headers["Location"]) == (303, "/app/teams/web-team/secrets")
    [row] = await query(database_url, "SELECT m.role FROM team_members m JOIN users u ON u.id = m.user_id "
                                      "WHERE u.username = 'web_joiner'")
    assert row["role"] == "Viewer"
    # A second click is the generic error page.
    resp = await client.post("/invites/accept", data={"csrf": csrf_of(html), "token": token_of(link)})
    assert resp.status == 400 and INVITE_INVALID in await resp.text()
    assert token_of(link) not in caplog.text  # no log line (access log included) has the token
    assert "/invites/accept" in caplog.text


async def test_sign_in_goes_back_only_to_a_local_path(start_client: Callable[..., Any],
                                                      make_settings: Callable[..., Settings]) -> None:
    client = await start_client(make_settings(app_url=""))
    user = await Api(client).register("next_user")
    for evil in ("//evil.example/x", "https://evil.example/", "/\\evil.example", "javascript:alert(1)"):
        page = await client.get("/signin", params={"next": evil})
        html = await page.text()
        assert 'name="next"' not in html
        resp = await client.post("/signin", allow_redirects=False, data={
            "csrf": csrf_of(html), "identifier": user["username"], "password": user["password"],
            "next": evil})
        assert (resp.status, resp.headers["Location"]) == (303, "/app/teams")
        client.session.cookie_jar.clear()
    page = await client.get("/signin", params={"next": "/invites/accept?token=abc"})
    html = await page.text()
    assert 'name="next" value="/invites/accept?token=abc"' in html
    resp = await client.post("/signin", allow_redirects=False, data={
        "csrf": csrf_of(html), "identifier": user["username"], "password": user["password"],
        "next": "/invites/accept?token=abc"})
    assert (resp.status, resp.headers["Location"]) == (303, "/invites/accept?token=abc")


async def test_a_member_sees_the_members_page_without_the_invite_form(
        start_client: Callable[..., Any], make_settings: Callable[..., Settings]) -> None:
    client = await start_client(make_settings(app_url=""))
    api = Api(client)
    owner, viewer = await api.register("page_owner"), await api.register("page_viewer")
    team_id = await api.team(owner, "page-team")
    await api.add_member(owner, team_id, viewer, "Viewer")
    assert (await invite(client, owner, team_id, "pending@example.com")).status == 201
    page = await client.get("/signin")
    resp = await client.post("/signin", allow_redirects=False, data={
        "csrf": csrf_of(await page.text()), "identifier": viewer["username"],
        "password": viewer["password"]})
    assert resp.status == 303
    page = await client.get("/app/teams/page-team/members")
    html = await page.text()
    assert page.status == 200 and "page_owner" in html
    assert "Undang lewat email" not in html and "pending@example.com" not in html
    resp = await client.post("/app/teams/page-team/invites",
                             data={"csrf": csrf_of(html), "email": "v@example.com", "role": "Viewer"})
    assert resp.status == 403


async def test_the_invitation_landing_page_stands_behind_the_failed_credential_throttle(
        start_client: Callable[..., Any], make_settings: Callable[..., Settings],
        mailbox: Any) -> None:
    """The link is a credential: while the address is limited a real link is not looked up
    (429, nothing named), and links that open nothing count toward that limit."""
    client = await start_client(make_settings(app_url="", smtp_url=mailbox.url,
                                              background_jobs="on", mail_poll_seconds="1",
                                              ratelimit_failed_auth="2/3600"))
    api = Api(client)
    owner = await api.register("throttle_owner")
    team_id = await api.team(owner, "throttle-team")
    _invite, token = await invited(client, mailbox, owner, team_id, "throttle_guest@example.com")
    assert (await client.get(f"/invites/accept?token={token}")).status == 200
    for _ in range(2):
        made_up = "x" * len(token)
        assert (await client.get(f"/invites/accept?token={made_up}")).status == 400
    limited = await client.get(f"/invites/accept?token={token}")
    text = await limited.text()
    assert limited.status == 429 and "Retry-After" in limited.headers
    assert "throttle_owner" not in text and "throttle-team" not in text
