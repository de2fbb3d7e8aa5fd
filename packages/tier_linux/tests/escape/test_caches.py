"""No cache is trusted because of where it is (issue 22, case 3).

The reproduction: ``XDG_CACHE_HOME=$PWD/.cache panday run -- true`` stored the jail plan in
the workspace; a run with another ``XDG_CACHE_HOME`` let the jail rewrite it (the bwrap path
replaced by a script, the unkeyed digest recomputed); the next run with the first setting
ran the script on the host. A seccomp cache replaced with an allow-all program was loaded
by every later jail. Now the caches live under the password file's home, every cached plan
and program carries a MAC under a per-user key, and no jail can read that key.

Each probe runs its positive control first: the attacker's rewrite working where the file is
within reach, the rewritten plan running its script on the host once launched, the allow-all
program letting ``keyctl`` through when it is sealed as panday seals, the key readable on the
host and in a jail without the cover over panday's state.
"""

from __future__ import annotations

import os
import subprocess
import sys
from hashlib import blake2b
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday_core import userstate
from panday_tier_linux import plan as jail
from panday_tier_linux import seccomp

if TYPE_CHECKING:
    from conftest import Escape, Outcome  # the suite's fixture types (tests get `esc`)

# ------------------------------------------------------------------ the plan (case 3)

_REWRITE = """
import glob, marshal
from hashlib import blake2b
done = []
for path in sorted(glob.glob({pattern!r}, recursive=True)):
    with open(path, "rb") as fh:
        blob = fh.read()
    end = blob.index(b"\\n\\x00") + 2  # the head (magic and key), then 32 bytes of check
    head, body = blob[:end], blob[end + 32 :]
    fields = list(marshal.loads(body))
    fields[7] = {script!r}  # the bwrap path (planning.encode's order)
    body = marshal.dumps(tuple(fields))
    with open(path, "wb") as fh:
        fh.write(head + blake2b(body, digest_size=32).digest() + body)
    done.append(path)
if done:
    ok("rewrote " + " ".join(done))
blocked("no plan within reach")
"""


def _cli_env(**extra: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}
    if "PYTHONPATH" in os.environ:  # the same code as this test's (falsify's scratch copy)
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return {**env, **extra}


def _cli(esc: Escape, argv: list[str], **env: str) -> tuple[str, str, int]:
    cli = Path(sys.prefix) / "bin" / "panday"
    if not cli.exists():
        pytest.fail(f"inconclusive: no console script at {cli}")
    proc = subprocess.run(
        [str(cli), "run", "--", *argv],
        cwd=esc.ws,
        capture_output=True,
        text=True,
        timeout=120,
        env=_cli_env(**env),
        check=False,
    )
    return proc.stdout, proc.stderr, proc.returncode


def _plan_body(blob: bytes) -> bytes:
    return blob[blob.index(b"\n\x00") + 2 + userstate.MAC_BYTES :]


def _plan_file_for(workspace: Path) -> Path | None:
    """The plan file in the password file's state whose plan is for `workspace`."""
    directory = jail.plan_dir()
    assert directory is not None
    want = os.path.realpath(workspace)
    for path in Path(directory).glob("*.plan"):
        try:
            found = jail.Plan.decode(_plan_body(path.read_bytes()))
        except (OSError, ValueError):
            continue
        if found is not None and found.workspace == want:
            return path
    return None


def test_a_plan_rewritten_as_case_3_did_never_runs_on_the_host(esc: Escape) -> None:
    marker = esc.next_door / "ran-on-the-host"
    script = esc.next_door / "not-bwrap"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n", encoding="utf-8")
    script.chmod(0o755)
    inside = str(esc.ws / ".cache")
    # The first run, with the cache setting of the reproduction: the plan is made ...
    assert _cli(esc, ["true"], XDG_CACHE_HOME=inside) == ("", "", 0)
    plan_file = _plan_file_for(esc.ws)
    if plan_file is None:
        pytest.fail("inconclusive: the first run stored no plan in the password file's home")
    # Control: the attacker's rewrite works on a plan within its reach (here the real one,
    # rewritten from outside: what a jail could do if the plan were in its workspace).
    esc.control(esc.outside(_REWRITE.format(pattern=str(plan_file), script=str(script))))
    tampered = jail.Plan.decode(_plan_body(plan_file.read_bytes()))
    assert tampered is not None
    assert tampered.bwrap == str(script)
    # Control: that plan, once launched, runs the script on the host.
    launched = jail.launch(tampered, ["true"], os.environ)
    if launched is not None:
        jail.run(launched, tampered, write=lambda _stream, _data: None)
    if not marker.exists():
        pytest.fail("inconclusive: control failed, the rewritten plan did not run its script")
    marker.unlink()
    # ... and the jail of a run with another setting finds no plan in the workspace.
    rewrite = esc.py(_REWRITE.format(pattern=f"{esc.ws}/.cache/**/*.plan", script=str(script)))
    out, err, code = _cli(esc, rewrite, XDG_CACHE_HOME=str(esc.tmp / "other"))
    esc.must_block(esc.parse("inside the jail (panday run)", out.encode(), err.encode(), code))
    # The next run with the first setting: the rewritten plan is a miss, not a launch.
    assert _cli(esc, ["true"], XDG_CACHE_HOME=inside) == ("", "", 0)
    assert _cli(esc, ["true"], XDG_CACHE_HOME=inside) == ("", "", 0)  # and the one after
    assert not marker.exists(), "ESCAPE: a plan rewritten without the key ran its bwrap path"
    esc.held()


# ------------------------------------------------------------------ the seccomp program

_KEYCTL = """
KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING = 0, -3
r, e = sys_call({nr}, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 1)
if r >= 0:
    ok(f"session keyring {{r}}")
blocked(errno.errorcode.get(e, str(e)))
"""

# One BPF instruction: `ret SECCOMP_RET_ALLOW`.
_ALLOW_ALL = (0x06).to_bytes(2, sys.byteorder) + b"\0\0" + (0x7FFF0000).to_bytes(4, sys.byteorder)


def _keyctl() -> str:
    import pyseccomp as sc  # noqa: PLC0415  # pyright: ignore[reportMissingTypeStubs] - typed inline, no stub package

    return _KEYCTL.format(nr=sc.resolve_syscall(sc.Arch.NATIVE, "keyctl"))


def _own_home(esc: Escape, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A password-file home of this test's own (the caches of this process only)."""
    home = esc.tmp / "pwhome"
    (home / ".cache").mkdir(parents=True)
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(home))
    return home


def test_an_allow_all_seccomp_program_written_into_the_cache_is_not_loaded(
    esc: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _own_home(esc, monkeypatch)
    with esc.open():
        pass  # compiles and caches the program
    (entry,) = (home / ".cache" / "panday" / "seccomp").glob("*.bpf")
    text = seccomp.FilterSpec().text.encode()
    secret = userstate.key(create=False)
    assert secret is not None
    # Control: the allow-all program, sealed as panday seals its own, is what the next jail
    # loads, and there keyctl works.
    entry.write_bytes(seccomp.seal(secret, text, _ALLOW_ALL))
    esc.control(esc.inside(_keyctl()))
    body = text + _ALLOW_ALL
    forgeries = {
        "the previous format": b"panday-seccomp-bpf 1\n" + body,
        "an unkeyed digest": seccomp.CACHE_MAGIC + blake2b(body, digest_size=32).digest() + body,
        "a key of its own": seccomp.CACHE_MAGIC
        + userstate.mac(os.urandom(32), userstate.SECCOMP, body)
        + body,
    }
    for what, blob in forgeries.items():
        entry.write_bytes(blob)
        entry.chmod(0o600)
        outcome: Outcome = esc.inside(_keyctl())
        assert outcome.blocked, f"ESCAPE: {what}: {outcome!r}"
    esc.held()


# ------------------------------------------------------------------ the key itself

_READ_KEY = """
import os
path = {path!r}
try:
    with open(path, "rb") as fh:
        data = fh.read()
except OSError as exc:
    where = os.path.dirname(path)
    blocked(err(exc) + " " + repr(os.listdir(where) if os.path.isdir(where) else None))
ok(f"read {{len(data)}} bytes") if len(data) == 32 else blocked(f"{{len(data)}} bytes")
"""


def _without_cover(dest: str) -> object:
    def edit(args: list[str]) -> list[str]:
        for i in range(len(args) - 3):
            if args[i : i + 4] == ["--tmpfs", dest, "--remount-ro", dest]:
                return args[:i] + args[i + 4 :]
        pytest.fail(f"the jail has no cover over {dest}")

    return edit


@pytest.mark.parametrize("access", ["rw", "ro"])
def test_the_cache_key_is_not_readable_from_a_jail_whose_workspace_is_the_home(
    esc: Escape, monkeypatch: pytest.MonkeyPatch, access: str
) -> None:
    home = _own_home(esc, monkeypatch)
    monkeypatch.setenv("HOME", str(home))
    assert userstate.key(create=True) is not None
    state = home / ".cache" / "panday"
    code = _READ_KEY.format(path=str(state / userstate.KEY_NAME))
    esc.control(esc.outside(code))  # readable on the host
    # Control: the jail shows the home; without the cover over panday's state the key would
    # be read there.
    esc.control(
        esc.edited_run(
            esc.py(code),
            edit=_without_cover(str(state)),  # pyright: ignore[reportArgumentType] - an edit
            seccomp=True,
            where="inside a jail without the cover over panday's state",
            workspace=home,
            allow_home=True,
            access=access,  # pyright: ignore[reportArgumentType] - rw or ro
        )
    )
    esc.must_block(esc.inside(code, workspace=home, allow_home=True, access=access))  # pyright: ignore[reportArgumentType] - rw or ro
