"""Mail, queued: messages from Jinja2 templates (plain text and HTML), stored in PostgreSQL and
delivered by a background sender (`mail_sender`), so a mail failure never loses the action that
sent it.

- `enqueue` stores a rendered message in `mail_outbox` in the caller's transaction (`send`
  renders and queues): the mail exists exactly when the action committed. The message is sealed
  with the master key (it carries single-use links) and `NOTIFY cvsm_mail` wakes the senders
  once the transaction commits, on every server process.
- No link token reaches a log: each message keeps its links with their tokens cut out.
- A mail is written in its recipient's language (`core.i18n`): the account's choice when the
  address has an account that chose one, else the language of the request that sent it.
- Mail that anyone can make the server send to an address of their choosing (`UNSOLICITED`:
  verification, reset, newsletter confirmation, invitation) is limited per recipient,
  whoever asks and from wherever (`PER_RECIPIENT`, counted in PostgreSQL like the other limits):
  past it the message is silently not queued, so the asker learns nothing about the address.
"""

from __future__ import annotations

import email.policy
import email.utils
import json
import logging
import uuid
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import jinja2

from .. import db
from ..accounts import ratelimit
from ..core import i18n
from ..core.config import RateLimit
from ..crypto.sealing import Keyring, mail_aad
from ..core.inputs import one_line

log = logging.getLogger("cvsm.mail")

CHANNEL = "cvsm_mail"
REDACTED = "[token]"

_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("cvsm_server", "templates/mail"),
    autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default=False),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    extensions=["jinja2.ext.i18n"],
)
# `{{ _("...") }}` and `{% trans %}`: the mail's language (`render`)
_templates.install_gettext_callables(i18n.gettext, i18n.ngettext, newstyle=True,
                                     pgettext=i18n.pgettext, npgettext=i18n.npgettext)
_templates.globals["language"] = i18n.current_language  # `<html lang>`


@dataclass(frozen=True)
class Message:
    """A rendered mail. Its repr names only the recipient and subject: bodies carry links."""

    to: str
    subject: str
    text: str
    html: str
    # The links in the body with their tokens cut out, for the log.
    redacted_links: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"Message(to={self.to!r}, subject={self.subject!r})"

    def to_email(self, sender: str, message_id_domain: str | None = None) -> EmailMessage:
        mail = EmailMessage(policy=email.policy.SMTP)
        # Header text on one line, whatever was queued: a subject rendered from a team name
        # stored with a line break (before `inputs.check_line`) is still delivered.
        mail["From"] = sender
        mail["To"] = one_line(self.to)
        mail["Subject"] = one_line(self.subject)
        mail["Date"] = email.utils.formatdate(localtime=False, usegmt=True)
        mail["Message-ID"] = email.utils.make_msgid(domain=message_id_domain)
        mail.set_content(self.text)
        mail.add_alternative(self.html, subtype="html")
        return mail


def redact(link: str, token: str) -> str:
    return link.replace(token, REDACTED)


def render(template: str, to: str, context: dict[str, Any], *, tokens: tuple[str, ...] = (),
           language: str | None = None) -> Message:
    """Render `mail/<template>.txt` and `.html`; each sets `subject` (`{% set subject = ... %}`).

    `tokens` are the secrets in the context's links, so the log can show the links without them.
    The mail is in `language` (`id`, `en`), else in the current one (the request's)."""
    with i18n.use_language(language or i18n.current_language()):
        return _render(template, to, context, tokens)


def _render(template: str, to: str, context: dict[str, Any], tokens: tuple[str, ...]) -> Message:
    text_module = _templates.get_template(f"{template}.txt").make_module(context)
    html = _templates.get_template(f"{template}.html").render(context)
    links = []
    for value in context.values():
        if isinstance(value, str) and value.startswith(("http://", "https://")):
            for token in tokens:
                value = redact(value, token)
            links.append(value)
    return Message(to=to, subject=one_line(str(getattr(text_module, "subject"))).strip(),
                   text=str(text_module).strip() + "\n", html=html, redacted_links=tuple(links))


_aad = mail_aad

UNSOLICITED = frozenset({"verify_email", "password_reset", "newsletter_confirm", "team_invite"})
PER_RECIPIENT = RateLimit(limit=5, period=3600)


async def _recipient_allows(cur: db.Cursor, to: str) -> bool:
    charge = ratelimit.Charge.of("mail_to", to.strip().lower(), PER_RECIPIENT)
    assert charge is not None
    row = await db.fetchone(cur, ratelimit.HIT_CTE, charge.params())
    return row["count"] <= PER_RECIPIENT.limit


async def enqueue(cur: db.Cursor, keyring: Keyring, purpose: str,
                  message: Message) -> uuid.UUID | None:
    """Queue `message` in the caller's transaction; the senders wake when it commits. None (and
    nothing queued) when an `UNSOLICITED` purpose's recipient is over `PER_RECIPIENT`."""
    if purpose in UNSOLICITED and not await _recipient_allows(cur, message.to):
        log.info("%s mail not queued: its recipient is over %d mails an hour", purpose,
                 PER_RECIPIENT.limit)
        return None
    mail_id = uuid.uuid4()
    payload = json.dumps({"to": message.to, "subject": message.subject, "text": message.text,
                          "html": message.html, "links": list(message.redacted_links)}).encode()
    sealed = keyring.seal(payload, _aad(mail_id))
    await cur.execute(
        """INSERT INTO mail_outbox (id, recipient, purpose, key_id, nonce, ciphertext)
           VALUES (%s, %s, %s, %s, %s, %s)""",
        (mail_id, message.to, purpose, sealed.key_id, sealed.nonce, sealed.ciphertext),
    )
    await cur.execute(f"NOTIFY {CHANNEL}")
    return mail_id


async def language_of(cur: db.Cursor, to: str) -> str | None:
    """The language the account with the address `to` chose, None when none (or no account)."""
    row = await db.fetchone(cur, "SELECT language FROM users WHERE lower(email) = lower(%s)",
                            (to,))
    return row["language"] if row is not None else None


async def send(cur: db.Cursor, keyring: Keyring, purpose: str, template: str, to: str,
               context: dict[str, Any], *, tokens: tuple[str, ...] = ()) -> uuid.UUID | None:
    """Render (in the recipient's language) and queue in one call (what the domain modules
    use)."""
    language = await language_of(cur, to)
    return await enqueue(cur, keyring, purpose,
                         render(template, to, context, tokens=tokens, language=language))
