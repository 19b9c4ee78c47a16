"""The real programs that read an exported `.env` file (and the shell export), for the tests,
and what the module docstrings of `cvsm_server.secrets.dotenv` and `cvsm_server.secrets.shell_export` say each
of them reads.

- Shells: `set -a; . ./file; set +a` (or `. ./file`, `eval "$(cat file)"`) in bash, dash and zsh,
  the environment read back with `env -0`.
- python-dotenv, imported (a dev dependency), with interpolation off.
- Node's dotenv: `node/read_dotenv.js`, one long-lived process answering JSON lines, with the
  package from `node/package-lock.json` installed by `npm ci` on first use.
- A one-line-per-variable reader, as `docker run --env-file` reads (split on LF, a CR before it
  dropped, blank and `#` lines skipped, `NAME=rest`) and as systemd's `EnvironmentFile` ends
  lines (LF, CR or CRLF): the names it finds.

A missing `node`, `npm`, `bash` or `zsh` skips the tests that need it, except under `CI=true`,
where it is a failure (the same rule as the conformance suite); a missing `dash` only skips.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import dotenv as python_dotenv
import pytest
from dotenv.parser import parse_stream

from cvsm_server.secrets import dotenv

NODE_DIR = Path(__file__).parent / "node"
OPTIONAL_SHELLS = {"dash"}  # checked where present, even under CI
_NEWLINE = re.compile(r"\r\n|\n|\r")


def missing(why: str) -> None:
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"{why} (CI=true)")
    pytest.skip(why)


# --- shells -----------------------------------------------------------------------------------

ALLEXPORT = 'set -a; . "$1"; set +a'  # how a .env file is loaded into a shell
SOURCE = '. "$1"'  # the shell export: its lines export themselves
EVAL = 'eval "$(cat "$1")"'


def source_in_shell(shell: str, text: str, cwd: Path | None = None, *,
                    load: str = ALLEXPORT) -> dict[str, str]:
    """Write `text` to a file, load it with `load` (the file is `$1`) in an empty environment,
    and return the environment the shell then hands to `env`."""
    program, env_program = shutil.which(shell), shutil.which("env")
    if program is None or env_program is None:
        if shell in OPTIONAL_SHELLS:
            pytest.skip(f"{shell} is not installed")
        missing(f"{shell} is not installed")
    with tempfile.TemporaryDirectory(prefix="cvsm-dotenv-") as tmp:
        path = Path(tmp) / "exported.env"
        path.write_bytes(text.encode("utf-8"))  # bytes: no newline translation
        proc = subprocess.run(
            [env_program, "-i", program, "-c", load + '; exec "$2" -0', shell, str(path),
             env_program],
            cwd=cwd or tmp, capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stderr == b"", (proc.returncode, proc.stderr)
    environment = {}
    for item in proc.stdout.split(b"\0"):
        if item:
            key, _, value = item.partition(b"=")
            environment[key.decode()] = value.decode("utf-8", "surrogateescape")
    return environment


# --- one-line-per-variable readers -----------------------------------------------------------

def docker_env_file_names(text: str) -> list[str]:
    """The names `docker run --env-file` finds: one line per LF (a CR before it dropped), blank
    lines and `#` lines skipped, the name up to the first `=` (a line without one names a
    variable to take from docker's own environment: a name all the same)."""
    names = []
    for line in text.split("\n"):
        line = line.removesuffix("\r").lstrip(" \t")
        if line and not line.startswith("#"):
            names.append(line.partition("=")[0])
    return names


def line_reader_names(text: str) -> list[str]:
    """The names a reader that ends lines at LF, CR or CRLF (systemd's `EnvironmentFile`,
    Python's universal newlines) and takes `NAME=rest` finds."""
    names = []
    for line in _NEWLINE.split(text):
        line = line.lstrip(" \t")
        if line and not line.startswith("#"):
            names.append(line.partition("=")[0])
    return names


# --- python-dotenv ----------------------------------------------------------------------------

def python_dotenv_values(text: str) -> dict[str, str | None]:
    return dict(python_dotenv.dotenv_values(stream=io.StringIO(text), interpolate=False))


def python_dotenv_bindings(text: str) -> list[tuple[int, str | None, str | None, bool]]:
    """(line, key, value, error) for each binding python-dotenv reads, blank space and comments
    left out. The line is where the key starts, counted from the text itself (python-dotenv's own
    `original.line` counts a CRLF twice after a line it could not parse)."""
    body = text.removeprefix("\ufeff")
    offset, bindings = 0, []
    for binding in parse_stream(io.StringIO(text)):
        original = binding.original.string
        start = offset + len(original) - len(original.lstrip())
        offset += len(original)
        if binding.key is None and not binding.error:
            continue  # blank space or a comment
        line = 1 + len(_NEWLINE.findall(body, 0, start))
        bindings.append((line, binding.key, binding.value, binding.error))
    assert offset == len(body)
    return bindings


# --- Node's dotenv ----------------------------------------------------------------------------

class NodeDotenv:
    """A `node read_dotenv.js` process: `parse(text)` -> (dotenv.parse, dotenv.parse fast)."""

    def __init__(self) -> None:
        node, npm = shutil.which("node"), shutil.which("npm")
        if node is None or npm is None:
            missing("node and npm are needed to check what Node's dotenv reads")
        lock = json.loads((NODE_DIR / "package-lock.json").read_text())
        wanted = lock["packages"]["node_modules/dotenv"]["version"]
        installed = NODE_DIR / "node_modules" / "dotenv" / "package.json"
        if not installed.exists() or json.loads(installed.read_text())["version"] != wanted:
            proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                                  cwd=NODE_DIR, capture_output=True, text=True, timeout=300,
                                  check=False)
            if proc.returncode != 0:
                missing(f"npm ci in {NODE_DIR} failed: {proc.stderr[-2000:]}")
        self.process = subprocess.Popen([node, "read_dotenv.js"], cwd=NODE_DIR, text=True,
                                        encoding="utf-8", stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE)

    def parse(self, text: str) -> tuple[dict[str, str], dict[str, str]]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"content": text}) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        assert answer, "the Node helper stopped"
        parsed = json.loads(answer)
        return parsed["parse"], parsed["fast"]

    def close(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()
        self.process.wait(timeout=30)


# --- what each reader gets from an export (the module docstrings, as code) --------------------

def _double_quoted(value: str) -> str:
    """What the .env export writes between double quotes."""
    escapes = {"\\": "\\\\", '"': '\\"', "$": "\\$", "`": "\\`", "\n": "\\n", "\r": "\\r"}
    return "".join(escapes.get(c, c) for c in value)


def python_dotenv_reads(value: str) -> str:
    """python-dotenv keeps the backslash before `$` and backtick in double quotes."""
    if dotenv.single_quotable(value):
        return value
    return value.replace("$", "\\$").replace("`", "\\`")


def node_reads(value: str) -> str:
    """Node: double quotes keep every backslash, and only the two-character sequences \\n and
    \\r are decoded."""
    if dotenv.single_quotable(value):
        return value
    return _double_quoted(value).replace("\\n", "\n").replace("\\r", "\r")


def _without_nul(shell: str, value: str) -> str:
    """bash and dash drop NUL characters; zsh's environment cuts a value at the first one."""
    return value.partition("\0")[0] if shell == "zsh" else value.replace("\0", "")


def shell_reads(value: str, shell: str = "bash") -> str:
    """A shell loading the .env export: double quotes leave \\n and \\r as they are written."""
    if not dotenv.single_quotable(value):
        value = value.replace("\n", "\\n").replace("\r", "\\r")
    return _without_nul(shell, value)


def shell_export_reads(value: str) -> str:
    """bash and zsh loading the shell export: the value without its NUL characters."""
    return value.replace("\0", "")
