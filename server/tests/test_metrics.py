"""`GET /metrics`: a 404 without `CVSM_METRICS_TOKEN`; with it, a 401 without the right bearer,
and Prometheus text whose counters move with the requests served, labelled by route pattern
(never an id or a share token from the path)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from conftest import Api

METRICS_TOKEN = "metrics-token-" + "m" * 24


def samples(text: str) -> dict[tuple[str, tuple], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(scraped: dict, name: str, **labels: str) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


async def scrape(client) -> tuple[str, dict]:
    resp = await client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"].startswith("text/plain")
    text = await resp.text()
    return text, samples(text)


async def test_metrics_are_not_found_without_a_metrics_token(client):
    resp = await client.get("/metrics")
    assert resp.status == 404
    resp = await client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert resp.status == 404


async def test_metrics_need_the_bearer_token(start_client, make_settings):
    client = await start_client(make_settings(metrics_token=METRICS_TOKEN))
    for headers in ({}, {"Authorization": "Bearer wrong-token-of-some-length"},
                    {"Authorization": f"Basic {METRICS_TOKEN}"},
                    {"Authorization": f"Bearer {METRICS_TOKEN}x"}):
        resp = await client.get("/metrics", headers=headers)
        assert resp.status == 401, headers
        assert "error" in await resp.json()
        assert METRICS_TOKEN not in await resp.text()


async def test_counters_move_with_requests_and_no_label_holds_an_id_or_token(start_client,
                                                                             make_settings):
    client = await start_client(make_settings(metrics_token=METRICS_TOKEN,
                                              ratelimit_public="2/60"))
    api = Api(client)
    _, before = await scrape(client)
    owner = await api.register()
    team = await api.team(owner)
    secret_id = await api.secret(owner, team, "DB_URL", "postgres://x")
    for _ in range(3):
        resp = await client.get(f"/api/v1/teams/{team}/secrets/{secret_id}",
                                headers=api.auth(owner["token"]))
        assert resp.status == 200
    resp = await client.post(f"/api/v1/teams/{team}/secrets/{secret_id}/shares",
                             headers=api.auth(owner["token"]), json={"max_views": 5})
    share_token = (await resp.json())["url"].rsplit("/", 1)[1]
    statuses = [(await client.get(f"/api/v1/public/share/{share_token}")).status for _ in range(3)]
    assert statuses == [200, 200, 429]
    assert (await client.get("/no/such/page")).status == 404

    text, after = await scrape(client)
    read = "/api/v1/teams/{team_id}/secrets/{secret_id}"
    assert value(after, "cvsm_http_requests_total", route=read, method="GET", status="200") \
        == value(before, "cvsm_http_requests_total", route=read, method="GET", status="200") + 3
    assert value(after, "cvsm_audited_reads_total", kind="secret") == 3
    assert value(after, "cvsm_audited_reads_total", kind="share") == 2
    share_route = "/api/v1/public/share/{token}"
    assert value(after, "cvsm_rate_limit_rejections_total", route=share_route) == 1
    assert value(after, "cvsm_http_requests_total", route="unmatched", method="GET",
                 status="404") == 1
    assert value(after, "cvsm_http_request_duration_seconds_count", route=read, method="GET") == 3
    assert value(after, "cvsm_db_pool_connections", state="open") >= 1
    assert value(after, "cvsm_db_pool_connections", state="max") >= \
        value(after, "cvsm_db_pool_connections", state="free")
    for secret in (share_token, secret_id, team, owner["token"], METRICS_TOKEN, "no/such"):
        assert secret not in text

    _, later = await scrape(client)
    metrics_route = dict(route="/metrics", method="GET", status="200")
    assert value(later, "cvsm_http_requests_total", **metrics_route) == \
        value(after, "cvsm_http_requests_total", **metrics_route) + 1
