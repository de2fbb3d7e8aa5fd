"""What the host's own tools execute next, found as those tools find it (issue 22 cases 2
and 7): panday's own project when it runs from a checkout inside the workspace (the
quickstart rebuilt panday with a build backend the jail wrote), an import path that does
not exist yet, and a link at a protected name that must not refuse every later session.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday_tier_linux.binds import ProtectedLinkWarning

if TYPE_CHECKING:
    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

REPO = Path(__file__).resolve().parents[4]


def _checkout_as_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from the checkout, pytest puts it first on sys.path, and a writable workspace
    there is refused outright (`sys_path_refusal`, probed on its own); these probes are
    about what lies inside it, so that entry is taken out."""
    if not (REPO / "pyproject.toml").is_file() or not (REPO / "uv.lock").is_file():
        pytest.fail(f"inconclusive: {REPO} is not the checkout")
    cwd = Path.cwd().resolve()
    kept = [p for p in sys.path if (Path(p).resolve() if p else cwd) != REPO]
    monkeypatch.setattr(sys, "path", kept)
    import panday_core  # noqa: PLC0415 - where panday's own code is loaded from

    if not Path(panday_core.__path__[0]).resolve().is_relative_to(REPO):
        pytest.fail("inconclusive: panday is not loaded from this checkout")


_APPEND = """
import os
path = {path!r}
try:
    if {create!r} and os.path.lexists(path):
        os.unlink(path)  # a placeholder whose bind is missing (the control)
    with open(path, "a") as fh:
        fh.write({text!r})
except OSError as exc:
    blocked(err(exc))
ok("wrote " + path)
"""


@pytest.mark.parametrize(
    ("rel", "text", "create"),
    [
        ("packages/core/pyproject.toml", "\n# a probe: build-backend = 'evilbackend'\n", False),
        ("pyproject.toml", "\n# a probe\n", False),
        ("uv.toml", "# a probe\n", True),
        (".python-version", "3.99\n", True),
    ],
    ids=["member-pyproject", "root-pyproject", "uv.toml", "python-version"],
)
@pytest.mark.usefixtures("checkout_alone")  # no other jail's placeholders in the checkout
def test_pandays_own_project_cannot_be_changed_from_a_jail(
    esc: Escape, monkeypatch: pytest.MonkeyPatch, rel: str, text: str, create: bool
) -> None:
    _checkout_as_workspace(monkeypatch)
    path = REPO / rel
    before = path.read_bytes() if path.exists() else None
    code = _APPEND.format(path=str(path), text=text, create=create)
    try:
        esc.control(esc.without_bind(code, str(path), workspace=REPO))
        assert path.read_bytes() != before
    finally:
        if before is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(before)
    esc.must_block(esc.inside(code, workspace=REPO))
    assert (path.read_bytes() if path.exists() else None) == before


def test_a_missing_import_path_cannot_be_created(
    esc: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``PYTHONPATH`` entry that does not exist yet: a ``sitecustomize.py`` the jail put
    there would run in the next Python (the next ``panday``) that has it on its path."""
    missing = esc.ws / "pp" / "lib"
    monkeypatch.setattr(sys, "path", [*sys.path, str(missing)])  # this Python's path
    marker = esc.next_door / "ran"
    code = f"""
import os
os.chdir({str(esc.ws)!r})
try:
    if os.path.isdir("pp") and not os.listdir("pp"):
        os.rmdir("pp")  # a placeholder whose bind is missing (the control)
    os.makedirs("pp/lib")
    with open("pp/lib/sitecustomize.py", "w") as fh:
        fh.write("open({str(marker)!r}, 'w').write('ran')\\n")
except OSError as exc:
    blocked(err(exc))
ok("planted sitecustomize.py")
"""

    def next_python() -> bool:
        marker.unlink(missing_ok=True)
        subprocess.run(
            ["/usr/bin/python3", "-c", "pass"],
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(missing)},
            timeout=60,
            check=False,
        )
        return marker.exists()

    esc.control(esc.without_bind(code, str(esc.ws / "pp")))
    assert next_python(), "inconclusive: the planted sitecustomize.py did not run"
    for leftover in sorted(esc.ws.rglob("*"), reverse=True):
        leftover.unlink() if leftover.is_file() else leftover.rmdir()
    esc.must_block(esc.inside(code))
    assert not next_python(), "ESCAPE: the jail's sitecustomize.py ran on the host"


def test_a_link_at_a_protected_name_does_not_refuse_later_sessions(esc: Escape) -> None:
    """``ln -s /nonexistent .envrc`` in one command made every later session refuse to
    start. It is reported and the session opens; where a link leads inside the
    workspace is kept read-only (what direnv would read through it)."""
    code = f"""
import os
os.chdir({str(esc.ws)!r})
os.symlink("/nonexistent", ".envrc")
ok("linked")
"""
    esc.control(esc.inside(code))  # a command may create the name (.envrc: create=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = esc.run(["/bin/true"])  # the next session opens
    assert result.exit_code == 0
    assert any(issubclass(w.category, ProtectedLinkWarning) for w in seen), seen
    esc.held()
    # A link to a file inside the workspace: that file is what direnv runs, kept read-only.
    (esc.ws / ".envrc").unlink()
    (esc.ws / "env.sh").write_text("export A=1\n")
    (esc.ws / ".envrc").symlink_to("env.sh")
    append = f"""
try:
    with open({str(esc.ws / "env.sh")!r}, "a") as fh:
        fh.write("echo planted\\n")
except OSError as exc:
    blocked(err(exc))
ok("appended through the link's target")
"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProtectedLinkWarning)  # seen above
        esc.control(esc.without_bind(append, str(esc.ws / "env.sh")))
        (esc.ws / "env.sh").write_text("export A=1\n")
        esc.must_block(esc.inside(append))
    assert (esc.ws / "env.sh").read_text() == "export A=1\n"
    assert (esc.ws / ".envrc").readlink() == Path("env.sh")
