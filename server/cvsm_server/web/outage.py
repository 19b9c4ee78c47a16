"""The requests' side of a database outage, in two log lines per process: one at the first
request answered 503 (with its request id, its route and what happened), one at the next request
answered otherwise (how long, how many 503s); the 503s between are in the access log only.
`web.middleware.failure_of` and `error_middleware` report to it (`state.REQUEST_OUTAGE`)."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("cvsm.errors")


class RequestOutage:
    def __init__(self) -> None:
        self.since: float | None = None
        self.refused = 0

    def failed(self, request_id: str | None, route: str, cause: str) -> None:
        self.refused += 1
        if self.since is not None:
            return
        self.since = time.monotonic()
        log.warning("[%s] the database is unavailable (%s on %s): answering 503 with Retry-After "
                    "until it is back", request_id, cause, route)

    def ok(self) -> None:
        if self.since is None:
            return
        log.warning("the database is back: %d request(s) answered 503 over %.1f s",
                    self.refused, time.monotonic() - self.since)
        self.since, self.refused = None, 0
