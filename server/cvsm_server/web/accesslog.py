"""The access log: one line per request, with credentials cut out; and `redact()`, the one
function that removes credentials from text on its way to a log.

Share links carry their token in the URL (`/share/shr_…`, `/api/v1/public/share/shr_…`), so
the default aiohttp access log would write live credentials to disk. This logger never writes a
header other than the user agent, and redacts every share token (`shr_…`) and API token
(`cvsm_<hex>`) in what it writes. `create_app` wires it for every runner (`handler_args`).
"""

from __future__ import annotations

import logging
import re

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from .state import ACTOR, REQUEST_ID

# `shr_` (or `shr%5F`, any case) and the rest of the URL segment or word: the token is URL-safe base64.
SHARE_TOKEN = re.compile(r"(?i:shr)(?:_|%5[fF])[^\s/?#&'\"\\<>]*")
# `cvsm_` (or `cvsm%5F`, any case) and hex: a run of 8 or more, or a shorter run that ends the word (a cut-off token),
# whatever follows it in the same word, and an end-to-end token's key part: each `.` (or `%2E`)
# and the base64url run after it (the private key, the pinned version, the commitment), so no
# part of a whole token string reaches a log. Identifiers such as `cvsm_server` do not match.
API_TOKEN = re.compile(r"(?i:cvsm)(?:_|%5[fF])(?:[0-9a-fA-F]{8,}|[0-9a-fA-F]+(?![0-9A-Za-z_]))[0-9A-Za-z]*"
                       r"(?:(?:\.|%2[eE])[0-9A-Za-z_-]+)*")
# A long hex run without its prefix: the tail of an API token cut where a line or packet was.
BARE_SECRET_HEX = re.compile(r"[0-9a-fA-F]{32,}")


def redact(text: str) -> str:
    """`text` with every API token, share token and long hex run replaced by a marker."""
    lowered = text.casefold()  # most text has neither prefix: two substring tests skip two scans
    if "shr" in lowered:
        text = SHARE_TOKEN.sub("shr_[redacted]", text)
    if "cvsm" in lowered:
        text = API_TOKEN.sub("cvsm_[redacted]", text)
    return BARE_SECRET_HEX.sub("[redacted]", text)


def redact_path(path: str) -> str:
    return redact(path)


class RedactingAccessLogger(AbstractAccessLogger):
    """`<client ip> "<METHOD> <path>" <status> <bytes> <ms>ms "<user agent>" <request id>`."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        actor = request.get(ACTOR)
        client = (actor.ip if actor else None) or request.remote or "-"
        method = request.method
        line = (f'{redact(str(client))} "{method if method in _METHODS else redact(method)} '
                f'{redact_path(request.rel_url.path)}" {response.status} {response.body_length} '
                f'{time * 1000:.1f}ms "{_agent(request.headers.get("User-Agent") or "-")}" '
                f'{request.get(REQUEST_ID) or "-"}')
        # The record made directly, as `logger.info(line)` would make it, without looking up
        # the caller's frame (one line per request: its cost shows in the server's CPU per read).
        logger.handle(logger.makeRecord(logger.name, logging.INFO, __file__, 0, line, None,
                                        None, "log"))


_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))
# Redacted user agents by the header (a client sends the same one on every request).
_AGENTS: dict[str, str] = {}
_AGENTS_MAX, _AGENT_CACHED_LENGTH = 256, 512


def _agent(raw: str) -> str:
    agent = _AGENTS.get(raw)
    if agent is None:
        agent = redact(raw).replace('"', "'")[:200]
        if len(raw) <= _AGENT_CACHED_LENGTH:
            if len(_AGENTS) >= _AGENTS_MAX:
                _AGENTS.clear()
            _AGENTS[raw] = agent
    return agent
