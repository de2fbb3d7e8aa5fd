"""Two house rules of panday's packages, read from the source.

No two modules import each other, not even for types. Every import of a ``panday*``
module counts: at the top, inside a function (a deferred import still ties the two files
together) and under ``TYPE_CHECKING`` (a type named in a lower module ties it to the
higher one). Where a lower module needs something of a higher one, it names what it needs
as a `typing.Protocol` the higher one satisfies (`panday_core.egress.ends.Tunnel`,
`panday_core.egress.tunnel.Origin`), or the registry names the higher module
(`panday.tiers.Tier.maker`). A package's face (its ``__init__.py``, which only hands
names on) is not counted as importing anything.

A module over 500 lines says why on its first line (``# Over 500 lines: ...``): length is
allowed where splitting would cut one state machine or one protocol in two, never by
default.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
ROOTS = (
    REPO / "packages/core/src",
    REPO / "packages/sdk/src",
    REPO / "packages/tier_linux/src",
    REPO / "packages/tier_macos/src",
)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for root in ROOTS:
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MAX_LINES = 500
REASON = "# Over 500 lines: "


def _target(name: str, modules: dict[str, Path]) -> str | None:
    """The module `name` is, or the nearest package holding it (an attribute of it)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(module, path).split(".")
                base = ".".join([*package[: len(package) - node.level + 1], base]).strip(".")
            # `from pkg import sub` imports the module pkg.sub when there is one.
            names = [f"{base}.{a.name}" for a in node.names] or [base]
        for name in names:
            if not name.startswith("panday"):
                continue
            target = _target(name, modules)
            if target is not None and target != module:
                out.add(target)
    return out


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that reach themselves, grouped by circle (each sorted): two modules are
    in one circle when each reaches the other."""
    reach = {name: _reach(graph, name) for name in graph}
    found = {
        tuple(sorted(m for m in reach[name] if name in reach[m]))
        for name in graph
        if name in reach[name]
    }
    return sorted(list(circle) for circle in found)


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: set() if path.name == "__init__.py" else _imports(name, path, modules)
        for name, path in modules.items()
    }


def test_the_graph_is_read() -> None:
    """The control: the reader sees the imports it must (one at the top, one deferred, one
    for types only), so an empty answer below means no circle, not a blind reader."""
    graph = import_graph()
    assert "panday_core.errors" in graph["panday_core.capabilities"]  # at the top
    assert "panday_tier_linux.enforcement" in graph["panday_tier_linux.session"]  # deferred
    assert "panday_core.refusal" in graph["panday_core.errors"]  # TYPE_CHECKING


def test_the_circle_finder_finds_a_circle() -> None:
    """The finder itself, on a graph with one circle of three and a tail."""
    graph: dict[str, set[str]] = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert _circles(graph) == [["a", "b", "c"]]


def test_no_module_imports_back_into_one_that_imports_it() -> None:
    circles = _circles(import_graph())
    shown = "; ".join(", ".join(c) for c in circles)
    assert not circles, f"modules that import each other in a loop: {shown}"


def test_a_long_module_says_why_on_its_first_line() -> None:
    modules = _modules()
    assert len(modules) > 100  # the control: the source trees were found
    unexplained = sorted(
        f"{path.relative_to(REPO)} ({n} lines)"
        for path in modules.values()
        if (n := len(lines := path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
        and not (lines[0].startswith(REASON) and len(lines[0]) > len(REASON) + 10)
    )
    assert not unexplained, f"over {MAX_LINES} lines without a reason on the first line: " + (
        ", ".join(unexplained)
    )
