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
KNOWN_FAILURES_DIR = ROOT / "known-failures"

# The optional behaviours a driver may report in its answer to the ``capabilities`` op
# (PROTOCOL.md); a case that requires one the driver does not report is n/a for that language.
CAPABILITIES = frozenset({"tls_ca_file", "proxy_env", "live", "refresh"})

# The capabilities some SDKs do not have yet: capability -> {language: why}. PROTOCOL.md shows the
# same list. A driver listed here must not report the capability (remove its line when it does),
# and every driver not listed must report it.
NOT_YET: dict[str, dict[str, str]] = {
    "live": {
        "shell": "not in the shell SDK (issue 39): each shell call is a process of its own, which holds "
                 "no stream; the live path for shell users is the Go `cvsm` command's `cvsm run --watch`",
    },
}

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
    client: Mapping[str, Any] | None = None
    requires: tuple[str, ...] = ()
    # An end-to-end team (docs/e2e.md): secrets sealed in the harness, {{token}} with its key part.
    e2e: bool = False

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
    # Case ids from ``known-failures/<language>.txt``: reported "known" when they fail,
    # "fixed" (a failure of the run, until the line is removed) when they pass.
    known_failures: frozenset[str] = frozenset()

    def is_known_failure(self, case_id: str) -> bool:
        """is_known_failure tells whether ``case_id`` (or its case, for a variant) is listed."""
        return case_id in self.known_failures or case_id.split("[", 1)[0] in self.known_failures


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
    """load_cases reads and validates every ``*.json`` in ``directory``, sorted by id.

    A case with ``variants`` becomes one case per variant, ``<id>[<label>]``, with each
    ``{{param:NAME}}`` replaced by the variant's value; every expanded case is validated.
    """
    validator = _validator("case.schema.json")
    cases = []
    for path in sorted(directory.glob("*.json")):
        data = _load_json(path)
        if not isinstance(data, dict):
            raise CaseFileError(f"{path}: a case is a JSON object")
        if data.get("id") != path.stem:
            raise CaseFileError(f"{path}: id {data.get('id')!r} differs from the file name")
        for variant in _expand(data, path):
            _check(validator, variant, path)
            cases.append(_case(variant, path))
    if not cases:
        raise CaseFileError(f"{directory}: no case files")
    for case in cases:
        _check_placeholders(case)
    return cases


def _expand(data: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    variants = data.get("variants")
    if variants is None:
        return [data]
    if not isinstance(variants, list) or not variants:
        raise CaseFileError(f"{path}: variants is a non-empty array")
    base = {k: v for k, v in data.items() if k != "variants"}
    expanded = []
    labels: set[str] = set()
    for variant in variants:
        if not isinstance(variant, dict) or not isinstance(variant.get("label"), str) \
                or not re.fullmatch(r"[a-z0-9_]+", variant["label"]) or not isinstance(variant.get("params", {}), dict):
            raise CaseFileError(f"{path}: each variant is {{\"label\": \"[a-z0-9_]+\", \"params\": {{...}}}}")
        if variant["label"] in labels:
            raise CaseFileError(f"{path}: variant {variant['label']} appears twice")
        labels.add(variant["label"])
        params = variant.get("params", {})
        case = _with_params(base, params, path)
        case["id"] = f"{data['id']}[{variant['label']}]"
        if "title" in variant:
            case["title"] = f"{data['title']}: {variant['title']}"
        expanded.append(case)
    return expanded


def _with_params(value: Any, params: Mapping[str, Any], path: Path) -> Any:
    """_with_params puts a variant's params in: a whole-string ``{{param:X}}`` takes any JSON value."""
    if isinstance(value, str):
        whole = _PLACEHOLDER.fullmatch(value)
        if whole and whole.group(1) == "param":
            return params[_param(whole.group(2), params, path)]

        def text(match: re.Match[str]) -> str:
            if match.group(1) != "param":
                return match.group(0)
            param = params[_param(match.group(2), params, path)]
            if not isinstance(param, str):
                raise CaseFileError(f"{path}: param {match.group(2)} is not a string but sits inside one")
            return param
        return _PLACEHOLDER.sub(text, value)
    if isinstance(value, list):
        return [_with_params(v, params, path) for v in value]
    if isinstance(value, dict):
        keys = {k: _with_params(k, params, path) for k in value}
        if not all(isinstance(k, str) for k in keys.values()):
            raise CaseFileError(f"{path}: a param used as a key is not a string")
        return {keys[k]: _with_params(v, params, path) for k, v in value.items()}
    return value


def _param(name: str | None, params: Mapping[str, Any], path: Path) -> str:
    if name is None or name not in params:
        raise CaseFileError(f"{path}: a variant lacks param {name!r}")
    return name


def _case(data: dict[str, Any], path: Path) -> Case:
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
    e2e = bool(data.get("team", {}).get("e2e", False))
    resealed = [step["secret"] for step in data["steps"] if step.get("server") == "reseal_secret"]
    if resealed and not e2e:
        raise CaseFileError(f"{path}: reseal_secret needs an end-to-end team (\"team\": {{\"e2e\": true}})")
    for name in resealed:
        if not any(s.name == name and s.environment == "production" for s in seeds):
            raise CaseFileError(f"{path}: reseal_secret of {name}, which is not a seeded production secret")
    for name in [step["secret"] for step in data["steps"] if step.get("server") == "update_and_watch"]:
        if not any(s.name == name and s.environment == "production" for s in seeds):
            raise CaseFileError(f"{path}: update_and_watch of {name}, which is not a seeded production secret")
        if e2e:
            raise CaseFileError(f"{path}: update_and_watch writes plaintext values: not for an end-to-end team")
    for server_step in ("forge_team_key", "rekey_team"):
        if not e2e and any(step.get("server") == server_step for step in data["steps"]):
            raise CaseFileError(f"{path}: {server_step} needs an end-to-end team (\"team\": {{\"e2e\": true}})")
    if e2e and data.get("tokens"):
        raise CaseFileError(f"{path}: an end-to-end case has one token, {{{{token}}}}; \"tokens\" are not minted for it")
    return Case(
        id=data["id"],
        title=data["title"],
        path=path,
        secrets=tuple(seeds),
        tokens=data.get("tokens", {}),
        env=data.get("env", {}),
        steps=tuple(data["steps"]),
        timeout=float(data.get("timeout", 60)),
        client=data.get("client"),
        requires=tuple(data.get("requires", [])),
        e2e=e2e,
    )


PLACEHOLDERS = {
    "base_url": "the proxy's base URL, including /api/v1",
    "refused_url": "a base URL on a port where nothing listens",
    "base_url_with_userinfo": "{{base_url}} with a user and password in its authority "
                              "(http://cvsm-user:cvsm-pass-must-not-show@127.0.0.1:PORT/api/v1)",
    "refused_url_with_userinfo": "{{refused_url}} with the same user and password in its authority",
    "token": "the run's API token; in an end-to-end case, a token of the case's team with its key part",
    "token:NAME": "a token of the case's \"tokens\", minted for this language run",
    "api_token": "in an end-to-end case, {{token}} without its key part (the API token before the dot)",
    "token_unpinned": "in an end-to-end case, {{token}} in the first format: its private key without the pin",
    "token_pinned_ahead": "in an end-to-end case, {{token}} pinned to the key version above the team's current one "
                          "(what a token meets when the server rolls its team back below the pin)",
    "wrapped_key": "in an end-to-end case, the team key of key version 1 wrapped to {{token}}, as the seeding "
                   "gave it to the server (the wrapped_key of a genuine key answer)",
    "envelope:NAME[@ENV]": "in an end-to-end case, the envelope a seeded secret was seeded with (its version 1, "
                           "under key version 1)",
    "secret_id:NAME[@ENV]": "in an end-to-end case, a seeded secret's id",
    "bad_token": "a well-formed token the server never issued (new for each language run)",
    "team_id": "the case's team id",
    "team_slug": "the case's team slug",
    "unknown_team_id": "a team id that exists nowhere",
    "secret:NAME[@ENV]": "the value of a seeded secret (environment default production)",
    "sdk": "the driver's sdk name, as in its user agent",
    "language": "the driver's language",
    "root_url": "the proxy's root URL, without /api/v1 (a base URL missing its prefix)",
    "tls_base_url": "the proxy's https base URL, its certificate signed by the run's private CA",
    "ca_file": "the PEM file of the run's private CA",
    "proxy_url": "the proxy as a forward HTTP proxy (http://127.0.0.1:PORT)",
    "proxied_base_url": "a base URL on a host that only the forward proxy can reach",
    "refused_proxy_url": "a forward proxy URL where nothing listens",
    "repeat:TEXT*BYTES": "TEXT repeated up to exactly BYTES UTF-8 bytes",
    "http_date:+SECONDS": "an HTTP date SECONDS from now (or -SECONDS ago), made when the step runs",
    "param:NAME": "a variant's parameter, put in when the case file is loaded",
    "previous:NAME": "a seeded secret's value just before the case's last rotate_secret step of it",
    "rotated:NAME": "a seeded secret's value after the case's last rotate_secret step of it",
}
_SIMPLE = {
    "base_url", "refused_url", "base_url_with_userinfo", "refused_url_with_userinfo", "token", "bad_token",
    "team_id", "team_slug", "unknown_team_id", "sdk",
    "language", "root_url", "tls_base_url", "ca_file", "proxy_url", "proxied_base_url", "refused_proxy_url",
}


def _check_placeholders(case: Case) -> None:
    used = placeholders_in([case.steps, dict(case.env), case.client or {}])
    for name, arg in sorted(used, key=str):
        if name in _SIMPLE and arg is None:
            continue
        if name == "repeat" and arg is not None and re.fullmatch(r".+\*[0-9]+", arg):
            text, _, size = arg.rpartition("*")
            generate_value(text, int(size))
            continue
        if name == "http_date" and arg is not None and re.fullmatch(r"[+-][0-9]+", arg):
            continue
        if name == "token" and arg in case.tokens:
            continue
        if name in ("envelope", "secret_id") and arg is not None:
            if not case.e2e:
                raise CaseFileError(f"{case.path}: {{{{{name}:...}}}} needs an end-to-end team (\"team\": {{\"e2e\": true}})")
            secret_name, _, environment = arg.partition("@")
            try:
                case.value_of(secret_name, environment or "production")
            except KeyError as exc:
                raise CaseFileError(f"{case.path}: {exc.args[0]}") from None
            continue
        if name in ("api_token", "token_unpinned", "token_pinned_ahead", "wrapped_key") and arg is None:
            if not case.e2e:
                raise CaseFileError(f"{case.path}: {{{{{name}}}}} needs an end-to-end team (\"team\": {{\"e2e\": true}})")
            continue
        if name in ("previous", "rotated") and arg in _rotated_names(case):
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


def _rotated_names(case: Case) -> set[str]:
    """The secrets a `rotate_secret` step of the case rotates (their values change mid-case)."""
    return {step["secret"] for step in case.steps if step.get("server") == "rotate_secret"}


def load_known_failures(path: Path, case_ids: set[str] | None = None) -> frozenset[str]:
    """load_known_failures reads one case id per line (``#`` starts a comment); none: empty.

    With ``case_ids``, a line naming no case (nor a case with variants) is an error, so a
    renamed or deleted case cannot leave a stale entry behind.
    """
    if not path.is_file():
        return frozenset()
    ids = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if case_ids is not None and line not in case_ids:
            raise CaseFileError(f"{path}:{number}: no case {line!r}")
        ids.append(line)
    return frozenset(ids)


def load_drivers(
    directory: Path = DRIVERS_DIR, known_failures_dir: Path = KNOWN_FAILURES_DIR, cases: list[Case] | None = None
) -> list[DriverSpec]:
    """load_drivers reads and validates every ``drivers/*.json``, sorted by language, with each
    language's ``known-failures/<language>.txt`` (checked against ``cases`` when given)."""
    validator = _validator("driver.schema.json")
    case_ids = None
    if cases is not None:
        case_ids = {c.id for c in cases} | {c.id.split("[", 1)[0] for c in cases}
    if known_failures_dir.is_dir():
        languages = {p.stem for p in directory.glob("*.json")}
        for stray in sorted(known_failures_dir.glob("*.txt")):
            if stray.stem not in languages:
                raise CaseFileError(f"{stray}: no driver declares language {stray.stem!r}")
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
                known_failures=load_known_failures(known_failures_dir / f"{data['language']}.txt", case_ids),
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
