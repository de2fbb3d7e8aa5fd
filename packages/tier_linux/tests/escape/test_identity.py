"""A root is judged by what was opened, never by how it was spelled (issue 22 case 4).

``//etc`` opened ``/etc`` while every string test missed it: root wrote the host's
``/etc``, ``//usr`` wrote ``/usr/local/bin``, ``//home/probe`` a home's ``.bashrc``, and
``//<clone>`` a ``.pth`` in panday's own environment; ``panday policy check`` called such
a policy enforceable. Each probe: the ordinary spelling is refused (or protected) as the
control of the guard's existence, a directory of the test's own in the same spelling opens
(the control that the spelling itself works), then the odd spelling must get the same
answer, from the session and from ``policy check``.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import pytest

from panday_core.errors import PolicyViolation
from panday_tier_linux.session import open_session

if TYPE_CHECKING:
    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

    from panday_tier_linux.session import LinuxSession

_CONSOLE = "from panday.cli_fast import console; console()"  # the `panday` script's entry
_SPELLINGS = ("//{}", "/.{}", "///{}/.", "{}/./")


def _spell(template: str, path: Path | str) -> str:
    return template.format(str(path).lstrip("/") if template.startswith("//") else path)


def _open(esc: Escape, workspace: str) -> LinuxSession:
    """A session whose workspace is spelled exactly `workspace` (pathlib would tidy it)."""
    policy = esc.policy()
    fs = msgspec.structs.replace(policy.fs, workspace=workspace)
    return open_session(msgspec.structs.replace(policy, fs=fs))


def _cli_check(esc: Escape, workspace: str) -> subprocess.CompletedProcess[str]:
    policy = esc.tmp / f"policy-{secrets.token_hex(3)}.toml"
    policy.write_text(f'[fs]\nworkspace = "{workspace}"\n')
    return subprocess.run(
        [sys.executable, "-c", _CONSOLE, "policy", "check", str(policy)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
        cwd=esc.next_door,
    )


@pytest.mark.parametrize("system", ["/etc", "/usr", "/usr/local/bin", "/var/lib/dpkg"])
@pytest.mark.parametrize("template", _SPELLINGS)
def test_a_system_directory_is_refused_in_every_spelling(
    esc: Escape, system: str, template: str
) -> None:
    if not Path(system).is_dir():
        pytest.fail(f"inconclusive: {system} is missing on this host")
    with _open(esc, _spell(template, esc.ws)) as session:  # control: the spelling opens
        assert session.workspace == str(esc.ws)  # held as the kernel spells it
    with pytest.raises(PolicyViolation) as plain:  # control: the guard exists
        _open(esc, system)
    assert plain.value.field == "fs.workspace"
    with pytest.raises(PolicyViolation) as refused:
        _open(esc, _spell(template, system))
    assert refused.value.field == "fs.workspace"
    esc.held()


def test_policy_check_answers_as_run_does(esc: Escape) -> None:
    ok = _cli_check(esc, "/" + str(esc.ws))
    assert ok.returncode == 0, f"inconclusive: {ok.stdout}{ok.stderr}"  # control
    assert "enforceable here" in ok.stdout
    refused = _cli_check(esc, "//etc")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "NOT enforceable here" in refused.stdout
    assert "fs.workspace" in refused.stdout
    esc.held()


def test_a_home_is_refused_in_every_spelling(esc: Escape, monkeypatch: pytest.MonkeyPatch) -> None:
    home = esc.tmp / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# mine\n")
    monkeypatch.setenv("HOME", str(home))
    with esc.open(workspace=esc.ws):  # control: beside the home, a workspace opens
        pass
    for template in _SPELLINGS:
        with pytest.raises(PolicyViolation) as refused:
            _open(esc, _spell(template, home))
        assert "fs.allow_home" in refused.value.reason
        esc.held()


def test_a_pth_cannot_be_planted_through_a_double_slash(
    esc: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``//<clone>`` planted a ``.pth`` in panday's own environment: the protected entries
    are found by identity, so they hold in any spelling."""
    venv = esc.ws / "venv" / "lib" / "site-packages"
    venv.mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [*sys.path, str(venv)])  # this Python loads code there
    pth = venv / "planted.pth"
    code = f"""
try:
    with open({str(pth)!r}, "w") as fh:
        fh.write("# a probe\\n")
except OSError as exc:
    blocked(err(exc))
ok("planted")
"""
    odd = Path("/" + str(esc.ws))  # pathlib keeps a leading '//'
    assert str(odd).startswith("//")
    esc.control(esc.without_bind(code, str(venv), workspace=odd))
    pth.unlink()
    esc.must_block(esc.inside(code, workspace=odd))
    assert not pth.exists()


def test_a_bind_alias_of_etc_is_refused(esc: Escape) -> None:
    """``mount --bind /etc x`` (here in a user and mount namespace of the test's own, so it
    works for any caller and the host's mounts are untouched): x is /etc's inode."""
    alias = esc.tmp / "alias"
    alias.mkdir()
    judge = (
        "import sys\n"
        "from panday_core.policy import FsPolicy\n"
        "from panday_tier_linux.binds import Roots\n"
        "roots, refusals = Roots.open(FsPolicy(workspace=sys.argv[1]))\n"
        "print('REFUSED ' + refusals[0].reason if refusals else 'OPENED')\n"
    )
    script = 'mount --bind "$1" "$2" && exec "$3" -c "$4" "$2"'
    python = (sys.executable, judge)

    def run(source: Path | str) -> str:
        proc = subprocess.run(
            ["unshare", "-Urm", "sh", "-c", script, "sh", str(source), str(alias), *python],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "PYTHONSAFEPATH": "1"},
        )
        if proc.returncode != 0:
            pytest.fail(f"inconclusive: {proc.stdout}{proc.stderr}")
        return proc.stdout.strip()

    assert run(esc.next_door) == "OPENED"  # control: an alias of an ordinary directory
    # /var: refused only as the jail's own mount point (nothing above it is refused), so
    # its alias is refused by the exact identity alone.
    for system in ("/etc", "/etc/ssl", "/usr/share", "/var"):
        verdict = run(system)
        assert verdict.startswith("REFUSED"), f"ESCAPE: an alias of {system}: {verdict}"
        esc.held()


def test_a_workspace_inside_a_homes_protected_entry_is_refused(
    esc: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``~/.config`` as a workspace (no ``fs.allow_home`` needed: it is not the home) would
    leave every file in it writable, autostart entries and systemd user units included."""
    home = esc.tmp / "home"
    (home / ".config" / "autostart").mkdir(parents=True)
    (home / "project").mkdir()
    monkeypatch.setenv("HOME", str(home))
    with esc.open(workspace=home / "project"):  # control: a project in the home opens
        pass
    for inside in (home / ".config", home / ".config" / "autostart"):
        with pytest.raises(PolicyViolation) as refused:
            esc.open(workspace=inside)
        assert refused.value.field == "fs.workspace"
        assert "must stay read-only" in refused.value.reason
        esc.held()
