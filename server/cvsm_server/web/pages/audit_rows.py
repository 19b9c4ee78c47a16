"""The audit page's rows (`teams.audit_page`), as the template shows them: each cell's HTML made
here, once per distinct value of a page (a page's 50 entries share their people, actions and
secrets), with the page's texts translated once. The template only places the cells: a macro
call, a few filtered links and translations per row cost more than the page's statements.

Every value is escaped (`markupsafe`), as the template's autoescape would; the texts are the
template's own msgids (`N_`: the catalogs keep them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from ...core import i18n
from ...core.i18n import N_

FILTER_PERSON = N_("Saring orang %(user_email)s")
FILTER_ACTION = N_("Saring tindakan %(action)s")
FILTER_SECRET = N_("Saring secret %(name)s")
VIA_TOKEN = N_("via token")
VERSION = N_("versi %(version)s")
TOKEN = N_("token")
NOBODY = "—"

Link = Callable[..., str]


@dataclass(frozen=True, slots=True)
class Row:
    """One entry's cells: time (UTC), who (and the token it went through), the action, its
    target, the IP address."""

    when: str
    by: Markup
    action: Markup
    target: Markup
    ip: str


class _Cells:
    """The page's cells, each made once per distinct value (plain f-strings of escaped values:
    `Markup.format` costs ten times more)."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.texts = {text: i18n.gettext(text)
                      for text in (FILTER_PERSON, FILTER_ACTION, FILTER_SECRET, VIA_TOKEN,
                                   VERSION, TOKEN)}
        self.made: dict[tuple, Markup] = {}

    def once(self, key: tuple, make: Callable[[], str]) -> Markup:
        try:
            cell = self.made.get(key)
        except TypeError:  # a value no dict can key (a list in the metadata): made each time
            return Markup(make())
        if cell is None:
            cell = self.made[key] = Markup(make())
        return cell

    def person(self, email: str | None, via_token: Any) -> str:
        texts = self.texts
        if email:
            label = texts[FILTER_PERSON] % {"user_email": escape(email)}
            cell = (f'<a href="{escape(self.link(person=email.lower()))}" aria-label="{label}">'
                    f'{escape(email)}</a>')
        else:
            cell = NOBODY
        if via_token:
            cell += (f' <span class="muted">{texts[VIA_TOKEN]} <code>{escape(via_token)}</code>'
                     f'</span>')
        return cell

    def action(self, action: str) -> str:
        label = self.texts[FILTER_ACTION] % {"action": escape(action)}
        return (f'<a href="{escape(self.link(action=action))}" aria-label="{label}">'
                f'{escape(action)}</a>')

    def target(self, resource: str | None, m: dict) -> str:
        """The entry's resource and what it names (the secret, with a link that filters by it;
        the member or invitation; the token...)."""
        texts = self.texts
        out = str(escape(resource))
        if resource in ("secret", "share") and m.get("name"):
            name = m["name"]
            label = texts[FILTER_SECRET] % {"name": escape(name)}
            out += (f' <a href="{escape(self.link(secret=name))}" aria-label="{label}">'
                    f'<code>{escape(name)}</code></a>')
            if m.get("environment"):
                out += f' <span class="muted">{escape(m["environment"])}</span>'
            if m.get("version"):
                out += " " + texts[VERSION] % {"version": escape(m["version"])}
        elif resource in ("member", "invite") and m.get("email"):
            out += f" {escape(m['email'])}"
            if m.get("from") and m.get("to"):
                out += f" ({escape(m['from'])} → {escape(m['to'])})"
            elif m.get("role"):
                out += f" ({escape(m['role'])})"
        elif resource == "api_token" and m.get("name"):
            out += f" {texts[TOKEN]} <code>{escape(m['name'])}</code>"
        elif m.get("name"):
            out += f" <code>{escape(m['name'])}</code>"
        elif m.get("slug"):
            out += f" <code>{escape(m['slug'])}</code>"
        return out


# The metadata an entry's target shows (its cache key, with the resource).
_TARGET_KEYS = ("name", "environment", "version", "email", "from", "to", "role", "slug")


def rows(entries: list[dict], link: Link) -> list[Row]:
    """The page's entries as rows; `link(**changes)` is the page's link with a filter set."""
    cells = _Cells(link)
    out = []
    for entry in entries:
        m = entry["metadata"] if isinstance(entry["metadata"], dict) else {}
        email, via, action, resource = (entry["user_email"], m.get("via_token"), entry["action"],
                                        entry["resource"])
        out.append(Row(
            when=entry["created_at"].strftime("%Y-%m-%d %H:%M:%S"),
            by=cells.once(("by", email, via), lambda: cells.person(email, via)),
            action=cells.once(("action", action), lambda: cells.action(action)),
            target=cells.once(("target", resource, *(m.get(k) for k in _TARGET_KEYS)),
                              lambda: cells.target(resource, m)),
            ip=entry["ip_address"] or NOBODY))
    return out
