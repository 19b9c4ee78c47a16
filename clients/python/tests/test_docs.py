"""Every public item has a PEP 257 docstring: a summary line in the imperative for functions
("Return ...", not "get returns ..."), a sentence for classes."""

from __future__ import annotations

import inspect
import re

import cvsm

PUBLIC_CLASSES = [getattr(cvsm, name) for name in cvsm.__all__ if inspect.isclass(getattr(cvsm, name))]
# Go's voice: a docstring that opens with its own name ("get returns the value ...").
GO_VOICE = re.compile(r"^(?P<name>\w+) (is|are|returns|reads|builds|means|tells|forgets)\b")


def public_members(cls: type) -> list[tuple[str, object]]:
    """Return the public methods and properties `cls` defines or takes from the package's bases."""
    own = []
    inherited = {name: member for base in reversed(cls.__mro__) if base.__module__.startswith("cvsm")
                 for name, member in vars(base).items()}
    for name, member in inherited.items():
        if name.startswith("_"):  # the constructor is documented by the class, as PEP 257 allows
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if inspect.isfunction(member) or isinstance(member, property):
            own.append((f"{cls.__name__}.{name}", member))
    return own


def test_every_public_class_and_method_has_a_docstring_in_pep_257_voice() -> None:
    items = [(cls.__name__, cls) for cls in PUBLIC_CLASSES]
    for cls in PUBLIC_CLASSES:
        if cls.__module__.startswith("cvsm"):
            items += public_members(cls)
    undocumented = [name for name, item in items if not (inspect.getdoc(item) or "").strip()]
    go_voice = [name for name, item in items if GO_VOICE.match(inspect.getdoc(item) or "")]
    assert undocumented == []
    assert go_voice == []
    assert {"Client.get", "AsyncClient.inject", "Client.clear_cache", "Client.config"} <= {name for name, _ in items}


def test_the_package_docstring_opens_with_a_summary_line() -> None:
    summary = (cvsm.__doc__ or "").strip().splitlines()[0]
    assert summary.endswith(".") and not summary.startswith("cvsm ")
