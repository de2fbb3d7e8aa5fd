"""Fail unless a release tag (`v1.2.3`) names the version every workspace package carries."""

from __future__ import annotations

import sys

from gatelib import GateError, die, workspace_members


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        die("release", "usage: release_version.py TAG (for example v0.2.0)")
    tag = args[0]
    try:
        members = workspace_members()
    except GateError as exc:
        die("release", str(exc))
    want = tag.removeprefix("v")
    wrong = [f"{m.name} is {m.version}" for m in members if m.version != want]
    if not tag.startswith("v") or wrong:
        die(
            "release",
            f"tag {tag} does not match the packages: {'; '.join(wrong) or 'tags look like v1.2.3'}",
        )
    print(f"release: tag {tag} matches all {len(members)} packages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
