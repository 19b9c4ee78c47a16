"""The package's layers, read from the source (ast over every file of `cvsm_server`: absolute and
relative imports, function-level ones included).

The server is folders in layers, inner to outer:

- the kernel: `core` (actor, errors, inputs, settings), `db` (PostgreSQL) and `crypto` (keys,
  sealing);
- the domain, one package per feature (`DOMAIN`): explicit actor and connection in, SQL inside,
  nothing of aiohttp and nothing of the layers outside;
- `outbound`: what calls out over HTTP (the webhook sender, the rotation runner);
- `web`: the HTTP layer (handlers, pages, middleware, the one route table);
- `runtime`: the process (app factory, the `cvsm-server` command, workers, jobs).

`ALLOWED` names each package and the packages it may import; no module imports itself back
through any chain; the kernel and the domain load nothing of aiohttp."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import cvsm_server

PACKAGE = Path(cvsm_server.__file__).parent

KERNEL = {"core", "db", "crypto"}
DOMAIN = {"accounts", "teams", "secrets", "audit", "e2e", "mail", "webhooks", "rotation", "billing",
          "instance", "support"}
# package -> the packages its modules may import (besides its own modules)
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "db": {"core"},
    "crypto": {"core", "db"},
    **{name: KERNEL | DOMAIN for name in DOMAIN},
    "outbound": KERNEL | DOMAIN,
    "web": KERNEL | DOMAIN,
    "runtime": KERNEL | DOMAIN | {"outbound", "web"},
}
# Data the package ships (not Python): templates, static files, help articles, migrations.
DATA = {"templates", "static", "help", "migrations", "locale"}


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


def package_of(module: str) -> str:
    """`cvsm_server.secrets.service` -> `secrets`; the root package itself -> `cvsm_server`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert "cvsm_server.web.routes" in graph["cvsm_server.runtime.app"]  # from ..web.routes import
    assert "cvsm_server.web.teams" in graph["cvsm_server.web.routes"]  # from . import (teams...)
    assert "cvsm_server.audit.log" in graph["cvsm_server.accounts.users"]  # import ... as audit
    assert "cvsm_server.runtime.app" in graph["cvsm_server.runtime.serve"]  # inside a function


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package() -> None:
    assert cycles(import_graph()) == []


def test_the_root_holds_only_its_init_and_every_package_has_a_place() -> None:
    root = sorted(p.name for p in PACKAGE.iterdir() if p.name != "__pycache__")
    assert [p for p in root if p.endswith(".py")] == ["__init__.py"]
    packages = {p for p in root if (PACKAGE / p / "__init__.py").is_file()} - DATA
    assert packages == set(ALLOWED)
    assert set(root) == {"__init__.py"} | packages | DATA
    assert set().union(*ALLOWED.values()) <= set(ALLOWED)


def test_every_import_between_packages_is_an_allowed_arrow() -> None:
    wrong = []
    for name, targets in import_graph().items():
        here = package_of(name)
        for target in targets:
            there = package_of(target)
            if target != "cvsm_server" and there != here and there not in ALLOWED[here]:
                wrong.append(f"{name} -> {target}")
    assert wrong == []


def test_an_arrow_not_allowed_is_seen() -> None:
    assert "web" not in ALLOWED["secrets"] and "outbound" not in ALLOWED["web"]
    assert "runtime" not in ALLOWED["outbound"] and "accounts" not in ALLOWED["db"]


def inner_modules() -> list[str]:
    return sorted(name for name in modules() if package_of(name) in KERNEL | DOMAIN)


def test_the_kernel_and_the_domain_load_nothing_of_aiohttp() -> None:
    inner = inner_modules()
    assert {"cvsm_server.secrets.service", "cvsm_server.accounts.users", "cvsm_server.db.pool",
            "cvsm_server.rotation.policy", "cvsm_server.mail.sender"} <= set(inner)
    code = ("import sys\n"
            + "".join(f"import {m}\n" for m in inner)
            + "loaded = sorted(m for m in sys.modules if m == 'aiohttp' or m.startswith('aiohttp.')"
            + " or m.split('.')[:2] in (['cvsm_server', 'web'], ['cvsm_server', 'outbound'],"
            + " ['cvsm_server', 'runtime']))\n"
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


def test_no_file_of_the_package_is_over_500_lines() -> None:
    long = {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
            if len(path.read_text(encoding="utf-8").splitlines()) > 500}
    assert long == set()
