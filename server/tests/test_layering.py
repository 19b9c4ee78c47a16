"""The package's layers, read from the source (ast over every file of `cvsm_server`: absolute and
relative imports, function-level ones included): no module imports itself back through any
chain of imports, and the domain modules (every module of the package but the outer layer
below) import nothing from `cvsm_server.web` and load nothing of aiohttp."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import cvsm_server

PACKAGE = Path(cvsm_server.__file__).parent

# The outer layer: the entry points (the app factory, the CLI, the process supervisor and the
# graceful stop), the background jobs' registry, and the senders that call out over HTTP or SMTP
# (the webhook sender and the rotation worker with its targets use aiohttp's client). Every
# other module of the package is a domain module.
OUTER = {"cvsm_server", "cvsm_server.runtime.app", "cvsm_server.runtime.cli", "cvsm_server.runtime.drain",
         "cvsm_server.runtime.workers", "cvsm_server.runtime.jobs", "cvsm_server.mail.sender",
         "cvsm_server.webhooks.sender", "cvsm_server.rotation.targets",
         "cvsm_server.rotation.policy"}


def modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (file, is a package's __init__)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        out[".".join(parts)] = (path, is_package)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (`from . import x` counts as importing `x`)."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in known.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[:len(here) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets.add(module)
                targets.update(f"{module}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in known and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert "cvsm_server.web.routes" in graph["cvsm_server.runtime.app"]  # from .web.routes import ...
    assert "cvsm_server.web.teams" in graph["cvsm_server.web.routes"]  # from . import (teams...)
    assert "cvsm_server.audit.log" in graph["cvsm_server.accounts.users"]  # from . import audit
    assert "cvsm_server.web.routes" in graph["cvsm_server.web.apilock"]  # inside a function


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package() -> None:
    assert cycles(import_graph()) == []


def domain_modules() -> list[str]:
    return sorted(name for name in modules() if name not in OUTER
                  and name != "cvsm_server.web" and not name.startswith("cvsm_server.web."))


def test_the_domain_is_every_module_outside_web_and_the_outer_layer() -> None:
    domain = domain_modules()
    assert {"cvsm_server.secrets.service", "cvsm_server.accounts.users", "cvsm_server.webhooks.events",
            "cvsm_server.mail.messages", "cvsm_server.core.inputs"} <= set(domain)
    assert OUTER <= set(modules())  # the list names real modules


def test_no_domain_module_imports_the_web_layer() -> None:
    graph = import_graph()
    for name in domain_modules():
        web = sorted(t for t in graph[name] if t == "cvsm_server.web"
                     or t.startswith("cvsm_server.web."))
        assert not web, f"{name} imports {web}"


def test_domain_modules_load_nothing_of_aiohttp() -> None:
    code = ("import sys\n"
            + "".join(f"import {m}\n" for m in domain_modules())
            + "loaded = sorted(m for m in sys.modules if m == 'aiohttp' or m.startswith('aiohttp.')"
            + " or m == 'cvsm_server.web' or m.startswith('cvsm_server.web.'))\n"
            + "print(loaded)\nsys.exit(1 if loaded else 0)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_module_imports_another_modules_private_names() -> None:
    known = modules()
    found = []
    for name, (path, _) in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                found += [f"{name}: {alias.name}" for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert found == []
