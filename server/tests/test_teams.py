"""Teams, members, the role matrix, and isolation between teams."""

import uuid

import pytest

from conftest import Api, query


async def test_create_team_makes_caller_owner_on_starter_plan(start_client, make_settings):
    client = await start_client(make_settings(default_plan="starter"))  # the shipped default
    api = Api(client)
    user = await api.register("owner1")
    resp = await client.post("/api/v1/teams", headers=api.auth(user["token"]),
                             json={"name": "Acme", "slug": "acme-1"})
    assert resp.status == 201
    team = (await resp.json())["team"]
    assert team["plan"] == "starter" and team["max_secrets"] == 50 and team["max_members"] == 5
    uuid.UUID(team["id"])
    teams = (await (await client.get("/api/v1/teams", headers=api.auth(user["token"]))).json())["teams"]
    assert [(t["slug"], t["role"]) for t in teams] == [("acme-1", "Owner")]


@pytest.mark.parametrize("slug", ["ab", "UPPER", "has space", "under_score", "x" * 51, 42])
async def test_invalid_slug_is_400(client, api: Api, slug):
    user = await api.register()
    resp = await client.post("/api/v1/teams", headers=api.auth(user["token"]), json={"name": "A", "slug": slug})
    assert resp.status == 400


async def test_slug_in_use_is_409_even_for_another_user(client, api: Api):
    a, b = await api.register(), await api.register()
    await api.team(a, "taken")
    resp = await client.post("/api/v1/teams", headers=api.auth(b["token"]), json={"name": "B", "slug": "taken"})
    assert resp.status == 409


async def test_teams_list_shows_only_callers_teams(client, api: Api):
    a, b = await api.register(), await api.register()
    await api.team(a, "team-a")
    await api.team(b, "team-b")
    teams = (await (await client.get("/api/v1/teams", headers=api.auth(a["token"]))).json())["teams"]
    assert [t["slug"] for t in teams] == ["team-a"]


async def test_foreign_team_answers_exactly_like_a_missing_one(client, api: Api):
    a, b = await api.register(), await api.register()
    foreign = await api.team(b)
    secret = await api.secret(b, foreign, "KEY", "value")
    missing = str(uuid.uuid4())
    paths = [
        "/api/v1/teams/{t}", "/api/v1/teams/{t}/secrets", "/api/v1/teams/{t}/members",
        "/api/v1/teams/{t}/audit", "/api/v1/teams/{t}/secrets/export",
        "/api/v1/teams/{t}/secrets/" + secret,
    ]
    for path in paths:
        theirs = await client.get(path.format(t=foreign), headers=api.auth(a["token"]))
        nothing = await client.get(path.format(t=missing), headers=api.auth(a["token"]))
        assert theirs.status == nothing.status == 404, path
        assert await theirs.json() == await nothing.json(), path


@pytest.mark.parametrize("path", ["/api/v1/teams/not-a-uuid/secrets", "/api/v1/teams/1/members",
                                  "/api/v1/teams/{team}/secrets/xyz", "/api/v1/teams/{team}/secrets/xyz/versions"])
async def test_malformed_ids_are_404(client, api: Api, owner, team_id, path):
    resp = await client.get(path.format(team=team_id), headers=api.auth(owner["token"]))
    assert resp.status == 404
    assert "error" in await resp.json()


async def role_users(api: Api, owner, team_id):
    users = {}
    for role in ("Admin", "Member", "Viewer"):
        users[role] = await api.register(f"{role.lower()}_{uuid.uuid4().hex[:6]}")
        await api.add_member(owner, team_id, users[role], role)
    users["Owner"] = owner
    return users


async def test_role_matrix_for_secret_operations(client, api: Api, owner, team_id):
    users = await role_users(api, owner, team_id)
    expectations = {  # role -> (create, update, delete, audit)
        "Viewer": (403, 403, 403, 403),
        "Member": (201, 200, 403, 403),
        "Admin": (201, 200, 200, 200),
        "Owner": (201, 200, 200, 200),
    }
    for role, (create, update, delete, audit) in expectations.items():
        h = api.auth(users[role]["token"])
        target = await api.secret(owner, team_id, f"T_{role}", "v")
        r = await client.post(f"/api/v1/teams/{team_id}/secrets", headers=h,
                              json={"name": f"NEW_{role}", "value": "v", "environment": "staging"})
        assert r.status == create, role
        r = await client.put(f"/api/v1/teams/{team_id}/secrets/{target}", headers=h, json={"value": "w"})
        assert r.status == update, role
        r = await client.delete(f"/api/v1/teams/{team_id}/secrets/{target}", headers=h)
        assert r.status == delete, role
        r = await client.get(f"/api/v1/teams/{team_id}/audit", headers=h)
        assert r.status == audit, role
        # every role lists, reads and exports
        assert (await client.get(f"/api/v1/teams/{team_id}/secrets", headers=h)).status == 200
        assert (await client.get(f"/api/v1/teams/{team_id}/secrets/export", headers=h)).status == 200


async def test_only_owner_grants_admin_or_owner(client, api: Api, owner, team_id):
    users = await role_users(api, owner, team_id)
    admin = api.auth(users["Admin"]["token"])
    newcomer = await api.register()
    for role in ("Admin", "Owner"):
        r = await client.post(f"/api/v1/teams/{team_id}/members", headers=admin,
                              json={"identifier": newcomer["username"], "role": role})
        assert r.status == 403
    r = await client.post(f"/api/v1/teams/{team_id}/members", headers=admin,
                          json={"identifier": newcomer["email"], "role": "Member"})
    assert r.status == 201
    r = await client.patch(f"/api/v1/teams/{team_id}/members/{newcomer['id']}", headers=admin, json={"role": "Admin"})
    assert r.status == 403
    r = await client.patch(f"/api/v1/teams/{team_id}/members/{newcomer['id']}",
                           headers=api.auth(owner["token"]), json={"role": "Admin"})
    assert r.status == 200 and (await r.json())["member"]["role"] == "Admin"
    # an Admin cannot remove or demote another Admin
    r = await client.delete(f"/api/v1/teams/{team_id}/members/{newcomer['id']}", headers=admin)
    assert r.status == 403


async def test_member_and_viewer_cannot_manage_members(client, api: Api, owner, team_id):
    users = await role_users(api, owner, team_id)
    other = await api.register()
    for role in ("Member", "Viewer"):
        r = await client.post(f"/api/v1/teams/{team_id}/members", headers=api.auth(users[role]["token"]),
                              json={"identifier": other["username"], "role": "Viewer"})
        assert r.status == 403


async def test_last_owner_cannot_be_removed_or_demoted(client, api: Api, owner, team_id):
    h = api.auth(owner["token"])
    r = await client.patch(f"/api/v1/teams/{team_id}/members/{owner['id']}", headers=h, json={"role": "Admin"})
    assert r.status == 409
    r = await client.delete(f"/api/v1/teams/{team_id}/members/{owner['id']}", headers=h)
    assert r.status == 409
    second = await api.register()
    await api.add_member(owner, team_id, second, "Owner")
    r = await client.patch(f"/api/v1/teams/{team_id}/members/{owner['id']}", headers=h, json={"role": "Admin"})
    assert r.status == 200


async def test_members_listing_and_bad_role(client, api: Api, owner, team_id):
    other = await api.register()
    r = await client.post(f"/api/v1/teams/{team_id}/members", headers=api.auth(owner["token"]),
                          json={"identifier": other["username"], "role": "superuser"})
    assert r.status == 400
    await api.add_member(owner, team_id, other, "Viewer")
    members = (await (await client.get(f"/api/v1/teams/{team_id}/members",
                                       headers=api.auth(other["token"]))).json())["members"]
    assert {(m["username"], m["role"]) for m in members} == {(owner["username"], "Owner"), (other["username"], "Viewer")}
    assert set(members[0]) == {"user_id", "email", "username", "name", "role"}


async def test_adding_unknown_or_existing_member(client, api: Api, owner, team_id):
    h = api.auth(owner["token"])
    r = await client.post(f"/api/v1/teams/{team_id}/members", headers=h, json={"identifier": "nobody_here", "role": "Member"})
    assert r.status == 404
    r = await client.post(f"/api/v1/teams/{team_id}/members", headers=h, json={"identifier": owner["username"], "role": "Member"})
    assert r.status == 409


async def test_member_quota_is_enforced(client, api: Api, owner, team_id, database_url):
    await query(database_url, "UPDATE teams SET max_members = 2 WHERE id = %s", (team_id,))
    a, b = await api.register(), await api.register()
    await api.add_member(owner, team_id, a, "Member")
    r = await client.post(f"/api/v1/teams/{team_id}/members", headers=api.auth(owner["token"]),
                          json={"identifier": b["username"], "role": "Member"})
    assert r.status == 403


async def test_deleting_team_cascades_secrets_and_keeps_audit_with_team_nulled(client, api: Api, owner, team_id,
                                                                               database_url):
    await api.secret(owner, team_id, "GONE", "v")
    viewer = await api.register()
    await api.add_member(owner, team_id, viewer, "Viewer")
    assert (await client.delete(f"/api/v1/teams/{team_id}", headers=api.auth(viewer["token"]))).status == 403
    assert (await client.delete(f"/api/v1/teams/{team_id}", headers=api.auth(owner["token"]))).status == 200
    assert await query(database_url, "SELECT id FROM secrets") == []
    rows = await query(database_url, "SELECT action, team_id FROM audit_logs")
    assert {r["action"] for r in rows} >= {"create", "team_create", "member_add", "team_delete"}
    assert all(r["team_id"] is None for r in rows)
