"""`panday doctor`: every tier with the reason it is unavailable, the host tier's mechanisms
and table, and (`--probe`) escape probes with controls that must all pass here."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from panday import exitcodes, probes, tiers
from panday.reports import ProbeOutcome
from panday_core.execution import Supervisor, collect, spawn, stream

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path
    from subprocess import CompletedProcess

    from panday_core.types import ExecResult

    Cli = Callable[..., CompletedProcess[str]]
    Validate = Callable[[str, str], dict[str, object]]

linux = pytest.mark.usefixtures("linux_tier")


@linux
def test_doctor_json_names_every_tier_and_the_host_s_mechanisms(
    cli: Cli, validate: Validate
) -> None:
    result = cli("doctor", "--json")
    assert result.returncode == exitcodes.OK, result.stderr
    doc = validate(result.stdout, "cli-doctor")
    rows: list[dict[str, object]] = doc["tiers"]  # pyright: ignore[reportAssignmentType] - JSON
    by_tier = {row["tier"]: row for row in rows}
    assert set(by_tier) == set(tiers.ALL_TIERS)
    linux_row = by_tier["t2-linux"]
    assert linux_row["available"] is True
    assert linux_row["host_tier"] is True
    details: dict[str, str] = linux_row["details"]  # pyright: ignore[reportAssignmentType] - JSON
    assert details["bwrap"].startswith("/")
    assert "bubblewrap" in details["bwrap"]
    assert "libseccomp" in details["libseccomp"]
    assert details["cgroups"].startswith(("cgroup v1", "cgroup v2", "none: "))
    macos = by_tier["t2-macos"]
    assert macos["available"] is False
    assert "needs macOS" in str(macos["unavailable_reason"])
    fields = {f["field"]: f["support"] for f in doc["fields"]}  # pyright: ignore[reportGeneralTypeIssues, reportUnknownVariableType] - JSON
    host = tiers.host_capabilities("t2-linux")
    assert fields == {f.field: f.support.value for f in host.fields}
    assert len(doc["guarantees"]) == len(host.guarantees)  # pyright: ignore[reportArgumentType] - JSON
    assert doc["probes"] is None


@linux
def test_doctor_human_output_is_short(cli: Cli) -> None:
    result = cli("doctor")
    assert result.returncode == exitcodes.OK
    lines = result.stdout.splitlines()
    assert lines[1].startswith("Summary: commands run under t2-linux here")
    assert lines[3].startswith("t2-linux: available (this host's command tier)")
    assert any(line.startswith("t2-macos: unavailable: ") for line in lines)
    assert len(lines) < 80


@linux
def test_every_probe_passes_here_with_its_control(cli: Cli, validate: Validate) -> None:
    result = cli("doctor", "--probe", "--json", timeout=180)
    doc = validate(result.stdout, "cli-doctor")
    outcomes: list[dict[str, str]] = doc["probes"]  # pyright: ignore[reportAssignmentType] - JSON
    assert {o["name"] for o in outcomes} == {p.name for p in probes.PROBES}
    failed = [o for o in outcomes if o["verdict"] != "pass"]
    assert failed == [], failed
    assert result.returncode == exitcodes.OK


class _Unsandboxed:
    """Stands in for a session whose jail is gone: it runs commands on the host, with the
    caller's environment."""

    def run(self, argv: Sequence[str], *, timeout: float) -> ExecResult:
        proc = spawn(list(argv), env=dict(os.environ))
        return collect(stream(proc, Supervisor(), timeout_ms=int(timeout * 1000)))


@linux
def test_the_probes_catch_a_jail_that_is_not_there(tmp_path: Path) -> None:
    """Without a jail every probe must report fail: none of them is vacuous."""
    base = tmp_path / "probes"
    base.mkdir()
    ctx = probes.Context(str(base))
    outcomes: list[ProbeOutcome] = []
    try:
        for probe in probes.PROBES:
            if probe.name == "wall-clock":
                continue  # the host's own process group kill also ends it; not a jail property
            verdict, detail = probe.check(ctx, _Unsandboxed())  # pyright: ignore[reportArgumentType] - stands in for a Session
            outcomes.append(
                ProbeOutcome(name=probe.name, guarantee="", verdict=verdict, detail=detail)
            )
    finally:
        ctx.close()
    assert [o.name for o in outcomes if o.verdict != "fail"] == [], outcomes


def test_the_verdict_needs_a_working_control() -> None:
    ok, blocked = "RESULT ok\n", "RESULT blocked\n"
    assert probes.judge(ok, blocked)[0] == "pass"
    assert probes.judge(ok, ok)[0] == "fail"
    assert probes.judge(blocked, blocked)[0] == "inconclusive"
    assert probes.judge("", blocked)[0] == "inconclusive"
    assert probes.judge(ok, "Traceback")[0] == "inconclusive"


@linux
def test_doctor_reports_an_unusable_host_tier() -> None:
    """No bubblewrap and no Landlock: doctor exits 69 and says why (run in a child whose
    bwrap lookup has been made to find nothing, and T1's ABI probe to find none)."""
    code = (
        "import panday_tier_linux.host as h; h._BWRAP[:] = [None];"
        "import panday_tier_linux.t1.landlock as t1; t1._ABI[:] = ['no Landlock (test)'];"
        "from panday.cli import main; raise SystemExit(main(['doctor']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ},
    )  # fmt: skip
    assert result.returncode == exitcodes.TIER_UNAVAILABLE, result.stdout + result.stderr
    assert (
        "t2-linux: unavailable (this host's command tier): bubblewrap (bwrap) was not found"
        in result.stdout
    )
