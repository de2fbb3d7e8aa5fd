"""Render the generated parts of docs/ from code: the policy field reference and every
tier's enforcement and guarantee tables.

Markdown files carry marker pairs::

    <!-- generated:NAME -->
    ...replaced by this tool...
    <!-- /generated:NAME -->

NAME is ``policy-fields``, ``policy-enforcement``, ``fields:<tier>``,
``guarantees:<tier>`` or ``protected-entries``. ``--check`` (the `docs` gate) fails when a
committed file differs from what the code says; ``--write`` updates the files. Prose
around the markers is the author's; the tables are never typed by hand.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

import msgspec

from panday import tiers
from panday_core.capabilities import Support, TierCapabilities, policy_fields
from panday_core.policy import FsPolicy, Limits, NetPolicy, SandboxPolicy
from panday_core.protect import (
    DEFAULT_ENTRIES,
    ENV_HOOK_PREFIXES,
    ENV_HOOKS,
    HOME_ENTRIES,
    MACOS_HOME_ENTRIES,
)

if TYPE_CHECKING:
    from collections.abc import Callable

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
FIX = "uv run python tools/gen_docs.py --write"

_SUPPORT_WORD = {
    Support.STRICT: "strict",
    Support.PARTIAL: "partial",
    Support.NOT_ENFORCED: "refused",
    Support.NOT_APPLICABLE: "n/a",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _field_schema() -> dict[str, dict[str, object]]:
    """Dotted field -> its JSON Schema fragment (type, default, description)."""
    schema = msgspec.json.schema(SandboxPolicy)
    defs = cast("dict[str, dict[str, object]]", schema["$defs"])
    out: dict[str, dict[str, object]] = {}
    sections: dict[str, type[msgspec.Struct]] = {"fs": FsPolicy, "net": NetPolicy, "limits": Limits}
    top = cast("dict[str, dict[str, object]]", defs["SandboxPolicy"]["properties"])
    for name, prop in top.items():
        model = sections.get(name)
        if model is None:
            out[name] = prop
            continue
        props = cast("dict[str, dict[str, object]]", defs[model.__name__]["properties"])
        for sub, sub_prop in props.items():
            out[f"{name}.{sub}"] = sub_prop
    return out


def _type_of(prop: dict[str, object]) -> str:
    if "enum" in prop:
        return " or ".join(repr(v) for v in cast("list[object]", prop["enum"]))
    if "anyOf" in prop:
        options = cast("list[dict[str, object]]", prop["anyOf"])
        parts = [p for p in options if p.get("type") != "null"]
        text = " or ".join(_type_of(p) for p in parts) if parts else "null"
        return f"{text} (optional)" if parts and len(parts) < len(options) else text
    kind = prop.get("type")
    if kind == "array":
        items = cast("dict[str, object]", prop.get("items", {}))
        return f"list of {_type_of(items)}"
    if kind == "object":
        return "table of string"
    if kind == "integer":
        low, high = prop.get("minimum"), prop.get("maximum")
        return f"integer {low}..{high}" if low is not None else "integer"
    return str(kind)


def render_policy_fields() -> str:
    props = _field_schema()
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for field in policy_fields():
        prop = props.get(field, {})
        default = msgspec.json.encode(prop.get("default")).decode() if "default" in prop else "{}"
        meaning = str(prop.get("description", ""))
        for option in cast("list[dict[str, object]]", prop.get("anyOf", [])):
            meaning = meaning or str(option.get("description", ""))
        lines.append(f"| `{field}` | {_cell(_type_of(prop))} | `{default}` | {_cell(meaning)} |")
    return "\n".join(lines)


def _declared() -> list[TierCapabilities]:
    return [tiers.declared(tier) for tier in tiers.ALL_TIERS]


def render_policy_enforcement() -> str:
    caps = _declared()
    header = "| field | " + " | ".join(str(c.tier) for c in caps) + " |"
    lines = [header, "|---|" + "---|" * len(caps)]
    for field in policy_fields():
        if field == "version":
            lines.append(
                f"| `{field}` | " + " | ".join(["(format; nothing to enforce)"] * len(caps)) + " |"
            )
            continue
        cells: list[str] = []
        for cap in caps:
            entry = cap.for_field(field)
            cells.append("refused (undeclared)" if entry is None else _SUPPORT_WORD[entry.support])
        lines.append(f"| `{field}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_tier_fields(tier: str) -> str:
    cap = tiers.declared(tier)
    lines = ["| field | support | mechanism | note |", "|---|---|---|---|"]
    for field in policy_fields():
        entry = cap.for_field(field)
        if entry is None:
            lines.append(f"| `{field}` | refused | (undeclared: silence is not permission) | |")
            continue
        word = _SUPPORT_WORD[entry.support]
        lines.append(f"| `{field}` | {word} | {_cell(entry.mechanism)} | {_cell(entry.note)} |")
    return "\n".join(lines)


def render_tier_guarantees(tier: str) -> str:
    cap = tiers.declared(tier)
    lines = ["| guarantee | mechanism | support | note |", "|---|---|---|---|"]
    lines.extend(
        f"| {_cell(g.name)} | {_cell(g.mechanism)} | {_SUPPORT_WORD[g.support]} | {_cell(g.note)} |"
        for g in cap.guarantees
    )
    if not cap.guarantees:
        lines.append("| (none declared yet) | | | |")
    return "\n".join(lines)


def render_protected_entries() -> str:
    """The protected entries and why each is there (panday_core.protect). The same on every
    host: the macOS home entries are listed (and marked) wherever the docs are made."""
    lines = ["| entry | when missing | why |", "|---|---|---|"]
    home = [e for e in HOME_ENTRIES if e not in MACOS_HOME_ENTRIES]
    for title, entries in (
        ("workspace", DEFAULT_ENTRIES),
        ("home", home),
        ("macOS home", MACOS_HOME_ENTRIES),
    ):
        for entry in entries:
            where = f"`{entry.rel}`" if title == "workspace" else f"`~/{entry.rel}`"
            if title == "macOS home":
                where += " (macOS)"
            missing = "cannot be created" if entry.create else "may be created"
            lines.append(f"| {where} | {missing} | {_cell(entry.why)} |")
    return "\n".join(lines)


def render_hazards() -> str:
    """The hazard rules of ``fs.writes`` checked and review (panday_core.changes.hazards)."""
    from panday_core.changes.hazards import CONFLICT, RULES  # noqa: PLC0415 - this block only

    lines = ["| rule | what is held | why |", "|---|---|---|"]
    lines += [f"| `{r.id}` | {_cell(r.what)} | {_cell(r.reason)} |" for r in RULES]
    lines.append(
        f"| `conflict` | a change whose workspace entry changed after the command took it "
        f"over | {_cell(CONFLICT)} |"
    )
    return "\n".join(lines)


def render_env_hooks() -> str:
    """The env names refused unless allow_env_hooks lists them (panday_core.protect)."""
    lines = ["| name | why it is refused |", "|---|---|"]
    lines += [f"| `{p}*` | {_cell(why)} |" for p, why in sorted(ENV_HOOK_PREFIXES.items())]
    lines += [f"| `{n}` | {_cell(why)} |" for n, why in sorted(ENV_HOOKS.items())]
    return "\n".join(lines)


PACKAGES = {
    "core": "packages/core/src/panday_core",
    "tier_linux": "packages/tier_linux/src/panday_tier_linux",
    "tier_macos": "packages/tier_macos/src/panday_tier_macos",
    "sdk": "packages/sdk/src/panday",
}


def _summary(path: Path) -> str:
    """The first sentence of a module's docstring (its first paragraph, as one line)."""
    import ast  # noqa: PLC0415 - only this block reads source

    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree) or ""
    first = " ".join(doc.split("\n\n", 1)[0].split())
    return first.replace("|", "\\|") or "(no docstring)"


def render_modules(package: str) -> str:
    """One row per module and subpackage of a package: its name and the first paragraph of
    its docstring (no line counts: they would make every edit a docs change)."""
    base = REPO / PACKAGES[package]
    rows = ["| module | what it is (its docstring) |", "|---|---|"]
    for path in sorted(base.iterdir()):
        if path.is_dir() and (path / "__init__.py").is_file():
            source, name = path / "__init__.py", f"`{path.name}/`"
        elif path.suffix == ".py" and path.name != "__init__.py":
            source, name = path, f"`{path.name}`"
        else:
            continue
        rows.append(f"| {name} | {_summary(source)} |")
    return "\n".join(rows)


def renderer(name: str) -> Callable[[], str]:
    fixed: dict[str, Callable[[], str]] = {
        "protected-entries": render_protected_entries,
        "env-hooks": render_env_hooks,
        "hazards": render_hazards,
        "policy-fields": render_policy_fields,
        "policy-enforcement": render_policy_enforcement,
    }
    if name in fixed:
        return fixed[name]
    kind, _, arg = name.partition(":")
    if kind == "modules" and arg in PACKAGES:
        return lambda: render_modules(arg)
    if arg in tiers.ALL_TIERS and kind == "fields":
        return lambda: render_tier_fields(arg)
    if arg in tiers.ALL_TIERS and kind == "guarantees":
        return lambda: render_tier_guarantees(arg)
    msg = f"unknown generated block {name!r}"
    raise KeyError(msg)


def regenerate(text: str) -> tuple[str, list[str]]:
    """Return `text` with every generated block re-rendered, and the block names."""
    out: list[str] = []
    names: list[str] = []
    rest = text
    while (start := rest.find("<!-- generated:")) != -1:
        head_end = rest.index("-->", start) + len("-->")
        name = rest[start + len("<!-- generated:") : head_end - len("-->")].strip()
        closer = f"<!-- /generated:{name} -->"
        end = rest.index(closer, head_end)
        out.append(rest[:head_end])
        out.append("\n" + renderer(name)() + "\n")
        out.append(closer)
        names.append(name)
        rest = rest[end + len(closer) :]
    out.append(rest)
    return "".join(out), names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="fail when docs differ from code")
    mode.add_argument("--write", action="store_true", help="rewrite the generated blocks")
    args = parser.parse_args(argv)
    drifted: list[str] = []
    blocks = 0
    for path in sorted(DOCS.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        new, names = regenerate(text)
        blocks += len(names)
        if new == text:
            continue
        rel = str(path.relative_to(REPO))
        if args.write:
            path.write_text(new, encoding="utf-8")
            print(f"updated {rel}")
        else:
            drifted.append(rel)
            sys.stdout.writelines(
                difflib.unified_diff(
                    text.splitlines(keepends=True),
                    new.splitlines(keepends=True),
                    rel,
                    rel + " (from code)",
                )
            )
    if blocks == 0:
        print("docs: no generated blocks found; the gate would check nothing", file=sys.stderr)
        return 1
    if drifted:
        print(
            f"docs: {len(drifted)} file(s) differ from the code: {', '.join(drifted)}",
            file=sys.stderr,
        )
        print(f"docs: fix with: {FIX}", file=sys.stderr)
        return 1
    print(f"docs: {blocks} generated blocks checked, all match the code")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
