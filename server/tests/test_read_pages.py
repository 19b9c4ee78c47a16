"""The dashboard's read pages over real HTTP (cookies, CSRF, the real database): a secret's
values and the diff of two versions (each read audited, never stored, never in a URL), who read
it, the team's read insights with their one-click clean-up, environments side by side, the
audit log's filters and export, the plan's quotas, and the controls each role is shown."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from html import unescape
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from conftest import MASTER_KEY, Api, query, server_url
from cvsm_server import db
from cvsm_server.secrets import service as secrets
from cvsm_server.teams import service as teams
from cvsm_server.core.actor import Actor, Scope
from cvsm_server.core.config import Settings, parse_master_key
from cvsm_server.crypto.sealing import Keyring
from cvsm_server.core.errors import NotFound
from test_dashboard import form_csrf


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(app_url="")  # links use the address asked; plain http keeps the cookie


async def sign_in(client: TestClient, user: dict[str, Any]) -> None:
    """`client`'s browser signs in as `user` (any earlier session's cookie is dropped)."""
    client.session.cookie_jar.clear()
    csrf = await form_csrf(client, "/signin")
    resp = await client.post("/signin", data={"csrf": csrf, "identifier": user["username"],
                                              "password": "correct horse 1"},
                             allow_redirects=False)
    assert resp.status == 303, await resp.text()


async def post(client: TestClient, page: str, action: str, **fields: str) -> Any:
    """Submit a form of `page` (its CSRF token) to `action`."""
    csrf = await form_csrf(client, page)
    return await client.post(action, data={"csrf": csrf, **fields}, allow_redirects=False)


async def reads_of(database_url: str, secret_id: str) -> list[dict]:
    return await query(database_url, """SELECT user_email, metadata FROM audit_logs
                                         WHERE action = 'read' AND resource_id = %s
                                         ORDER BY created_at""", (secret_id,))


async def versioned(client: TestClient, api: Api, owner: dict, team_id: str) -> str:
    """DB_URL in production at version 3 (values one, two, three lines)."""
    secret_id = await api.secret(owner, team_id, "DB_URL", "host=a\nport=5432\nuser=app")
    for value in ("host=b\nport=5432\nuser=app", "host=b\nport=6432\nuser=app"):
        resp = await client.put(f"/api/v1/teams/{team_id}/secrets/{secret_id}",
                                headers=api.auth(owner["token"]), json={"value": value})
        assert resp.status == 200
    return secret_id


async def test_the_secret_page_reveals_the_current_value_and_a_versions_by_post_audited_and_never_stored(
        client: TestClient, api: Api, owner: dict, team_id: str, database_url: str) -> None:
    secret_id = await versioned(client, api, owner, team_id)
    await sign_in(client, owner)
    page = f"/app/teams/{team_id}/secrets/{secret_id}"
    html = await (await client.get(page)).text()
    assert "port=6432" not in html and "Tampilkan nilai sekarang" in html
    assert await reads_of(database_url, secret_id) == []

    resp = await post(client, page, f"{page}/value")
    html = unescape(await resp.text())
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    assert "host=b\nport=6432\nuser=app" in html
    resp = await post(client, page, f"{page}/value", version="1")
    html = unescape(await resp.text())
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    assert "host=a\nport=5432\nuser=app" in html and "port=6432" not in html
    reads = await reads_of(database_url, secret_id)
    assert [r["metadata"].get("version") for r in reads] == [None, 1]
    assert all(r["user_email"] == owner["email"] for r in reads)

    resp = await post(client, page, f"{page}/value", version="9")
    assert resp.status == 404 and "Versi secret tidak ditemukan" in await resp.text()
    resp = await post(client, page, f"{page}/value", version="x")
    assert resp.status == 400 and "Pilih nomor versi yang ada" in await resp.text()
    resp = await client.post(f"{page}/value", data={"csrf": "0" * 64, "version": "1"})
    assert resp.status == 403
    assert len(await reads_of(database_url, secret_id)) == 2


async def test_a_diff_of_two_versions_shows_the_changed_lines_and_audits_both_reads(
        client: TestClient, api: Api, owner: dict, team_id: str, database_url: str) -> None:
    secret_id = await versioned(client, api, owner, team_id)
    await sign_in(client, owner)
    page = f"/app/teams/{team_id}/secrets/{secret_id}"
    resp = await post(client, page, f"{page}/diff", **{"from": "1", "to": "3"})
    html = await resp.text()
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    assert "Perbedaan versi 1 ke versi 3" in html
    assert '<span class="diff-del">-host=a</span>' in html
    assert '<span class="diff-add">+port=6432</span>' in html
    assert '<span class="diff-same"> user=app</span>' in html
    reads = await reads_of(database_url, secret_id)
    assert sorted(r["metadata"]["version"] for r in reads) == [1, 3]
    resp = await post(client, page, f"{page}/diff", **{"from": "2", "to": "2"})
    assert resp.status == 400 and "dua versi yang berbeda" in await resp.text()
    assert len(await reads_of(database_url, secret_id)) == 2


async def test_a_viewer_may_reveal_a_version_but_is_not_offered_edit_or_rollback(
        client: TestClient, api: Api, owner: dict, team_id: str, database_url: str) -> None:
    secret_id = await versioned(client, api, owner, team_id)
    viewer = await api.register("vivi")
    await api.add_member(owner, team_id, viewer, "Viewer")
    await sign_in(client, viewer)
    page = f"/app/teams/{team_id}/secrets/{secret_id}"
    html = await (await client.get(page)).text()
    assert "Simpan perubahan" not in html and "Kembalikan" not in html
    assert "Dibaca dalam 30 hari terakhir" not in html  # the readers are the audit log's
    resp = await post(client, page, f"{page}/value", version="2")
    assert resp.status == 200 and "port=5432" in unescape(await resp.text())
    # The server still refuses what is not shown.
    resp = await post(client, page, f"{page}/rollback", version="1")
    assert resp.status == 403


async def test_a_viewer_is_shown_no_control_the_server_would_refuse_and_the_sole_owner_cannot_remove_themself(
        client: TestClient, api: Api, owner: dict, team_id: str) -> None:
    await api.secret(owner, team_id, "API_KEY", "k")
    viewer = await api.register("vivi")
    await api.add_member(owner, team_id, viewer, "Viewer")
    member = await api.register("mona")
    await api.add_member(owner, team_id, member, "Member")

    await sign_in(client, viewer)
    secrets_html = await (await client.get(f"/app/teams/{team_id}/secrets")).text()
    members_html = await (await client.get(f"/app/teams/{team_id}/members")).text()
    for label in ("Tambah secret", "Hapus", "Impor", "Log audit", "Wawasan baca"):
        assert label not in secrets_html, label
    assert "Tampilkan nilai API_KEY" in secrets_html and "Unduh" in secrets_html
    for label in ("Ubah peran", "Keluarkan", "Tambah anggota", "Kirim undangan"):
        assert label not in members_html, label
    assert members_html.count(">Keluar dari tim</button>") == 1  # anyone may leave
    # What is not shown stays refused.
    page = f"/app/teams/{team_id}/secrets"
    resp = await post(client, page, page, name="NEW", value="v", environment="production")
    assert resp.status == 403
    assert (await client.get(f"/app/teams/{team_id}/audit")).status == 403

    await sign_in(client, owner)
    secrets_html = await (await client.get(f"/app/teams/{team_id}/secrets")).text()
    for label in ("Tambah secret", "Hapus API_KEY", "Impor", "Log audit", "Wawasan baca"):
        assert label in secrets_html, label
    members_html = await (await client.get(f"/app/teams/{team_id}/members")).text()
    assert "Keluarkan vivi" in members_html and "Keluarkan mona" in members_html
    assert f"Keluarkan {owner['username']}" not in members_html
    assert "Keluar dari tim" not in members_html  # the sole Owner stays
    assert members_html.count("Ubah peran") == 2
    assert "Tambah anggota" in members_html


async def backdate(database_url: str, table: str, row_id: str, days: int) -> None:
    await query(database_url, f"UPDATE {table} SET created_at = now() - make_interval(days => %s) "
                              "WHERE id = %s", (days, row_id))


async def test_read_insights_list_unread_secrets_and_unused_tokens_with_one_click_delete_and_revoke(
        client: TestClient, api: Api, owner: dict, team_id: str, database_url: str) -> None:
    stale = await api.secret(owner, team_id, "OLD_KEY", "old")
    fresh = await api.secret(owner, team_id, "READ_KEY", "read")
    await backdate(database_url, "secrets", stale, 40)
    await backdate(database_url, "secrets", fresh, 40)
    token = await api.api_token(owner, name="forgotten-ci")
    await backdate(database_url, "api_tokens", token["api_token"]["id"], 40)
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/{fresh}",
                            headers=api.auth(owner["token"]))
    assert resp.status == 200
    await sign_in(client, owner)
    page = f"/app/teams/{team_id}/insights"
    html = await (await client.get(page)).text()
    assert "OLD_KEY" in html and "READ_KEY" not in html
    assert "Cabut token forgotten-ci" in html and 'data-confirm="Hapus OLD_KEY' in html

    resp = await post(client, page, f"{page}/secrets/{stale}/delete")
    assert (resp.status, resp.headers["Location"]) == (303, page)
    resp = await post(client, page, f"{page}/tokens/{token['api_token']['id']}/revoke")
    assert (resp.status, resp.headers["Location"]) == (303, page)
    html = await (await client.get(page)).text()
    assert "OLD_KEY" not in html and "forgotten-ci" not in html
    rows = await query(database_url, "SELECT action FROM audit_logs WHERE action IN "
                                     "('delete', 'token_revoke') ORDER BY created_at")
    assert [r["action"] for r in rows] == ["delete", "token_revoke"]
    resp = await client.post(f"{page}/secrets/{fresh}/delete", data={"csrf": "0" * 64})
    assert resp.status == 403

    viewer = await api.register("vivi")
    await api.add_member(owner, team_id, viewer, "Viewer")
    await sign_in(client, viewer)
    assert (await client.get(page)).status == 403


async def test_the_secret_page_says_who_read_it_in_30_days_and_through_which_token(
        client: TestClient, api: Api, owner: dict, team_id: str) -> None:
    secret_id = await api.secret(owner, team_id, "DB_URL", "postgres://x")
    token = await api.api_token(owner, name="deploy-bot")
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/{secret_id}",
                            headers=api.auth(token["token"]))
    assert resp.status == 200
    await sign_in(client, owner)
    html = await (await client.get(f"/app/teams/{team_id}/secrets/{secret_id}")).text()
    assert "Dibaca dalam 30 hari terakhir" in html
    assert "via token <code>deploy-bot</code>" in html and owner["email"] in html


async def test_environments_side_by_side_show_missing_and_differing_names_and_reveal_one_cell_audited(
        client: TestClient, api: Api, owner: dict, team_id: str, database_url: str) -> None:
    prod = await api.secret(owner, team_id, "SAME", "one")
    await api.secret(owner, team_id, "SAME", "one", environment="staging")
    await api.secret(owner, team_id, "DIFF", "a")
    staging_diff = await api.secret(owner, team_id, "DIFF", "b", environment="staging")
    await api.secret(owner, team_id, "ONLY_DEV", "d", environment="development")
    await sign_in(client, owner)
    page = f"/app/teams/{team_id}/environments"
    resp = await client.get(page)
    html = await resp.text()
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-cache"
    assert "3 nama · 3 tidak ada di setiap environment · 1 dengan nilai berbeda" in html
    for value in ("one", "\"a\"", ">b<", ">d<"):
        assert value not in html
    assert "tidak ada di production, staging" in html  # ONLY_DEV
    resp = await post(client, page, f"{page}/reveal", secret_id=staging_diff)
    html = await resp.text()
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    assert re.search(r'aria-label="Nilai DIFF di staging" data-secret-value>b</pre>', html)
    assert 'aria-label="Tampilkan nilai DIFF di production"' in html
    reads = await query(database_url, "SELECT resource_id FROM audit_logs WHERE action = 'read'")
    assert [r["resource_id"] for r in reads] == [staging_diff]
    assert prod not in [r["resource_id"] for r in reads]
    resp = await post(client, page, f"{page}/reveal", secret_id="not-an-id")
    assert resp.status == 404


async def test_the_plan_page_shows_each_quota_used_and_what_to_do_when_one_refuses(
        client: TestClient, api: Api, owner: dict, team_id: str, database_url: str) -> None:
    await api.secret(owner, team_id, "A", "1")
    await query(database_url, "UPDATE teams SET plan = 'starter', max_secrets = 50, "
                              "max_members = 5 WHERE id = %s", (team_id,))
    viewer = await api.register("vivi")
    await api.add_member(owner, team_id, viewer, "Viewer")
    await sign_in(client, viewer)  # every member sees it
    resp = await client.get(f"/app/teams/{team_id}/plan")
    html = unescape(await resp.text())
    assert resp.status == 200
    assert "Paket tim ini: <strong>starter</strong>" in html
    assert re.search(r"Secret aktif</strong>: 1 dari 50", html)
    assert re.search(r"Kursi \(anggota dan undangan tertunda\)</strong>: 2 dari 5", html)
    assert re.search(r"Environment berisi secret</strong>: 1 dari 1\s+<span class=\"error\">penuh", html)
    assert "Log audit disimpan</strong>: 30 hari" in html
    assert "Jika kuota menolak" in html
    slug = (await query(database_url, "SELECT slug FROM teams WHERE id = %s", (team_id,)))[0]["slug"]
    assert f"<code>cvsm-server team set-plan {slug} professional</code>" in html


async def test_the_audit_page_filters_by_links_says_who_did_what_to_which_and_exports_with_the_session(
        client: TestClient, api: Api, owner: dict, team_id: str) -> None:
    secret_id = await api.secret(owner, team_id, "DB_URL", "postgres://x")
    await api.secret(owner, team_id, "OTHER", "y")
    viewer = await api.register("vivi")
    await api.add_member(owner, team_id, viewer, "Viewer")
    resp = await client.patch(f"/api/v1/teams/{team_id}/members/{viewer['id']}",
                              headers=api.auth(owner["token"]), json={"role": "Member"})
    assert resp.status == 200
    token = await api.api_token(viewer, name="vivi-laptop")
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/{secret_id}",
                            headers=api.auth(token["token"]))
    assert resp.status == 200
    await sign_in(client, owner)
    page = f"/app/teams/{team_id}/audit"
    html = unescape(await (await client.get(page)).text())
    assert "vivi@example.com (Viewer → Member)" in html
    assert "via token <code>vivi-laptop</code>" in html
    assert f'href="{page}?action=read"' in html and f'href="{page}?secret=DB_URL"' in html

    html = unescape(await (await client.get(f"{page}?action=read")).text())
    assert "1 entri yang cocok dengan filter" in html
    html = unescape(await (await client.get(f"{page}?secret=DB_URL&action=create")).text())
    assert "1 entri yang cocok" in html and "OTHER" not in html
    assert f'href="{page}?secret=DB_URL"' in html  # dropping the action filter keeps the secret
    html = unescape(await (await client.get(f"{page}?person={viewer['email'].upper()}")).text())
    assert "1 entri yang cocok" in html
    html = await (await client.get(f"{page}?from=2000-01-01&to=2000-01-02")).text()
    assert "Tidak ada entri yang cocok dengan filter ini" in html
    for bad, message in (("action=DROP TABLE", "Filter aksi tidak valid"),
                         ("from=kemarin", "Waktu &#39;from&#39; tidak valid"),
                         ("from=2001-01-02&to=2001-01-01", "harus sebelum")):
        resp = await client.get(f"{page}?{bad}")
        assert resp.status == 400 and message in await resp.text(), bad

    resp = await post(client, page, f"{page}/export", format="jsonl", **{"from": "", "to": ""})
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    assert resp.headers["Content-Type"].startswith("application/x-ndjson")
    assert '"action":"read"' in await resp.text()
    resp = await post(client, page, f"{page}/export", format="csv")
    body = await resp.text()
    assert resp.status == 200 and body.startswith("seq,id,created_at,action")
    assert '"action":"audit_export"' not in body and "audit_export" in body
    resp = await client.post(f"{page}/export", data={"csrf": "0" * 64, "format": "csv"})
    assert resp.status == 403
    resp = await post(client, page, f"{page}/export", format="xml")
    assert resp.status == 400

    await sign_in(client, viewer)  # a Member: no audit log
    resp = await client.post(f"{page}/export", data={"csrf": "0" * 64, "format": "csv"})
    assert resp.status == 403


async def test_the_controls_shown_for_a_members_row_are_the_ones_the_server_accepts(
        client: TestClient, api: Api, owner: dict, team_id: str) -> None:
    """`teams.may_change_role` against `update_member`, for every caller and target role."""
    people = {"Owner": owner}
    for role in ("Admin", "Member", "Viewer"):
        people[role] = await api.register(f"the_{role.lower()}")
        await api.add_member(owner, team_id, people[role], role)
    for caller in ("Admin", "Member", "Viewer"):
        for target, person in people.items():
            if target == caller:
                continue
            new = "Viewer" if target != "Viewer" else "Member"
            resp = await client.patch(f"/api/v1/teams/{team_id}/members/{person['id']}",
                                      headers=api.auth(people[caller]["token"]), json={"role": new})
            assert (resp.status == 200) == teams.may_change_role(caller, target, owners=1), \
                (caller, target, resp.status)
            if resp.status == 200:
                resp = await client.patch(f"/api/v1/teams/{team_id}/members/{person['id']}",
                                          headers=api.auth(owner["token"]), json={"role": target})
                assert resp.status == 200
    # The sole Owner may neither leave nor step down; with a second Owner, both may.
    assert not teams.may_remove("Owner", "Owner", is_self=True, owners=1)
    resp = await client.delete(f"/api/v1/teams/{team_id}/members/{owner['id']}",
                               headers=api.auth(owner["token"]))
    assert resp.status == 409
    resp = await client.patch(f"/api/v1/teams/{team_id}/members/{people['Admin']['id']}",
                              headers=api.auth(owner["token"]), json={"role": "Owner"})
    assert resp.status == 200
    assert teams.may_remove("Owner", "Owner", is_self=True, owners=2)
    resp = await client.delete(f"/api/v1/teams/{team_id}/members/{owner['id']}",
                               headers=api.auth(owner["token"]))
    assert resp.status == 200


async def test_the_teams_page_names_each_teams_plan_and_links_its_quotas(
        client: TestClient, api: Api, owner: dict, team_id: str) -> None:
    await sign_in(client, owner)
    html = await (await client.get("/app/teams")).text()
    assert re.search(r'<a href="/app/teams/[a-z0-9-]+/plan" aria-label="Paket professional dan '
                     r'kuota Team">paket professional</a>', html)


async def test_read_versions_keeps_a_tokens_scope_and_writes_nothing_for_a_version_that_is_missing(
        client: TestClient, api: Api, owner: dict, team_id: str, database_url: str) -> None:
    secret_id = uuid.UUID(await versioned(client, api, owner, team_id))
    keyring = Keyring(parse_master_key(MASTER_KEY))
    me = Actor.anonymous("127.0.0.1").as_user(uuid.UUID(owner["id"]), owner["email"])
    staging_only = Actor.anonymous("127.0.0.1").as_user(
        uuid.UUID(owner["id"]), owner["email"], via="api_token",
        scope=Scope(environments=("staging",)))
    pool = await db.create_pool(server_url(database_url), maxsize=1)
    try:
        async with db.connection(pool) as conn:
            meta, values = await secrets.read_versions(conn, me, keyring, uuid.UUID(team_id),
                                                       secret_id, [3, 1])
            assert meta["name"] == "DB_URL" and "ciphertext" not in meta
            assert values == {1: "host=a\nport=5432\nuser=app", 3: "host=b\nport=6432\nuser=app"}
            for actor, versions in ((staging_only, [1]), (me, [1, 9]), (me, [1, 2, 3]), (me, [])):
                with pytest.raises(NotFound):
                    await secrets.read_versions(conn, actor, keyring, uuid.UUID(team_id),
                                                secret_id, versions)
    finally:
        pool.close()
        await pool.wait_closed()
    assert sorted(r["metadata"]["version"] for r in await reads_of(database_url, str(secret_id))) \
        == [1, 3]
