"""Write RUN-REPORT.md from the gates' own results (`nox -s report`, the last default gate).

The report says what this run verified (a verification line in the style of the seed's run
report), what this host could not verify and which CI job is its authority, the guarantee
table of each tier as it holds on this host, and the benchmark ratios. Its only inputs are
the result records the gates wrote (tools/results.py), the tiers' capability data and
benchmarks/results.json, so regenerating it changes only counts and dates.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, cast

import results

if TYPE_CHECKING:
    from collections.abc import Sequence

    from panday_core.capabilities import TierCapabilities

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "RUN-REPORT.md"
BENCH = REPO / "benchmarks" / "results.json"

# The order of the verification line: every default gate, as the seed's report listed them.
GATES = (
    "fmt", "lint", "typecheck", "tests", "escape", "schemas", "lock", "docs", "fields",
    "falsify", "sbom", "audit", "licenses", "actions", "build", "ray",
)  # fmt: skip
HEADINGS = (
    "# Run report",
    "## Verification",
    "## Not verified on this host",
    "## Guarantees on this host",
    "## Benchmarks",
)


def verification(records: dict[str, dict[str, object]]) -> tuple[str, list[str], list[str]]:
    """The verification line, the gates that failed and the gates this run did not run."""
    parts: list[str] = []
    failed: list[str] = []
    missing: list[str] = []
    for gate in GATES:
        record = records.get(gate)
        if record is None:
            missing.append(gate)
            continue
        if record.get("status") != "ok":
            failed.append(gate)
        parts.append(str(record.get("label", gate)))
    return " · ".join(parts), failed, missing


def _macos_probes() -> int:
    """How many macOS escape probes this host skipped (from the escape gate's JUnit file)."""
    count = 0
    for junit in sorted(results.RESULTS.glob("escape-*.xml")):
        for case in ET.parse(junit).getroot().iter("testcase"):  # noqa: S314 - pytest's report
            if "tier_macos" in case.get("classname", "") and any(c.tag == "skipped" for c in case):
                count += 1
        if count:
            break
    return count


def _cgroup_v2_controllers() -> bool:
    path = Path("/sys/fs/cgroup/cgroup.controllers")
    alt = Path("/sys/fs/cgroup/unified/cgroup.controllers")
    for candidate in (path, alt):
        try:
            # The ceilings panday sets need these three; hugetlb alone (as here) is not v2.
            if {"memory", "pids", "cpu"} <= set(candidate.read_text(encoding="utf-8").split()):
                return True
        except OSError:
            continue
    return False


def not_verified() -> list[str]:
    """Each platform-gated module or suite this host could not run, with its authority."""
    rows: list[str] = []
    macos_ci = "`ci.yml` job `tests (macos-latest, 3.11/3.12/3.13)` (`nox --tags matrix`)"
    linux_ci = "`ci.yml` job `tests (ubuntu-latest, 3.11/3.12/3.13)` (`nox --tags matrix`)"
    if sys.platform.startswith("linux"):
        probes = _macos_probes()
        suite = f"{probes} probes" if probes else "its probes"
        rows += [
            (
                "- The T2 macOS runner (`packages/tier_macos`: `sandbox-exec`, profile "
                "application, rlimits, process-group kill) → verified only on macOS CI: "
                f"{macos_ci}."
            ),
            (
                f"- The macOS escape suite (`packages/tier_macos/tests/escape`, {suite}, skipped "
                f"here with the reason) → verified only on macOS CI: {macos_ci}."
            ),
            (
                "- The macOS path of the shared exec machinery (`panday_core/execution.py`: "
                f"exit watch through kqueue) → verified only on macOS CI: {macos_ci}."
            ),
            (
                "- The macOS walk of the T0 path resolver (no openat2 there; the walk itself is "
                f"tested here by forcing it) → {macos_ci}."
            ),
        ]
        if not _cgroup_v2_controllers():
            rows.append(
                "- cgroup v2 ceilings (this host's cgroup v2 holds no memory, pids or cpu "
                f"controller; its limits ran on cgroup v1) → {linux_ci}, whose runners use "
                "cgroup v2."
            )
    elif sys.platform == "darwin":
        rows += [
            (
                "- The T2 Linux tier and its escape suite (bubblewrap, seccomp, cgroups), as root "
                f"and as an unprivileged user → {linux_ci} and `.ci/run` on Debian."
            ),
        ]
    version = ".".join(str(v) for v in sys.version_info[:2])
    others = [v for v in ("3.11", "3.12", "3.13") if v != version]
    rows.append(
        f"- Python {' and '.join(others)} (this run used {version}) → the `ci.yml` test matrix."
    )
    rows.append(
        "- Publishing (PyPI trusted publishing, provenance attestations) → `release.yml` on "
        "a version tag; it has never run from this host."
    )
    return rows


def _tier_tables() -> list[tuple[str, str | None, TierCapabilities]]:
    from panday import tiers  # noqa: PLC0415 - tools import packages, never the reverse

    out: list[tuple[str, str | None, TierCapabilities]] = []
    for tier in tiers.ALL_TIERS:
        reason = tiers.unavailable_reason(tier)
        caps = tiers.declared(tier)
        if reason is None and tier == "t2-linux":
            from panday_tier_linux import host_capabilities  # noqa: PLC0415 - host probe

            caps = host_capabilities()
        out.append((tier, reason, caps))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def guarantees() -> list[str]:
    lines: list[str] = []
    for tier, reason, caps in _tier_tables():
        lines.append(f"### {tier}")
        lines.append("")
        if reason is not None:
            lines.append(f"Not available on this host: {reason}. Its declared table follows.")
            lines.append("")
        lines += ["| guarantee | mechanism | support |", "|---|---|---|"]
        lines += [
            f"| {_cell(g.name)} | {_cell(g.mechanism)} | {g.support} |" for g in caps.guarantees
        ]
        refused = [f.field for f in caps.fields if f.support == "not-enforced"]
        lines.append("")
        lines.append(
            f"Policy fields refused here: {', '.join(f'`{f}`' for f in refused) or 'none'}."
        )
        lines.append("")
    return lines


def _ratios(name: str, node: object, out: list[tuple[str, str, str, str]]) -> None:
    if not isinstance(node, dict):
        return
    doc = cast("dict[str, object]", node)
    if "ratio" in doc and "budget" in doc:
        ok = doc.get("within_budget")
        verdict = "yes" if ok is True else "no" if ok is False else "?"
        out.append((name, str(doc["ratio"]), str(doc["budget"]), verdict))
        return
    met = doc.get("budgets_met")
    if isinstance(met, dict):
        for key, value in sorted(cast("dict[str, object]", met).items()):
            out.append((f"{name}: {key}", "see docs/benchmarks.md", "", "yes" if value else "no"))
        return
    for key, value in sorted(doc.items()):
        _ratios(f"{name}.{key}" if name else key, value, out)


def benchmarks() -> list[str]:
    if not BENCH.is_file():
        return ["No `benchmarks/results.json` yet: run `uv run nox -s bench`."]
    rows: list[tuple[str, str, str, str]] = []
    _ratios("", json.loads(BENCH.read_text(encoding="utf-8")), rows)
    lines = [
        "From `benchmarks/results.json` (`uv run nox -s bench`; details in docs/benchmarks.md).",
        "",
        "| benchmark | ratio | budget | within budget |",
        "|---|---|---|---|",
    ]
    lines += [f"| {_cell(a)} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return lines


def _names(items: list[str]) -> str:
    return ", ".join(items) or "none"


def render(records: dict[str, dict[str, object]], today: dt.date) -> str:
    line, failed, missing = verification(records)
    who = "root" if hasattr(os, "geteuid") and os.geteuid() == 0 else "an ordinary user"
    lines = [
        HEADINGS[0],
        "",
        "Written by the `report` gate (`uv run nox`) from the other gates' own results;",
        "regenerating it changes only counts and dates.",
        "",
        f"- Date: {today.isoformat()}",
        (
            f"- Host: {platform.system()} {platform.machine()}, "
            f"Python {platform.python_version()}, run as {who}"
        ),
        "",
        HEADINGS[1],
        "",
        line or "(no gate results recorded: run `uv run nox`)",
        "",
        f"Failed: {_names(failed)}. Not run in this run: {_names(missing)}.",
        "",
        HEADINGS[2],
        "",
        *not_verified(),
        "",
        HEADINGS[3],
        "",
        "Each tier's guarantee table as it holds on this host (the data `panday doctor` shows).",
        "",
        *guarantees(),
        HEADINGS[4],
        "",
        *benchmarks(),
    ]
    return "\n".join(lines).rstrip() + "\n"


def check_structure(text: str) -> list[str]:
    """What is wrong with a RUN-REPORT.md's structure (empty when it is valid)."""
    problems: list[str] = []
    positions = [
        text.find(f"\n{h}\n") if i else text.find(f"{h}\n") for i, h in enumerate(HEADINGS)
    ]
    for heading, pos in zip(HEADINGS, positions, strict=True):
        if pos < 0:
            problems.append(f"missing heading {heading!r}")
    found = [p for p in positions if p >= 0]
    if found != sorted(found):
        problems.append("headings are out of order")
    section = text.split(f"{HEADINGS[1]}\n", 1)[-1].strip().split("\n", 1)[0]
    problems.extend(
        f"the verification line does not mention {gate}"
        for gate in ("fmt", "lint", "tests", "escape", "falsify", "sbom", "audit")
        if gate not in section
    )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write RUN-REPORT.md from the gates' results")
    parser.add_argument("--check", action="store_true", help="only check RUN-REPORT.md's structure")
    args = parser.parse_args(argv)
    if args.check:
        problems = check_structure(OUT.read_text(encoding="utf-8"))
        for problem in problems:
            print(f"report: {problem}", file=sys.stderr)
        return 1 if problems else 0
    records = results.load()
    if not records:
        print("report: no gate results found; run `uv run nox` first", file=sys.stderr)
        return 1
    OUT.write_text(render(records, dt.datetime.now(tz=dt.UTC).date()), encoding="utf-8")
    line, failed, missing = verification(records)
    print(f"report: wrote {OUT.name}: {line}")
    if failed or missing:
        print(f"report: failed: {_names(failed)}; not run: {_names(missing)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
