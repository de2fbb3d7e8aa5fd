"""Each package's exports come from one list: its ``_LAZY`` table (name -> module).

The other two lists a package ``__init__`` keeps exist for static tools only (the
``TYPE_CHECKING`` imports, so type checkers see the names; ``__all__``, which pyright reads
only as a literal) and must say exactly what ``_LAZY`` says: this test fails on any drift
(core's ``Sandbox`` was once missing from its ``__all__``). Names bound eagerly at the top
of an ``__init__`` (tier_macos's table functions) count as exports without a ``_LAZY`` row.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PACKAGES = {
    "panday": REPO / "packages/sdk/src/panday/__init__.py",
    "panday_core": REPO / "packages/core/src/panday_core/__init__.py",
    "panday_tier_linux": REPO / "packages/tier_linux/src/panday_tier_linux/__init__.py",
    "panday_tier_macos": REPO / "packages/tier_macos/src/panday_tier_macos/__init__.py",
}
EXTRA = {"panday": {"__version__", "aio"}}
"""Exports that are not lazy names: the version, and a submodule bound on first use."""


def _lists(path: Path) -> tuple[dict[str, str], dict[str, str], dict[str, str], list[str]]:  # noqa: C901 - one pass over the statements
    """(_LAZY, TYPE_CHECKING imports name -> module, eager imports name -> module, __all__)."""
    tree = ast.parse(path.read_text())
    lazy: dict[str, str] = {}
    typed: dict[str, str] = {}
    eager: dict[str, str] = {}
    exported: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name == "_LAZY":
                lazy = ast.literal_eval(node.value)
            elif name == "__all__":
                exported = ast.literal_eval(node.value)
        elif isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for sub in node.body:
                if isinstance(sub, ast.ImportFrom) and sub.module:
                    typed.update({a.asname or a.name: sub.module for a in sub.names})
                elif isinstance(sub, ast.Import):
                    typed.update(
                        {(a.asname or a.name).rpartition(".")[2]: a.name for a in sub.names}
                    )
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("panday"):
            if node.module == "panday_core.lazy":
                continue
            eager.update({a.asname or a.name: str(node.module) for a in node.names})
    return lazy, typed, eager, exported


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_the_export_lists_say_what_lazy_says(package: str) -> None:
    lazy, typed, eager, exported = _lists(PACKAGES[package])
    extra = EXTRA.get(package, set())
    assert {n: m for n, m in typed.items() if n not in extra} == lazy, (
        "TYPE_CHECKING imports and _LAZY differ"
    )
    assert sorted(exported) == exported, "__all__ is kept sorted"
    assert set(exported) == {*lazy, *eager, *extra}, "__all__ and _LAZY differ"
    module = importlib.import_module(package)
    for name in exported:
        assert getattr(module, name) is not None, name  # each lazy row resolves


def test_a_drift_is_seen(tmp_path: Path) -> None:
    # Positive control: core's lists as they were, Sandbox in _LAZY but not in __all__.
    drifted = tmp_path / "__init__.py"
    drifted.write_text(
        "TYPE_CHECKING = False\n"
        "if TYPE_CHECKING:\n"
        "    from panday_core.protocol import Sandbox\n"
        "_LAZY = {'Sandbox': 'panday_core.protocol'}\n"
        "__all__ = []\n"
    )
    lazy, typed, eager, exported = _lists(drifted)
    assert typed == lazy
    assert set(exported) != {*lazy, *eager}
