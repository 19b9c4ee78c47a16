"""What an end-to-end team leaves on the operator's side (docs/e2e.md, "What a backup holds"):
values written through the API are found nowhere in the database (every row of every table, as
text) nor in the file `cvsm-server backup` writes, nor in anything the master key opens; a plain
team's value, the control, is not in the clear either but opens with the master key. Master-key
rotation (`cvsm-server rotate-key`) re-seals the plain rows and leaves the envelopes as they are.
"""

from __future__ import annotations

import base64
import os
import subprocess
import uuid
from typing import Any

from conftest import JWT_SECRET, MASTER_KEY, query, server_url
from cvsm import e2e as crypto
from cvsm_server.crypto import rekey as rotation
from cvsm_server.secrets import service as secrets
from cvsm_server.secrets import queries as secret_queries
from cvsm_server.crypto.sealing import Keyring
from cvsm_server.db.embedded import wheel_bin_dir
from e2e_client import E2ETeam, Member, auth
from serving import CONSOLE_SCRIPT
from test_rotation import NEW_ID, NEW_KEY, rotate_key


def marker(kind: str) -> str:
    return f"{kind}-value-{uuid.uuid4().hex}"


def forms(value: str) -> list[str]:
    """A value as it could appear in a text dump: itself, its bytes in hex (bytea) and base64."""
    raw = value.encode()
    return [value, raw.hex(), base64.b64encode(raw).decode().rstrip("="),
            base64.urlsafe_b64encode(raw).decode().rstrip("=")]


async def dump_rows(database_url: str) -> str:
    """Every row of every table of the database, as text."""
    tables = await query(database_url,
                         "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    parts = []
    for table in tables:
        rows = await query(database_url, f'SELECT t::text AS row FROM "{table["tablename"]}" t')
        parts.extend(r["row"] for r in rows)
    assert len(tables) > 20 and parts
    return "\n".join(parts)


async def write_team_values(client: Any, api: Any) -> tuple[E2ETeam, Member, dict[str, str], str]:
    """An end-to-end team whose values went through create, bulk create, update, a share and a
    re-key; and a plain team's value. Returns the team, its owner, the e2e values by name and the
    plain value."""
    owner = Member(await api.register("owner_e2e"))
    await owner.setup_key(client)
    team = await E2ETeam.create(client, owner)
    values = {"CREATED": marker("e2e"), "BULK": marker("e2e"), "UPDATED": marker("e2e"),
              "SHARED": marker("e2e"), "REKEYED": marker("e2e")}
    ids = {"CREATED": await team.create_secret(owner, "CREATED", values["CREATED"])}
    bulk_id = str(uuid.uuid4())
    resp = await client.post(f"/api/v1/teams/{team.id}/secrets/bulk", headers=auth(owner.token),
                             json={"items": [{"id": bulk_id, "name": "BULK",
                                              "environment": "production",
                                              "value": team.seal(values["BULK"], secret_id=bulk_id,
                                                                 version=1, name="BULK")}]})
    assert (await resp.json())["summary"]["ok"] == 1
    ids["BULK"] = bulk_id
    ids["UPDATED"] = await team.create_secret(owner, "UPDATED", marker("e2e-first"))
    resp = await client.put(f"/api/v1/teams/{team.id}/secrets/{ids['UPDATED']}",
                            headers=auth(owner.token),
                            json={"value": team.seal(values["UPDATED"], secret_id=ids["UPDATED"],
                                                     version=2, name="UPDATED")})
    assert resp.status == 200
    ids["SHARED"] = await team.create_secret(owner, "SHARED", values["SHARED"])
    resp = await client.post(f"/api/v1/teams/{team.id}/secrets/{ids['SHARED']}/shares",
                             headers=auth(owner.token),
                             json={"value": crypto.seal_share(values["SHARED"], os.urandom(32))})
    assert resp.status == 201
    ids["REKEYED"] = await team.create_secret(owner, "REKEYED", marker("e2e-before-rekey"))
    versions = {"CREATED": 1, "BULK": 1, "UPDATED": 2, "SHARED": 1, "REKEYED": 1}
    new_key = crypto.new_team_key()
    resp = await client.post(f"/api/v1/teams/{team.id}/e2e/rekey", headers=auth(owner.token), json={
        "key_version": 2,
        "wraps": [{"user_id": owner.id, "public_key": crypto._b64u(owner.public_key),
                   "wrapped_key": team.wrap_for(owner.public_key, 2, new_key)}],
        "secrets": [{"id": ids[name], "value": crypto.seal_value(
            values[name], new_key, 2, team_id=team.id, secret_id=ids[name],
            version=versions[name] + 1, environment="production", name=name)}
            for name in values]})
    assert resp.status == 200, await resp.text()
    team.key, team.key_version = new_key, 2

    plain_team = await api.team(owner.user, f"plain-{uuid.uuid4().hex[:8]}")
    plain = marker("plain")
    await api.secret(owner.user, plain_team, "PLAIN", plain)
    # every value reads back through the API, opened by the client
    for name, value in values.items():
        resp = await client.get(f"/api/v1/teams/{team.id}/secrets/by-name/{name}",
                                headers=auth(owner.token))
        assert team.open((await resp.json())["value"], name=name) == value
    return team, owner, values, plain


async def test_no_e2e_value_is_in_the_database_the_backup_or_what_the_master_key_opens(
        client, api, database_url, tmp_path):
    team, _, values, plain = await write_team_values(client, api)
    hidden = [form for value in values.values() for form in forms(value)]

    # 1. every row of every table, as text
    rows = await dump_rows(database_url)
    assert team.id in rows  # the dump is real: the team is there, with its names
    assert "REKEYED" in rows and "cvsm-e2e1.2." in rows
    assert [form for form in hidden if form in rows] == []
    assert [form for form in forms(plain) if form in rows] == []  # the control: sealed too

    # 2. the file `cvsm-server backup` writes, and its SQL text
    backup = tmp_path / "cvsm.dump"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
    env.update(CVSM_DATABASE_URL=server_url(database_url),
               CVSM_MIGRATION_DATABASE_URL=database_url, CVSM_DATA_DIR=str(tmp_path / "data"),
               CVSM_MASTER_KEY=MASTER_KEY, CVSM_JWT_SECRET=JWT_SECRET,
               PATH=f"{wheel_bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}")
    made = subprocess.run([str(CONSOLE_SCRIPT), "backup", str(backup)], env=env,
                          capture_output=True, text=True, timeout=240)
    assert made.returncode == 0, made.stdout + made.stderr
    sql = subprocess.run([str(wheel_bin_dir() / "pg_restore"), "--file", "-", str(backup)],
                         capture_output=True, text=True, timeout=240, check=True).stdout
    assert team.id in sql and "cvsm-e2e1.2." in sql
    raw = backup.read_bytes().decode("latin-1")
    for text in (sql, raw):
        assert [form for form in hidden if form in text] == []
        assert [form for form in forms(plain) if form in text] == []

    # 3. what the master key opens: every sealed row of every sealed table; the plain value is
    # there (the control), no end-to-end value is
    keyring = Keyring(base64.b64decode(MASTER_KEY))
    opened = []
    for spec in rotation.SEALED_TABLES:
        for row in await query(database_url, f"""
                SELECT t.id, t.{spec.key_id} AS key_id, t.{spec.nonce} AS nonce,
                       t.{spec.ciphertext} AS ciphertext {spec.extra}
                FROM {spec.table} t {spec.join} WHERE t.{spec.key_id} IS NOT NULL"""):
            opened.append(keyring.open(row["key_id"], row["nonce"], row["ciphertext"],
                                       spec.aad(row)).decode("utf-8", "replace"))
    assert plain in opened
    assert [v for v in values.values() if any(v in text for text in opened)] == []
    # and no row of the team holds a master-key ciphertext
    for table in ("secrets", "secret_versions", "secret_shares"):
        rows = await query(database_url, f"""
            SELECT count(*) FILTER (WHERE x.key_id IS NOT NULL) AS sealed,
                   count(*) FILTER (WHERE x.envelope IS NOT NULL) AS envelopes
            FROM {table} x
            {"JOIN secrets s ON s.id = x.secret_id" if table == "secret_versions" else ""}
            WHERE {"s" if table == "secret_versions" else "x"}.team_id = %s""", (team.id,))
        assert rows[0]["sealed"] == 0 and rows[0]["envelopes"] > 0, table


async def test_rotate_key_reseals_plain_rows_and_leaves_envelopes_as_they_are(
        client, api, database_url, tmp_path):
    team, owner, values, plain = await write_team_values(client, api)
    before = {r["id"]: r["envelope"] for r in await query(
        database_url, """SELECT id, envelope FROM secrets WHERE envelope IS NOT NULL
                         UNION ALL SELECT id, envelope FROM secret_versions
                         WHERE envelope IS NOT NULL
                         UNION ALL SELECT id, envelope FROM secret_shares
                         WHERE envelope IS NOT NULL""")}
    assert len(before) == 5 + 6 + 1  # current values, versions (1 update, 5 re-key), the share
    proc = rotate_key(database_url, tmp_path)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    assert "0 left under old keys" in out
    after = {r["id"]: r["envelope"] for r in await query(
        database_url, """SELECT id, envelope FROM secrets WHERE envelope IS NOT NULL
                         UNION ALL SELECT id, envelope FROM secret_versions
                         WHERE envelope IS NOT NULL
                         UNION ALL SELECT id, envelope FROM secret_shares
                         WHERE envelope IS NOT NULL""")}
    assert after == before
    rows = await query(database_url, """SELECT key_id, envelope IS NULL AS plain FROM secrets""")
    assert {r["key_id"] for r in rows if r["plain"]} == {NEW_ID}
    assert {r["key_id"] for r in rows if not r["plain"]} == {None}
    # a second run finds nothing left: the envelopes are not counted as values to re-seal
    proc = rotate_key(database_url, tmp_path)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0 and "0 value(s) to re-encrypt" in out, out
    # the server still serves the envelopes, which the client opens
    for name, value in values.items():
        resp = await client.get(f"/api/v1/teams/{team.id}/secrets/by-name/{name}",
                                headers=auth(owner.token))
        assert team.open((await resp.json())["value"], name=name) == value
    # the plain value opens with the new key only
    row = (await query(database_url, "SELECT * FROM secrets WHERE name = 'PLAIN'"))[0]
    assert secret_queries.open_value(Keyring(base64.b64decode(NEW_KEY)), row) == plain
