"""python -m conformance: run the conformance cases or every client's unit tests.

    python -m conformance run [--lang L ...] [-k CASE ...] [--server-url URL] [--jobs N]
    python -m conformance unit-tests [--lang L ...] [--jobs N]
    python -m conformance check        # validate case, driver and known-failures files only
    python -m conformance list         # cases and declared languages
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from . import suite
from .cases import PLACEHOLDERS, CaseFileError, load_cases, load_drivers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the conformance cases against the declared drivers")
    run.add_argument("--lang", action="append", metavar="L", help="a language (repeatable, or comma list)")
    run.add_argument("-k", "--case", action="append", metavar="ID", help="only cases whose id contains ID")
    run.add_argument("--server-url", help="use a running server (root URL, no /api/v1) instead of starting one")
    run.add_argument("--jobs", "-j", type=int, default=_default_jobs(), metavar="N",
                     help="languages run at once (default: CVSM_CONFORMANCE_JOBS, else 2)")
    units = commands.add_parser("unit-tests", help="run each declared language's unit_test command")
    units.add_argument("--lang", action="append", metavar="L")
    units.add_argument("--jobs", "-j", type=int, default=_default_jobs(), metavar="N",
                       help="suites run at once, each into its own log (default: "
                            "CVSM_CONFORMANCE_JOBS, else 2; 1 streams the output)")
    commands.add_parser("check", help="validate the case, driver and known-failures files")
    commands.add_parser("list", help="list cases, languages and placeholders")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "run":
            _quiet_server_logs()
            if args.jobs < 1:
                parser.error("--jobs must be at least 1")
            return asyncio.run(suite.run(args.lang, args.case, args.server_url, jobs=args.jobs))
        if args.command == "unit-tests":
            if args.jobs < 1:
                parser.error("--jobs must be at least 1")
            return asyncio.run(suite.unit_tests(args.lang, jobs=args.jobs))
        cases = load_cases()
        drivers = load_drivers(cases=cases)
        if args.command == "check":
            known = sum(len(d.known_failures) for d in drivers)
            print(f"{len(cases)} cases, {len(drivers)} drivers and {known} known failures are valid")
            return 0
        for case in cases:
            print(f"case  {case.id}: {case.title}")
        for driver in drivers:
            print(f"lang  {driver.language}: {' '.join(driver.command)} (requires {', '.join(driver.requires) or 'nothing'})")
        for name, meaning in PLACEHOLDERS.items():
            print(f"{{{{{name}}}}}  {meaning}")
        return 0
    except (CaseFileError, suite.UsageError) as exc:
        print(f"conformance: {exc}", file=sys.stderr)
        return 2


def _default_jobs() -> int:
    """Most cases wait (retries, timeouts, cache lifetimes) rather than compute, so two languages
    at once roughly halve the run even on two cores."""
    text = os.environ.get("CVSM_CONFORMANCE_JOBS", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else 2


def _quiet_server_logs() -> None:
    """_quiet_server_logs sends the in-process server's logs to a file, not the report."""
    suite.REPORTS_DIR.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(suite.REPORTS_DIR / "server.log", mode="w", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(logging.INFO)


if __name__ == "__main__":
    sys.exit(main())
