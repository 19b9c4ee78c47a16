"""Input rules that do not depend on where the input came from: typed fields of a decoded JSON
object, text PostgreSQL can store, text that stays on one line (names, anything that reaches a
mail header), lists of strings, UUIDs, bounded numbers and timestamps.

Every malformed input becomes a `BadRequest` with an Indonesian message naming the field.
(The web layer's `web.request` reads bodies and query strings with these rules.)
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timezone
from typing import Any

from .errors import BadRequest
from .i18n import Text
from .timeutil import parse_iso

# PostgreSQL integer columns and every 64-bit client: numbers beyond these are never valid.
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1

_MISSING = object()
# Digits as every client writes them: ASCII 0-9 only. `str.isdigit()` also accepts `²`, `①`
# and `٣` (which `int()` refuses or reads), so no input is checked with it.
_DIGITS = re.compile(r"[0-9]+")
_SIGNED = re.compile(r"([+-]?)([0-9]+)")
# Characters that break a line or control a terminal: C0 (CR, LF, tab, NUL...), DEL, C1 (NEL
# among them) and Unicode's line and paragraph separators. A name holding one would break the
# line it is shown on, and a mail header it reaches (`email` refuses CR and LF there).
CONTROL_CHARACTERS = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
_CONTROL = re.compile(f"[{CONTROL_CHARACTERS}]")
# An e-mail address: no space or control character anywhere (it goes into mail headers as it
# is), at most 254 characters. The one rule for accounts, invitations, the newsletter and the
# addresses identity providers send.
_ADDRESS_CHAR = rf"[^@\s{CONTROL_CHARACTERS}]"
EMAIL_RE = re.compile(rf"{_ADDRESS_CHAR}{{1,64}}@{_ADDRESS_CHAR}+\.{_ADDRESS_CHAR}+\Z")
EMAIL_MAX = 254
EMAIL_INVALID = "Alamat email tidak valid"


def check_text(name: str, value: str, *, allow_nul: bool = False) -> str:
    """400 for text PostgreSQL cannot store or UTF-8 cannot encode: NUL characters (unless the
    text is only ever stored encrypted) and unpaired surrogates (JSON allows `\\ud800`)."""
    if not allow_nul and "\x00" in value:
        raise BadRequest(Text("Kolom '{name}' berisi karakter yang tidak valid", name=name))
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(Text("Kolom '{name}' berisi karakter yang tidak valid",
                              name=name)) from None
    return value


def check_line(name: str, value: str) -> str:
    """400 for text that must stay on one line (team, user and token names; anything that
    reaches a mail header): what `check_text` refuses, and any control character
    (`CONTROL_CHARACTERS`)."""
    check_text(name, value)
    if _CONTROL.search(value):
        raise BadRequest(Text("Kolom '{name}' tidak boleh berisi karakter kontrol atau baris baru",
                              name=name))
    return value


def one_line(value: str) -> str:
    """`value` with each control character a space and anything UTF-8 cannot encode a `?`: for
    text that must go on one line though it was never checked (a mail header built from data
    stored before `check_line`, a name an identity provider sent)."""
    return _CONTROL.sub(" ", value).encode("utf-8", "replace").decode("utf-8")


def field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], *, required: bool = True,
          default: Any = None, allow_nul: bool = False) -> Any:
    """`body[name]` checked against `kind`; 400 when missing (if required) or of the wrong type.
    An optional field given as null is the same as one left out (`default`).

    Text is also checked with `check_text` (`allow_nul` is for values stored only encrypted);
    integers must fit in 32 bits (no integer field is larger)."""
    value = body.get(name, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise BadRequest(Text("Kolom '{name}' wajib diisi", name=name))
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int in Python; JSON true is never a number here.
    if isinstance(value, bool) and bool not in kinds:
        raise BadRequest(Text("Kolom '{name}' memiliki tipe yang salah", name=name))
    # JSON has one number type: 168.0 is the integer 168 (as JSON Schema's "integer" says).
    if isinstance(value, float) and int in kinds and float not in kinds and value.is_integer():
        value = int(value)
    if not isinstance(value, kinds):
        raise BadRequest(Text("Kolom '{name}' memiliki tipe yang salah", name=name))
    if isinstance(value, str):
        check_text(name, value, allow_nul=allow_nul)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT32_MAX:
        raise BadRequest(Text("Kolom '{name}' di luar rentang yang diizinkan", name=name))
    return value


def string_list(body: dict[str, Any], name: str, *, required: bool = True, max_items: int = 500) -> list[str]:
    items = field(body, name, list, required=required, default=[])
    if len(items) > max_items:
        raise BadRequest(Text("Kolom '{name}' berisi lebih dari {max_items} item", name=name,
                              max_items=max_items))
    if not all(isinstance(i, str) for i in items):
        raise BadRequest(Text("Kolom '{name}' harus berupa daftar teks", name=name))
    for item in items:
        check_text(name, item)
    return items


def parse_uuid(value: Any) -> uuid.UUID | None:
    if not isinstance(value, str):
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def is_digits(text: object, length: int | None = None) -> bool:
    """Whether `text` is ASCII digits only (0-9; `length` of them when given)."""
    return isinstance(text, str) and _DIGITS.fullmatch(text) is not None \
        and (length is None or len(text) == length)


def decimal(text: object, *, max_digits: int = 19, signed: bool = False) -> int | None:
    """The whole number `text` writes in decimal, or None: ASCII digits 0-9 only (a sign too
    with `signed`), at most `max_digits` of them, spaces around ignored. The one parser of
    numbers typed as text (forms, query strings, the CLI): Unicode digits (`²`, `①`, `٣`),
    underscores, signs and anything `int()` would read besides are None, never an exception."""
    if not isinstance(text, str):
        return None
    match = _SIGNED.fullmatch(text.strip()) if len(text) <= 4 * max_digits + 64 else None
    if match is None or (match[1] and not signed) or len(match[2].lstrip("0") or "0") > max_digits:
        return None
    return int(match[1] + match[2])


def whole_number(name: str, text: object, *, minimum: int = 0, maximum: int = INT32_MAX,
                 message: str | None = None) -> int:
    """A form field's whole number from `minimum` to `maximum` (`decimal`); 400 `message` (or
    one naming the field) for anything else."""
    value = decimal(text, max_digits=len(str(maximum)))
    if value is None or not minimum <= value <= maximum:
        raise BadRequest(message or Text("Kolom '{name}' harus bilangan bulat", name=name))
    return value


def bounded_int(name: str, raw: str, *, minimum: int = 0, maximum: int | None = None,
                clamp: bool = True) -> int:
    """A whole number given as text (a query parameter), within 64 bits and `minimum`;
    above `maximum` it is clamped (or refused with `clamp=False`)."""
    value = decimal(raw, max_digits=30, signed=True)
    if value is None:
        raise BadRequest(Text("Parameter '{name}' harus berupa bilangan bulat", name=name))
    if abs(value) > INT64_MAX:
        raise BadRequest(Text("Parameter '{name}' di luar rentang yang diizinkan", name=name))
    if value < minimum:
        raise BadRequest(Text("Parameter '{name}' minimal {minimum}", name=name, minimum=minimum))
    if maximum is not None and value > maximum:
        if not clamp:
            raise BadRequest(Text("Parameter '{name}' maksimal {maximum}", name=name,
                                  maximum=maximum))
        value = maximum
    return value


def timestamp(name: str, text: str) -> datetime:
    """An ISO 8601 time (UTC when it names no zone) that PostgreSQL and Python both read back:
    years 1 to 9999 once in UTC."""
    try:
        value = parse_iso(text).astimezone(timezone.utc)
    except (ValueError, OverflowError):
        raise BadRequest(Text("Kolom '{name}' harus berupa waktu ISO 8601", name=name)) from None
    if not 1 < value.year < 9999:
        raise BadRequest(Text("Kolom '{name}' di luar rentang waktu yang diizinkan", name=name))
    return value


def is_email(value: object) -> bool:
    """Whether `value`, once trimmed, is an address `check_email` accepts."""
    if not isinstance(value, str):
        return False
    value = value.strip()
    return len(value) <= EMAIL_MAX and EMAIL_RE.match(value) is not None


def check_email(value: object) -> str:
    """The address, trimmed; 400 `EMAIL_INVALID` for anything else."""
    if not is_email(value):
        raise BadRequest(EMAIL_INVALID)
    return value.strip()  # type: ignore[union-attr]
