"""The schemas gate: the committed schemas match the code; any drift turns it red."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import schemas

if TYPE_CHECKING:
    from pathlib import Path

    from conftest import RunGate


def _check(directory: Path, run_gate: RunGate) -> tuple[int, str]:
    return run_gate(schemas.main, ["--dir", str(directory)])


def test_committed_schemas_match_the_code(run_gate: RunGate) -> None:
    code, out = _check(schemas.REPO / "schemas", run_gate)
    assert code == 0, out
    assert "all match the code" in out


@pytest.mark.parametrize("edit", ["hand-edit", "delete", "stale-extra"])
def test_drift_turns_the_gate_red_and_names_the_fix(
    tmp_path: Path, run_gate: RunGate, edit: str
) -> None:
    generated = schemas.expected()
    schemas.write(tmp_path, generated)
    code, out = _check(tmp_path, run_gate)
    if code != 0:
        pytest.fail(f"inconclusive: control failed, freshly written schemas did not match:\n{out}")
    first = tmp_path / min(generated)
    if edit == "hand-edit":
        first.write_text(
            first.read_text(encoding="utf-8").replace('"type"', '"typ"', 1), encoding="utf-8"
        )
    elif edit == "delete":
        first.unlink()
    else:
        (tmp_path / "old.schema.json").write_text("{}\n", encoding="utf-8")
    code, out = _check(tmp_path, run_gate)
    assert code == 1
    assert "uv run python tools/schemas.py --write" in out


def test_write_restores_a_drifted_directory(tmp_path: Path, run_gate: RunGate) -> None:
    (tmp_path / "old.schema.json").write_text("{}\n", encoding="utf-8")
    assert schemas.main(["--dir", str(tmp_path), "--write"]) == 0
    code, out = _check(tmp_path, run_gate)
    assert code == 0, out


def test_rendering_is_stable_sorted_and_ends_with_a_newline() -> None:
    first, second = schemas.expected(), schemas.expected()
    assert first == second
    assert first
    for text in first.values():
        assert text.endswith("}\n")
