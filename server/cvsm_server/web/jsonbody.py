"""A request body's JSON, parsed without holding the event loop and within a bounded number of
values (issue 36: a 30 MiB body of `{}` parsed in one `json.loads` call stalled every request
of the process for a second and left it gigabytes larger).

A body up to `FAST_BYTES` is parsed by `json.loads` at once (milliseconds at most). A larger one
is walked here, one value at a time: objects and arrays by this loop, every string, number
and literal by the standard library's C scanner (so a 64 KiB value is one C call). Every
`STEP_VALUES` values the walk yields to the event loop (`asyncio.sleep(0)`), and it stops with
a 413 once the body holds more values than its cap allows (`max_values`: one per 64 bytes of
the route's body cap, at least `MIN_VALUES`): what a route may legitimately receive, never
millions of empty objects. The result is what `json.loads` gives for the same text (the same
types, the last of duplicate keys, NaN and Infinity, UTF-8/16/32 by the same detection); a
text it refuses is refused here too.

Threads would not help: the C parser holds the GIL for the whole parse, so the loop waits
for it whichever thread runs it.
"""

from __future__ import annotations

import asyncio
import json
import json.decoder
import json.scanner
from collections.abc import Generator
from typing import Any

from ..core.errors import BadRequest, PayloadTooLarge

FAST_BYTES = 64 * 1024
STEP_VALUES = 256
STEP_BYTES = 512 * 1024
MIN_VALUES = 10_000
MAX_DEPTH = 64
# The longest string a body may carry, in characters: a .env file's 200 KiB, even fully
# \u-escaped, fits. A longer one is refused before it is scanned.
MAX_STRING = 2 * 1024 * 1024

NOT_JSON = "Isi permintaan bukan JSON yang valid"
TOO_MANY_VALUES = "Isi permintaan memuat terlalu banyak nilai JSON"
TOO_LONG_STRING = "Isi permintaan memuat teks yang terlalu panjang"

_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # the C scanner: one value at `idx`
_STRING = json.decoder.scanstring
_WHITESPACE = " \t\n\r"


def max_values(cap: int) -> int:
    """How many JSON values (objects, arrays, strings, numbers, literals) a body under a cap of
    `cap` bytes may hold."""
    return max(MIN_VALUES, cap // 256)


async def loads(raw: bytes, *, cap: int) -> Any:
    """`json.loads(raw)` for a body read under a cap of `cap` bytes: a 400 for text that is not
    JSON (or nests deeper than `MAX_DEPTH`), a 413 for more values than `max_values(cap)`."""
    try:
        if len(raw) <= FAST_BYTES:
            return json.loads(raw)
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
        del raw
        walk = _walk(text, max_values(cap))
        while True:
            try:
                next(walk)
            except StopIteration as done:
                return done.value
            await asyncio.sleep(0)  # let every other request run between steps
    except (ValueError, UnicodeDecodeError, RecursionError, IndexError):
        # RecursionError: nesting deep enough to exhaust json.loads is not JSON we accept.
        raise BadRequest(NOT_JSON) from None


def _skip(text: str, idx: int) -> int:
    n = len(text)
    while idx < n and text[idx] in _WHITESPACE:
        idx += 1
    return idx


def _key(text: str, idx: int) -> tuple[str, int]:
    """An object's key at `idx` (after whitespace) and the index after its colon and whitespace."""
    idx = _skip(text, idx)
    if text[idx:idx + 1] != '"':
        raise ValueError("expected a key")
    key, idx = _STRING(text, idx + 1, True)
    idx = _skip(text, idx)
    if text[idx:idx + 1] != ":":
        raise ValueError("expected ':'")
    return key, _skip(text, idx + 1)


def _walk(text: str, budget: int) -> Generator[None, None, Any]:
    """Parse `text` as one JSON value, yielding every `STEP_VALUES` values."""
    # Each open container: [container, key it is waiting a value for (objects) or None].
    stack: list[list[Any]] = []
    count = 0
    idx = _skip(text, 0)
    step_end = STEP_BYTES
    while True:
        count += 1
        if count > budget:
            raise PayloadTooLarge(TOO_MANY_VALUES)
        if count % STEP_VALUES == 0 or idx > step_end:
            yield
            step_end = idx + STEP_BYTES
        char = text[idx:idx + 1]
        if char in ("{", "["):
            if len(stack) >= MAX_DEPTH:
                raise ValueError("nested too deep")
            idx = _skip(text, idx + 1)
            closing = "}" if char == "{" else "]"
            if text[idx:idx + 1] == closing:
                value: Any = {} if char == "{" else []
                idx += 1
            elif char == "{":
                key, idx = _key(text, idx)
                stack.append([{}, key])
                continue
            else:
                stack.append([[], None])
                continue
        else:
            if char == '"' and text.find('"', idx + 1, idx + 2 + MAX_STRING) < 0 \
                    and len(text) > idx + 2 + MAX_STRING:
                raise PayloadTooLarge(TOO_LONG_STRING)
            try:
                value, idx = _SCAN(text, idx)
            except StopIteration:
                raise ValueError("expected a value") from None
        # A value is complete: put it in its container; close the containers it completes.
        while True:
            if not stack:
                if _skip(text, idx) != len(text):
                    raise ValueError("extra data")
                return value
            frame = stack[-1]
            container = frame[0]
            if frame[1] is not None:
                container[frame[1]] = value
            else:
                container.append(value)
            idx = _skip(text, idx)
            char = text[idx:idx + 1]
            if char == ",":
                if frame[1] is not None:
                    frame[1], idx = _key(text, idx + 1)
                else:
                    idx = _skip(text, idx + 1)
                break
            if char == ("}" if frame[1] is not None else "]"):
                stack.pop()
                value = container
                idx += 1
                continue
            raise ValueError("expected ',' or the end of a container")
