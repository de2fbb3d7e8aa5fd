"""Escape probes: a home directory as the workspace (``fs.allow_home``, issue 22 case 6).

Reproduced before: with the home as the workspace, a jail could write ``~/.bash_aliases``
(Debian's .bashrc sources it), a ``.pth`` in ``~/.local/lib/python3.*/site-packages`` (run
by every Python), ``.vimrc``, ``.aws/config`` (credential_process), ``.kube/config`` (exec
plugins), ``.cargo/config.toml``, ``.npmrc`` and ``.ipython/profile_default/startup/``:
code that runs at the user's next login, terminal or ordinary command. The positive
control is the same writes with those entries left out by ``fs.unprotect``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    import pytest
    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

# (path under the home, what is there before: a file's text, "" for a directory that holds
# the path, None for nothing at all), and the fs.unprotect name that leaves it writable.
_TARGETS: tuple[tuple[str, str | None, str], ...] = (
    (".bash_aliases", None, ".bash_aliases"),
    (".local/lib/python3.11/site-packages/planted.pth", "", ".local"),
    (".vimrc", '" mine\n', ".vimrc"),
    (".aws/config", "[default]\nregion = eu-west-1\n", ".aws"),
    (".kube/config", "apiVersion: v1\n", ".kube"),
    (".cargo/config.toml", None, ".cargo"),
    (".npmrc", None, ".npmrc"),
    (".ipython/profile_default/startup/planted.py", "", ".ipython"),
)


def _home(esc: Escape, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = esc.tmp / "home"
    home.mkdir()
    for rel, before, _ in _TARGETS:
        path = home / rel
        if before is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        if before:
            path.write_text(before)
    monkeypatch.setenv("HOME", str(home))
    return home


def _probe(home: Path) -> str:
    paths = [str(home / rel) for rel, _, _ in _TARGETS]
    return f"""
wrote, refused = [], []
for path in {paths!r}:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as fh:
            fh.write("import os; os.system('id > /tmp/pwned')\\n")
        wrote.append(path)
    except OSError as exc:
        refused.append(f"{{path}}: {{err(exc)}}")
if wrote and refused:
    print("RESULT partly wrote", wrote, "refused", refused, flush=True)
    sys.exit(0)
if wrote:
    ok(f"wrote all {{len(wrote)}}")
blocked("; ".join(refused))
"""


def _state(home: Path) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for rel, _, _ in _TARGETS:
        path = home / rel
        out[rel] = path.read_text() if path.is_file() else None
    return out


def test_a_homes_start_up_files_stay_read_only_under_allow_home(
    esc: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(esc, monkeypatch)
    before = _state(home)
    code = _probe(home)
    unprotect = [name for _, _, name in _TARGETS]
    # Control: the same writes, those entries left out of the protection.
    esc.control(esc.inside(code, workspace=home, allow_home=True, unprotect=unprotect))
    assert all(text is not None for text in _state(home).values())
    for rel, _, _ in _TARGETS:  # back to how it was
        path = home / rel
        if before[rel] is None:
            path.unlink()
        else:
            path.write_text(before[rel] or "")
    assert _state(home) == before
    held = esc.inside(code, workspace=home, allow_home=True)
    esc.must_block(held)
    # each one refused as read-only: the bind (EROFS), or a missing one's 0444 placeholder
    # (EACCES, also for root without capabilities)
    assert held.detail.count("EROFS") + held.detail.count("EACCES") == len(_TARGETS), held.detail
    assert _state(home) == before
    # What the jail could have written instead is still the workspace's.
    outcome = esc.inside(
        f"""
with open({str(home / "notes.txt")!r}, "w") as fh:
    fh.write("ok")
ok("wrote notes.txt")
""",
        workspace=home,
        allow_home=True,
    )
    esc.control(outcome)
