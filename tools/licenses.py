"""Apply the licence policy (tools/licenses.toml) to every component of the SBOMs.

Each component's declared licences become one SPDX expression (several declared entries all
apply, so they are joined with AND), parsed by the `license-expression` library against the
SPDX licence list. Then: `A OR B` is allowed when either side is; `A AND B` only when both
are; `X WITH exception` only when that exact pairing is on the allowlist. A component with no
licence, with a licence name that is not an SPDX identifier, or with an unknown identifier
fails — unless tools/licenses.toml holds an exception for that package and exactly what it
declares, with a reason.

Trove classifiers (`License :: OSI Approved :: ...`) that cyclonedx-py copies next to an
SPDX identifier only restate it, less precisely; they are ignored when an SPDX identifier or
expression is present, and are a non-SPDX name when they are all a component has.
"""

from __future__ import annotations

import argparse
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

import msgspec
from license_expression import (
    AND,
    OR,
    BaseSymbol,
    ExpressionError,
    LicenseSymbol,
    LicenseWithExceptionSymbol,
    Licensing,
    RenderableFunction,
    get_spdx_licensing,
)

import results
from gatelib import REPO, GateError, canonical, die

POLICY = REPO / "tools" / "licenses.toml"


class Accepted(msgspec.Struct, forbid_unknown_fields=True):
    package: str
    declared: str  # exactly what the component declares (SPDX expression or licence name)
    reason: str


class Policy(msgspec.Struct, forbid_unknown_fields=True):
    allow: list[str]
    exception: list[Accepted] = []


@dataclass(frozen=True, slots=True)
class Declared:
    """What a component declares: an SPDX expression, or licence names that are not SPDX."""

    text: str | None  # None: no licence at all
    spdx: bool = True


@dataclass(frozen=True, slots=True)
class Component:
    name: str
    version: str
    declared: Declared
    sources: tuple[str, ...]  # SBOM files it appears in


def load_policy(path: Path) -> Policy:
    try:
        policy = msgspec.convert(tomllib.loads(path.read_text(encoding="utf-8")), Policy)
    except (OSError, tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise GateError(f"{path}: {exc}") from exc
    if not policy.allow:
        raise GateError(f"{path}: the allowlist is empty")
    return policy


class _Licence(msgspec.Struct):
    id: str | None = None
    name: str | None = None


class _LicenceChoice(msgspec.Struct):
    """One entry of a CycloneDX `licenses` array: a licence, or an SPDX expression."""

    license: _Licence | None = None
    expression: str | None = None


def declared_expression(licenses: object) -> Declared:
    """What a CycloneDX `licenses` array declares, as one expression where it can be."""
    try:
        entries = msgspec.convert(licenses, list[_LicenceChoice])
    except msgspec.ValidationError as exc:
        raise GateError(f"unreadable licences {licenses!r}: {exc}") from exc
    spdx: list[str] = []
    names: list[str] = []
    for entry in entries:
        if entry.expression:
            spdx.append(entry.expression)
        elif entry.license and entry.license.id:
            spdx.append(entry.license.id)
        elif entry.license and entry.license.name:
            names.append(entry.license.name)
    names = [n for n in names if not (spdx and n.startswith("License :: "))]
    if names:
        return Declared(" AND ".join([*spdx, *names]), spdx=False)
    if not spdx:
        return Declared(None)
    if len(spdx) == 1:
        return Declared(spdx[0])
    return Declared(" AND ".join(f"({p})" for p in spdx))


def collect(sbom_files: list[Path]) -> list[Component]:
    found: dict[tuple[str, str], tuple[Declared, list[str]]] = {}
    for path in sbom_files:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise GateError(f"cannot read SBOM {path}: {exc}") from exc
        entries = [doc.get("metadata", {}).get("component"), *doc.get("components", [])]
        for comp in entries:
            if not comp:
                continue
            key = (canonical(comp["name"]), str(comp.get("version", "")))
            declared = declared_expression(comp.get("licenses", []))
            found.setdefault(key, (declared, []))[1].append(path.name)
    return [
        Component(name, version, declared, tuple(sources))
        for (name, version), (declared, sources) in sorted(found.items())
    ]


def allowed(node: RenderableFunction | BaseSymbol, allow: set[str]) -> bool:
    """SPDX semantics: OR needs any side allowed, AND needs every side allowed."""
    if isinstance(node, OR):
        return any(allowed(arg, allow) for arg in node.args)
    if isinstance(node, AND):
        return all(allowed(arg, allow) for arg in node.args)
    if isinstance(node, LicenseWithExceptionSymbol):
        return f"{node.license_symbol.key} WITH {node.exception_symbol.key}" in allow
    if isinstance(node, LicenseSymbol):
        return node.key in allow
    return False


def verdict(declared: Declared | str | None, allow: set[str], licensing: Licensing) -> str | None:
    """None when allowed; otherwise why not, in a few words."""
    if not isinstance(declared, Declared):
        declared = Declared(declared)
    if declared.text is None:
        return "no licence declared"
    if not declared.spdx:
        return f"declares {declared.text!r}, which is not an SPDX licence identifier"
    try:
        parsed = licensing.parse(declared.text, validate=True, strict=True)
    except ExpressionError as exc:
        return f"not a known SPDX expression ({exc})"
    if parsed is None:
        return "empty licence expression"
    if not allowed(parsed, allow):
        return f"{parsed.render()} is not allowed by the policy"
    return None


def check(components: list[Component], policy: Policy) -> tuple[list[str], list[str]]:
    """(failures, notes) for the components under the policy."""
    licensing = get_spdx_licensing()
    allow: set[str] = set()
    for item in policy.allow:
        parsed = licensing.parse(item, validate=True, strict=True)
        if not isinstance(parsed, LicenseSymbol | LicenseWithExceptionSymbol):
            raise GateError(
                f"allowlist entry {item!r} must be one licence id (or id WITH exception)"
            )
        allow.add(parsed.render())
    failures: list[str] = []
    notes: list[str] = []
    used: set[tuple[str, str]] = set()
    for comp in components:
        reason = verdict(comp.declared, allow, licensing)
        if reason is None:
            continue
        accepted = next(
            (
                e
                for e in policy.exception
                if canonical(e.package) == comp.name and e.declared == comp.declared.text
            ),
            None,
        )
        if accepted is not None:
            used.add((canonical(accepted.package), accepted.declared))
            notes.append(
                f"accepted {comp.name} {comp.version} ({comp.declared.text}): {accepted.reason}"
            )
            continue
        failures.append(f"{comp.name} {comp.version}: {reason} (in {', '.join(comp.sources)})")
    notes.extend(
        f"unused exception for {e.package} ({e.declared}): no component needs it; remove it"
        for e in policy.exception
        if (canonical(e.package), e.declared) not in used
    )
    return failures, notes


def _components(files: list[Path]) -> list[Component]:
    if not files:
        raise GateError("no SBOM to check (run `nox -s sbom` first)")
    components = collect(files)
    if not components:
        raise GateError(f"the SBOMs list no components: {', '.join(map(str, files))}")
    return components


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "sboms", nargs="*", type=Path, help="CycloneDX JSON files (default: dist/sbom/*.cdx.json)"
    )
    parser.add_argument("--policy", type=Path, default=POLICY)
    parser.add_argument("--dir", type=Path, default=REPO / "dist" / "sbom", help="where SBOMs are")
    args = parser.parse_args(argv)
    sbom_dir: Path = args.dir
    files: list[Path] = args.sboms or sorted(sbom_dir.glob("*.cdx.json"))
    try:
        components = _components(files)
        failures, notes = check(components, load_policy(args.policy))
    except GateError as exc:
        die("licenses", str(exc))
    for note in notes:
        print(f"licenses: {note}")
    expressions = {c.declared.text for c in components}
    if failures:
        for failure in failures:
            print(f"  {failure}")
        die("licenses", f"{len(failures)} of {len(components)} components break the licence policy")
    print(
        f"licenses: {len(components)} components from {len(files)} SBOMs checked, "
        f"{len(expressions)} distinct licences declared, all allowed"
    )
    results.record(
        "licenses",
        f"licenses ({len(components)} components, {len(expressions)} licences)",
        components=len(components),
        licences=len(expressions),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
