"""Shared fixtures: the installed `panday` console script, one-line errors, committed schemas.

On Linux the T2 Linux tier must work: the CLI's end-to-end tests fail (never skip) when it
cannot run here. On another OS those tests are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCHEMAS = REPO / "schemas"
IS_LINUX = sys.platform.startswith("linux")

Cli = Callable[..., subprocess.CompletedProcess[str]]


def panday_exe() -> str:
    exe = shutil.which("panday", path=str(Path(sys.executable).parent))
    assert exe is not None, "the panday console script is not installed in this environment"
    return exe


@pytest.fixture
def exe() -> str:
    """The installed `panday` console script, for tests that drive it with Popen."""
    return panday_exe()


def finish(proc: subprocess.Popen[bytes]) -> None:
    """Kill `proc` if it still runs (bounded), and close our ends of its pipes."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


@pytest.fixture
def finished() -> Callable[[subprocess.Popen[bytes]], None]:
    return finish


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """Run the installed `panday` with `args` (in a fresh directory unless `cwd` is given).

    $XDG_CONFIG_HOME points at an empty directory unless `env` sets it, so a per-user
    default policy on the machine running the tests never changes what they see.
    """

    def run(
        *args: str,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        where = cwd or tmp_path / "cwd"
        where.mkdir(exist_ok=True)
        full = dict(os.environ if env is None else env)
        full.setdefault("XDG_CONFIG_HOME", str(tmp_path / "no-user-config"))
        return subprocess.run(
            [panday_exe(), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=where,
            env=full,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
        )

    return run


def one_clean_line(result: subprocess.CompletedProcess[str]) -> str:
    """panday's error: exactly one line on stderr, no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("panday: "), lines[0]
    return lines[0]


@pytest.fixture
def clean_line() -> Callable[[subprocess.CompletedProcess[str]], str]:
    return one_clean_line


def validated(text: str, schema: str) -> dict[str, object]:
    """`text` parsed as JSON and validated against the committed ``schemas/<schema>``."""
    import jsonschema  # noqa: PLC0415 - test dependency

    doc = json.loads(text)
    spec = json.loads((SCHEMAS / f"{schema}.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(spec).validate(doc)  # pyright: ignore[reportUnknownMemberType] - jsonschema ships no complete types
    assert isinstance(doc, dict)
    return doc  # pyright: ignore[reportUnknownVariableType] - a JSON object


@pytest.fixture
def validate() -> Callable[[str, str], dict[str, object]]:
    return validated


@pytest.fixture(scope="session")
def linux_tier() -> None:
    """On Linux the jail must run here; elsewhere the test is skipped with the reason."""
    if not IS_LINUX:
        pytest.skip(f"T2 Linux end-to-end tests need Linux; this host is {sys.platform}")
    from panday_tier_linux import unavailable_reason  # noqa: PLC0415

    reason = unavailable_reason()
    if reason is not None:
        pytest.fail(f"T2 Linux is unavailable on this Linux host: {reason}")


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (from /proc; a snapshot)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):  # noqa: PTH208 - /proc walk
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:  # noqa: PTH123
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pids: Sequence[int]) -> list[int]:
    """Those of `pids` that still exist and are not zombies."""
    out: list[int] = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:  # noqa: PTH123
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(pid)
    return out


class Procs:
    """/proc helpers for tests that must prove nothing was left behind."""

    descendants = staticmethod(descendants)
    alive = staticmethod(alive)

    @staticmethod
    def cgroups_of(pid: int, root: str = "/sys/fs/cgroup", depth: int = 6) -> list[str]:
        """Session cgroup directories a panday process `pid` made (``panday-<pid>.<start>-...``,
        or ``panday-<pid>-...`` as earlier versions named them)."""
        prefixes = (f"panday-{pid}-", f"panday-{pid}.")
        found: list[str] = []
        base = root.rstrip("/").count("/")
        for where, dirs, _files in os.walk(root):
            if where.count("/") - base >= depth:
                dirs[:] = []
                continue
            found.extend(os.path.join(where, d) for d in dirs if d.startswith(prefixes))  # noqa: PTH118
        return found


@pytest.fixture
def procs() -> type[Procs]:
    return Procs
