"""conformance.report writes the case-by-language matrix (Markdown) and JUnit XML.

The printed report ends with the plain line ``N passed, N failed`` (``, N skipped`` when any
were skipped, ``, N n/a`` when a case needs a capability a driver does not report, ``, N known``
for the failures a language lists in ``known-failures/<language>.txt``, ``, N fixed`` for those
that pass now), counted per case and language. A known failure is never counted as passed.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

from .cases import Case
from .runner import CaseResult

_CELL = {"passed": "pass", "failed": "**FAIL**", "skipped": "skip", "n/a": "n/a", "known": "known",
         "fixed": "**FIXED**"}


def summary_line(results: Sequence[CaseResult]) -> str:
    passed = sum(r.status == "passed" for r in results)
    failed = sum(r.status == "failed" for r in results)
    skipped = sum(r.status == "skipped" for r in results)
    not_applicable = sum(r.status == "n/a" for r in results)
    known = sum(r.status == "known" for r in results)
    fixed = sum(r.status == "fixed" for r in results)
    line = f"{passed} passed, {failed} failed"
    line += f", {skipped} skipped" if skipped else ""
    line += f", {not_applicable} n/a" if not_applicable else ""
    line += f", {known} known" if known else ""
    return line + (f", {fixed} fixed" if fixed else "")


def markdown(
    cases: Sequence[Case],
    languages: Sequence[str],
    results: Sequence[CaseResult],
    notes: Mapping[str, str],
    header: Sequence[str],
    capabilities: Mapping[str, Sequence[str] | None] | None = None,
) -> str:
    """markdown renders the report; ``notes`` says per language why it was skipped or failed whole;
    ``capabilities`` what each driver reported at start-up (None: it never started)."""
    by_key = {(r.case_id, r.language): r for r in results}
    lines = ["# cvsm conformance report", ""]
    lines += [f"- {h}" for h in header]
    lines.append("")
    if capabilities:
        lines.append("| language | capabilities |")
        lines.append("|---|---|")
        for language in languages:
            reported = capabilities.get(language)
            shown = "not reported (no driver started)" if reported is None else ", ".join(reported) or "none"
            lines.append(f"| {language} | {shown} |")
        lines.append("")
    if languages:
        lines.append("| case | " + " | ".join(languages) + " |")
        lines.append("|---|" + "---|" * len(languages))
        for case in cases:
            cells = []
            for language in languages:
                result = by_key.get((case.id, language))
                cells.append(_CELL[result.status] if result else "-")
            lines.append(f"| `{case.id}` {case.title} | " + " | ".join(cells) + " |")
        lines.append("")
    if notes:
        lines.append("## Languages not run in full")
        lines.append("")
        for language, note in notes.items():
            lines.append(f"- **{language}**: {note}")
        lines.append("")
    fixed = [r for r in results if r.status == "fixed"]
    if fixed:
        lines.append("## Known failures that pass now")
        lines.append("")
        for result in fixed:
            lines.append(f"- {result.language} / `{result.case_id}`: remove it from "
                         f"`conformance/known-failures/{result.language}.txt`")
        lines.append("")
    known = [r for r in results if r.status == "known"]
    if known:
        lines.append("## Known failures")
        lines.append("")
        for result in known:
            lines.append(f"- {result.language} / `{result.case_id}`: {result.message.splitlines()[0][:300]}")
        lines.append("")
    failures = [r for r in results if r.status == "failed"]
    if failures:
        lines.append("## Failures")
        lines.append("")
        for result in failures:
            lines.append(f"### {result.language} / {result.case_id}")
            lines.append("")
            lines.append(result.message)
            if result.details:
                lines.append("")
                lines.append("```")
                lines.extend(result.details)
                lines.append("```")
            lines.append("")
    lines.append(summary_line(results))
    return "\n".join(lines) + "\n"


def junit(results: Sequence[CaseResult], languages: Sequence[str]) -> ET.ElementTree:
    suites = ET.Element("testsuites", name="cvsm-conformance")
    for language in languages:
        mine = [r for r in results if r.language == language]
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"conformance.{language}",
            tests=str(len(mine)),
            failures=str(sum(r.status in ("failed", "fixed") for r in mine)),
            skipped=str(sum(r.status in ("skipped", "n/a", "known") for r in mine)),
            errors="0",
            time=f"{sum(r.seconds for r in mine):.3f}",
            timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        for result in mine:
            case = ET.SubElement(
                suite, "testcase", classname=f"conformance.{language}", name=result.case_id,
                time=f"{result.seconds:.3f}",
            )
            if result.status in ("failed", "fixed"):
                failure = ET.SubElement(case, "failure", message=result.message[:500])
                failure.text = "\n".join([result.message, *result.details])
            elif result.status in ("skipped", "n/a", "known"):
                ET.SubElement(case, "skipped", message=result.message[:500])
    ET.indent(suites)
    return ET.ElementTree(suites)


def write(directory: Path, name: str, text: str, tree: ET.ElementTree | None) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = [directory / f"{name}.md"]
    written[0].write_text(text, encoding="utf-8")
    if tree is not None:
        path = directory / f"{name}.junit.xml"
        tree.write(path, encoding="utf-8", xml_declaration=True)
        written.append(path)
    return written
