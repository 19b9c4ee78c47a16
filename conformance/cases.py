"""conformance.cases loads the case files and the driver declarations, checked against schemas.

It also owns the placeholders (``{{token}}``, ``{{secret:NAME@env}}``, ...) that cases use for
values only known at run time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import jsonschema

ROOT = Path(__file__).resolve().parent
REPO_ROOT = ROOT.parent
CASES_DIR = ROOT / "cases"
DRIVERS_DIR = ROOT / "drivers"

_PLACEHOLDER = re.compile(r"\{\{([a-z_]+)(?::([^}]+))?\}\}")


class CaseFileError(Exception):
    """CaseFileError says a case or driver file is invalid; the run stops before it starts."""


@attrs.frozen
class SecretSeed:
    """SecretSeed is one secret a case needs on the server."""

    name: str
    environment: str
    value: str


@attrs.frozen
class Case:
    """Case is one conformance case as loaded from ``cases/<id>.json``."""

    id: str
    title: str
    path: Path
    secrets: tuple[SecretSeed, ...]
    tokens: Mapping[str, Mapping[str, Any]]
    env: Mapping[str, str | None]
    steps: tuple[Mapping[str, Any], ...]
    timeout: float

    def value_of(self, name: str, environment: str = "production") -> str:
        for secret in self.secrets:
            if secret.name == name and secret.environment == environment:
                return secret.value
        raise KeyError(f"case {self.id} seeds no secret {name}@{environment}")


@attrs.frozen
class DriverSpec:
    """DriverSpec is one language's declaration from ``drivers/<language>.json``."""

    language: str
    sdk: str
    requires: tuple[str, ...]
    build: tuple[str, ...] | None
    command: tuple[str, ...]
    unit_test: tuple[str, ...] | None
    path: Path


def _validator(schema_file: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((ROOT / schema_file).read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise CaseFileError(f"{path}: not valid JSON: {exc}") from None


def _check(validator: jsonschema.Draft202012Validator, data: Any, path: Path) -> None:
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"{path}:"]
        for error in errors[:5]:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            lines.append(f"  at {where}: {error.message[:300]}")
        raise CaseFileError("\n".join(lines))


def generate_value(repeat: str, size: int) -> str:
    """generate_value repeats ``repeat`` up to exactly ``size`` UTF-8 bytes (or fails loudly)."""
    unit = len(repeat.encode("utf-8"))
    if size % unit:
        raise CaseFileError(f"generate: {size} bytes is not a whole number of {repeat!r} ({unit} bytes)")
    return repeat * (size // unit)


def load_cases(directory: Path = CASES_DIR) -> list[Case]:
    """load_cases reads and validates every ``*.json`` in ``directory``, sorted by id."""
    validator = _validator("case.schema.json")
    cases = []
    for path in sorted(directory.glob("*.json")):
        data = _load_json(path)
        _check(validator, data, path)
        if data["id"] != path.stem:
            raise CaseFileError(f"{path}: id {data['id']!r} differs from the file name")
        seeds = []
        for item in data.get("secrets", []):
            value = item.get("value")
            if value is None:
                value = generate_value(item["generate"]["repeat"], item["generate"]["bytes"])
            if len(value.encode("utf-8")) > 65536:
                raise CaseFileError(f"{path}: secret {item['name']} is over 65,536 bytes")
            seeds.append(SecretSeed(item["name"], item.get("environment", "production"), value))
        if len({(s.name, s.environment) for s in seeds}) != len(seeds):
            raise CaseFileError(f"{path}: a secret name is seeded twice in one environment")
        cases.append(
            Case(
                id=data["id"],
                title=data["title"],
                path=path,
                secrets=tuple(seeds),
                tokens=data.get("tokens", {}),
                env=data.get("env", {}),
                steps=tuple(data["steps"]),
                timeout=float(data.get("timeout", 60)),
            )
        )
    if not cases:
        raise CaseFileError(f"{directory}: no case files")
    for case in cases:
        _check_placeholders(case)
    return cases


PLACEHOLDERS = {
    "base_url": "the proxy's base URL, including /api/v1",
    "refused_url": "a base URL on a port where nothing listens",
    "token": "the run's API token",
    "token:NAME": "a token of the case's \"tokens\", minted for this language run",
    "bad_token": "a well-formed token the server never issued (new for each language run)",
    "team_id": "the case's team id",
    "team_slug": "the case's team slug",
    "unknown_team_id": "a team id that exists nowhere",
    "secret:NAME[@ENV]": "the value of a seeded secret (environment default production)",
    "sdk": "the driver's sdk name, as in its user agent",
    "language": "the driver's language",
}
_SIMPLE = {"base_url", "refused_url", "token", "bad_token", "team_id", "team_slug", "unknown_team_id", "sdk", "language"}


def _check_placeholders(case: Case) -> None:
    used = placeholders_in([case.steps, dict(case.env)])
    for name, arg in sorted(used, key=str):
        if name in _SIMPLE and arg is None:
            continue
        if name == "token" and arg in case.tokens:
            continue
        if name == "secret" and arg is not None:
            secret_name, _, environment = arg.partition("@")
            try:
                case.value_of(secret_name, environment or "production")
            except KeyError as exc:
                raise CaseFileError(f"{case.path}: {exc.args[0]}") from None
            continue
        shown = name + (f":{arg}" if arg is not None else "")
        raise CaseFileError(f"{case.path}: unknown placeholder {{{{{shown}}}}}")


def load_drivers(directory: Path = DRIVERS_DIR) -> list[DriverSpec]:
    """load_drivers reads and validates every ``drivers/*.json``, sorted by language."""
    validator = _validator("driver.schema.json")
    drivers = []
    for path in sorted(directory.glob("*.json")):
        data = _load_json(path)
        _check(validator, data, path)
        if data["language"] != path.stem:
            raise CaseFileError(f"{path}: language {data['language']!r} differs from the file name")
        drivers.append(
            DriverSpec(
                language=data["language"],
                sdk=data.get("sdk", data["language"]),
                requires=tuple(data.get("requires", [])),
                build=tuple(data["build"]) if data.get("build") else None,
                command=tuple(data["command"]),
                unit_test=tuple(data["unit_test"]) if data.get("unit_test") else None,
                path=path,
            )
        )
    return drivers


def substitute(value: Any, lookup: Any) -> Any:
    """substitute replaces ``{{name}}`` and ``{{name:arg}}`` in every string inside ``value``.

    ``lookup(name, arg)`` returns the replacement text or raises KeyError for an unknown one.
    """
    if isinstance(value, str):
        return _PLACEHOLDER.sub(lambda m: lookup(m.group(1), m.group(2)), value)
    if isinstance(value, list):
        return [substitute(v, lookup) for v in value]
    if isinstance(value, dict):
        return {substitute(k, lookup): substitute(v, lookup) for k, v in value.items()}
    return value


def placeholders_in(value: Any) -> set[tuple[str, str | None]]:
    """placeholders_in lists the placeholders used anywhere inside ``value``."""
    found: set[tuple[str, str | None]] = set()
    if isinstance(value, str):
        found.update((m.group(1), m.group(2)) for m in _PLACEHOLDER.finditer(value))
    elif isinstance(value, (list, tuple)):
        for v in value:
            found |= placeholders_in(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            found |= placeholders_in(k) | placeholders_in(v)
    return found
