"""What README.md promises and what .ci/run and CI do must stay the same thing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import cast

from gatelib import REPO

CI_RUN = REPO / ".ci" / "run"


def quickstart_commands() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None, "README's Quickstart has no ```sh block"
    return [
        line.strip()
        for line in block.group(1).splitlines()
        if line.strip() and not line.startswith("#")
    ]


def ci_run_command() -> str:
    lines = [
        line.strip()
        for line in CI_RUN.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    return lines[-1]


def test_quickstart_has_exactly_two_commands() -> None:
    commands = quickstart_commands()
    assert len(commands) == 2, commands
    assert commands[0].startswith("uv run panday ")
    # --locked: a stale uv.lock stops the run; a plain `uv run` would re-lock it first, and
    # the lock gate would then check the rewritten file.
    assert commands[1] == "uv run --locked nox"


def test_ci_run_ends_with_the_readme_gate_command() -> None:
    assert ci_run_command() == quickstart_commands()[1]


def test_ci_run_is_an_executable_strict_bash_script() -> None:
    text = CI_RUN.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "\nset -euo pipefail\n" in text
    assert os.access(CI_RUN, os.X_OK)
    assert "PANDAY_ADVISORY_DB" in text


def test_readme_first_command_runs_in_the_jail() -> None:
    # `uv run X` runs X from the project environment; here, the test environment has it.
    import shlex  # noqa: PLC0415

    argv = shlex.split(quickstart_commands()[0].removeprefix("uv run "))
    assert argv[:3] == ["panday", "run", "--"]
    executable = Path(sys.executable).parent / argv[0]
    proc = subprocess.run(
        [str(executable), *argv[1:]],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in proc.stderr
    # The jail ran the shell (hello), and /etc/shadow does not exist inside it: cat's
    # failure is the command's own exit status, which panday passes on.
    assert proc.stdout == "hello\n", proc.stdout + proc.stderr
    assert "/etc/shadow" in proc.stderr
    assert "No such file or directory" in proc.stderr
    assert proc.returncode == 1, proc.stderr


def test_ci_workflow_covers_the_matrix_the_issue_asks_for() -> None:
    ci = (REPO / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    # Linux and a pinned macOS image in the matrix, and a second macOS release (issue 30:
    # a floating "latest" changes under the suite; one release is not the platform).
    assert "os: [ubuntu-latest, macos-15]" in ci
    assert "- os: macos-14" in ci
    assert 'python: ["3.11", "3.12", "3.13"]' in ci
    assert "cancel-in-progress: true" in ci
    assert "kernel.apparmor_restrict_unprivileged_userns=0" in ci
    assert "nox --tags static" in ci
    assert "nox --tags matrix" in ci


def _workflow(name: str) -> dict[str, object]:
    import yaml  # noqa: PLC0415 - only these tests read workflows as data

    doc: dict[str, object] = yaml.safe_load(
        (REPO / ".github" / "workflows" / name).read_text(encoding="utf-8")
    )
    return doc


def _runs(workflow: dict[str, object]) -> list[str]:
    jobs = cast("dict[str, dict[str, object]]", workflow["jobs"])
    steps = [
        s for job in jobs.values() for s in cast("list[dict[str, object]]", job.get("steps", []))
    ]
    return [str(s["run"]) for s in steps if "run" in s]


def test_every_workflow_runs_the_gates_with_a_locked_environment() -> None:
    for name in ("ci.yml", "release.yml"):
        for command in _runs(_workflow(name)):
            for line in command.splitlines():
                if "uv run" in line:
                    assert "uv run --locked" in line, f"{name}: {line.strip()}"


def test_ci_runs_the_mutation_floors_and_needs_them_for_all_green() -> None:
    ci = _workflow("ci.yml")
    jobs = cast("dict[str, dict[str, object]]", ci["jobs"])
    assert any("nox -s mutmut" in run for run in _runs({"jobs": {"m": jobs["mutation"]}}))
    assert "mutation" in cast("list[str]", jobs["all-green"]["needs"])


def test_release_publishes_only_a_commit_on_main_that_passed_ci() -> None:
    release = _workflow("release.yml")
    jobs = cast("dict[str, dict[str, object]]", release["jobs"])
    verify = "\n".join(_runs({"jobs": {"verify": jobs["verify"]}}))
    assert 'git merge-base --is-ancestor "$SHA" origin/main' in verify
    assert 'gh run list --workflow ci.yml --commit "$SHA" --status success' in verify
    assert "nox -s report_fresh" in verify
    for name, job in jobs.items():
        if name == "verify":
            continue
        needs = job.get("needs", [])
        needs = [needs] if isinstance(needs, str) else cast("list[str]", needs)
        assert "verify" in needs or "build" in needs, name
    # Every job that publishes something waits for the verification itself.
    for name in ("build", "attest", "github-release", "pypi"):
        needs = jobs[name]["needs"]
        assert needs == "verify" or "verify" in cast("list[str]", needs), name
