"""The language a page or a mail is written in, and its translations (gettext).

Every text a person reads on a page, in a flash message or in a mail goes through `gettext`
(`_` in templates, through jinja2's i18n extension). The source texts (msgids) are the
Indonesian ones the pages always had; catalogs under `cvsm_server/locale/<lang>/` translate them.
API error bodies are not translated: the contract fixes them in Indonesian.

The language is per request (or per mail): `use_language` sets it for the current task, a
contextvar, so concurrent requests never see each other's. Until a catalog is loaded for a
language, texts stay as written (`NullTranslations`).
"""

from __future__ import annotations

import contextvars
import gettext as _gettext
import io
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

LANGUAGES = ("id", "en")
DEFAULT_LANGUAGE = "id"

_CATALOGS: dict[str, _gettext.NullTranslations] = {}
_NULL = _gettext.NullTranslations()
_CURRENT: contextvars.ContextVar[str] = contextvars.ContextVar("cvsm_language")
# The language of a task that chose none (an API request's mail to an address without an
# account, a background job): the server's `CVSM_DEFAULT_LANGUAGE` once `set_default` ran.
_default = DEFAULT_LANGUAGE


def set_default(language: str) -> None:
    """The server's default language (`CVSM_DEFAULT_LANGUAGE`, at start-up)."""
    global _default
    _default = language if language in LANGUAGES else DEFAULT_LANGUAGE


# The catalogs: `locale/<lang>/LC_MESSAGES/messages.po` in the package, compiled in memory at
# start-up (no .mo file is shipped or kept in git). `python -m cvsm_server.core.i18n_tool update`
# (`make i18n`) extracts the texts and updates them.
LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"
DOMAIN = "messages"


def catalog_path(language: str) -> Path:
    return LOCALE_DIR / language / "LC_MESSAGES" / f"{DOMAIN}.po"


def compile_catalog(language: str) -> _gettext.GNUTranslations:
    """The language's .po file as gettext translations, compiled in memory with Babel (fuzzy
    entries are left out, as msgfmt does)."""
    from babel.messages.mofile import write_mo  # Babel: only when the catalogs are loaded
    from babel.messages.pofile import read_po

    with catalog_path(language).open("rb") as handle:
        catalog = read_po(handle, locale=language, domain=DOMAIN)
    buffer = io.BytesIO()
    write_mo(buffer, catalog, use_fuzzy=False)
    buffer.seek(0)
    return _gettext.GNUTranslations(buffer)


# Catalogs compiled by `load_catalogs`, by file and its stat: an app made again in one process
# (the tests make one per test) reuses them, and an edited file is compiled afresh.
_COMPILED: dict[tuple[str, Path, int, int], _gettext.GNUTranslations] = {}


def load_catalogs(languages: Iterable[str] = LANGUAGES) -> None:
    """Compile and install every language's catalog (once per process, at start-up)."""
    for language in languages:
        path = catalog_path(language)
        stat = path.stat()
        key = (language, path, stat.st_mtime_ns, stat.st_size)
        if key not in _COMPILED:
            _COMPILED[key] = compile_catalog(language)
        install(language, _COMPILED[key])


def negotiate(accept_language: str | None, default: str = DEFAULT_LANGUAGE) -> str:
    """The language an `Accept-Language` header prefers among `LANGUAGES` (q-values honoured,
    `en-US` matches `en`), else `default`."""
    if not accept_language:
        return default
    wanted: list[tuple[float, int, str]] = []
    for index, part in enumerate(accept_language.split(",")[:32]):
        tag, _sep, params = part.strip().partition(";")
        quality = 1.0
        for param in params.split(";"):
            name, _eq, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        tag = tag.strip().lower()
        if tag and quality > 0:
            wanted.append((-quality, index, tag))
    for _quality, _index, tag in sorted(wanted):
        if tag == "*":
            return default
        primary = tag.split("-")[0]
        if primary in LANGUAGES:
            return primary
    return default


def install(language: str, translations: _gettext.NullTranslations) -> None:
    """Use `translations` for `language` from now on (done once at start-up)."""
    _CATALOGS[language] = translations


def current_language() -> str:
    return _CURRENT.get(_default)


def set_language(language: str) -> None:
    """The language of the rest of this task (a request's handler, a mail's rendering)."""
    _CURRENT.set(language if language in LANGUAGES else _default)


@contextmanager
def use_language(language: str) -> Iterator[None]:
    token = _CURRENT.set(language if language in LANGUAGES else _default)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def _translations() -> _gettext.NullTranslations:
    return _CATALOGS.get(_CURRENT.get(_default), _NULL)


def gettext(message: str) -> str:
    return _translations().gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    return _translations().ngettext(singular, plural, n)


def pgettext(context: str, message: str) -> str:
    return _translations().pgettext(context, message)


def npgettext(context: str, singular: str, plural: str, n: int) -> str:
    return _translations().npgettext(context, singular, plural, n)


_ = gettext


def N_(text: str) -> str:
    """Marks a text for the catalogs (`make i18n` finds it) where it is defined; it is
    translated where it is shown (a page's refusal, a flash message)."""
    return text


class Text(str):
    """A message built with values: the Indonesian text itself (a `str`, what the API's JSON
    and a log show, unchanged), plus its msgid (`template`, with `{name}` placeholders) and its
    values, so a page shows it in its own language (`translate`).

        Text("Satu tim paling banyak memiliki {n} webhook", n=5)   # a refusal's message
        Text(TOO_MANY, n=5)   # a template defined elsewhere: mark it there with N_(...)

    `make i18n` extracts the literal templates of `Text(...)` calls. A value that is a `Text`
    itself is translated too; any other value is shown as given (a number, a slug, a name).
    """

    template: str
    params: dict[str, object]

    def __new__(cls, template: str, /, **params: object) -> "Text":
        if isinstance(template, Text) and not params:
            return template  # already one: keeps its template and values
        self = super().__new__(cls, template.format(**params) if params else template)
        self.template = template
        self.params = params
        return self

    def __reduce__(self):  # a copy or pickle keeps the plain text only
        return (str, (str(self),))


def translate(text: str) -> str:
    """`text` in the current language: a `Text` through its template and values, any other
    text through the catalog as it is (a fixed refusal's message)."""
    if not isinstance(text, Text):
        return gettext(text)
    params = {name: translate(value) if isinstance(value, Text) else value
              for name, value in text.params.items()}
    try:
        return gettext(text.template).format(**params) if params else gettext(text.template)
    except (KeyError, IndexError, ValueError):  # a translation that broke a placeholder
        return str(text)
