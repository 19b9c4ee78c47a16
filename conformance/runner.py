"""conformance.runner runs the cases against one driver and judges every step.

A case passes when every step does. The runner owns the assertions: the expected result or
error, the requests the proxy saw during the step, and two checks made on every answer — an
error message never holds a token or a seeded value, and ``describe`` never holds a token.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import re
import time
from email.utils import formatdate
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from cvsm import e2e

from .cases import Case, DriverSpec, generate_value, substitute
from .driver import DriverProcess
from .proxy import API_PREFIX, Fault, FaultProxy, RequestRecord
from .server import MintedToken, SeedError, Seeder, bad_token, refused_port, unknown_team_id


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")

CVSM_VARIABLES = (
    "CVSM_TOKEN", "CVSM_BASE_URL", "CVSM_TEAM", "CVSM_ENVIRONMENT", "CVSM_CACHE_TTL",
    "CVSM_TIMEOUT", "CVSM_MAX_RETRIES", "CVSM_CA_FILE",
)
ERROR_KEYS = ("kind", "message", "status", "retry_after", "request_id", "suggestion")
PROXIED_HOST = "cvsm-conformance.invalid"  # reachable only through the forward proxy
DEFAULT_STEP_TIMEOUT = 20.0
_MIN_LEAK_LENGTH = 6  # shorter seeded values could occur in any message by chance

# The user and password {{base_url_with_userinfo}} and {{refused_url_with_userinfo}} carry: the
# password is a credential like the token, so no describe or error message may ever show it.
USERINFO_USER = "cvsm-user"
USERINFO_PASSWORD = "cvsm-pass-must-not-show"


def with_userinfo(url: str) -> str:
    """with_userinfo puts USERINFO_USER:USERINFO_PASSWORD@ into a URL's authority."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{USERINFO_USER}:{USERINFO_PASSWORD}@{rest}"


@attrs.define
class CaseResult:
    """CaseResult is the verdict of one case for one language."""

    case_id: str
    language: str
    # "passed", "failed", "skipped", "n/a" (a capability the driver does not report), "known" (a
    # failure listed in known-failures/<language>.txt) or "fixed" (a listed failure that passes)
    status: str
    seconds: float = 0.0
    message: str = ""
    details: list[str] = attrs.Factory(list)


class StepFailure(Exception):
    """StepFailure says a step's answer or requests were not what the case expects."""


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _subset_mismatch(expected: Any, actual: Any, where: str) -> str | None:
    """_subset_mismatch compares nested objects key by key; other values must be equal."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{where}: expected an object, got {_short(actual)}"
        for key, value in expected.items():
            if key not in actual:
                return f"{where}.{key}: missing"
            problem = _subset_mismatch(value, actual[key], f"{where}.{key}")
            if problem:
                return problem
        return None
    if not _equal(expected, actual):
        if isinstance(expected, str) and isinstance(actual, str):
            return f"{where}: {_string_difference(expected, actual)}"
        return f"{where}: expected {_short(expected)}, got {_short(actual)}"
    return None


def _string_difference(expected: str, actual: str) -> str:
    """_string_difference says where two strings part, readable even for 64 KiB values."""
    if len(expected) <= 80 and len(actual) <= 80:
        return f"expected {json.dumps(expected, ensure_ascii=False)}, got {json.dumps(actual, ensure_ascii=False)}"
    at = next((i for i, (a, b) in enumerate(zip(expected, actual)) if a != b), min(len(expected), len(actual)))
    window = slice(max(0, at - 20), at + 20)
    return (
        f"strings differ at character {at} (expected {len(expected)} characters / "
        f"{len(expected.encode('utf-8', 'surrogatepass'))} bytes, got {len(actual)} / "
        f"{len(actual.encode('utf-8', 'surrogatepass'))}): expected ...{json.dumps(expected[window], ensure_ascii=False)}..., "
        f"got ...{json.dumps(actual[window], ensure_ascii=False)}..."
    )


def _equal(expected: Any, actual: Any) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return float(expected) == float(actual)
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(_equal(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(_equal(a, b) for a, b in zip(expected, actual))
    return bool(expected == actual)


def _count_mismatch(expected: Any, actual: int) -> bool:
    if isinstance(expected, int):
        return actual != expected
    return actual < expected.get("min", 0) or ("max" in expected and actual > expected["max"])


def _show_count(expected: Any) -> str:
    if isinstance(expected, int):
        return str(expected)
    return f"between {expected.get('min', 0)} and {expected.get('max', 'any')}"


class CaseRun:
    """CaseRun is one case run against one driver: its context, placeholders and steps."""

    def __init__(
        self,
        case: Case,
        spec: DriverSpec,
        driver: DriverProcess,
        proxy: FaultProxy,
        seeder: Seeder,
        touched_env: set[str],
        ca_file: str = "",
    ) -> None:
        self.case = case
        self.spec = spec
        self.driver = driver
        self.proxy = proxy
        self.seeder = seeder
        self.touched_env = touched_env
        self.tokens: dict[str, MintedToken] = {}
        self.bad_token = bad_token()
        self.unknown_team = unknown_team_id()
        self.refused_url = f"http://127.0.0.1:{refused_port()}{API_PREFIX}"
        self.refused_proxy_url = f"http://127.0.0.1:{refused_port()}"
        self.op_mark = 0  # where the proxy log stood when the last op step began
        self.ca_file = ca_file
        self.log: list[str] = []
        self.rotated: dict[str, tuple[str, str]] = {}  # name: (before, after) a rotate_secret

    # Placeholders -------------------------------------------------------------------------
    def lookup(self, name: str, arg: str | None) -> str:
        seed = self.seeder.teams[self.case.id]
        if name == "token":
            if arg is None:
                return seed.e2e.token if seed.e2e is not None else self.seeder.token
            return self.tokens[arg].token
        if name == "api_token":  # an end-to-end case's token without its key part
            assert seed.e2e is not None
            return seed.e2e.token.partition(".")[0]
        if name == "token_unpinned":  # the same token in the first format: its key without the pin
            assert seed.e2e is not None
            return ".".join(seed.e2e.token.split(".")[:2])
        if name == "token_pinned_ahead":  # the same token pinned one key version above the team's
            assert seed.e2e is not None
            parts = e2e.parse_token(seed.e2e.token)
            assert parts is not None
            ahead = seed.e2e.key_version + 1
            return e2e.join_token(parts.api_token, parts.private_key, ahead,
                                  e2e.commitment(seed.e2e.team_key, seed.team_id, ahead))
        if name == "wrapped_key":  # the team key of version 1 wrapped to the token, as seeded
            assert seed.e2e is not None
            return seed.e2e.token_wrap
        if name in ("envelope", "secret_id"):  # an end-to-end secret as it was seeded
            assert seed.e2e is not None and arg is not None
            secret_name, _, environment = arg.partition("@")
            key = (secret_name, environment or "production")
            return seed.e2e.envelopes[key] if name == "envelope" else seed.e2e.secret_ids[key]
        if name == "secret":
            assert arg is not None
            secret_name, _, environment = arg.partition("@")
            return self.case.value_of(secret_name, environment or "production")
        if name in ("previous", "rotated"):
            assert arg is not None
            before, after = self.rotated[arg]
            return before if name == "previous" else after
        if name == "repeat":
            assert arg is not None
            text, _, size = arg.rpartition("*")
            return generate_value(text, int(size))
        if name == "http_date":
            assert arg is not None
            return formatdate(time.time() + int(arg), usegmt=True)
        simple = {
            "base_url": self.proxy.base_url,
            "refused_url": self.refused_url,
            "base_url_with_userinfo": with_userinfo(self.proxy.base_url),
            "refused_url_with_userinfo": with_userinfo(self.refused_url),
            "bad_token": self.bad_token,
            "team_id": seed.team_id,
            "team_slug": seed.team_slug,
            "unknown_team_id": self.unknown_team,
            "sdk": self.spec.sdk,
            "language": self.spec.language,
            "root_url": self.proxy.base_url[: -len(API_PREFIX)],
            "tls_base_url": self.proxy.tls_base_url,
            "ca_file": self.ca_file,
            "proxy_url": self.proxy.proxy_url,
            "proxied_base_url": f"http://{PROXIED_HOST}{API_PREFIX}",
            "refused_proxy_url": self.refused_proxy_url,
        }
        return simple[name]

    def sub(self, value: Any) -> Any:
        return substitute(value, self.lookup)

    def tokens_never_shown(self) -> list[str]:
        """tokens_never_shown are the credentials no error message or describe may hold: with an
        end-to-end team's token, its part before the dot, its key part and its team key too."""
        tokens = [self.seeder.token, self.bad_token, USERINFO_PASSWORD]
        tokens += [t.token for t in self.tokens.values()]
        e2e = self.seeder.teams[self.case.id].e2e if self.case.id in self.seeder.teams else None
        if e2e is not None:
            api_token, _, key_part = e2e.token.partition(".")
            tokens += [e2e.token, api_token, key_part, key_part.split(".")[0], _b64u(e2e.team_key)]
        return tokens

    def secrets_never_shown(self) -> list[str]:
        """secrets_never_shown are the strings no error message may hold."""
        values = [s.value for s in self.case.secrets if len(s.value) >= _MIN_LEAK_LENGTH]
        return self.tokens_never_shown() + values

    # Running ------------------------------------------------------------------------------
    async def run(self) -> None:
        if any(step.get("server") in ("rotate_secret", "reseal_secret", "update_and_watch",
                                      "forge_team_key", "rekey_team") for step in self.case.steps):
            # Languages run side by side on one team per case: a case that rotates a value
            # runs whole for one language at a time, so each sees only its own rotation.
            async with self.seeder.case_lock(self.case.id):
                await self._run()
        else:
            await self._run()

    async def _run(self) -> None:
        self.proxy.reset()
        for name, spec in self.case.tokens.items():
            self.tokens[name] = await self.seeder.mint(
                f"conformance {self.case.id} {name} {self.spec.language}",
                expires_in=spec.get("expires_in"),
                allowed_ips=spec.get("allowed_ips"),
            )
        env = {k: (self.sub(v) if v is not None else None) for k, v in self.case.env.items()}
        unset = sorted((set(CVSM_VARIABLES) | self.touched_env) - {k for k, v in env.items() if v is not None})
        self.touched_env.update(env)
        await self.driver.request(
            "set_env", {"set": {k: v for k, v in env.items() if v is not None}, "unset": unset}
        )
        if self.case.client is not None:
            try:
                await self.run_op({"op": "new_client", "args": {"options": self.case.client}})
            except StepFailure as failure:
                raise StepFailure(f"the case's client: {failure}") from None
        for index, step in enumerate(self.case.steps, start=1):
            try:
                await self.run_step(step)
            except StepFailure as failure:
                raise StepFailure(f"step {index} ({self.describe_step(step)}): {failure}") from None

    def describe_step(self, step: Mapping[str, Any]) -> str:
        if "op" in step:
            args = step.get("args")
            return f"{step['op']} {_short(args, 80)}" if args else str(step["op"])
        if "sleep" in step:
            return f"sleep {step['sleep']}s"
        if "faults" in step:
            return "faults " + ", ".join(f"{f['match']}x{f.get('times', 1)}" for f in step["faults"])
        if "sealed_for" in step or "environment" in step:
            where = f"{step.get('sealed_for', step['secret'])}@{step.get('environment', 'production')}"
            return f"server {step['server']} {step['secret']} sealed for {where}"
        if step.get("server") in ("rekey_team", "forge_team_key"):
            return f"server {step['server']}"
        if "updates" in step:
            return f"server update_and_watch {step['secret']} x{step['updates']}"
        return f"server {step['server']} {step.get('token') or step.get('secret')}"

    async def run_step(self, step: Mapping[str, Any]) -> None:
        if "sleep" in step:
            await asyncio.sleep(float(step["sleep"]))
            if "requests" in step:  # from the last op on: what the client also sent on its own
                self.check_requests(self.sub(step["requests"]), self.proxy.log[self.op_mark:])
            return
        if "faults" in step:
            # A faults step replaces whatever is still pending from an earlier one.
            self.proxy.reset()
            self.proxy.add_faults([Fault.from_case(self.sub(f)) for f in step["faults"]])
            return
        if step.get("server") == "rotate_secret":
            seed = self.seeder.teams[self.case.id]
            try:
                self.rotated[step["secret"]] = await self.seeder.rotate(seed.team_id, step["secret"])
            except SeedError as exc:
                raise StepFailure(f"the server did not rotate {step['secret']}: {exc}") from None
            self.log.append(f"server rotated {step['secret']}")
            return
        if step.get("server") == "forge_team_key":
            try:
                await self.seeder.forge_team_key(self.case.id)
            except SeedError as exc:
                raise StepFailure(f"the server did not take the forged team key: {exc}") from None
            self.log.append("server serves a team key of its own to the token")
            return
        if step.get("server") == "reseal_secret":
            name = step["secret"]
            sealed_for = step.get("sealed_for", name)
            environment = step.get("environment", "production")
            try:
                await self.seeder.reseal(self.case.id, name, self.case.value_of(name), sealed_for, environment)
            except SeedError as exc:
                raise StepFailure(f"the server did not take {name} sealed anew: {exc}") from None
            self.log.append(f"server holds {name} sealed for {sealed_for} in {environment}")
            return
        if step.get("server") == "rekey_team":
            try:
                version = await self.seeder.rekey_team(self.case)
            except SeedError as exc:
                raise StepFailure(f"the server did not take the re-key: {exc}") from None
            self.log.append(f"server re-keyed the team to key version {version}")
            return
        if step.get("server") == "update_and_watch":
            await self.update_and_watch(step)
            return
        if "server" in step:
            token = self.tokens[step["token"]]
            if step["server"] == "revoke_token":
                await self.seeder.revoke(token)
            elif token.expires_at is not None:
                remaining = token.expires_at.timestamp() - time.time()
                await asyncio.sleep(max(0.0, remaining) + 1.0)
            return
        await self.run_op(step)

    async def update_and_watch(self, step: Mapping[str, Any]) -> None:
        """update_and_watch updates a secret on the server again and again and measures, for
        each update, the time from its 200 to the driver's `get` returning the new value."""
        name = step["secret"]
        updates, p99_limit = int(step["updates"]), float(step.get("p99", 1.0))
        poll, pause = float(step.get("poll", 0.02)), float(step.get("pause", 0.1))
        seeded = self.case.value_of(name)
        try:
            path = await self.seeder.secret_path(self.seeder.teams[self.case.id].team_id, name)
        except SeedError as exc:
            raise StepFailure(str(exc)) from None
        mark = len(self.proxy.log)
        latencies: list[float] = []
        try:
            for number in range(1, updates + 1):
                value = f"{seeded}-{self.spec.language}-{number}-{time.time_ns() % 1_000_000}"
                latencies.append(await self._update_and_wait(path, name, value, p99_limit + 2.0, poll))
                await asyncio.sleep(pause)
            seen = self.proxy.log[mark:]
        finally:
            with contextlib.suppress(StepFailure, SeedError):  # the seeded value back, for what follows
                await self._update_and_wait(path, name, seeded, 30.0, poll)
        ordered = sorted(latencies)
        p50 = ordered[(len(ordered) - 1) // 2]
        p99 = ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]
        summary = (f"{updates} updates of {name}: update's 200 to get returning it p50 {p50 * 1000:.0f} ms, "
                   f"p99 {p99 * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms; {len(seen)} request(s): "
                   + ", ".join(f"{kind} {sum(1 for r in seen if r.kind == kind)}"
                               for kind in sorted({r.kind for r in seen})))
        self.log.append(summary)
        if p99 > p99_limit:
            raise StepFailure(f"p99 {p99:.3f} s is over {p99_limit:g} s ({summary})")
        if "requests" in step:
            self.check_requests(self.sub(step["requests"]), seen)

    async def _update_and_wait(self, path: str, name: str, value: str, give_up: float, poll: float) -> float:
        await self.seeder.update(path, value)
        written = time.monotonic()
        while True:
            response = await self.driver.request("get", {"name": name})
            seen_at = time.monotonic()
            self.check_universal("get", response)
            if not response["ok"]:
                error = response.get("error") or {}
                raise StepFailure(f"get {name} failed: {error.get('kind')}: {_short(error.get('message'), 200)}")
            if response["result"].get("value") == value:
                return seen_at - written
            if seen_at - written > give_up:
                raise StepFailure(f"the update of {name} was not seen within {give_up:g} s")
            await asyncio.sleep(poll)

    async def run_op(self, step: Mapping[str, Any]) -> None:
        op = step["op"]
        args = self.sub(step.get("args", {}))
        mark = self.op_mark = len(self.proxy.log)
        response = await self.driver.request(op, args, timeout=float(step.get("timeout", DEFAULT_STEP_TIMEOUT)))
        seen = self.proxy.log[mark:]
        self.log.append(
            f"{op} -> " + ("ok " + _short(response.get("result"), 120) if response["ok"]
                           else "error " + _short(response.get("error"), 200))
            + "".join(f"\n      {r.describe()}" for r in seen)
        )
        if op == "set_env":
            self.touched_env.update(args.get("set", {}))
        if op == "inject" and response["ok"]:
            names = (response.get("result") or {}).get("names")
            if isinstance(names, list):
                self.touched_env.update(n for n in names if isinstance(n, str))
        self.check_universal(op, response)
        self.check_answer(self.sub(step.get("expect", {"ok": True})), response)
        if "requests" in step:
            self.check_requests(self.sub(step["requests"]), seen)

    def check_universal(self, op: str, response: Mapping[str, Any]) -> None:
        if not response["ok"]:
            error = response.get("error")
            if not isinstance(error, dict) or not isinstance(error.get("kind"), str):
                raise StepFailure(f"error answer without an error object and kind: {_short(response)}")
            if error["kind"] in ("internal", "unsupported"):
                raise StepFailure(f"driver answered {error['kind']}: {_short(error.get('message'), 400)}")
            missing = [key for key in ERROR_KEYS if key not in error]
            if missing:
                raise StepFailure(f"the error object lacks {', '.join(missing)}: {_short(error, 300)}")
            for key in ("request_id", "suggestion"):
                if error[key] is not None and not isinstance(error[key], str):
                    raise StepFailure(f"error {key} is neither a string nor null: {_short(error[key])}")
            message = str(error.get("message", ""))
            for secret in self.secrets_never_shown():
                if secret in message:
                    raise StepFailure(f"the error message holds a token or value: {_short(message)}")
        elif op == "describe":
            text = json.dumps(response.get("result"), ensure_ascii=False)
            if any(t in text for t in self.tokens_never_shown()):
                raise StepFailure("describe shows a token or a base URL's password")

    def check_answer(self, expect: Mapping[str, Any], response: Mapping[str, Any]) -> None:
        if expect["ok"]:
            if not response["ok"]:
                error = response.get("error") or {}
                raise StepFailure(
                    f"expected success, got error kind={error.get('kind')} status={error.get('status')}: "
                    f"{_short(error.get('message'), 300)}"
                )
            result = response.get("result")
            if not isinstance(result, dict):
                raise StepFailure(f"result is not an object: {_short(result)}")
            if "result" in expect and not _equal(expect["result"], result):
                problem = _subset_mismatch(expect["result"], result, "result") or (
                    f"result has extra keys: {sorted(set(result) - set(expect['result']))}"
                    if isinstance(expect["result"], dict) and set(result) != set(expect["result"])
                    else f"expected {_short(expect['result'])}, got {_short(result)}"
                )
                raise StepFailure(problem)
            if "result_subset" in expect:
                problem = _subset_mismatch(expect["result_subset"], result, "result")
                if problem:
                    raise StepFailure(problem)
            shown = list(_strings(result))
        else:
            if response["ok"]:
                raise StepFailure(
                    f"expected error kind {expect['error']['kind']}, got success {_short(response.get('result'))}"
                )
            error = response["error"]
            want = expect["error"]
            got = (f"kind={error.get('kind')} status={error.get('status')} retry_after={error.get('retry_after')} "
                   f"request_id={error.get('request_id')} suggestion={error.get('suggestion')}")
            if error.get("kind") != want["kind"]:
                raise StepFailure(f"expected kind {want['kind']}, got {got}: {_short(error.get('message'), 300)}")
            for field in ("status", "retry_after", "request_id", "suggestion"):
                if field not in want:
                    continue
                if isinstance(want[field], dict):  # a range, for a delay computed from a date
                    actual = error.get(field)
                    if not isinstance(actual, int) or isinstance(actual, bool) or _count_mismatch(want[field], actual):
                        raise StepFailure(f"expected {field} {_show_count(want[field])}, got {got}")
                elif error.get(field) != want[field]:
                    raise StepFailure(f"expected {field} {want[field]}, got {got}")
            if "request_id_matches" in want:
                request_id = error.get("request_id")
                if not isinstance(request_id, str) or not re.fullmatch(want["request_id_matches"], request_id):
                    raise StepFailure(f"request_id does not match /{want['request_id_matches']}/: got {got}")
            message = str(error.get("message", ""))
            for text in want.get("message_contains", []):
                if text not in message:
                    raise StepFailure(f"message lacks {_short(text)}: {_short(message, 300)}")
            for text in want.get("message_excludes", []):
                if text in message:
                    raise StepFailure(f"message holds {_short(text)}: {_short(message, 300)}")
            if "message_matches" in want and not re.search(want["message_matches"], message):
                raise StepFailure(f"message does not match /{want['message_matches']}/: {_short(message, 300)}")
            shown = [message]
        for text in expect.get("excludes", []):
            if any(text in s for s in shown):
                raise StepFailure(f"the answer holds {_short(text, 40)}, which it must not")

    def check_requests(self, expect: Mapping[str, Any], seen: list[RequestRecord]) -> None:
        listing = "; ".join(r.describe() for r in seen) or "none"
        if "count" in expect and _count_mismatch(expect["count"], len(seen)):
            raise StepFailure(
                f"expected {_show_count(expect['count'])} request(s), the proxy saw {len(seen)}: {listing}"
            )
        for kind, count in expect.get("kinds", {}).items():
            actual = sum(1 for r in seen if r.kind == kind)
            if _count_mismatch(count, actual):
                raise StepFailure(
                    f"expected {_show_count(count)} {kind} request(s), the proxy saw {actual}: {listing}"
                )
        each = expect.get("each", {})
        for record in seen:
            if "method" in each and record.method != each["method"]:
                raise StepFailure(f"expected method {each['method']}: {record.describe()}")
            if "forward_proxy" in each and record.forward_proxy != each["forward_proxy"]:
                raise StepFailure(
                    f"expected {'a' if each['forward_proxy'] else 'no'} forward-proxy request: {record.describe()}"
                )
            for header, pattern in each.get("headers", {}).items():
                value = record.headers.get(header.lower())
                if value is None or not re.fullmatch(pattern, value):
                    shown = "absent" if value is None else _short(value, 80)
                    if header.lower() == "authorization" and value is not None:
                        shown = _short(value, 12)  # never print a whole credential
                    raise StepFailure(f"header {header} is {shown}, expected /{_short(pattern, 60)}/ ({record.describe()})")
        if "sequence" in expect:
            wanted = expect["sequence"]
            if len(wanted) != len(seen):
                raise StepFailure(f"expected {len(wanted)} request(s) in sequence, the proxy saw {len(seen)}: {listing}")
            for position, (matcher, record) in enumerate(zip(wanted, seen), start=1):
                if "kind" in matcher and record.kind != matcher["kind"]:
                    raise StepFailure(f"request {position} should be {matcher['kind']}: {record.describe()}")
                path = record.path[len(API_PREFIX):] if record.path.startswith(API_PREFIX) else record.path
                if "path" in matcher and not re.fullmatch(matcher["path"], path):
                    raise StepFailure(f"request {position} path {path} does not match /{matcher['path']}/")
                for key, value in matcher.get("query", {}).items():
                    actual = record.query.get(key)
                    if value is None:
                        if actual is not None:
                            raise StepFailure(f"request {position} has query {key}={actual}, expected none")
                    elif actual != [value]:
                        raise StepFailure(
                            f"request {position} query {key} is {actual}, expected [{_short(value, 60)}] "
                            f"({record.describe()})"
                        )
