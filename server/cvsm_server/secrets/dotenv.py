"""The `.env` format: rendering an export and parsing an import.

Rendering (`render`, the export)
--------------------------------
One `NAME=value` line per secret, sorted by name, LF line ends, no `export` prefix. Every value
stays on its line: a line break inside a value is written as `\\n` or `\\r`, so the file has
exactly one line per secret and a line-based reader (`docker run --env-file`, systemd's
`EnvironmentFile`, anything that splits on LF, CR or CRLF and takes `NAME=rest`) finds exactly
the exported names, whatever the values hold. Each value is quoted:

- In single quotes, character for character, when the value holds no `'`, no LF, no CR, no two
  backslashes in a row and does not end with a backslash: `NAME='value'`. Every reader below
  (shells included) reads these exactly.
- Otherwise in double quotes, with a backslash before each `\\`, `"`, `$` and backtick, LF
  written `\\n` and CR `\\r`; every other character (tab, NUL, other control characters,
  non-ASCII) as it is: `NAME="it's \\$5"`, `KEY="-----BEGIN KEY-----\\nMIIE..."`. A value that
  ends with a backslash also gets the comment ` # ends with a backslash: "\\"` after its closing
  quote: without it, Node's dotenv takes that closing quote as escaped and reads on into the
  next lines; the `"` in the comment stops it.

What each reader gets (each checked against the real program in server/tests/test_dotenv.py):

- `parse` below: every value exactly, NUL included (the export round-trips through the import).
- python-dotenv 1.2 (`dotenv_values`, from a stream or a path, `interpolate=False`): every value
  exactly but a double-quoted one that holds `$` or a backtick: python-dotenv keeps the
  backslash written before each `$` and backtick. With `interpolate=True` (its default) it
  expands `${NAME}` in every value.
- Node's dotenv (`dotenv.parse`, tested with dotenv 18.0.10, whose default parser has the line
  pattern of 16 and 17 too, and with its `{fast: true}` parser): a single-quoted value exactly;
  a double-quoted one as written between the quotes with only `\\n` and `\\r` decoded, which is
  exact when the value holds none of `\\`, `"`, `$` and backtick (a PEM key, a value with a `'`
  or a line break and none of those). The name `__proto__` is lost (it sets the prototype of
  Node's result object).
- POSIX shells and zsh (`set -a; . ./file; set +a`): a single-quoted value exactly; a
  double-quoted one exactly but each line break, which they read as the two characters `\\n` or
  `\\r` (shells have `format=shell` for that, see `cvsm_server.secrets.shell_export`). Nothing is
  expanded or run. No environment variable can hold NUL: bash and dash drop NUL characters, zsh
  cuts the value at the first one. A secret whose name means something to the shell itself
  (`PATH`, `IFS`, read-only `UID`, ...) acts as that variable.
- Every reader finds exactly the exported names (Node: but `__proto__`): no value can end a line
  early or make a reader take part of a value for a line of its own. Characters that Python's
  `str.splitlines()` also takes for line ends (VT, FF, FS, GS, RS, NEL, U+2028, U+2029) are
  written as they are, since neither python-dotenv nor Node's dotenv would read an escape for
  them back; no reader above ends a line there.

Parsing (`parse`, the import)
-----------------------------
`parse` reads what python-dotenv reads (its parser is the reference: the tests compare the two on
a corpus and on generated text), with no variable expansion, and reports each entry it does not
import as an item error naming its line:

- A leading UTF-8 byte order mark is dropped. LF, CRLF and a lone CR end a line outside quotes.
  Line numbers are 1-based; an entry's `line` is where its key is, `end_line` where it ends.
- Blank space (any Unicode white space, blank lines included) before an entry is skipped. A `#`
  there starts a comment up to the end of the line.
- An entry is `[export ]KEY=VALUE`: an optional `export` and blanks, a key (no white space, `=` or
  `#`; or a `'quoted'` key), optional blanks, `=`, optional blanks, the value, then optional
  blanks, an optional `#` comment and the end of the line. `parsed` counts the entries that
  have the `KEY=` part; the key as written must then be a valid secret name (a quoted key never
  is), or the entry is an item error. Its value is still read, so that a multi-line value of an
  invalid key is one item error, never lines of its own.
- A line with no `=` after its key, or no key, is an item error not counted in `parsed`.
- A value in double quotes may span lines. A backslash always takes the character after it
  (so `\\"` does not close the value); `\\\\ \\" \\' \\n \\r \\t \\a \\b \\f \\v` are decoded as
  python-dotenv does, and, unlike python-dotenv, `\\$` and backtick after a backslash give `$`
  and a backtick, as in a shell (that is how the export writes them). Other backslashes stay.
- A value in single quotes may span lines; as in python-dotenv, `\\\\` and `\\'` in it give `\\`
  and `'`, every other character is taken as written.
- An unquoted value is the rest of the line, cut at the first `#` that follows white space,
  trailing white space removed. With only blanks and a `#` after `=`, the value is empty; a `#`
  right after `=` or inside a word is part of the value (`URL=https://host/#frag`).
- A quote with no closing quote anywhere after it is an item error for its line, and reading
  goes on at the next line. Text other than a comment after the closing quote is an item error
  for the whole entry, up to the end of the line where the quote closed (python-dotenv skips the
  same lines); its message names both lines.
- Nothing is ever expanded or executed: `$VAR`, `${VAR}`, `$(cmd)` and backticks stay literal.
- Duplicate keys: the first entry that gives a key a valid value imports; a later one with the
  same key is an item error ("duplicate in file"), never a silent override.

Error messages name the line, never the value.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass

from ..core.i18n import N_, Text
from .inputs import INVALID_NAME, NAME_RE  # one name rule, one message, for every input

# The messages of the lines refused (`Text`: Indonesian in the API, translated on a page).
NOT_KEY_VALUE = N_("Baris {line} bukan format KEY=VALUE")
UNTERMINATED = N_("Baris {line}: tanda kutip pembuka tidak ditutup")
TRAILING_TEXT = N_("Baris {line}: ada teks setelah tanda kutip penutup")
TRAILING_TEXT_SPAN = N_("Baris {line}: tanda kutip yang dibuka di baris ini baru ditutup di baris "
                        "{end} dan diikuti teks lain; baris {line} sampai {end} tidak diimpor")
DUPLICATE = N_("Nama ganda di dalam file (pertama kali di baris {first})")

# --- rendering --------------------------------------------------------------------------------

_DOUBLE_QUOTE_ESCAPES = {"\\": "\\\\", '"': '\\"', "$": "\\$", "`": "\\`", "\n": "\\n",
                         "\r": "\\r"}
BACKSLASH_END_NOTE = ' # ends with a backslash: "\\"'


def single_quotable(value: str) -> bool:
    """True when `value` is written in single quotes (see the module docstring)."""
    return (not any(ch in value for ch in "'\n\r") and "\\\\" not in value
            and not value.endswith("\\"))


def quote(value: str) -> str:
    """`value` as it follows `NAME=` in an export, comment included where there is one."""
    if single_quotable(value):
        return "'" + value + "'"
    quoted = '"' + "".join(_DOUBLE_QUOTE_ESCAPES.get(ch, ch) for ch in value) + '"'
    return quoted + BACKSLASH_END_NOTE if value.endswith("\\") else quoted


def render(values: Mapping[str, str]) -> str:
    """The `.env` export: one line per name, sorted by name."""
    return "".join(f"{name}={quote(values[name])}\n" for name in sorted(values))


# --- parsing ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One entry of the file: a `name` and `value`, or an `error` (Indonesian)."""

    line: int  # 1-based line where the entry (its key) starts
    name: str | None  # the key as written; None when the entry has no KEY= part
    value: str | None = None
    error: str | None = None
    key_line: bool = True  # has the KEY= part (counted in `parsed`)
    end_line: int | None = None  # the line where the entry ends; None: the same as `line`

    @property
    def ok(self) -> bool:
        return self.error is None


# The pieces of python-dotenv's grammar (dotenv/parser.py), matched at a position.
_NEWLINE = re.compile(r"\r\n|\n|\r")
_SPACE = re.compile(r"\s*")
_BLANKS = re.compile(r"[^\S\r\n]*")
_EXPORT = re.compile(r"export[^\S\r\n]+")
_QUOTED_KEY = re.compile(r"'[^']+'")
_KEY = re.compile(r"[^=#\s]+")
_EQUALS = re.compile(r"=[^\S\r\n]*")
_SINGLE_QUOTED = re.compile(r"'((?:\\.|[^'\\])*)'", re.DOTALL)
_DOUBLE_QUOTED = re.compile(r'"((?:\\.|[^"\\])*)"', re.DOTALL)
_UNQUOTED = re.compile(r"[^\r\n]*")
_COMMENT = re.compile(r"[^\S\r\n]*#[^\r\n]*")
_END_OF_LINE = re.compile(r"[^\S\r\n]*(?:\r\n|\n|\r|\Z)")
_REST_OF_LINE = re.compile(r"[^\r\n]*(?:\r\n|\n|\r)?")

_SINGLE_ESCAPES = re.compile(r"\\[\\']")
_DOUBLE_ESCAPES = re.compile(r"\\[\\'\"abfnrtv$`]")
_DOUBLE_DECODED = {"\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f", "n": "\n",
                   "r": "\r", "t": "\t", "v": "\v", "$": "$", "`": "`"}


def _unquoted(part: str) -> str:
    """python-dotenv's `re.sub(r"\\s+#.*", "", part).rstrip()`, in linear time."""
    hash_at = part.find("#", 1)
    while hash_at > 0:
        if part[hash_at - 1].isspace():
            return part[:hash_at].rstrip()
        hash_at = part.find("#", hash_at + 1)
    return part.rstrip()


def _with(message: str, **values: int) -> Text:
    """`message` with the values it names (a line's message names `{line}`, a span's `{end}`)."""
    return Text(message, **{name: value for name, value in values.items()
                            if "{" + name + "}" in message})


class _Failed(Exception):
    """The entry cannot be read: `message` (with `{line}` and `{end}`); reading stopped at `at`."""

    def __init__(self, message: str, at: int, key: str | None, *, key_line: bool = True) -> None:
        super().__init__(message)
        self.message, self.at, self.key, self.key_line = message, at, key, key_line


class _Reader:
    """python-dotenv's reader over the whole text (so quoted values may span lines)."""

    def __init__(self, content: str) -> None:
        self.text = content[1:] if content.startswith("\ufeff") else content
        self.pos = 0
        self._line_ends = [m.end() for m in _NEWLINE.finditer(self.text)]

    def line_at(self, offset: int) -> int:
        """The line of the character at `offset` (a line break belongs to the line it ends)."""
        return bisect_right(self._line_ends, offset) + 1

    def take(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        match = pattern.match(self.text, self.pos)
        if match is not None:
            self.pos = match.end()
        return match

    def peek(self) -> str:
        return self.text[self.pos:self.pos + 1]

    def entry(self) -> tuple[str, str, int] | None:
        """Read the entry at `pos` (past its leading space): (key as written, value, offset of
        its last character), or None for a comment. Raises _Failed."""
        self.take(_EXPORT)
        if self.peek() == "#":
            self.take(_REST_OF_LINE)
            return None
        key = self.take(_QUOTED_KEY if self.peek() == "'" else _KEY)
        if key is None:
            raise _Failed(NOT_KEY_VALUE, self.pos, None, key_line=False)
        self.take(_BLANKS)
        if self.peek() != "=":
            raise _Failed(NOT_KEY_VALUE, self.pos, None, key_line=False)
        equals = self.take(_EQUALS)
        assert equals is not None
        if len(equals.group()) > 1 and self.peek() == "#":
            value = ""  # `KEY= # comment`
        else:
            value = self.value(key.group())
        self.take(_COMMENT)
        last = self.pos - 1
        if self.take(_END_OF_LINE) is None:
            raise _Failed(TRAILING_TEXT, self.pos, key.group())
        return key.group(), value, last

    def value(self, key: str) -> str:
        first = self.peek()
        if first == "'":
            match = self.take(_SINGLE_QUOTED)
            if match is None:
                raise _Failed(UNTERMINATED, self.pos, key)
            return _SINGLE_ESCAPES.sub(lambda m: m.group()[1], match.group(1))
        if first == '"':
            match = self.take(_DOUBLE_QUOTED)
            if match is None:
                raise _Failed(UNTERMINATED, self.pos, key)
            return _DOUBLE_ESCAPES.sub(lambda m: _DOUBLE_DECODED[m.group()[1]], match.group(1))
        if first in ("", "\n", "\r"):
            return ""
        match = self.take(_UNQUOTED)
        assert match is not None
        return _unquoted(match.group())


def parse(content: str) -> list[Entry]:
    """Every entry of `content` (comments and blank space skipped) as an Entry, in file order."""
    reader = _Reader(content)
    entries: list[Entry] = []
    first_line: dict[str, int] = {}
    while True:
        reader.take(_SPACE)
        if reader.pos >= len(reader.text):
            return entries
        line = reader.line_at(reader.pos)
        try:
            read = reader.entry()
        except _Failed as failed:
            reader.pos = failed.at
            reader.take(_REST_OF_LINE)  # python-dotenv goes on after the line where it failed
            end = reader.line_at(failed.at)
            message = TRAILING_TEXT_SPAN if failed.message == TRAILING_TEXT and end > line \
                else failed.message
            entries.append(Entry(line, failed.key, error=_with(message, line=line, end=end),
                                 key_line=failed.key_line, end_line=end))
            continue
        if read is None:
            continue
        name, value, last = read
        end = reader.line_at(last)
        if not NAME_RE.match(name):
            entries.append(Entry(line, name, error=INVALID_NAME, end_line=end))
        elif name in first_line:
            entries.append(Entry(line, name, error=Text(DUPLICATE, first=first_line[name]),
                                 end_line=end))
        else:
            first_line[name] = line
            entries.append(Entry(line, name, value=value, end_line=end))


def parsed_count(entries: list[Entry]) -> int:
    return sum(1 for e in entries if e.key_line)
