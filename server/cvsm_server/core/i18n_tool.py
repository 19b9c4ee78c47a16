"""The catalogs' upkeep (Babel): extract every translatable text, update the catalogs, check them.

    python -m cvsm_server.core.i18n_tool update   # `make i18n`: extract, then merge into each .po
    python -m cvsm_server.core.i18n_tool check    # exit 1 when a text lacks a translation

Texts are found in the package's Python sources (`_()`, `gettext`, `ngettext`, `pgettext`, `N_()`,
`Text()`: a message built with values, its template with `{name}` placeholders)
and in its templates (pages `templates/*.html`, mails `templates/mail/*`: jinja2's i18n extension,
`{{ _("...") }}` and `{% trans %}`). The msgids are the Indonesian texts; `id` translates each to
itself, `en` to English. Nothing compiled is written: the server compiles the .po files in memory
at start-up (`core.i18n.load_catalogs`).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po, write_po

from . import i18n

PACKAGE = Path(__file__).resolve().parent.parent
KEYWORDS = {"_": None, "gettext": None, "ngettext": (1, 2), "pgettext": ((1, "c"), 2),
            "npgettext": ((1, "c"), 2, 3), "N_": None, "Text": None}
METHODS = [
    ("**/tests/**", "ignore"),
    ("**.py", "python"),
    ("templates/**.html", "jinja2"),
    ("templates/mail/**.txt", "jinja2"),
]
OPTIONS = {"templates/**.html": {"extensions": "jinja2.ext.i18n"},
           "templates/mail/**.txt": {"extensions": "jinja2.ext.i18n"}}


# The refusals' messages (`raise BadRequest("...")`, a module's `MESSAGE = "..."`, an error
# class's `default_message`): Indonesian in the API's JSON (the contract), translated where a page
# shows them (`web.pages.rendering.translated`). Not those of the modules below (operators' English,
# or formats no page shows), nor one filled in later (`{...}`: it never matches as written; such a
# message is a `core.i18n.Text`, its template found as a `Text(...)` or `N_(...)` call).
REFUSAL_SKIP = ("core/config.py", "crypto/", "web/metrics.py", "web/lowlevel.py",
                "web/headers.py", "web/jsonbody.py", "core/i18n_tool.py")


def _a_message(value: object) -> bool:
    return (isinstance(value, str) and " " in value and value[:1].isupper() and "{" not in value
            and "\n" not in value and not value.startswith(("ORDER BY", "SELECT", "INSERT")))


def refusals() -> list[tuple[str, int, str]]:
    """(file, line, message) for every refusal message of the package's Python sources."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(REFUSAL_SKIP) or "/tests/" in relative:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            value = None
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                value = node.exc.args[0]
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1
                  and isinstance(node.targets[0], ast.Name)
                  and (node.targets[0].id.isupper() or node.targets[0].id == "default_message")):
                value = node.value
            if isinstance(value, ast.Constant) and _a_message(value.value):
                found.append((relative, node.lineno, value.value))
    return found


def extract() -> Catalog:
    """Every translatable text of the package, with where it is used."""
    catalog = Catalog(project="cvsm", domain=i18n.DOMAIN, charset="utf-8")
    for filename, lineno, message, comments, context in extract_from_dir(
            str(PACKAGE), METHODS, OPTIONS, KEYWORDS, comment_tags=("i18n:",),
            strip_comment_tags=True):
        catalog.add(message, None, [(filename, lineno)], auto_comments=comments, context=context)
    for filename, lineno, message in refusals():
        if message not in catalog:
            catalog.add(message, None, [(filename, lineno)])
        else:
            catalog[message].locations.append((filename, lineno))
    return catalog


def read(language: str) -> Catalog:
    with i18n.catalog_path(language).open("rb") as handle:
        return read_po(handle, locale=language, domain=i18n.DOMAIN)


def update() -> None:
    """Merge the extracted texts into each language's catalog: new texts come in untranslated
    (Indonesian: translated to themselves), texts no longer used are dropped."""
    for language in i18n.LANGUAGES:
        template = extract()  # its own: `update` takes the template's new messages as they are
        path = i18n.catalog_path(language)
        if path.is_file():
            catalog = read(language)
            created = catalog.creation_date  # kept: an update changes only what changed
            catalog.update(template, no_fuzzy_matching=True)
            catalog.obsolete.clear()
            catalog.creation_date = created
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            catalog = Catalog(locale=language, domain=i18n.DOMAIN, project="cvsm", charset="utf-8")
            catalog.update(template, no_fuzzy_matching=True)
        catalog.fuzzy = False
        catalog.copyright_holder = "cvsm"
        catalog.msgid_bugs_address = ""
        catalog.last_translator = "cvsm"
        catalog.language_team = language
        if language == "id":  # the msgids are Indonesian already
            for message in catalog:
                if not message.id:
                    continue
                if isinstance(message.id, tuple):  # one form in Indonesian (nplurals=1)
                    if not all(message.string):
                        message.string = (message.id[0],) * catalog.num_plurals
                elif not message.string:
                    message.string = message.id
        with path.open("wb") as handle:
            write_po(handle, catalog, width=100, omit_header=False, sort_by_file=False,
                     include_lineno=False)


def problems() -> list[str]:
    """What keeps the catalogs from being complete: a text the sources use that a catalog lacks
    or leaves empty or fuzzy."""
    out: list[str] = []
    wanted = {(m.id if isinstance(m.id, str) else m.id[0], m.context) for m in extract() if m.id}
    for language in i18n.LANGUAGES:
        catalog = read(language)
        for msgid, context in sorted(wanted, key=lambda item: (item[0], item[1] or "")):
            message = catalog.get(msgid, context)
            if message is None:
                out.append(f"{language}: missing {msgid!r}")
            elif message.fuzzy:
                out.append(f"{language}: fuzzy {msgid!r}")
            elif not (all(message.string) if isinstance(message.string, tuple) else message.string):
                out.append(f"{language}: untranslated {msgid!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    command = (argv if argv is not None else sys.argv[1:])[:1]
    if command == ["update"]:
        update()
        return 0
    if command == ["check"]:
        found = problems()
        for line in found:
            print(line)
        return 1 if found else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
