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
from collections.abc import Iterator
from contextlib import contextmanager

LANGUAGES = ("id", "en")
DEFAULT_LANGUAGE = "id"

_CATALOGS: dict[str, _gettext.NullTranslations] = {}
_NULL = _gettext.NullTranslations()
_CURRENT: contextvars.ContextVar[str] = contextvars.ContextVar("cvsm_language", default=DEFAULT_LANGUAGE)


def install(language: str, translations: _gettext.NullTranslations) -> None:
    """Use `translations` for `language` from now on (done once at start-up)."""
    _CATALOGS[language] = translations


def current_language() -> str:
    return _CURRENT.get()


def set_language(language: str) -> None:
    """The language of the rest of this task (a request's handler, a mail's rendering)."""
    _CURRENT.set(language if language in LANGUAGES else DEFAULT_LANGUAGE)


@contextmanager
def use_language(language: str) -> Iterator[None]:
    token = _CURRENT.set(language if language in LANGUAGES else DEFAULT_LANGUAGE)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def _translations() -> _gettext.NullTranslations:
    return _CATALOGS.get(_CURRENT.get(), _NULL)


def gettext(message: str) -> str:
    return _translations().gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    return _translations().ngettext(singular, plural, n)


def pgettext(context: str, message: str) -> str:
    return _translations().pgettext(context, message)


def npgettext(context: str, singular: str, plural: str, n: int) -> str:
    return _translations().npgettext(context, singular, plural, n)


_ = gettext
