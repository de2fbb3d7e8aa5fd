"""Lint the GitHub workflows: schema (check-jsonschema) and security (zizmor), both offline.

check-jsonschema validates each file against the GitHub workflow schema it ships
(`vendor.github-workflows`), so no download happens. zizmor runs with `--offline` (no
GitHub API: the audits that need it, such as checking that a pinned SHA belongs to the
tag in its comment, are skipped — SHAs are checked by hand when an action is bumped) and
the `auditor` persona, its strictest, so that unpinned actions, excessive permissions and
template injection all fail the gate. A directory with no workflows fails too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import results
from gatelib import REPO, GateError, die, run


def workflows(directory: Path) -> list[Path]:
    found = sorted([*directory.glob("*.yml"), *directory.glob("*.yaml")])
    if not found:
        raise GateError(f"no workflow files in {directory}")
    return found


def lint(files: list[Path]) -> None:
    names = [str(f) for f in files]
    bin_dir = Path(sys.executable).parent
    run([str(bin_dir / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *names])
    run(
        [
            str(bin_dir / "zizmor"), "--offline", "--persona", "auditor", "--strict-collection",
            "--no-progress", "--format", "plain", *names,
        ]
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("directory", nargs="?", type=Path, default=REPO / ".github" / "workflows")
    args = parser.parse_args(argv)
    try:
        files = workflows(args.directory)
        lint(files)
    except GateError as exc:
        die("actions", str(exc))
    names = ", ".join(f.name for f in files)
    print(f"actions: {len(files)} workflows linted (schema + zizmor auditor, offline): {names}")
    results.record("actions", f"actions ({len(files)} workflows)", workflows=len(files))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
