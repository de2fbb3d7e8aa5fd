"""Check (default) or rewrite (`--write`) the committed JSON Schemas in `schemas/`.

The schemas are generated from the code: the documents users write or read
(`panday_core.schema.rendered_schemas()`: policy, plugin manifest) and every `--json`
output of the CLI (`panday.reports.rendered_schemas()`: ``cli-*``). The committed copies
exist so that users and reviewers can read them. A hand edit, a model change without
regeneration, a missing file or a stale extra file all fail the check.
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path

from gatelib import REPO, GateError, die

FIX = "uv run python tools/schemas.py --write"


def expected() -> dict[str, str]:
    # Tools import packages lazily.
    from panday.reports import rendered_schemas as cli_schemas  # noqa: PLC0415
    from panday_core.schema import rendered_schemas  # noqa: PLC0415

    schemas = rendered_schemas()
    if not schemas:
        raise GateError("panday_core.schema.rendered_schemas() returned no schemas")
    cli = cli_schemas()
    if not cli:
        raise GateError("panday.reports.rendered_schemas() returned no schemas")
    clash = sorted(set(schemas) & set(cli))
    if clash:
        raise GateError(f"schema names defined twice (core and CLI): {', '.join(clash)}")
    return {**schemas, **cli}


def problems(directory: Path, schemas: dict[str, str]) -> list[str]:
    """Every difference between `directory` and `schemas`, as readable lines."""
    found: list[str] = []
    for name, text in sorted(schemas.items()):
        path = directory / name
        if not path.is_file():
            found.append(
                f"missing: {path.relative_to(REPO) if path.is_relative_to(REPO) else path}"
            )
            continue
        committed = path.read_text(encoding="utf-8")
        if committed != text:
            diff = difflib.unified_diff(
                committed.splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"committed/{name}",
                f"generated/{name}",
                n=1,
            )
            found.append("differs:\n" + "".join(list(diff)[:40]).rstrip())
    found.extend(
        f"stale (no model generates it): {extra.name}"
        for extra in sorted(directory.glob("*.schema.json"))
        if extra.name not in schemas
    )
    return found


def write(directory: Path, schemas: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for extra in directory.glob("*.schema.json"):
        if extra.name not in schemas:
            extra.unlink()
    for name, text in schemas.items():
        (directory / name).write_text(text, encoding="utf-8", newline="\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite schemas/ from the code")
    parser.add_argument("--dir", type=Path, default=REPO / "schemas", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    directory: Path = args.dir
    try:
        schemas = expected()
    except GateError as exc:
        die("schemas", str(exc))
    if args.write:
        write(directory, schemas)
        print(f"schemas: wrote {len(schemas)} schema(s) to {directory}")
        return 0
    found = problems(directory, schemas)
    if found:
        for line in found:
            print(line)
        die("schemas", f"{len(found)} schema file(s) out of date; fix with: {FIX}")
    print(f"schemas: {len(schemas)} schema(s) checked, all match the code")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
