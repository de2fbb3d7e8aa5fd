"""Dead-control lint: every policy and manifest field has a reader on every tier.

A field that no enforcement code reads is a lie told at the consent prompt. For each tier
and each policy field this proves, by static analysis of the source (AST), one of:

* the tier's enforcement code reads the field (``policy.limits.mem_bytes``,
  ``limits.mem_bytes``, ``net.allow``, ``policy.env``, or ``getattr(x, "mem_bytes")``) and
  that read reaches an enforcement site (below), or
* the tier's capability data refuses it (``NOT_ENFORCED``, with a reason), or
* the capability data declares it not applicable there, with a reason, and that (tier,
  field) pair is in `REVIEWED_NOT_APPLICABLE` below. "Not applicable" needs no reader, so
  it is the easy way out for a field nobody implemented; each pair is reviewed here once,
  and a new one fails the gate until someone adds it (at run time such a field is refused
  unless it is left at its default, see `panday_core.capabilities.check_policy`).

A field declared ``STRICT``/``PARTIAL`` whose reader cannot be found fails, and so does a
field the tier says nothing about. Enforcement code is the tier's package plus the
``panday_core`` modules it imports, minus the model and data modules (which read fields
only to validate or describe them). Manifest fields must be read by the manifest's
``to_policy`` or ``consent_summary`` (what is enforced or displayed).

**A read is not enforcement** (issue 28: ``_unused = limits.threads`` satisfied the old
lint). A read counts only when its value reaches an enforcement site, decided from the AST
of the function holding it (`reaches_use`): walking up from the read through the
expressions that merely carry it (attribute and item access, operators, literals,
comprehensions, f-strings), the first thing that does something with it must be a call
(as an argument, a keyword or the receiver of a method: the value goes into the code that
applies it), a test (``if``, ``while``, ``assert``, a conditional expression, ``match``:
it decides what happens), a hand-over (``return``, ``yield``, ``await``, ``raise``, a
``lambda`` body, a default argument, a ``with`` item), or a store into an object's
attribute or item (state the enforcement code carries on). A store into local names
(``x = limits.pids``, a ``for`` target, ``:=``) defers the verdict to each load of those
names in the same function, judged by the same rule: one that reaches a site makes the
read live. Anything else is dead (a bare expression statement, ``del``, a name nobody
loads), and a field whose only reads are dead fails, naming the files of its dead reads.
The rule is intraprocedural and does not follow values through calls: a read passed to
any call counts, so it proves "the value goes somewhere that acts", not that the callee
enforces it correctly; that is the escape suite's and `falsify`'s job.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from panday_core.capabilities import FieldSupport, Support, TierCapabilities, policy_fields

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "packages/core/src/panday_core"

# Model and data modules: they touch fields to validate, describe or display them, which
# is not enforcement.
NOT_ENFORCEMENT = frozenset(
    {"policy", "capabilities", "declared", "types", "errors", "schema", "domains", "protocol"}
    | {"manifest"}
)
SECTIONS = frozenset({"fs", "net", "limits"})

ACCESSORS: dict[str, str] = {
    "limits.wall_clock_cap": "limits.wall_clock_ms",
    "limits.output_cap": "limits.output_bytes",
}
"""Model properties that are the tiers' only way to read a field: they turn the explicit
``"unbounded"`` into None, so a tier reading the raw field would have to repeat that.
A read of the property counts as a read of the field (test_fields_lint checks that each
property exists on the model and reads its field)."""

REVIEWED_NOT_APPLICABLE: dict[tuple[str, str], str] = {
    ("t0", "net.deny"): "narrows net.allow, which T0 refuses whenever it is non-empty",
    ("t0", "net.ports"): "narrows net.allow, which T0 refuses whenever it is non-empty",
    ("t0", "limits.pids"): "T0 starts no process or thread; a value is refused at run time",
    ("t0", "env"): "T0 runs no process, so there is no environment; a value is refused",
    ("t0", "allow_env_hooks"): "qualifies env, which T0 has none of; a value is refused",
}
"""Every (tier, field) pair allowed to be declared not applicable, with why it was accepted
(``version``, the document's format, is checked by the loader and skipped here)."""
MANIFEST_READERS = frozenset({"to_policy", "consent_summary"})


@dataclass
class TierSource:
    tier: str
    caps: TierCapabilities
    roots: list[Path]
    """Files or directories holding the tier's own enforcement code."""


@dataclass
class Verdict:
    tier: str
    read: list[str] = field(default_factory=list[str])
    refused: list[str] = field(default_factory=list[str])
    not_applicable: list[str] = field(default_factory=list[str])
    problems: list[str] = field(default_factory=list[str])


def _py_files(roots: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for root in roots:
        if root.is_file():
            files.append(root)
        elif root.is_dir():
            files.extend(sorted(p for p in root.rglob("*.py") if p.name != "capabilities.py"))
    return files


def _core_imports(tree: ast.AST) -> set[str]:
    """panday_core submodules a module imports (``from panday_core.x import y``)."""
    mods: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("panday_core.")
        ):
            mods.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            mods.update(
                a.name.split(".")[1] for a in node.names if a.name.startswith("panday_core.")
            )
    return mods


def enforcement_files(roots: Sequence[Path], core: Path = CORE) -> list[Path]:
    """The tier's files plus the core modules they import (transitively), minus model ones."""
    files = _py_files(roots)
    seen = {p.resolve() for p in files}
    queue = list(files)
    while queue:
        tree = ast.parse(queue.pop().read_text(encoding="utf-8"))
        for mod in _core_imports(tree) - NOT_ENFORCEMENT:
            for candidate in (core / f"{mod}.py", core / mod):
                for path in _py_files([candidate]):
                    if path.resolve() not in seen:
                        seen.add(path.resolve())
                        files.append(path)
                        queue.append(path)
    return files


def _terminal_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _scope(node: ast.AST, parents: Mapping[ast.AST, ast.AST]) -> ast.AST:
    """The function (or module) whose body holds `node`: where a local name lives."""
    here = parents.get(node)
    while here is not None and not isinstance(here, SCOPES):
        here = parents.get(here)
    return here if here is not None else node


SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)
"""What holds a local name: its loads are looked for there (nested functions included,
as closures read their enclosing function's names)."""
TESTS = (ast.If, ast.While, ast.IfExp, ast.Assert, ast.match_case)
STORES = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)
LOOPS = (ast.For, ast.AsyncFor, ast.comprehension)


def _target_names(targets: Iterable[ast.AST]) -> tuple[set[str], bool]:
    """(local names bound by `targets`, whether any target stores into an object)."""
    names: set[str] = set()
    into_object = False
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(
                node.ctx, ast.Store
            ):
                into_object = True
    return names, into_object


def _flows(
    names: set[str],
    at: ast.AST,
    parents: Mapping[ast.AST, ast.AST],
    seen: set[tuple[int, str]],
) -> bool:
    """Whether a load of one of `names` (in the scope of `at`) reaches a use."""
    scope = _scope(at, parents)
    for node in ast.walk(scope):
        if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load):
            key = (id(scope), node.id)
            if key in seen:
                continue
            seen.add(key)
            if reaches_use(node, parents, seen):
                return True
    return False


def reaches_use(  # noqa: C901, PLR0911 - one case per kind of parent, as the docstring lists
    node: ast.AST, parents: Mapping[ast.AST, ast.AST], seen: set[tuple[int, str]] | None = None
) -> bool:
    """Whether the value of the expression `node` reaches an enforcement site.

    Walking up from the read through the expressions that hold it (attribute and subscript
    access, operators, literals, comprehensions, f-strings) to the first place that does
    something with it: a call (an argument, a keyword, or the receiver of a method: the
    value goes into the code that applies it), a test (``if``/``while``/``assert``/a
    conditional expression/a ``case``: it decides what happens), ``return``/``yield``/
    ``await``/``raise``/a ``lambda`` body/a default argument (handed to the caller), or a
    store into an object's attribute or item (state the enforcement code carries). A store
    into local names (``x = limits.pids``, a ``for`` target, ``:=``) passes the question on
    to each load of those names in the same function: the read reaches a use when one of
    them does. Anything else is dead: a bare expression statement, a ``del``, a local name
    nobody loads (``_unused = limits.threads``).
    """
    seen = set() if seen is None else seen
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, (ast.Call, ast.Return, ast.Yield, ast.YieldFrom, ast.Await)):
            return True
        if isinstance(parent, (ast.Raise, ast.Lambda, ast.arguments, ast.keyword)):
            return True
        if isinstance(parent, TESTS) and child is getattr(parent, "test", None):
            return True
        if isinstance(parent, (ast.match_case, ast.Match)):
            return True
        if isinstance(parent, STORES):
            if child is not parent.value:
                return True  # an index or key of a store target: it selects what is written
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            names, into_object = _target_names(targets)
            return into_object or _flows(names, parent, parents, seen)
        if isinstance(parent, LOOPS):
            if child is not parent.iter:
                return isinstance(parent, ast.comprehension)  # an ``if`` of a comprehension
            names, into_object = _target_names([parent.target])
            return into_object or _flows(names, parent, parents, seen)
        if isinstance(parent, (ast.With, ast.AsyncWith, ast.withitem)):
            return True  # a context manager is entered: its __enter__ runs
        if isinstance(parent, ast.stmt):
            return False  # an expression statement, ``del``, ...: the value goes nowhere
        child, parent = parent, parents.get(parent)
    return False


def _field_of(node: ast.AST) -> str | None:
    """The policy field an expression reads, if it is a field read."""
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
        base = _terminal_name(node.value)
        if base in SECTIONS:
            dotted = f"{base}.{node.attr}"
            return ACCESSORS.get(dotted, dotted)
        if base is not None and base.endswith("policy"):
            return node.attr
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2  # noqa: PLR2004 - getattr(obj, name)
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        base = _terminal_name(node.args[0])
        if base in SECTIONS:
            return f"{base}.{node.args[1].value}"
    return None


def fields_read(tree: ast.AST) -> set[str]:
    """Dotted policy fields this AST reads where the read reaches a use (`reaches_use`)."""
    return {name for name, live in field_reads(tree) if live}


def field_reads(tree: ast.AST) -> list[tuple[str, bool]]:
    """Every policy field read in `tree`, each with whether it reaches a use."""
    parents = _parents(tree)
    found: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        name = _field_of(node)
        if name is not None:
            # A section read (``policy.limits``) reaches its fields through the name it is
            # bound to; a field's read is then judged at the field (``limits.pids``).
            found.append((name, reaches_use(node, parents)))
    return found


def check_tier(
    source: TierSource,
    fields: Sequence[str],
    reviewed: Mapping[tuple[str, str], str] = REVIEWED_NOT_APPLICABLE,
) -> Verdict:
    verdict = Verdict(source.tier)
    readers: dict[str, list[str]] = {}
    dead: dict[str, list[str]] = {}
    for path in enforcement_files(source.roots):
        for name, live in field_reads(ast.parse(path.read_text(encoding="utf-8"))):
            (readers if live else dead).setdefault(name, []).append(path.name)
    for name in fields:
        if name == "version":
            continue  # the document format: read by the loader, nothing to enforce
        entry = source.caps.for_field(name)
        if entry is None:
            verdict.problems.append(
                f"{source.tier}: {name}: the tier's capability data says nothing about it"
            )
        elif entry.support in {Support.STRICT, Support.PARTIAL}:
            if name in readers:
                verdict.read.append(name)
            else:
                what = f"declared {entry.support} but no enforcement code reads it"
                if name in dead:
                    where = ", ".join(sorted(set(dead[name])))
                    what += (
                        f" where the value reaches a use (only dead reads, in {where}: a "
                        "read is not enforcement)"
                    )
                verdict.problems.append(f"{source.tier}: {name}: {what}")
        else:
            _without_reader(verdict, entry, reviewed)
    return verdict


def _without_reader(
    verdict: Verdict, entry: FieldSupport, reviewed: Mapping[tuple[str, str], str]
) -> None:
    """A refused or not-applicable field: it needs a reason, and n/a a reviewed pair."""
    tier, name = verdict.tier, entry.field
    if not entry.note.strip():
        verdict.problems.append(f"{tier}: {name}: declared {entry.support} without a reason")
    elif entry.support is Support.NOT_ENFORCED:
        verdict.refused.append(name)
    elif (tier, name) not in reviewed:
        verdict.problems.append(
            f"{tier}: {name}: declared not applicable, but ({tier!r}, {name!r}) is not in "
            "the reviewed list (REVIEWED_NOT_APPLICABLE in tools/fields_lint.py); enforce "
            "it, refuse it, or get the pair reviewed"
        )
    else:
        verdict.not_applicable.append(name)


def stale_reviews(
    sources: Sequence[TierSource],
    reviewed: Mapping[tuple[str, str], str] = REVIEWED_NOT_APPLICABLE,
) -> list[str]:
    """Reviewed pairs no tier declares not applicable any more (the list stays exact)."""
    declared = {
        (s.tier, f.field) for s in sources for f in s.caps.fields
        if f.support is Support.NOT_APPLICABLE
    }  # fmt: skip
    return [
        f"{tier}: {name}: in the reviewed not-applicable list, but the tier no longer "
        "declares it so; remove the pair"
        for tier, name in sorted(set(reviewed) - declared)
    ]


def check_manifest(manifest_file: Path, fields: Sequence[str]) -> tuple[int, list[str]]:
    """Manifest fields read inside `to_policy`/`consent_summary` (or what they call here)."""
    tree = ast.parse(manifest_file.read_text(encoding="utf-8"))
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    todo = [functions[n] for n in MANIFEST_READERS if n in functions]
    if not todo:
        return 0, [f"manifest: {manifest_file.name} defines neither to_policy nor consent_summary"]
    reached: set[str] = set()
    attrs: set[str] = set()
    while todo:
        fn = todo.pop()
        if fn.name in reached:
            continue
        reached.add(fn.name)
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                attrs.add(node.attr)
                if node.attr in functions:
                    todo.append(functions[node.attr])
            elif isinstance(node, ast.Name) and node.id in functions:
                todo.append(functions[node.id])
    problems = [
        f"manifest: {f}: neither to_policy nor consent_summary reads it"
        for f in fields
        if f.rsplit(".", 1)[-1] not in attrs
    ]
    return len(fields), problems


def manifest_fields() -> tuple[Path, list[str]] | None:
    try:
        manifest = importlib.import_module("panday_core.manifest")
    except ModuleNotFoundError:
        return None
    names: list[str] = []
    models: list[tuple[str, type]] = list(getattr(manifest, "MANIFEST_MODELS", ()))
    for prefix, model in models:
        nested = {p.rstrip(".") for p, _ in models if p}
        names.extend(
            f"{prefix}{n}"
            for n in getattr(model, "__struct_fields__", ())
            if f"{prefix}{n}" not in nested
        )
    file = getattr(manifest, "__file__", None)
    return (Path(file), names) if file else None


def real_tiers() -> list[TierSource]:
    from panday import tiers  # noqa: PLC0415 - tools import packages, never the reverse

    # Each tier's source roots are its registry entry's `roots`: import packages, found
    # where Python finds them (the development environment installs every tier).
    return [
        TierSource(t, tiers.declared(t), [p for r in tiers.entry(t).roots for p in _where(r)])
        for t in tiers.ALL_TIERS
    ]


def _where(package: str) -> list[Path]:
    """The directories (or file) of import package `package`, without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise SystemExit(f"fields: the tier registry names {package!r}, which is not installed")
    if spec.submodule_search_locations:
        return [Path(p) for p in spec.submodule_search_locations]
    return [Path(spec.origin)] if spec.origin else []


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="every policy/manifest field has a reader")
    parser.parse_args(argv)
    fields = policy_fields()
    problems: list[str] = []
    checked = 0
    sources = real_tiers()
    problems.extend(stale_reviews(sources))
    for source in sources:
        verdict = check_tier(source, fields)
        problems.extend(verdict.problems)
        total = len(verdict.read) + len(verdict.refused) + len(verdict.not_applicable)
        checked += total
        print(
            f"fields: {source.tier}: {total} fields checked: {len(verdict.read)} read by "
            f"enforcement code, {len(verdict.refused)} refused, {len(verdict.not_applicable)} n/a"
        )
    manifest = manifest_fields()
    if manifest is not None:
        count, manifest_problems = check_manifest(*manifest)
        problems.extend(manifest_problems)
        checked += count
        print(f"fields: manifest: {count} fields checked against to_policy/consent_summary")
    if checked == 0:
        print("fields: nothing was checked; refusing to pass", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"fields: FAIL {problem}", file=sys.stderr)
    if problems:
        print(f"fields: {len(problems)} field(s) without a reader or a reason", file=sys.stderr)
        return 1
    print(f"fields: OK ({checked} field/tier pairs)")
    import results  # noqa: PLC0415 - tools/ is on sys.path when this script runs

    results.record("fields", f"fields ({checked} field/tier pairs)", pairs=checked)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
