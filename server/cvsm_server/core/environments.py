"""The environments a secret lives in, defined once: the set in its order (production first), the
message that refuses any other, and the SQL that sorts by that order."""

from __future__ import annotations

ENVIRONMENTS = ("production", "staging", "development")
INVALID_ENVIRONMENT = "Environment harus salah satu dari " + ", ".join(ENVIRONMENTS)


def order_sql(column: str = "environment") -> str:
    """An SQL expression that sorts `column` in ENVIRONMENTS' order."""
    names = ",".join(f"'{environment}'" for environment in ENVIRONMENTS)
    return f"array_position(ARRAY[{names}], {column})"
