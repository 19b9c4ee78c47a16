"""The access log: one line per request, with share tokens cut out of paths.

Share links carry their token in the URL (`/share/shr_…`, `/api/v1/public/share/shr_…`), so
the default aiohttp access log would write live credentials to disk. This logger never writes a
header other than the user agent, and replaces every `shr_` token in the path.
"""

from __future__ import annotations

import re

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from .web.state import ACTOR, REQUEST_ID

SHARE_TOKEN = re.compile(r"shr_[^/?#]*")


def redact_path(path: str) -> str:
    return SHARE_TOKEN.sub("shr_[redacted]", path)


class RedactingAccessLogger(AbstractAccessLogger):
    """`<client ip> "<METHOD> <path>" <status> <bytes> <ms>ms "<user agent>" <request id>`."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        actor = request.get(ACTOR)
        client = (actor.ip if actor else None) or request.remote or "-"
        agent = (request.headers.get("User-Agent") or "-").replace('"', "'")[:200]
        self.logger.info(
            '%s "%s %s" %s %s %.1fms "%s" %s',
            client, request.method, redact_path(request.rel_url.path), response.status,
            response.body_length, time * 1000, agent, request.get(REQUEST_ID) or "-",
        )
