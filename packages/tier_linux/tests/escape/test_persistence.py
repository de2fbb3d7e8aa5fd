"""What a jail writes must never run outside it, or widen a later jail.

Each probe is an attack through the file system that worked before (issue 12): a staged
path swapped for a link between commands and between sessions, a .pth planted in panday's
own environment, hooks and config planted in .git, a setuid file left for another user,
system and home directories accepted as a workspace. Each runs after a positive control
showing the same operation working where the guard is absent (the bind removed, the
entry opted out, the filter off) -- or, for refusals at open, a session that does open.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday_core.errors import PolicyViolation
from panday_tier_linux.session import open_session

if TYPE_CHECKING:
    import types

    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

# ------------------------------------------------------------------ staged-path swap

_SWAP = """
import os
os.chdir({ws!r})
try:
    os.rename("sub", "sub.old")
except OSError as exc:
    blocked("rename: " + err(exc))
os.mkdir("sub")
os.symlink({target!r}, "sub/ro-data")
ok("swapped sub/ro-data for a link to {target}")
"""

_LIST = """
try:
    names = os.listdir({path!r})
except OSError as exc:
    blocked(err(exc))
if {expected!r} in names:
    ok("the host's /tmp, with " + {expected!r})
blocked("not the host's /tmp: " + " ".join(sorted(names)[:10]))
"""

# ws/sub/ro-data -> ...: the host's /tmp (where a tmux socket lives) by enough '..' to climb
# to the root from sub/ (the spelling issue 12 reproduced), the directory next to the
# workspace, /etc and /proc as absolute links.
_TARGETS = ("UP/tmp", "../../next-door", "/etc", "/proc")


@pytest.mark.parametrize("spelling", _TARGETS, ids=["tmp", "next-door", "etc", "proc"])
def test_a_nested_staged_path_cannot_be_swapped_for_a_link(esc: Escape, spelling: str) -> None:
    # From ws/sub, one '..' per component of ws reaches the root (host's, or the jail's).
    target = spelling.replace("UP", "/".join([".."] * len(esc.ws.parts)))
    data = esc.ws / "sub" / "ro-data"
    data.mkdir(parents=True)
    (data / "input.txt").write_text("staged input\n")
    swap = _SWAP.format(ws=str(esc.ws), target=target)
    with esc.open(staged=[data]) as before:  # a session opened before the swap
        # Between two commands: the directories above a staged path inside the workspace
        # are mount points in every command, so the rename fails (EBUSY)...
        result = before.run(esc.py(swap), timeout_ms=60_000)
        esc.must_block(esc.parse("inside the jail", result.stdout, result.stderr, result.exit_code))
        # ...which is the only thing stopping it: without that one bind the swap succeeds.
        esc.control(esc.without_bind(swap, str(esc.ws / "sub"), staged=[data]))
        assert data.is_symlink()
        # The session holding the real directory refuses its next command...
        with pytest.raises(PolicyViolation) as refused:
            before.run(["/bin/true"])
        assert refused.value.field == "fs.staged_ro[0]"
        esc.held()
    # ...and a new session refuses the path at open, naming the link.
    with pytest.raises(PolicyViolation) as at_open:
        esc.open(staged=[data])
    assert at_open.value.field == "fs.staged_ro[0]"
    assert "symbolic link" in at_open.value.reason
    esc.held()
    if spelling != "UP/tmp":
        return
    # The harm, with the old kind of bind (by path, looked up again at every command): the
    # host's /tmp appears inside. A control run with the old mechanism on purpose.
    real = esc.ws / "sub.old" / "ro-data"

    def by_path(args: list[str]) -> list[str]:
        for i in range(len(args) - 2):
            if args[i] == "--ro-bind-fd" and args[i + 2] == str(real):
                return [*args[:i], "--ro-bind", str(data), str(data), *args[i + 3 :]]
        pytest.fail("no descriptor bind of the staged path")

    host_tmp_entry = esc.tmp.relative_to("/tmp").parts[0]
    outcome = esc.edited_run(
        esc.py(_LIST.format(path=str(data), expected=host_tmp_entry)),
        edit=by_path,
        seccomp=True,
        where="a jail binding the swapped path by its path",
        staged=[real],
    )
    esc.control(outcome)


def test_a_staged_path_swapped_by_another_sessions_jail_still_binds_what_was_opened(
    esc: Escape,
) -> None:
    """Session B stages a directory that lies in session A's workspace; A's jail swaps it for
    a link. B's next command still sees the directory B opened (bound from B's descriptor),
    never what the link names."""
    other = esc.tmp / "other-ws"
    data = other / "data"
    data.mkdir(parents=True)
    (data / "input.txt").write_text("staged input\n")
    (esc.next_door / "canary.txt").write_text("next-door canary\n")
    swap = f"""
os.rename({str(data)!r}, {str(other / "data.old")!r})
os.symlink("../next-door", {str(data)!r})
ok("swapped data for a link next door")
"""
    read = f"""
try:
    with open({str(data / "canary.txt")!r}) as fh:
        ok("read " + fh.read().strip())
except OSError as exc:
    blocked(err(exc))
"""
    with esc.open(staged=[data]) as b:
        esc.control(esc.inside(swap, workspace=other))  # A's jail: its own workspace
        assert data.is_symlink()
        result = b.run(esc.py(read), timeout_ms=60_000)
        esc.must_block(
            esc.parse("session B's next command", result.stdout, result.stderr, result.exit_code)
        )
        check = b.run(["/bin/cat", str(data / "input.txt")], timeout_ms=60_000)
        assert check.stdout == b"staged input\n", check  # what B opened, still there

    # With a bind whose source is looked up by its path again, the staged place shows
    # what is next door.
    real = str(other / "data.old")

    def by_path(args: list[str]) -> list[str]:
        for i in range(len(args) - 2):
            if args[i] == "--ro-bind-fd" and args[i + 2] == real:
                return [*args[:i], "--ro-bind", str(data), real, *args[i + 3 :]]
        pytest.fail("no descriptor bind of the staged path")

    esc.control(
        esc.edited_run(
            esc.py(read.replace(str(data), real)),
            edit=by_path,
            seccomp=True,
            where="a jail binding the staged path by its path",
            staged=[other / "data.old"],
        )
    )


# ----------------------------------------------------------- panday's own environment


REPO = Path(__file__).resolve().parents[4]


def _packages() -> list[types.ModuleType]:
    import panday_core  # noqa: PLC0415 - the packages whose directories are looked at
    import panday_tier_linux  # noqa: PLC0415

    return [panday_core, panday_tier_linux]


def _in_checkout(path: str) -> bool:
    return Path(path).resolve().is_relative_to(REPO)


def _plant_site(esc: Escape, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """Where this interpreter loads code from inside the checkout (its .venv's
    site-packages when the environment lives in the clone, as in the quickstart; else an
    editable package's source directory), and the protected entry that covers it.

    Run as `python -m pytest` from the checkout, the checkout itself is first on sys.path,
    and a writable workspace there is refused outright (`sys_path_refusal`, tested on its
    own); these probes are about what lies inside it, so that entry is taken out."""
    if not (REPO / "pyproject.toml").is_file():
        pytest.fail(f"inconclusive: {REPO} is not the checkout")
    # The layer under test alone: a venv of the checkout active in this process's
    # environment (nox's, uv run's), its bin on PATH, would protect the same places as
    # the places the caller runs code from (`hostpaths.caller_code_paths`).
    for name in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    outside = [p for p in os.environ.get("PATH", "").split(":") if p.startswith("/")]
    monkeypatch.setenv("PATH", ":".join(p for p in outside if not _in_checkout(p)))
    cwd = Path.cwd().resolve()
    monkeypatch.setattr(
        sys,
        "path",
        [p for p in sys.path if (Path(p).resolve() if p else cwd) != REPO],
    )
    # What every panday process loads from (not what pytest adds to sys.path for tests).
    candidates = [
        *(p for p in sys.path if p.endswith("site-packages")),
        *(str(Path(m.__path__[0]).parent) for m in _packages()),
    ]
    inside = [
        Path(p).resolve()
        for p in candidates
        if p and Path(p).is_dir() and Path(p).resolve().is_relative_to(REPO)
    ]
    if not inside:
        pytest.fail("inconclusive: this interpreter loads nothing from the checkout")
    with esc.open(workspace=REPO) as session:
        entries = [REPO / e.rel for e in session.roots.entries()]
    for site in inside:
        for entry in entries:
            if site == entry or site.is_relative_to(entry):
                return site, str(entry)
    pytest.fail(f"ESCAPE: none of {inside} is a protected entry of {REPO}")


@pytest.mark.usefixtures("checkout_alone")  # the checkout is the workspace
def test_a_pth_file_cannot_be_planted_in_pandays_environment(
    esc: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    site, entry = _plant_site(esc, monkeypatch)
    # Also the caller's PYTHONPATH (falsify's scratch copy sets it; sys.path has it).
    monkeypatch.delenv("PYTHONPATH", raising=False)
    pth = site / f"panday-escape-probe-{secrets.token_hex(4)}.pth"
    ordinary = REPO / f".panday-escape-probe-{secrets.token_hex(4)}"
    code = f"""
with open({str(ordinary)!r}, "w") as fh:  # an ordinary workspace write works
    fh.write("ok")
try:
    with open({str(pth)!r}, "a") as fh:
        fh.write("# a probe: a real plant would start with 'import'\\n")
except OSError as exc:
    blocked(err(exc))
ok("planted " + {pth.name!r})
"""
    try:
        esc.control(esc.without_bind(code, entry, workspace=REPO))
        assert pth.exists()
        pth.unlink()
        esc.must_block(esc.inside(code, workspace=REPO))
        assert ordinary.read_text() == "ok"
        assert not pth.exists()
    finally:
        pth.unlink(missing_ok=True)
        ordinary.unlink(missing_ok=True)


@pytest.mark.usefixtures("checkout_alone")  # the checkout is the workspace
def test_the_cli_run_from_the_repository_cannot_plant_code_for_the_next_run(
    esc: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 12's reproduction, literally: `panday run` from the clone, appending to a .pth
    where the next `panday` command loads code from."""
    site, _entry = _plant_site(esc, monkeypatch)
    cli = Path(sys.prefix) / "bin" / "panday"
    if not cli.exists():
        pytest.fail(f"inconclusive: no console script at {cli}")
    pth = site / f"panday-escape-cli-{secrets.token_hex(4)}.pth"
    script = f'printf "# probe\\n" >> {pth} && echo planted; echo done'
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}
    if "PYTHONPATH" in os.environ:  # the same code as this test's (falsify's scratch copy)
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    try:
        proc = subprocess.run(
            [str(cli), "run", "--", "sh", "-c", script],
            cwd=REPO,
            capture_output=True,
            timeout=120,
            env=env,
            check=False,
        )
        out = proc.stdout.decode()
        assert "done" in out, f"inconclusive: the jailed command did not run: {proc.stderr!r}"
        assert "planted" not in out, f"ESCAPE: {pth} was written from the jail"
        assert not pth.exists(), f"ESCAPE: {pth} exists after the jailed command"
        esc.held()
    finally:
        pth.unlink(missing_ok=True)


# ------------------------------------------------------------------ .git and friends

_PLANTS = """
import os
os.chdir({ws!r})
with open("notes.txt", "w") as fh:  # an ordinary write: must work in every case
    fh.write("ordinary")
done = []
for path, text in (
    (".git/hooks/pre-commit", "#!/bin/sh\\necho planted\\n"),
    (".git/config", "[core]\\n\\tfsmonitor = echo planted\\n"),
    (".envrc", "echo planted\\n"),
    (".mcp.json", "{{}}"),
    (".vscode/tasks.json", "{{}}"),
    ("tools/hooks/pre-push", "#!/bin/sh\\n"),
):
    try:
        with open(path, "a") as fh:
            fh.write(text)
        done.append(path)
    except OSError:
        pass
for old in (".git", "tools"):
    try:
        os.rename(old, old + ".moved")
        done.append("rename " + old)
    except OSError:
        pass
if done:
    ok(",".join(done))
blocked("nothing planted")
"""


def _repo(esc: Escape) -> None:
    git = esc.ws / ".git"
    (git / "hooks").mkdir(parents=True)
    (git / "config").write_text("[core]\n\thooksPath = tools/hooks\n")
    (esc.ws / ".envrc").write_text("export A=1\n")
    (esc.ws / "tools" / "hooks").mkdir(parents=True)


def test_git_metadata_hooks_and_tool_configuration_cannot_be_planted(esc: Escape) -> None:
    _repo(esc)
    code = _PLANTS.format(ws=str(esc.ws))
    opted_out = (".git", ".envrc", ".mcp.json", ".vscode")
    granted = esc.inside(code, unprotect=opted_out)
    esc.control(granted)  # opted out: the same writes land (tools/hooks stays protected)
    assert "tools/hooks" not in granted.detail  # core.hooksPath's target, from .git/config
    shutil.rmtree(esc.ws)
    esc.ws.mkdir()
    _repo(esc)
    esc.must_block(esc.inside(code))
    assert (esc.ws / "notes.txt").read_text() == "ordinary"
    assert not (esc.ws / ".git" / "hooks" / "pre-commit").exists()
    assert "fsmonitor" not in (esc.ws / ".git" / "config").read_text()
    assert not (esc.ws / ".mcp.json").exists()  # the placeholder is gone, nothing planted
    assert not (esc.ws / ".vscode").exists()


def test_a_pinned_directory_is_what_stops_the_rename(esc: Escape) -> None:
    (esc.ws / "tools" / "hooks").mkdir(parents=True)
    code = f"""
try:
    os.rename({str(esc.ws / "tools")!r}, {str(esc.ws / "tools.moved")!r})
except OSError as exc:
    blocked(err(exc))
ok("moved tools/ aside")
"""
    esc.control(esc.without_bind(code, str(esc.ws / "tools"), protect=["tools/hooks/"]))
    (esc.ws / "tools.moved").rename(esc.ws / "tools")
    esc.must_block(esc.inside(code, protect=["tools/hooks/"]))


# ------------------------------------------------------------------ privilege plants

_PRIVILEGE = """
import os, shutil, stat, struct
os.chdir({ws!r})
planted = []
shutil.copy("/usr/bin/id", "id-suid")
shutil.copy("/usr/bin/id", "id-sgid")
for name, bits in (("id-suid", 0o4755), ("id-sgid", 0o2755)):
    try:
        os.chmod(name, bits)
        planted.append(name)
    except OSError:
        pass
try:
    fd = os.open("created-suid", os.O_CREAT | os.O_WRONLY, 0o4755)
    os.close(fd)
    if os.stat("created-suid").st_mode & 0o6000:
        planted.append("created-suid")
except OSError:
    pass
try:  # cap_setuid, effective: what `setcap cap_setuid+ep` writes
    blob = struct.pack("<IIIII", 0x02000001, 1 << 7, 0, 0, 0)
    os.setxattr("id-suid", "security.capability", blob)
    planted.append("capability")
except OSError:
    pass
try:
    os.mknod("null-dev", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    planted.append("device")
except OSError:
    pass
if planted:
    ok(",".join(planted))
blocked("no privilege planted")
"""


def test_no_setuid_setgid_capability_or_device_file_is_left_behind(esc: Escape) -> None:
    code = _PRIVILEGE.format(ws=str(esc.ws))
    granted = esc.granted(code)  # no filter, capabilities: the plants work
    esc.control(granted)
    assert "id-suid" in granted.detail
    for leftover in esc.ws.iterdir():
        leftover.unlink()
    esc.must_block(esc.inside(code))
    for entry in esc.ws.iterdir():
        st = entry.lstat()
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), f"ESCAPE: {entry} {st.st_mode:o}"
        assert not stat.S_ISCHR(st.st_mode)
        assert "security.capability" not in os.listxattr(entry, follow_symlinks=False)


# ----------------------------------------------------------------- refused workspaces


@pytest.mark.parametrize(
    "path", ["/", "/usr", "/etc", "/tmp", "/var", "/home", "/run", "/proc", "/boot", "/dev"]
)
def test_system_directories_are_refused_as_a_workspace(esc: Escape, path: str) -> None:
    with esc.open():  # control: an ordinary directory is a workspace
        pass
    with pytest.raises(PolicyViolation) as refused:
        open_session(esc.policy(workspace=Path(path)))
    assert refused.value.field == "fs.workspace"
    esc.held()


def test_etc_is_refused_as_a_staged_path(esc: Escape) -> None:
    with esc.open(staged=[esc.next_door]):  # control: staging a directory works
        pass
    with pytest.raises(PolicyViolation) as refused:
        esc.open(staged=[Path("/etc")])
    assert refused.value.field == "fs.staged_ro[0]"
    esc.held()


def test_a_home_directory_is_refused_unless_allowed_and_its_rc_files_stay_read_only(
    esc: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = esc.tmp / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# mine\n")
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(PolicyViolation) as refused:
        esc.open(workspace=home)
    assert refused.value.field == "fs.workspace"
    assert "fs.allow_home" in refused.value.reason
    esc.held()
    code = f"""
with open({str(home / "work.txt")!r}, "w") as fh:
    fh.write("ok")
try:
    with open({str(home / ".bashrc")!r}, "a") as fh:
        fh.write("echo planted\\n")
except OSError as exc:
    blocked(err(exc))
ok("appended to .bashrc")
"""
    esc.control(esc.without_bind(code, str(home / ".bashrc"), workspace=home, allow_home=True))
    (home / ".bashrc").write_text("# mine\n")
    esc.must_block(esc.inside(code, workspace=home, allow_home=True))
    assert (home / ".bashrc").read_text() == "# mine\n"
    assert (home / "work.txt").read_text() == "ok"


def test_a_directory_on_the_callers_path_cannot_be_filled(
    esc: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workspace directory on the caller's own PATH (an activated venv's bin, direnv's
    PATH_add): a program the jail planted there would run in place of ls in the caller's
    next shell command. Control: the jail without that directory's read-only bind plants
    it, and the caller's shell runs it."""
    bin_dir = esc.ws / "bin"
    bin_dir.mkdir()
    marker = esc.next_door / "ran"
    path = f"{bin_dir}:{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)  # the caller's environment, as panday reads it
    code = f"""
target = {str(bin_dir / "ls")!r}
try:
    with open(target, "w") as fh:
        fh.write("#!/bin/sh\\necho planted > {marker}\\n")
    os.chmod(target, 0o755)
except OSError as exc:
    blocked(err(exc))
ok("planted bin/ls")
"""

    def callers_ls() -> None:
        subprocess.run(["sh", "-c", "ls"], env={**os.environ, "PATH": path},
                       cwd=esc.next_door, capture_output=True, timeout=30, check=False)  # fmt: skip

    esc.control(esc.without_bind(code, str(bin_dir)))
    callers_ls()
    assert marker.exists(), "inconclusive: the caller's shell did not run the planted ls"
    marker.unlink()
    (bin_dir / "ls").unlink()
    esc.must_block(esc.inside(code))
    callers_ls()
    assert not marker.exists(), "ESCAPE: the caller's shell ran a program the jail planted"
    assert list(bin_dir.iterdir()) == []
