"""Parse the server's JSON answers into typed records.

An answer of the wrong shape raises :class:`NetworkError` ("unreadable response"): the request
reached a server, but not one that speaks the cvsm API (or the answer was mangled on the way),
so it is retried like a dropped connection.
"""

from __future__ import annotations

from typing import Any

import attrs

from ._errors import NetworkError


@attrs.frozen
class Team:
    """One entry of ``GET /teams``: a team of the caller."""

    id: str
    slug: str


@attrs.frozen
class SecretSummary:
    """One entry of a secret listing: metadata, never the value."""

    id: str
    name: str
    environment: str | None


def _unreadable(what: str) -> NetworkError:
    return NetworkError(f"unreadable response: {what}")


def parse_teams(body: Any) -> list[Team]:
    """Read ``{"teams": [{"id", "slug", ...}]}``."""
    items = body.get("teams") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise _unreadable("expected a JSON object with a \"teams\" list")
    teams = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise _unreadable("a team without an id")
        teams.append(Team(id=item["id"], slug=str(item.get("slug", ""))))
    return teams


def parse_secret_list(body: Any) -> list[SecretSummary]:
    """Read ``{"secrets": [{"id", "name", "environment", ...}], "total"}``."""
    items = body.get("secrets") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise _unreadable("expected a JSON object with a \"secrets\" list")
    secrets = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not isinstance(item.get("name"), str):
            raise _unreadable("a secret without an id or name")
        environment = item.get("environment")
        secrets.append(
            SecretSummary(
                id=item["id"],
                name=item["name"],
                environment=environment if isinstance(environment, str) else None,
            )
        )
    return secrets


def parse_secret_value(body: Any) -> str:
    """Read ``{"secret": {...}, "value": "<plaintext>"}`` and return the value."""
    value = body.get("value") if isinstance(body, dict) else None
    if not isinstance(value, str):
        raise _unreadable("expected a JSON object with a string \"value\"")
    return value


def parse_export(body: Any) -> dict[str, str]:
    """Read the JSON export: an object whose values are all strings (name -> value)."""
    if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values()):
        raise _unreadable("expected a JSON object of names to string values")
    return body
