"""Build the sdist and the wheel a registry would receive, and check them (run by `make test`).

    python tools/check_package.py

``python -m build`` (PyPI ``build``) makes both artifacts in an isolated environment, as a
release would; ``twine check --strict`` (PyPI ``twine``) checks their metadata as PyPI renders
it. Then the contents: the wheel holds the ``cvsm`` package (with ``py.typed``) and nothing
else; the sdist holds the package and the whole test suite; neither holds a cache, a compiled
file or build debris; the metadata names the project's URLs, the Python it needs and the
version of ``cvsm/_version.py``. Exits non-zero, naming each problem, when one fails.
"""

from __future__ import annotations

import email.parser
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEBRIS = re.compile(r"(^|/)(__pycache__|\.pytest_cache|\.mypy_cache|build|dist)(/|$)|\.py[cod]$|\.egg-info/|\.whl$|\.tar\.gz$")
URLS = {"Homepage", "Documentation", "Source", "Changelog", "Issues"}


def version() -> str:
    text = (ROOT / "src" / "cvsm" / "_version.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE)
    assert found, "src/cvsm/_version.py has no __version__"
    return found.group(1)


def check(scratch: Path) -> list[str]:
    """Build in `scratch` and return the problems found (empty when all is well)."""
    problems: list[str] = []
    # From a copy without the editable install's egg-info, whose stale SOURCES.txt setuptools
    # would reuse for the sdist; caches are copied, so that shipping one would be seen.
    source, outdir = scratch / "source", scratch / "dist"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "dist"))
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(outdir), str(source)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if built.returncode:
        return [f"python -m build failed:\n{built.stdout}"]
    wheels, sdists = sorted(outdir.glob("*.whl")), sorted(outdir.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [f"expected one wheel and one sdist in {outdir}, found {[p.name for p in outdir.iterdir()]}"]
    subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheels[0]), str(sdists[0])], check=True)

    sources = sorted(p.relative_to(ROOT / "src").as_posix() for p in (ROOT / "src" / "cvsm").iterdir()
                     if p.suffix == ".py" or p.name == "py.typed")
    tests = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob("*.py"))

    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
        meta_name = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
        metadata = wheel.read(meta_name).decode("utf-8") if meta_name else ""
    package = sorted(n for n in names if ".dist-info/" not in n)
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        problems.append("wheel: the MIT licence text (LICENSE) is not shipped")
    if package != sources:
        problems.append(f"wheel: holds {package}, expected the package's files {sources}")
    problems += [f"wheel: {n} should not be shipped" for n in names if DEBRIS.search(n.split(".dist-info/")[0])]

    with tarfile.open(sdists[0]) as sdist:
        members = [m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name and m.isfile()]
    for expected in ["src/" + s for s in sources] + tests + ["pyproject.toml", "README.md", "LICENSE", "PKG-INFO"]:
        if expected not in members:
            problems.append(f"sdist: {expected} is missing")
    problems += [f"sdist: {n} should not be shipped" for n in members
                 if DEBRIS.search(n) and not n.startswith("src/cvsm.egg-info/")]
    problems += [f"sdist: {n} should not be shipped" for n in members
                 if not n.startswith(("src/", "tests/")) and n not in {"pyproject.toml", "README.md", "LICENSE", "PKG-INFO", "setup.cfg", "MANIFEST.in"}]

    fields = email.parser.Parser().parsestr(metadata)
    if fields["Version"] != version():
        problems.append(f"metadata: Version {fields['Version']}, src/cvsm/_version.py says {version()}")
    if not fields["Requires-Python"]:
        problems.append("metadata: no Requires-Python")
    labels = {url.split(",", 1)[0].strip() for url in fields.get_all("Project-URL") or []}
    if missing := URLS - labels:
        problems.append(f"metadata: [project.urls] lacks {sorted(missing)}")
    if not (fields["Description-Content-Type"] or "").startswith("text/markdown"):
        problems.append("metadata: the README is not declared as Markdown")
    return problems


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="cvsm-python-dist-") as scratch:
        problems = check(Path(scratch))
    for problem in problems:
        print(f"check_package: {problem}", file=sys.stderr)
    if not problems:
        print(f"check_package: cvsm {version()}: sdist and wheel OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
