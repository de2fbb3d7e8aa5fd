"""The README's Python example, saved as a script in the project it sandboxes and run with
``python example.py`` (issue 27, 3): Python puts the script's directory, the workspace, on
its import path. Written in place, a module there would run in the script's next import,
so the embedded default makes the writes proposals (``fs.writes = "checked"``) and holds
every Python module among them; the example runs, and a module the command writes does
not land."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[3] / "README.md"

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="checked writes are T2 Linux's"
)


def _example() -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"From Python:\n\n```python\n(.*?)```", text, re.DOTALL)
    assert found is not None, "the README's Python example moved"
    return found.group(1)


def _run(project: Path, code: str) -> subprocess.CompletedProcess[str]:
    (project / "example.py").write_text(code)
    return subprocess.run(
        [sys.executable, "example.py"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_the_readme_example_runs_as_a_script_in_its_own_project(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "data.txt").write_text("x\n")
    done = _run(project, _example())
    assert done.returncode == 0, done.stderr
    assert "data.txt" in done.stdout
    assert "example.py" in done.stdout


def test_a_module_the_command_writes_there_is_held_not_imported(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    code = _example().replace('["ls", "-l"]', '["sh", "-c", "echo raise SystemExit > helper.py"]')
    code += "print(result.writes)\n"
    done = _run(project, code)
    assert done.returncode == 0, done.stderr
    assert "mode='checked'" in done.stdout
    assert "caller-import-path" in done.stdout
    assert not (project / "helper.py").exists(), "the module landed where the script imports"
    found = re.search(r"change_set='([^']+)'", done.stdout)
    assert found is not None
    from panday_core.changes import store  # noqa: PLC0415 - after the run, in this process

    store.discard(found.group(1))
