"""The API lock (a development tool kept beside the tests, not part of the server package): the
OpenAPI document of the last release, committed as `docs/openapi-0.4.json`, and the rules that
tell a breaking change to it from an addition.

`breaking_changes(locked, live)` lists, as one line each, what in `live` (the document the server
serves now) would break a client written against `locked`:

- an operation (path and method) removed, or a public one that now needs a credential;
- a request that needs more: a new required parameter or body field, a body that becomes
  required, a field whose type, enum, pattern or bounds now refuse a value that was allowed;
- an answer that gives less or other: a success status, media type or response field removed,
  a field no longer always present, a type changed, an enum value removed.

Everything else is an addition and passes: new operations, optional parameters and fields,
response fields, enum values a request may send, wider bounds, descriptions. Schemas are compared
after resolving `$ref`; `anyOf`/`oneOf` branches count as one schema whose types are theirs together
(so `nullable(...)` is its schema plus null).

A change that is meant (a new major version, or a fix the CHANGELOG announces) is recorded by
writing the live document over the lock, normalised (two-space indent, sorted keys):

    PYTHONPATH=server python server/tests/apilock.py --write

Without `--write` the command prints the breaking changes and exits 1 if there are any.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterator

LOCK_FILE = Path(__file__).resolve().parents[2] / "docs" / "openapi-0.4.json"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
# bounds a request may only widen: keyword -> True when a larger value is wider
_WIDER_WHEN_LARGER = {"maxLength": True, "maximum": True, "maxItems": True,
                      "exclusiveMaximum": True, "minLength": False, "minimum": False,
                      "minItems": False, "exclusiveMinimum": False}


def normalised(doc: dict) -> str:
    """The document as the lock file holds it: stable key order, one trailing newline."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def read_lock(path: Path = LOCK_FILE) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


class _Doc:
    """A document and its `$ref` resolution."""

    def __init__(self, doc: dict) -> None:
        self.doc = doc

    def resolve(self, schema: Any) -> dict:
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and seen < 32:
            node: Any = self.doc
            for part in schema["$ref"].removeprefix("#/").split("/"):
                node = node[part]
            schema, seen = node, seen + 1
        return schema if isinstance(schema, dict) else {}

    def branches(self, schema: Any) -> list[dict]:
        """The alternatives a schema allows, `$ref`s resolved, `anyOf`/`oneOf` flattened."""
        schema = self.resolve(schema)
        alternatives = schema.get("anyOf") or schema.get("oneOf")
        if not alternatives:
            return [schema]
        own = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
        out = []
        for alternative in alternatives:
            for branch in self.branches(alternative):
                out.append({**own, **branch} if own.get("type") is None else branch)
        return out

    def types(self, schema: Any) -> set[str]:
        """The JSON types a schema allows ("any" when it does not say)."""
        out: set[str] = set()
        for branch in self.branches(schema):
            if "const" in branch:
                out.add(_json_type(branch["const"]))
            elif "enum" in branch and "type" not in branch:
                out |= {_json_type(v) for v in branch["enum"]}
            elif "type" in branch:
                kinds = branch["type"]
                out |= set(kinds if isinstance(kinds, list) else [kinds])
            else:
                out.add("any")
        if "integer" in out and "number" in out:
            out.discard("integer")
        return out

    def main(self, schema: Any) -> dict:
        """The branch that is not null (the one `nullable` wraps), or the schema itself."""
        branches = [b for b in self.branches(schema) if b.get("type") != "null"]
        return branches[0] if len(branches) == 1 else {}

    def enum(self, schema: Any) -> set | None:
        values: set = set()
        for branch in self.branches(schema):
            if "enum" in branch:
                values |= {json.dumps(v) for v in branch["enum"]}
            elif "const" in branch:
                values.add(json.dumps(branch["const"]))
            elif branch.get("type") != "null":
                return None  # some branch takes any value of its type
            else:
                values.add("null")
        return values


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}[type(value)]


def _covers(wide: set[str], narrow: set[str]) -> bool:
    """Whether the types `wide` take every value of the types `narrow`."""
    if "any" in wide:
        return True
    return all(t in wide or (t == "integer" and "number" in wide) for t in narrow)


def _request_schema(old: _Doc, new: _Doc, a: Any, b: Any, where: str,
                    depth: int = 0) -> Iterator[str]:
    """What `b` (live) refuses that `a` (locked) accepted, for a value a client sends."""
    if depth > 16:
        return
    old_types, new_types = old.types(a), new.types(b)
    if not _covers(new_types, old_types):
        yield f"{where}: type changed from {sorted(old_types)} to {sorted(new_types)}"
        return
    old_enum, new_enum = old.enum(a), new.enum(b)
    if new_enum is not None and (old_enum is None or not old_enum <= new_enum):
        lost = sorted(old_enum - new_enum) if old_enum is not None else ["any value"]
        yield f"{where}: enum narrowed (no longer {', '.join(lost)})"
    sa, sb = old.main(a), new.main(b)
    for key, larger_is_wider in _WIDER_WHEN_LARGER.items():
        if key in sb and (key not in sa or (sb[key] < sa[key]) == larger_is_wider
                          and sb[key] != sa[key]):
            yield f"{where}: {key} narrowed to {sb[key]}"
    if "pattern" in sb and sb.get("pattern") != sa.get("pattern"):
        yield f"{where}: pattern changed to {sb['pattern']!r}"
    old_required, new_required = set(sa.get("required", ())), set(sb.get("required", ()))
    for name in sorted(new_required - old_required):
        yield f"{where}: new required field {name!r}"
    old_props, new_props = sa.get("properties", {}), sb.get("properties", {})
    for name in sorted(set(old_props) & set(new_props)):
        yield from _request_schema(old, new, old_props[name], new_props[name],
                                   f"{where}.{name}", depth + 1)
    if "items" in sa and "items" in sb:
        yield from _request_schema(old, new, sa["items"], sb["items"], f"{where}[]", depth + 1)


def _response_schema(old: _Doc, new: _Doc, a: Any, b: Any, where: str,
                     depth: int = 0) -> Iterator[str]:
    """What `b` (live) may answer that a client of `a` (locked) does not expect, or no longer
    answers that it relied on."""
    if depth > 16:
        return
    old_types, new_types = old.types(a), new.types(b)
    if not _covers(old_types, new_types):
        yield f"{where}: type changed from {sorted(old_types)} to {sorted(new_types)}"
        return
    old_enum, new_enum = old.enum(a), new.enum(b)
    if old_enum is not None and new_enum is not None and not old_enum <= new_enum:
        yield f"{where}: enum value removed ({', '.join(sorted(old_enum - new_enum))})"
    sa, sb = old.main(a), new.main(b)
    old_props, new_props = sa.get("properties", {}), sb.get("properties", {})
    for name in sorted(set(old_props) - set(new_props)):
        yield f"{where}: response field {name!r} removed"
    for name in sorted(set(sa.get("required", ())) - set(sb.get("required", ()))):
        if name in new_props:
            yield f"{where}: response field {name!r} no longer always present"
    for name in sorted(set(old_props) & set(new_props)):
        yield from _response_schema(old, new, old_props[name], new_props[name],
                                    f"{where}.{name}", depth + 1)
    if "items" in sa and "items" in sb:
        yield from _response_schema(old, new, sa["items"], sb["items"], f"{where}[]", depth + 1)


def _operations(doc: dict) -> dict[tuple[str, str], dict]:
    return {(method, path): op for path, item in doc.get("paths", {}).items()
            for method, op in item.items() if method in METHODS}


def _operation(old: _Doc, new: _Doc, a: dict, b: dict, label: str) -> Iterator[str]:
    if a.get("security") == [] and b.get("security") not in (None, []):
        yield f"{label}: now needs a credential"
    old_params = {(p["in"], p["name"]): p for p in map(old.resolve, a.get("parameters", ()))}
    new_params = {(p["in"], p["name"]): p for p in map(new.resolve, b.get("parameters", ()))}
    for key, param in sorted(new_params.items()):
        where = f"{label} {key[0]} parameter {key[1]!r}"
        if key not in old_params:
            if param.get("required"):
                yield f"{where}: new and required"
            continue
        if param.get("required") and not old_params[key].get("required"):
            yield f"{where}: now required"
        yield from _request_schema(old, new, old_params[key].get("schema", {}),
                                   param.get("schema", {}), where)
    old_body, new_body = old.resolve(a.get("requestBody")), new.resolve(b.get("requestBody"))
    if new_body.get("required") and not (old_body and old_body.get("required")):
        yield f"{label}: request body now required"
    for media, content in sorted(new_body.get("content", {}).items()):
        if media in old_body.get("content", {}):
            yield from _request_schema(old, new, old_body["content"][media].get("schema", {}),
                                       content.get("schema", {}), f"{label} body")
    old_answers, new_answers = a.get("responses", {}), b.get("responses", {})
    for status, answer in sorted(old_answers.items()):
        where = f"{label} {status}"
        if status not in new_answers:
            if status.startswith("2"):
                yield f"{where}: success answer removed"
            continue
        answer, live = old.resolve(answer), new.resolve(new_answers[status])
        for media, content in sorted(answer.get("content", {}).items()):
            if media not in live.get("content", {}):
                yield f"{where}: {media} answer removed"
                continue
            yield from _response_schema(old, new, content.get("schema", {}),
                                        live["content"][media].get("schema", {}), f"{where} body")
        for header in sorted(answer.get("headers", {})):
            if answer["headers"][header].get("required") and header not in live.get("headers", {}):
                yield f"{where}: header {header} removed"


def breaking_changes(locked: dict, live: dict) -> list[str]:
    """Every change from `locked` to `live` that can break a client of `locked` (see above)."""
    old, new = _Doc(locked), _Doc(live)
    old_ops, new_ops = _operations(locked), _operations(live)
    out = []
    for (method, path), op in sorted(old_ops.items()):
        label = f"{method.upper()} {path}"
        if (method, path) not in new_ops:
            out.append(f"{label}: operation removed")
            continue
        out.extend(_operation(old, new, op, new_ops[(method, path)], label))
    return out


def main(argv: list[str] | None = None) -> int:
    from cvsm_server.web.apidoc import document
    from cvsm_server.web.routes import ROUTES
    args = sys.argv[1:] if argv is None else argv
    live = document(ROUTES)
    if args == ["--write"]:
        LOCK_FILE.write_text(normalised(live), encoding="utf-8")
        print(f"wrote {LOCK_FILE}")
        return 0
    if args:
        print("usage: python server/tests/apilock.py [--write]", file=sys.stderr)
        return 2
    changes = breaking_changes(read_lock(), live)
    for line in changes:
        print(line)
    return 1 if changes else 0


if __name__ == "__main__":
    raise SystemExit(main())
