"""conformance.suite runs the whole thing: requirements, builds, server, proxy, seeding, cases.

``run`` drives every selected language's driver through every case; ``unit_tests`` runs each
language's own unit tests. Both skip a language whose ``requires`` are missing (saying why),
except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from . import report
from .cases import REPO_ROOT, Case, DriverSpec, load_cases, load_drivers
from .driver import DriverFailure, DriverProcess, driver_environment
from .proxy import FaultProxy, PrivateCA
from .runner import CaseResult, CaseRun, StepFailure
from .server import ReferenceServer, Seeder, SeedError, ServerUnavailable

REPORTS_DIR = Path(__file__).resolve().parent / "reports"
BUILD_TIMEOUT = 1200.0
UNIT_TEST_TIMEOUT = 1800.0
MAX_DRIVER_FAILURES_IN_A_ROW = 3


class UsageError(Exception):
    """UsageError says the command line names something that does not exist."""


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def select_drivers(drivers: Sequence[DriverSpec], languages: Sequence[str] | None) -> list[DriverSpec]:
    if not languages:
        return list(drivers)
    wanted = [name for item in languages for name in item.split(",") if name]
    known = {d.language: d for d in drivers}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise UsageError(f"no driver declared for {', '.join(unknown)} (known: {', '.join(known) or 'none'})")
    return [known[name] for name in dict.fromkeys(wanted)]


def missing_requirements(spec: DriverSpec) -> list[str]:
    return [tool for tool in spec.requires if shutil.which(tool) is None]


def say(text: str) -> None:
    print(text, flush=True)


def unit_test_environment() -> dict[str, str]:
    """unit_test_environment is the drivers' environment plus ``CVSM_SERVER_PYTHON``: this
    Python, which imports the reference server, for suites that start it (the cvsm command's)."""
    return {**driver_environment(), "CVSM_SERVER_PYTHON": sys.executable}


async def run_command(
    command: Sequence[str], log_path: Path, timeout: float, env: dict[str, str] | None = None
) -> tuple[int | None, float]:
    """run_command runs ``command`` from the repository root into ``log_path``; None = timed out."""
    started = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as sink:
        try:
            proc = await asyncio.create_subprocess_exec(
                *command, cwd=REPO_ROOT, env=env if env is not None else driver_environment(),
                stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
            )
        except OSError as exc:
            sink.write(f"cannot run {list(command)}: {exc}\n".encode())
            return 127, time.monotonic() - started
        try:
            code = await asyncio.wait_for(proc.wait(), timeout)
        except asyncio.TimeoutError:
            os.killpg(proc.pid, 9)
            await proc.wait()
            return None, time.monotonic() - started
    return code, time.monotonic() - started


def tail(path: Path, lines: int = 25) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def fail_all(cases: Sequence[Case], language: str, message: str, details: list[str] | None = None) -> list[CaseResult]:
    return [CaseResult(c.id, language, "failed", message=message, details=details or []) for c in cases]


def skip_all(cases: Sequence[Case], language: str, message: str) -> list[CaseResult]:
    return [CaseResult(c.id, language, "skipped", message=message) for c in cases]


async def run_language(
    spec: DriverSpec, cases: Sequence[Case], proxy: FaultProxy, seeder: Seeder, reports: Path, ca_file: str = ""
) -> tuple[list[CaseResult], str | None]:
    """run_language runs every case against one long-lived driver process (restarted if it dies).

    It returns the results (known failures already judged), a note on the driver's exit, and
    the capabilities the driver reported when it started (None when it never started).
    """
    stderr_log = reports / f"driver-{spec.language}.stderr.log"
    stderr_log.unlink(missing_ok=True)
    results: list[CaseResult] = []
    driver: DriverProcess | None = None
    failures_in_a_row = 0
    note = None
    capabilities: frozenset[str] | None = None
    for case in cases:
        if failures_in_a_row >= MAX_DRIVER_FAILURES_IN_A_ROW:
            results.append(judge_known(spec, CaseResult(
                case.id, spec.language, "failed",
                message=f"not run: the driver failed {failures_in_a_row} cases in a row")))
            continue
        started = time.monotonic()
        if driver is None or not driver.alive:
            driver = DriverProcess(spec, stderr_log)
            try:
                await driver.start()
            except DriverFailure as exc:
                failures_in_a_row += 1
                results.append(judge_known(spec, CaseResult(
                    case.id, spec.language, "failed", time.monotonic() - started,
                    f"driver did not start: {exc}", driver.stderr_since(0))))
                await driver.kill()
                driver = None
                _progress(results[-1])
                continue
            if capabilities is None:
                capabilities = driver.capabilities
        lacking = [c for c in case.requires if c not in driver.capabilities]
        if lacking:
            results.append(CaseResult(case.id, spec.language, "n/a", message=f"needs {', '.join(lacking)}"))
            _progress(results[-1])
            continue
        mark = driver.stderr_count
        run = CaseRun(case, spec, driver, proxy, seeder, touched_env=driver.touched_env, ca_file=ca_file)
        try:
            async with asyncio.timeout(case.timeout):
                await run.run()
            result = CaseResult(case.id, spec.language, "passed", time.monotonic() - started)
            failures_in_a_row = 0
        except StepFailure as exc:
            result = CaseResult(case.id, spec.language, "failed", time.monotonic() - started, str(exc))
            failures_in_a_row = 0
        except DriverFailure as exc:
            result = CaseResult(case.id, spec.language, "failed", time.monotonic() - started, f"driver failure: {exc}")
            failures_in_a_row += 1
        except TimeoutError:
            result = CaseResult(case.id, spec.language, "failed", time.monotonic() - started,
                                f"the case took longer than its {case.timeout:g}s budget (driver killed)")
            failures_in_a_row += 1
        except SeedError as exc:
            result = CaseResult(case.id, spec.language, "failed", time.monotonic() - started,
                                f"the harness could not prepare the case: {exc}")
        if result.status == "failed":
            result.details = ["steps:", *("  " + line for line in run.log)]
            stderr = driver.stderr_since(mark)
            if stderr:
                result.details += ["driver stderr:", *("  " + line for line in stderr)]
            if failures_in_a_row:
                await driver.kill()
        result = judge_known(spec, result)
        results.append(result)
        _progress(result)
    if driver is not None and driver.alive:
        code = await driver.stop()
        if code not in (0, None):
            note = f"the driver exited with code {code} after shutdown"
    return results, note, capabilities


def judge_known(spec: DriverSpec, result: CaseResult) -> CaseResult:
    """judge_known turns the verdict on a case of ``known-failures/<language>.txt``: a failure
    is "known" (neither a pass nor a failure of the run), a pass is "fixed" (a failure of the
    run, so that the line is removed)."""
    if not spec.is_known_failure(result.case_id):
        return result
    if result.status == "failed":
        result.status = "known"
        result.message = f"known failure (known-failures/{spec.language}.txt): {result.message}"
    elif result.status == "passed":
        result.status = "fixed"
        result.message = (f"listed in conformance/known-failures/{spec.language}.txt but passes now: "
                          "remove the line")
    return result


def _progress(result: CaseResult) -> None:
    mark = {"passed": "pass", "failed": "FAIL", "skipped": "skip", "n/a": "n/a", "known": "known",
            "fixed": "FIXED"}[result.status]
    line = f"  [{result.language}] {mark:5} {result.case_id} ({result.seconds:.1f}s)"
    if result.status in ("failed", "fixed", "known"):
        line += f"\n         {result.message[:400]}"
    say(line)


async def run(
    languages: Sequence[str] | None,
    case_filter: Sequence[str] | None,
    server_url: str | None,
    reports: Path = REPORTS_DIR,
    jobs: int = 1,
) -> int:
    """run is ``python -m conformance run``; returns the exit code. With `jobs` > 1, that many
    languages run at once (each in its own lane)."""
    all_cases = cases = load_cases()
    if case_filter:
        cases = [c for c in cases if any(f in c.id for f in case_filter)]
        if not cases:
            raise UsageError(f"no case id contains {', '.join(case_filter)}")
    selected = select_drivers(load_drivers(cases=all_cases), languages)
    ci = in_ci()
    results: list[CaseResult] = []
    notes: dict[str, str] = {}
    reported: dict[str, frozenset[str]] = {}
    runnable: list[DriverSpec] = []
    for spec in selected:
        missing = missing_requirements(spec)
        if missing:
            reason = f"{', '.join(missing)} not on PATH"
            if ci:
                notes[spec.language] = f"FAILED (CI=true): {reason}"
                results += fail_all(cases, spec.language, f"required tool missing under CI: {reason}")
            else:
                notes[spec.language] = f"skipped: {reason}"
                results += skip_all(cases, spec.language, reason)
            say(f"[{spec.language}] {notes[spec.language]}")
        else:
            runnable.append(spec)

    builds: dict[tuple[str, ...], tuple[int | None, Path]] = {}
    ready: list[DriverSpec] = []
    for spec in runnable:
        if spec.build is None:
            ready.append(spec)
            continue
        if spec.build not in builds:
            log_path = reports / f"build-{spec.language}.log"
            say(f"[{spec.language}] build: {' '.join(spec.build)}")
            code, seconds = await run_command(spec.build, log_path, BUILD_TIMEOUT)
            builds[spec.build] = (code, log_path)
            say(f"[{spec.language}] build {'ok' if code == 0 else 'FAILED'} ({seconds:.1f}s, log {log_path})")
        code, log_path = builds[spec.build]
        if code == 0:
            ready.append(spec)
        else:
            why = "timed out" if code is None else f"exited {code}"
            notes[spec.language] = f"build {why}; see {log_path}"
            results += fail_all(cases, spec.language, f"build {why}", ["build output (tail):", *tail(log_path)])

    header = [
        f"run at {datetime.now(timezone.utc).isoformat(timespec='seconds')}",
        f"{len(cases)} cases; languages: {', '.join(s.language for s in selected) or 'none'}",
    ]
    if ready:
        server = ReferenceServer(server_url)
        proxies: list[FaultProxy] = []
        ca_dir = tempfile.TemporaryDirectory(prefix="cvsm-conformance-ca-")
        try:
            say("starting the reference server (embedded PostgreSQL)..." if not server_url else f"using {server_url}")
            started = time.monotonic()
            await server.start()
            ca = PrivateCA(Path(ca_dir.name))
            # One lane per job, each with its own fault proxy: a lane runs one language at a time,
            # so faults and the requests a case counts never mix between languages. Cases share
            # only read-only seeds (each case's team and secrets) and the server.
            lanes = max(1, min(jobs, len(ready)))
            for _ in range(lanes):
                proxies.append(FaultProxy(server.url, tls=ca.server_context()))
                await proxies[-1].start()
            say(f"server {server.url} (version {server.version}) ready in {time.monotonic() - started:.1f}s; "
                f"{lanes} lane(s), proxies {', '.join(p.base_url for p in proxies)}")
            header.append(f"server version {server.version}")
            async with Seeder(server.url) as seeder:
                await seeder.seed(cases)
                waiting = list(ready)
                by_language: dict[str, list[CaseResult]] = {}

                async def lane(proxy: FaultProxy) -> None:
                    while waiting:
                        spec = waiting.pop(0)
                        say(f"[{spec.language}] running {len(cases)} cases: {' '.join(spec.command)}")
                        language_results, note, capabilities = await run_language(
                            spec, cases, proxy, seeder, reports, str(ca.ca_file))
                        by_language[spec.language] = language_results
                        if capabilities is not None:
                            reported[spec.language] = capabilities
                        if note:
                            notes[spec.language] = note

                await asyncio.gather(*(lane(proxy) for proxy in proxies))
                for spec in ready:
                    results += by_language.get(spec.language, [])
        except (ServerUnavailable, SeedError, OSError) as exc:
            say(f"cannot run the cases: {exc}")
            done = {(r.case_id, r.language) for r in results}
            for spec in ready:
                results += [r for r in fail_all(cases, spec.language, f"not run: {exc}") if (r.case_id, r.language) not in done]
                notes.setdefault(spec.language, f"not run: {exc}")
        finally:
            for proxy in proxies:
                await proxy.close()
            await server.stop()
            ca_dir.cleanup()

    languages_shown = [s.language for s in selected]
    capabilities = {s.language: sorted(reported[s.language]) if s.language in reported else None for s in selected}
    text = report.markdown(cases, languages_shown, results, notes, header, capabilities)
    written = report.write(reports, "conformance", text, report.junit(results, languages_shown))
    say("")
    say(text.rstrip("\n").rsplit("\n", 1)[0])
    say(f"(written to {', '.join(str(p.relative_to(REPO_ROOT)) for p in written)})")
    say(report.summary_line(results))
    return 1 if any(r.status in ("failed", "fixed") for r in results) else 0


async def unit_tests(languages: Sequence[str] | None, reports: Path = REPORTS_DIR, jobs: int = 1) -> int:
    """unit_tests is ``python -m conformance unit-tests``; returns the exit code. With `jobs` > 1,
    that many languages' suites run at once, each into its own log, printed whole when it ends."""
    selected = select_drivers(load_drivers(), languages)
    ci = in_ci()
    rows: dict[str, tuple[str, str, str]] = {}
    waiting: list[DriverSpec] = []
    for spec in selected:
        if spec.unit_test is None:
            continue
        missing = missing_requirements(spec)
        if missing:
            reason = f"{', '.join(missing)} not on PATH"
            rows[spec.language] = (spec.language, "failed" if ci else "skipped",
                                   reason + (" (CI=true)" if ci else ""))
            say(f"[{spec.language}] {'FAILED' if ci else 'skipped'}: {reason}")
            continue
        waiting.append(spec)
    order = [s.language for s in selected]
    reports.mkdir(parents=True, exist_ok=True)

    async def lane() -> None:
        while waiting:
            spec = waiting.pop(0)
            say(f"[{spec.language}] unit tests: {' '.join(spec.unit_test)}")
            started = time.monotonic()
            if jobs > 1:
                log_path = reports / f"unit-{spec.language}.log"
                code, _ = await run_command(spec.unit_test, log_path, UNIT_TEST_TIMEOUT, unit_test_environment())
                say(f"[{spec.language}] output ({log_path.relative_to(REPO_ROOT)}):")
                say(log_path.read_text(errors="replace").rstrip("\n"))
            else:
                code = await _run_streaming(spec.unit_test, UNIT_TEST_TIMEOUT)
            seconds = time.monotonic() - started
            if code == 0:
                rows[spec.language] = (spec.language, "passed", f"{seconds:.1f}s")
            else:
                why = "timed out" if code is None else f"exited {code}"
                rows[spec.language] = (spec.language, "failed", f"{why} after {seconds:.1f}s")
            say(f"[{spec.language}] unit tests {rows[spec.language][1]} ({rows[spec.language][2]})")

    await asyncio.gather(*(lane() for _ in range(max(1, min(jobs, len(waiting) or 1)))))
    ordered = [rows[lang] for lang in order if lang in rows]
    lines = ["# cvsm unit tests", "", "| language | result | |", "|---|---|---|"]
    lines += [f"| {lang} | {status} | {info} |" for lang, status, info in ordered]
    passed = sum(r[1] == "passed" for r in ordered)
    failed = sum(r[1] == "failed" for r in ordered)
    skipped = sum(r[1] == "skipped" for r in ordered)
    summary = f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else "")
    lines += ["", summary]
    report.write(reports, "unit-tests", "\n".join(lines) + "\n", None)
    say("")
    say("\n".join(lines[:-1]))
    say(summary)
    return 1 if failed else 0


async def _run_streaming(command: Sequence[str], timeout: float) -> int | None:
    sys.stdout.flush()
    try:
        proc = await asyncio.create_subprocess_exec(
            *command, cwd=REPO_ROOT, env=unit_test_environment(), stdin=subprocess.DEVNULL, start_new_session=True
        )
    except OSError as exc:
        say(f"cannot run {list(command)}: {exc}")
        return 127
    try:
        return await asyncio.wait_for(proc.wait(), timeout)
    except asyncio.TimeoutError:
        os.killpg(proc.pid, 9)
        await proc.wait()
        return None
