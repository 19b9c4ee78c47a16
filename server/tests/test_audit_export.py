"""Audit export: `GET /teams/:teamId/audit/export?format=csv|jsonl&from=&to=` (Admin), streamed,
audited, CSV safe against spreadsheet formulas."""

from __future__ import annotations

import csv
import io
import json

from cvsm_server.audit import log as audit
from conftest import Api, query, server_url


def export_url(team_id: str) -> str:
    return f"/api/v1/teams/{team_id}/audit/export"


async def test_csv_export_has_header_fixed_columns_rows_in_chain_order_and_a_file_name(
        client, api: Api, owner, team_id):
    h = api.auth(owner["token"])
    sid = await api.secret(owner, team_id, "DB_URL", "v")
    await client.get(f"/api/v1/teams/{team_id}/secrets/{sid}", headers=h)
    resp = await client.get(export_url(team_id), params={"format": "csv"}, headers=h)
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/csv; charset=utf-8"
    disposition = resp.headers["Content-Disposition"]
    assert disposition.startswith('attachment; filename="cvsm-audit-') and disposition.endswith('.csv"')
    rows = list(csv.reader(io.StringIO(await resp.text())))
    assert rows[0] == list(audit.CSV_COLUMNS)
    body = [dict(zip(rows[0], r)) for r in rows[1:]]
    assert [r["action"] for r in body] == ["team_create", "create", "read", "audit_export"]
    assert [r["seq"] for r in body] == ["1", "2", "3", "4"]
    assert json.loads(body[2]["metadata"]) == {"name": "DB_URL", "environment": "production"}
    assert body[3]["prev_hash"] == body[2]["hash"] and len(body[3]["hash"]) == 64
    assert "v" not in {c for r in body for c in r.values()}  # never a value


async def test_jsonl_export_is_the_list_entries_plus_chain_fields_and_is_audited(client, api: Api,
                                                                                 owner, team_id):
    h = api.auth(owner["token"])
    await api.secret(owner, team_id, "A", "v")
    resp = await client.get(export_url(team_id), params={"format": "jsonl"}, headers=h)
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("application/x-ndjson")
    assert resp.headers["Content-Disposition"].endswith('.jsonl"')
    lines = [json.loads(line) for line in (await resp.text()).splitlines()]
    listed = (await (await client.get(f"/api/v1/teams/{team_id}/audit", headers=h)).json())["logs"]
    by_id = {e["id"]: e for e in listed}
    for line in lines:
        chain = {k: line.pop(k) for k in ("seq", "prev_hash", "hash")}
        assert line == by_id[line["id"]] and len(chain["hash"]) == 64
    export_entry = listed[0]
    assert export_entry["action"] == "audit_export" and export_entry["resource"] == "audit"
    assert export_entry["metadata"] == {"format": "jsonl", "from": None, "to": None}


async def test_export_range_filters_from_inclusive_to_exclusive(client, api: Api, owner, team_id,
                                                                database_url):
    insert = "INSERT INTO audit_logs (team_id, action, resource, created_at) VALUES (%s, %s, 't', %s)"
    for action, at in (("jan", "2024-01-15T00:00:00Z"), ("feb", "2024-02-01T00:00:00Z"),
                       ("mar", "2024-03-01T00:00:00Z")):
        await query(database_url, insert, (team_id, action, at))  # the owner: dated entries
    h = api.auth(owner["token"])

    async def actions(**params: str) -> list[str]:
        resp = await client.get(export_url(team_id), params={"format": "jsonl", **params}, headers=h)
        assert resp.status == 200
        return [json.loads(line)["action"] for line in (await resp.text()).splitlines()]

    assert await actions(**{"from": "2024-02-01T00:00:00Z", "to": "2024-03-01T00:00:00Z"}) == ["feb"]
    # an entry exported alone still carries its link: the hash of the entry before it in the
    # chain (seals keep no link since migration 0042: the export reads it from the seal before)
    resp = await client.get(export_url(team_id), params={"format": "jsonl"}, headers=h)
    whole = {e["action"]: e for e in map(json.loads, (await resp.text()).splitlines())}
    resp = await client.get(export_url(team_id), headers=h, params={
        "format": "jsonl", "from": "2024-02-01T00:00:00Z", "to": "2024-03-01T00:00:00Z"})
    [feb] = map(json.loads, (await resp.text()).splitlines())
    assert whole["feb"]["seq"] == whole["jan"]["seq"] + 1
    assert feb["prev_hash"] == whole["jan"]["hash"] == whole["feb"]["prev_hash"]
    assert await actions(to="2024-02-01") == ["jan"]
    since = await actions(**{"from": "2024-02-01T00:00:00+00:00"})
    assert "jan" not in since and {"team_create", "feb", "mar"} <= set(since)
    logs = (await (await client.get(f"/api/v1/teams/{team_id}/audit", headers=h)).json())["logs"]
    assert logs[0]["metadata"]["from"] == "2024-02-01T00:00:00Z"
    for bad in ({"from": "yesterday"}, {"to": "2024-13-01"}, {"format": "xlsx"},
                {"from": "2024-03-01", "to": "2024-02-01"}):
        resp = await client.get(export_url(team_id), params=bad, headers=h)
        assert resp.status == 400 and set(await resp.json()) == {"error"}


async def test_csv_cells_that_a_spreadsheet_would_run_are_neutralised(client, api: Api, owner, team_id,
                                                                     database_url):
    h = api.auth(owner["token"])
    sid = await api.secret(owner, team_id, "A", "v")
    for agent in ["=HYPERLINK(\"http://evil\")", "+1+1", "-2+3", "@SUM(A1)"]:
        await client.get(f"/api/v1/teams/{team_id}/secrets/{sid}",
                         headers={**h, "User-Agent": agent})
    for agent in ("\tTAB", "\rCR", "plain=ok"):  # an HTTP header cannot start with these
        await query(server_url(database_url), "INSERT INTO audit_logs (team_id, action, resource, "
                    "user_agent) VALUES (%s, 'read', 'secret', %s)", (team_id, agent))
    resp = await client.get(export_url(team_id), headers=h)  # csv is the default
    rows = list(csv.DictReader(io.StringIO(await resp.text())))
    seen = [r["user_agent"] for r in rows if r["action"] == "read"]
    assert seen == ["'=HYPERLINK(\"http://evil\")", "'+1+1", "'-2+3", "'@SUM(A1)", "'\tTAB", "'\rCR",
                    "plain=ok"]
    assert audit.safe_cell(None) == "" and audit.safe_cell(-5) == "'-5"


async def test_export_needs_admin(client, api: Api, owner, team_id):
    for role in ("Viewer", "Member"):
        user = await api.register()
        await api.add_member(owner, team_id, user, role)
        resp = await client.get(export_url(team_id), headers=api.auth(user["token"]))
        assert resp.status == 403
    outsider = await api.register()
    assert (await client.get(export_url(team_id), headers=api.auth(outsider["token"]))).status == 404


async def test_a_large_export_is_streamed_in_chunks_and_complete(client, api: Api, owner, team_id,
                                                                 database_url):
    await query(database_url, """INSERT INTO audit_logs (team_id, action, resource, metadata)
                                 SELECT %s, 'bulk', 'test', jsonb_build_object('i', i)
                                 FROM generate_series(1, 3000) AS i""", (team_id,))
    resp = await client.get(export_url(team_id), params={"format": "jsonl"},
                            headers=api.auth(owner["token"]))
    assert resp.status == 200
    assert resp.headers.get("Transfer-Encoding") == "chunked" and "Content-Length" not in resp.headers
    chunks = 0
    data = b""
    async for chunk in resp.content.iter_any():
        chunks += 1
        data += chunk
    lines = [json.loads(line) for line in data.decode().splitlines()]
    assert len(lines) == 3002 and [e["seq"] for e in lines] == list(range(1, 3003))
    # each entry's link is the hash before it, across the export's pages too
    assert lines[0]["prev_hash"] == "00" * 32
    assert all(b["prev_hash"] == a["hash"] for a, b in zip(lines, lines[1:]))
    assert chunks > 1
