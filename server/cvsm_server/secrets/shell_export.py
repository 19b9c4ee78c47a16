"""The `format=shell` export: one `export NAME=$'...'` line per secret, for `source` and `eval`.

The `.env` export (`cvsm_server.secrets.dotenv`) writes a line break inside a value as `\\n`, which
dotenv libraries decode and shells do not. This format is the one for shells: sourced or
evaluated by bash or zsh, every variable gets exactly its value, and nothing is expanded or run
(each checked against the real shells in server/tests/test_dotenv.py).

- One line per secret, sorted by name, LF line ends: `export NAME=$'value'`.
- Inside the ANSI-C quotes `$'...'`: `\\` is written `\\\\`, `'` is `\\x27`, LF `\\n`, CR `\\r`,
  tab `\\t`, every other ASCII control character (and DEL) `\\xHH` with two hex digits; every
  other character, non-ASCII included, as it is (UTF-8 bytes, which the shells keep whatever
  their locale). A `'` written `\\x27` rather than `\\'` keeps every value one plain single-quoted
  word even for a shell without `$'...'` (dash, a strict POSIX `sh`): there the variables get the
  text as written, escapes and the leading `$` included, but still nothing runs and no value adds
  a variable.
- NUL is left out: no environment variable can hold it (bash stops a `$'...'` string at `\\x00`,
  zsh cuts an exported value at it), so each variable gets its value without its NUL characters.
- A secret whose name means something to the shell itself (`PATH`, `IFS`, read-only `UID`,
  zsh's `path`, ...) acts as that variable, as it would with any other way of setting it.
"""

from __future__ import annotations

from collections.abc import Mapping

_ESCAPES = {"\\": "\\\\", "'": "\\x27", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": ""}


def _char(ch: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if ch < " " or ch == "\x7f":
        return f"\\x{ord(ch):02x}"
    return ch


def quote(value: str) -> str:
    """`value` as it follows `NAME=` in the shell export: `$'...'`."""
    return "$'" + "".join(_char(ch) for ch in value) + "'"


def render(values: Mapping[str, str]) -> str:
    """The shell export: one `export NAME=$'...'` line per name, sorted by name."""
    return "".join(f"export {name}={quote(values[name])}\n" for name in sorted(values))
