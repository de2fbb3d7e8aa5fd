"""Small helpers every gate tool shares: where the repository is, what it builds, and how a
gate reports a failure (one clear line on stderr and a non-zero exit, never a traceback).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from collections.abc import Sequence

REPO = Path(__file__).resolve().parent.parent


class GateError(Exception):
    """A gate found a problem; the message is the one line the user sees."""


@dataclass(frozen=True, slots=True)
class Member:
    """One distributable package of the uv workspace."""

    name: str  # distribution name, e.g. "panday-core"
    version: str
    directory: Path  # packages/<dir>, holding its pyproject.toml


def canonical(name: str) -> str:
    """PEP 503 normalised project name (what PyPI, OSV and purls use)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def workspace_members(root: Path = REPO) -> list[Member]:
    """Every member listed by the root pyproject's workspace globs, sorted by name."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    globs: list[str] = config["tool"]["uv"]["workspace"]["members"]
    members: list[Member] = []
    for pattern in globs:
        for directory in sorted(root.glob(pattern)):
            manifest = directory / "pyproject.toml"
            if not manifest.is_file():
                continue
            project = tomllib.loads(manifest.read_text(encoding="utf-8"))["project"]
            members.append(Member(project["name"], project["version"], directory))
    if not members:
        raise GateError(f"no workspace members found under {globs} in {root}")
    return sorted(members, key=lambda m: m.name)


def run(argv: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run a command and return its stdout.

    On failure its whole output goes to stderr (the findings are the useful part) and a
    GateError names the command and its last line.
    """
    proc = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        lines = [
            line.strip()
            for line in (proc.stdout + "\n" + proc.stderr).splitlines()
            if line.strip() and "INFO" not in line[:12]  # skip tools' progress logging
        ]
        last = lines[-1] if lines else "no output"
        command = " ".join([Path(argv[0]).name, *argv[1:3]])
        raise GateError(f"`{command} ...` exited {proc.returncode}: {last}")
    return proc.stdout


def die(gate: str, message: str) -> NoReturn:
    print(f"{gate}: FAILED: {message}", file=sys.stderr)
    raise SystemExit(1)
