"""The `.env` format: rendering an export (and, for import, parsing).

Rendering writes one `NAME="value"` line per secret, sorted by name, escaping `\\`, `"`, newline,
carriage return and tab, so that importing an export gives back exactly the same values.
"""

from __future__ import annotations

from collections.abc import Mapping

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(value: str) -> str:
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in value) + '"'


def render(values: Mapping[str, str]) -> str:
    return "".join(f"{name}={quote(values[name])}\n" for name in sorted(values))
