"""Reading the outbox: the `.eml` files `mail_sender.OutboxTransport` writes to
`$CVSM_DATA_DIR/outbox/` when no `CVSM_SMTP_URL` is set, for `cvsm-server mail list` and
`mail show`.

The files are MIME as a mail program gets it: the text part is quoted-printable, so a long link
is cut over two lines with `=` and its own `=` signs read `=3D`; `grep` on the file gives broken
links. Here the stdlib `email` package decodes each message, and `show` prints the text part as
its reader sees it, every link whole.

A message carries text the server's users wrote (a name, a team's name, a support message), and
that text may look like a link or hold characters that reorder or hide what a terminal shows.
So `show --links` prints only the links the server made (the `href`s of the HTML part's `<a>`
elements: the templates put only the server's links there, and a user's text is escaped text),
`show` marks each link-like piece of text that is not one of them (`NOT_SERVER_LINK`), and
every line printed has its control and format characters (U+202E and the other bidi controls,
zero-width ones, escape sequences) written as `\\uXXXX` (`printable`).
"""

from __future__ import annotations

import email
import email.policy
import email.utils
import re
import unicodedata
from dataclasses import dataclass
from email.message import EmailMessage
from html.parser import HTMLParser
from pathlib import Path

# `<YYYYmmddTHHMMSSZ>-<mail id>.eml`, as `mail_sender.OutboxTransport` names them.
FILE_NAME = re.compile(r"(\d{8}T\d{6}Z)-([0-9a-f-]{36})\.eml\Z")
SHORT_ID = 8
LINK = re.compile(r"https?://[^\s<>\"']+")
NOT_SERVER_LINK = "[user text, not a link the server made:] "
# Characters a terminal does not print as themselves: controls (C0, C1), format characters (the
# bidi controls U+202A-U+202E and U+2066-U+2069, zero-width ones), line and paragraph
# separators, surrogates, private-use and unassigned code points.
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


class OutboxError(Exception):
    """The outbox cannot answer (empty, no such message, unreadable); the message says why."""


@dataclass(frozen=True)
class Entry:
    """One message in the outbox. Its repr holds no body (bodies carry single-use links)."""

    path: Path
    mail_id: str
    date: str
    to: str
    subject: str

    @property
    def short_id(self) -> str:
        return self.mail_id[:SHORT_ID]


def _parse(path: Path) -> EmailMessage:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise OutboxError(f"cannot read {path}: {(exc.strerror or str(exc)).lower()}") from None
    return email.message_from_bytes(data, policy=email.policy.default)  # type: ignore[return-value]


def _date(message: EmailMessage, stamp: str) -> str:
    """`YYYY-MM-DD HH:MM:SSZ` (UTC), from the Date header or else the file name."""
    try:
        when = email.utils.parsedate_to_datetime(str(message["Date"]))
        return when.strftime("%Y-%m-%d %H:%M:%SZ")
    except (TypeError, ValueError):
        return f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}Z"


def entries(directory: Path) -> list[Entry]:
    """The outbox's messages, oldest first (by the time each was written)."""
    if not directory.is_dir():
        return []
    try:
        files = [(path, FILE_NAME.match(path.name)) for path in directory.iterdir()]
    except OSError as exc:
        raise OutboxError(f"cannot read {directory}: {(exc.strerror or str(exc)).lower()}") from None
    found = []
    for path, match in files:
        if match is None:
            continue  # a `.part` still being written, or a file not ours
        message = _parse(path)
        try:
            written = path.stat().st_mtime_ns
        except OSError:
            written = 0
        entry = Entry(path, match.group(2), _date(message, match.group(1)),
                      str(message["To"] or "-"), str(message["Subject"] or "-"))
        found.append((match.group(1), written, path.name, entry))
    return [entry for *_, entry in sorted(found, key=lambda item: item[:3])]


def find(directory: Path, ref: str | None) -> Entry:
    """The message `ref` names (its id, a unique start of it, or its file name); None: the
    newest."""
    found = entries(directory)
    if not found:
        raise OutboxError(f"no mail in {directory}")
    if ref is None:
        return found[-1]
    ref = ref.strip().lower()
    matches = [e for e in found if ref and (e.path.name == ref or e.mail_id.startswith(ref))]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise OutboxError(f"no message {ref!r} in {directory} (`cvsm-server mail list` lists them)")
    raise OutboxError(f"{ref!r} starts {len(matches)} message ids; give more of it")


def text_of(message: EmailMessage) -> str:
    """The message's text as its reader sees it: the plain part decoded (else the HTML one)."""
    body = message.get_body(preferencelist=("plain", "html"))
    if body is None:
        return ""
    content = body.get_content()
    text = content if isinstance(content, str) else content.decode("utf-8", "replace")
    return text.replace("\r\n", "\n")  # the files keep SMTP's line ends


def links(text: str) -> list[str]:
    """The http(s) links in `text`, each once, in order (a sentence's final stop left out)."""
    return list(dict.fromkeys(link.rstrip(".,;:)]") for link in LINK.findall(text)))


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v and LINK.fullmatch(v)]


def server_links(message: EmailMessage) -> list[str]:
    """The links the server made, each once, in order: the `href`s of the HTML part's `<a>`
    elements (a user's text is never one: the templates escape it)."""
    body = message.get_body(preferencelist=("html",))
    if body is None:
        return []
    content = body.get_content()
    parser = _Anchors()
    parser.feed(content if isinstance(content, str) else content.decode("utf-8", "replace"))
    parser.close()
    return list(dict.fromkeys(parser.hrefs))


def printable(text: str, *, lines: bool = True) -> str:
    """`text` as a terminal shows it faithfully: a backslash doubled, and each character that
    is not printed as itself (`_HIDDEN`: U+202E, an escape, a NUL...) written `\\uXXXX`; line
    feeds and tabs are kept when `lines`."""
    def shown(ch: str) -> str:
        if ch == "\\":
            return "\\\\"
        if (lines and ch in "\n\t") or unicodedata.category(ch) not in _HIDDEN:
            return ch
        return f"\\u{ord(ch):04x}"
    return "".join(map(shown, text))


def show(entry: Entry, *, links_only: bool = False) -> str:
    """The message as `cvsm-server mail show` prints it, through `printable`: its headers and
    decoded text, each link-like piece of text the server did not make marked
    `NOT_SERVER_LINK`; or only the links the server made, one a line."""
    message = _parse(entry.path)
    made = server_links(message)
    if links_only:
        return "\n".join(printable(link, lines=False) for link in made)
    text = LINK.sub(lambda m: m[0] if m[0].rstrip(".,;:)]") in made else NOT_SERVER_LINK + m[0],
                    text_of(message))
    headers = [f"{name}: {printable(str(message[name]), lines=False)}"
               for name in ("From", "To", "Date", "Subject") if message[name] is not None]
    return "\n".join([*headers, f"File: {entry.path}", "", printable(text.rstrip("\n"))])


def listing(directory: Path) -> list[str]:
    """One line per message, oldest first: short id, date, recipient, subject (`printable`)."""
    return [f"{e.short_id}  {e.date}  {printable(e.to, lines=False)}  "
            f"{printable(e.subject, lines=False)}" for e in entries(directory)]
