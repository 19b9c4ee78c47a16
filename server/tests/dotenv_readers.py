"""The real programs that read a `.env` file, for the tests.

- python-dotenv, imported (a dev dependency), with interpolation off.
"""

from __future__ import annotations

import io
import re

import dotenv as python_dotenv
from dotenv.parser import parse_stream

_NEWLINE = re.compile(r"\r\n|\n|\r")


# --- python-dotenv ----------------------------------------------------------------------------

def python_dotenv_values(text: str) -> dict[str, str | None]:
    return dict(python_dotenv.dotenv_values(stream=io.StringIO(text), interpolate=False))


def python_dotenv_bindings(text: str) -> list[tuple[int, str | None, str | None, bool]]:
    """(line, key, value, error) for each binding python-dotenv reads, blank space and comments
    left out. The line is where the key starts, counted from the text itself (python-dotenv's own
    `original.line` counts a CRLF twice after a line it could not parse)."""
    body = text.removeprefix("\ufeff")
    offset, bindings = 0, []
    for binding in parse_stream(io.StringIO(text)):
        original = binding.original.string
        start = offset + len(original) - len(original.lstrip())
        offset += len(original)
        if binding.key is None and not binding.error:
            continue  # blank space or a comment
        line = 1 + len(_NEWLINE.findall(body, 0, start))
        bindings.append((line, binding.key, binding.value, binding.error))
    assert offset == len(body)
    return bindings
