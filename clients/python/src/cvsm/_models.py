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
class SecretSummary:
    """One entry of a secret listing: metadata, never the value."""

    id: str
    name: str
    environment: str | None


def _unreadable(what: str) -> NetworkError:
    return NetworkError(f"unreadable response: {what}")


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


@attrs.frozen
class SecretRead:
    """A read by name: the value as served, and whether the server marks the team end-to-end.

    For an end-to-end team (``e2e``) the value is the sealed envelope, not the plaintext.
    ``version`` is the secret's current version when the answer says it (a live cache compares it
    with the change stream's).
    """

    value: str = attrs.field(repr=False)
    e2e: bool = False
    version: int | None = None


@attrs.frozen
class WrappedTeamKey:
    """The answer to ``GET /teams/{team}/e2e/key``: the team key wrapped to the caller, and the
    answer's ``links`` as they came (read with the key: a malformed one is a decryption error)."""

    team_id: str
    key_version: int
    wrapped_key: str = attrs.field(repr=False)
    links: Any = attrs.field(default=None, repr=False)


def parse_secret_value(body: Any) -> SecretRead:
    """Read ``{"secret": {..., "e2e": bool}, "value": "<plaintext or envelope>"}``.

    The team is end-to-end when ``e2e`` is true in the secret object or beside it.
    """
    value = body.get("value") if isinstance(body, dict) else None
    secret = body.get("secret") if isinstance(body, dict) else None
    if not isinstance(value, str) or not isinstance(secret, dict):
        raise _unreadable("expected a JSON object with a \"secret\" object and a string \"value\"")
    version = secret.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        version = None
    return SecretRead(value, body.get("e2e") is True or secret.get("e2e") is True, version)


def parse_team_key(body: Any) -> WrappedTeamKey:
    """Read ``{"team_id": "<uuid>", "key_version": <int>, "wrapped_key": "cvsm-wrap1....",
    "links": [{"key_version": <int>, "link": "cvsm-link1...."}, ...]}``. Without its team id, key
    version or wrap the answer is unreadable (rule R3); ``links`` is kept as it came and checked
    with the key it chains (``e2e.parse_links``), where a malformed one is a decryption error."""
    if not isinstance(body, dict):
        raise _unreadable("expected a JSON object with team_id, key_version and wrapped_key")
    team_id, key_version, wrapped = body.get("team_id"), body.get("key_version"), body.get("wrapped_key")
    if (
        not isinstance(team_id, str)
        or not team_id
        or isinstance(key_version, bool)
        or not isinstance(key_version, int)
        or key_version < 1
        or not isinstance(wrapped, str)
    ):
        raise _unreadable("expected a JSON object with team_id, key_version and wrapped_key")
    return WrappedTeamKey(team_id, key_version, wrapped, body.get("links"))


def parse_export(body: Any) -> dict[str, str]:
    """Read the JSON export: an object whose values are all strings (name -> value)."""
    if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values()):
        raise _unreadable("expected a JSON object of names to string values")
    return body
