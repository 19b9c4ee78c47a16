"""The dashboard's read pages over real HTTP (cookies, CSRF, the real database): a secret's
values and the diff of two versions (each read audited, never stored, never in a URL), who read
it, the team's read insights with their one-click clean-up, environments side by side, the
audit log's filters and export, the plan's quotas, and the controls each role is shown."""

from __future__ import annotations

import re
from collections.abc import Callable
from html import unescape
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from conftest import Api, query
from cvsm_server.config import Settings
from test_dashboard import csrf_of, form_csrf


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
