"""Timestamps as the API writes and reads them (ISO 8601, UTC)."""

from __future__ import annotations

from datetime import datetime, timezone


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    """Parse an ISO 8601 timestamp; a naive one is taken as UTC. Raises ValueError."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value


def now() -> datetime:
    return datetime.now(timezone.utc)
