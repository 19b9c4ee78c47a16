"""`GET /metrics`: this process's metrics in the Prometheus text format (prometheus-client).

Served only when `CVSM_METRICS_TOKEN` is set, and then only to `Authorization: Bearer <that
token>` (compared in constant time; anything else is a 401); unset, `/metrics` is a 404 and
nothing is counted. Each server process counts its own requests and answers with its own numbers
(no shared state): with several processes, scrape each or sum what you get.

Requests are labelled by the matched route's pattern (`/api/v1/public/share/{token}`), never by
the path itself, which holds ids and share tokens; a path no route matches is `unmatched`.

- `cvsm_http_requests_total{route, method, status}` and
  `cvsm_http_request_duration_seconds{route, method}` (a histogram)
- `cvsm_audited_reads_total{kind}`: secret values handed out and audited (`secret`: one value by
  id or name, API or dashboard; `export`; `share`: a share link viewed)
- `cvsm_rate_limit_rejections_total{route}`: requests refused with 429
- `cvsm_db_pool_connections{state}`: the database pool's `open`, `free` and `max` connections
"""

from __future__ import annotations

import asyncio
import hmac
import time

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..core.errors import Unauthorized
from .state import POOL, SETTINGS

# (method, route pattern) of the responses that hand out a secret value and audit it, on 200.
AUDITED_READS = {
    ("GET", "/api/v1/teams/{team_id}/secrets/{secret_id}"): "secret",
    ("GET", "/api/v1/teams/{team_id}/secrets/by-name/{name}"): "secret",
    ("POST", "/app/teams/{team}/secrets/{secret_id}/reveal"): "secret",
    ("GET", "/api/v1/teams/{team_id}/secrets/export"): "export",
    ("POST", "/app/teams/{team}/export"): "export",
    ("GET", "/api/v1/public/share/{token}"): "share",
}

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _PoolCollector(Collector):
    def __init__(self, app: web.Application) -> None:
        self._app = app

    def collect(self):
        family = GaugeMetricFamily("cvsm_db_pool_connections",
                                   "Database connections of this process's pool", labels=["state"])
        pool = self._app.get(POOL)
        if pool is not None:
            family.add_metric(["open"], pool.size)
            family.add_metric(["free"], pool.freesize)
            family.add_metric(["max"], pool.maxsize)
        yield family


class Metrics:
    """One process's metrics, in a registry of its own (never the global one)."""

    def __init__(self, app: web.Application) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("cvsm_http_requests", "HTTP requests answered",
                                ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("cvsm_http_request_duration_seconds",
                                 "Time to answer an HTTP request", ["route", "method"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.audited_reads = Counter("cvsm_audited_reads", "Secret values handed out and audited",
                                     ["kind"], registry=self.registry)
        self.rate_limited = Counter("cvsm_rate_limit_rejections",
                                    "Requests refused by a rate limit (429)", ["route"],
                                    registry=self.registry)
        self.registry.register(_PoolCollector(app))

    def observe(self, request: web.Request, status: int, seconds: float) -> None:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        method = request.method if request.method in _METHODS else "other"
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)
        if status == 429:
            self.rate_limited.labels(route).inc()
        elif status == 200 and (kind := AUDITED_READS.get((method, route))):
            self.audited_reads.labels(kind).inc()


_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

METRICS = web.AppKey("metrics", Metrics)


def setup(app: web.Application) -> None:
    """Count requests when `CVSM_METRICS_TOKEN` is set."""
    if app[SETTINGS].metrics_token:
        app[METRICS] = Metrics(app)


@web.middleware
async def metrics_middleware(request: web.Request, handler) -> web.StreamResponse:
    """Count every answer by route pattern and status, with its latency (outside the error
    middleware, so that errors are counted with the status they were answered with)."""
    metrics = request.app.get(METRICS)
    if metrics is None:
        return await handler(request)
    start = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:  # the client went away: no answer to count
        status = 0
        raise
    finally:
        if status:
            metrics.observe(request, status, time.perf_counter() - start)


async def metrics_page(request: web.Request) -> web.Response:
    """`GET /metrics` (outside the JSON API, so not in the OpenAPI document)."""
    metrics = request.app.get(METRICS)
    token = request.app[SETTINGS].metrics_token
    if metrics is None or not token:
        raise web.HTTPNotFound()
    scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
    given = credential.strip().encode() if scheme.lower() == "bearer" else b""
    if not hmac.compare_digest(given, token.encode()):
        raise Unauthorized("Token metrik tidak valid", headers={"WWW-Authenticate": "Bearer"})
    return web.Response(body=generate_latest(metrics.registry),
                        headers={"Content-Type": CONTENT_TYPE_LATEST, "Cache-Control": "no-store"})
