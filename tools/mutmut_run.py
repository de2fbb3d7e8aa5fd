"""`nox -s mutmut` (not a default gate: slow): mutmut over the policy, host-pattern and path
modules, in a scratch copy of panday-core, printing the kill rate.

The named-guard gate (`falsify`) proves each guard we know about has a test; this one
looks for the ones we did not think of. Survivors are listed for a person to read: some are
equivalent mutants (a change with no observable effect), others are missing tests.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "packages" / "core"
MODULES = {
    "policy": ("src/panday_core/policy.py", ["tests/test_policy.py", "tests/test_capabilities.py"]),
    "domains": ("src/panday_core/domains.py", ["tests/test_domains.py", "tests/test_policy.py"]),
    "paths": ("src/panday_core/paths.py", ["tests/test_paths.py", "tests/test_t0_tools.py"]),
}
CONFIG = """[tool.mutmut]
source_paths = ["src"]
only_mutate = {only}
pytest_add_cli_args_test_selection = {tests}
pytest_add_cli_args = ["-q", "-x", "-p", "no:cacheprovider"]
also_copy = ["tests"]
"""


def run_module(name: str, jobs: int) -> dict[str, int]:
    module, tests = MODULES[name]
    with tempfile.TemporaryDirectory(prefix=f"panday-mutmut-{name}-") as tmp:
        root = Path(tmp)
        shutil.copytree(CORE / "src", root / "src")
        shutil.copytree(CORE / "tests", root / "tests", ignore=shutil.ignore_patterns("egress"))
        (root / "pyproject.toml").write_text(
            CONFIG.format(only=json.dumps([module]), tests=json.dumps(tests)), encoding="utf-8"
        )
        mutmut = str(Path(sys.executable).with_name("mutmut"))
        subprocess.run(
            [mutmut, "run", "--max-children", str(jobs)], cwd=root, check=True,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        subprocess.run([mutmut, "export-cicd-stats"], cwd=root, check=True, capture_output=True)
        stats: dict[str, int] = json.loads(
            (root / "mutants" / "mutmut-cicd-stats.json").read_text(encoding="utf-8")
        )
        survivors = subprocess.run(
            [mutmut, "results"], cwd=root, capture_output=True, text=True, check=False
        ).stdout
        for line in survivors.splitlines()[:40]:
            print(f"  {name}: survived: {line.strip()}")
        return stats


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("modules", nargs="*", default=sorted(MODULES), choices=sorted(MODULES))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    total = killed = 0
    for name in args.modules:
        stats = run_module(name, args.jobs)
        rate = 100 * stats["killed"] / stats["total"] if stats["total"] else 0.0
        print(f"mutmut: {name}: {stats['killed']}/{stats['total']} killed ({rate:.0f}%)")
        total += stats["total"]
        killed += stats["killed"]
    if total == 0:
        print("mutmut: no mutants generated; refusing to report a rate", file=sys.stderr)
        return 1
    print(f"mutmut: kill rate {killed}/{total} ({100 * killed / total:.0f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
