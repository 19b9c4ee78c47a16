"""The `.env` format: rendering an export and parsing an import.

Rendering writes one `NAME="value"` line per secret, sorted by name, escaping `\\`, `"`, newline,
carriage return and tab, so that importing an export gives back exactly the same values.

Parsing (`parse`) follows the spec's rules and decides what the spec leaves open:

- The input may start with a UTF-8 byte order mark (dropped) and use LF or CRLF line ends. Lines
  are split on LF only (one CR before it is dropped), never on other Unicode line breaks, so a
  value may hold any other character.
- Blank lines and lines whose first non-blank character is `#` are skipped.
- A KEY line has the shape `[export ]KEY=VALUE`: optional blanks, an optional `export` prefix,
  a key without blanks or `=`, optional blanks, `=`, the value. `parsed` counts these lines.
  The key must then be a valid secret name, or the line is an item error.
- Any other non-blank, non-comment line is an item error too (it is not counted in `parsed`).
- Values: blanks after `=` are dropped. A value in double quotes decodes `\\n`, `\\t`, `\\"`
  (the spec) and also `\\\\` and `\\r` (so an export round-trips); any other backslash stays as
  written. A value in single quotes is taken literally. After the closing quote only blanks and
  a `#` comment may follow; anything else makes the line an item error. An unquoted value ends
  at a blank followed by `#` (an inline comment) and loses its trailing blanks; a `#` with no
  blank before it is part of the value (`URL=https://host/#frag`).
- A quote that is never closed on its line makes that line an item error; heredocs and values
  spanning lines are not supported. The other lines still import.
- Nothing is ever expanded or executed: `$VAR`, `${VAR}`, `$(cmd)` and backticks stay literal.
- Duplicate keys: each line is one item. The first line that gives a key a valid value imports;
  a later line with the same key is an item error ("duplicate in file"), never a silent override.

Error messages name the line, never its value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "r": "\r"}

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}\Z")  # the same rule as secrets.NAME_RE
_KEY_LINE = re.compile(r"[ \t]*(?:export[ \t]+)?([^\s=]+)[ \t]*=(.*)\Z", re.DOTALL)
_BLANKS = " \t"

INVALID_NAME = ("Nama harus diawali huruf atau garis bawah, lalu huruf, angka, atau garis bawah "
                "(maksimal 255 karakter)")
NOT_KEY_VALUE = "Baris {line} bukan format KEY=VALUE"
UNTERMINATED = "Baris {line}: tanda kutip pembuka tidak ditutup"
TRAILING_TEXT = "Baris {line}: ada teks setelah tanda kutip penutup"
DUPLICATE = "Nama ganda di dalam file (pertama kali di baris {first})"


def quote(value: str) -> str:
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in value) + '"'


def render(values: Mapping[str, str]) -> str:
    return "".join(f"{name}={quote(values[name])}\n" for name in sorted(values))


@dataclass(frozen=True)
class Entry:
    """One non-blank, non-comment line: a `name` and `value`, or an `error` (Indonesian)."""

    line: int  # 1-based line number
    name: str | None  # the key as written; None when the line has no KEY=VALUE shape
    value: str | None = None
    error: str | None = None
    key_line: bool = True  # matched the KEY=VALUE shape (counted in `parsed`)

    @property
    def ok(self) -> bool:
        return self.error is None


def _after_quote(rest: str, line: int) -> None:
    """Only blanks and a `#` comment may follow a closing quote."""
    stripped = rest.lstrip(_BLANKS)
    if stripped and not stripped.startswith("#"):
        raise ValueError(TRAILING_TEXT.format(line=line))


def _double_quoted(text: str, line: int) -> str:
    out = []
    i = 1
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt in _UNESCAPES:
                out.append(_UNESCAPES[nxt])
            else:
                out.append(ch + nxt)
            i += 2
            continue
        if ch == '"':
            _after_quote(text[i + 1:], line)
            return "".join(out)
        out.append(ch)
        i += 1
    raise ValueError(UNTERMINATED.format(line=line))


def _single_quoted(text: str, line: int) -> str:
    end = text.find("'", 1)
    if end < 0:
        raise ValueError(UNTERMINATED.format(line=line))
    _after_quote(text[end + 1:], line)
    return text[1:end]


def _unquoted(raw: str) -> str:
    """`raw` (with its leading blanks, so `A= # note` is an empty value) up to ` #`, stripped."""
    for i, ch in enumerate(raw):
        if ch == "#" and i > 0 and raw[i - 1] in _BLANKS:
            raw = raw[:i]
            break
    return raw.strip(_BLANKS)


def parse_value(raw: str, line: int = 1) -> str:
    """The value part of a KEY line (everything after `=`). Raises ValueError on a bad quote."""
    text = raw.lstrip(_BLANKS)
    if text.startswith('"'):
        return _double_quoted(text, line)
    if text.startswith("'"):
        return _single_quoted(text, line)
    return _unquoted(raw)


def lines(content: str) -> list[str]:
    """Split on LF (dropping one CR before it) after removing a leading byte order mark."""
    if content.startswith("\ufeff"):
        content = content[1:]
    out = content.split("\n")
    if out and out[-1] == "":
        out.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in out]


def parse(content: str) -> list[Entry]:
    """Every non-blank, non-comment line of `content` as an Entry, in file order."""
    entries: list[Entry] = []
    first_line: dict[str, int] = {}
    for number, text in enumerate(lines(content), start=1):
        stripped = text.strip(_BLANKS)
        if not stripped or stripped.startswith("#"):
            continue
        match = _KEY_LINE.match(text)
        if match is None:
            entries.append(Entry(number, None, error=NOT_KEY_VALUE.format(line=number),
                                 key_line=False))
            continue
        name, raw = match.group(1), match.group(2)
        if not NAME_RE.match(name):
            entries.append(Entry(number, name, error=INVALID_NAME))
            continue
        try:
            value = parse_value(raw, number)
        except ValueError as exc:
            entries.append(Entry(number, name, error=str(exc)))
            continue
        if name in first_line:
            entries.append(Entry(number, name, error=DUPLICATE.format(first=first_line[name])))
            continue
        first_line[name] = number
        entries.append(Entry(number, name, value=value))
    return entries


def parsed_count(entries: list[Entry]) -> int:
    return sum(1 for e in entries if e.key_line)
