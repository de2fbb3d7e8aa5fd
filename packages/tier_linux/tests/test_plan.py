"""Jail plans (plan.py): the plain value a real session launches from, cached per user, used
only for their own key and only when nobody else could have written them; a cached plan
launches through the session's own code (`jail.start`), and every per-command refusal is
made again at launch.

The CLI's use of plans (keys from its inputs, the full path on anything else) is tested end
to end in packages/sdk/tests/test_cli_fast.py.
"""

from __future__ import annotations

import marshal
import os
import shutil
import sys
from typing import TYPE_CHECKING

import pytest

from panday_core import userstate
from panday_core.errors import PolicyViolation
from panday_core.policy import FsPolicy, Limits, SandboxPolicy
from panday_tier_linux import host, jail, plan, planning
from panday_tier_linux.session import open_session

if TYPE_CHECKING:
    from pathlib import Path

    from panday_core.execution import Ended
    from panday_tier_linux.session import LinuxSession

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="jail plans are the Linux tier's"
)


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of this test's own (plans, seccomp programs, /etc views, the key): the state
    directory of a password-file home of its own (``<returned>/panday``)."""
    home = tmp_path / "pwhome"
    where = home / ".cache"
    where.mkdir(parents=True)
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(home))
    return where


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def session_for(ws: Path, **kw: object) -> LinuxSession:
    env = kw.pop("env", {})
    limits = Limits(**kw)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType] - test keywords
    policy = SandboxPolicy(fs=FsPolicy(workspace=str(ws)), limits=limits, env=env)  # pyright: ignore[reportArgumentType] - test keywords
    return open_session(policy)


def plan_of(session: LinuxSession, caller_env: tuple[str, ...] = ()) -> plan.Plan:
    """The session's own plan, as `panday run` caches it (`panday.cli_plan.make`)."""
    assert planning.cacheable(session)
    made = session.plan
    made.caller_env = caller_env
    return made


@pytest.fixture
def made(ws: Path) -> plan.Plan:
    session = session_for(ws, wall_clock_ms=60_000, output_bytes=1 << 20, env={"FOO": "bar"})
    try:
        return plan_of(session)
    finally:
        session.close()


def fields(p: plan.Plan) -> object:
    """Every field of a plan, as values (marshal's bytes differ with string interning)."""
    return marshal.loads(planning.encode(p))  # noqa: S302 - our own bytes


def plan_files() -> list[Path]:
    from pathlib import Path  # noqa: PLC0415 - a test helper

    directory = plan.plan_dir()
    assert directory is not None
    return sorted(Path(directory).glob("*.plan"))


def captured(
    made: plan.Plan, argv: list[str], environ: dict[str, str] | None = None
) -> tuple[bytes, bytes, Ended | None]:
    """Launch and run `argv` from `made`: its output and how it ended (None: never ran)."""
    launched = plan.launch(made, argv, environ or {})
    assert launched is not None
    out: dict[str, bytes] = {"stdout": b"", "stderr": b""}

    def write(stream: str, data: bytes) -> None:
        out[stream] += data

    ended = plan.run(launched, made, write=write)
    return out["stdout"], out["stderr"], ended


# ---------------------------------------------------------------------- the cache


def test_a_stored_plan_is_loaded_for_its_key_and_no_other(made: plan.Plan) -> None:
    assert plan.load("key A") is None  # control: nothing cached yet
    assert planning.store("key A", made)
    loaded = plan.load("key A")
    assert loaded is not None
    assert fields(loaded) == fields(made)
    assert plan.load("key B") is None
    assert plan.load("key A\n") is None


def test_a_plan_written_for_another_key_is_never_used(made: plan.Plan) -> None:
    """Even under the file name of the key asked for (a collision, or a planted file)."""
    assert planning.store("key B", made)
    (b_file,) = plan_files()
    assert plan.load("key B") is not None  # control
    assert planning.store("key A", made)
    a_file = next(p for p in plan_files() if p != b_file)
    b_file.replace(a_file)
    assert plan.load("key A") is None


def test_a_tampered_plan_is_not_used(made: plan.Plan) -> None:
    assert planning.store("key", made)
    (path,) = plan_files()
    assert plan.load("key") is not None  # control
    blob = bytearray(path.read_bytes())
    blob[-5] ^= 0x01
    path.write_bytes(bytes(blob))
    assert plan.load("key") is None


def _rewrite(path: Path, key: str, p: plan.Plan, tag: bytes | None = None) -> None:
    """Write `p` for `key` at `path`: sealed with this user's key, or with `tag` (what an
    attacker without the key can put in the MAC's place)."""
    body = planning.encode(p)
    if tag is None:
        secret = userstate.key(create=False)
        assert secret is not None
        path.write_bytes(plan.seal(secret, key, body))
    else:
        path.write_bytes(plan.file_head(key) + tag + body)
    path.chmod(0o600)


def _with(p: plan.Plan, **changes: object) -> plan.Plan:
    kwargs = {name: getattr(p, name) for name in plan.Plan.__slots__}
    kwargs.update(changes)
    return plan.Plan(**kwargs)


def test_a_plan_whose_mac_does_not_verify_is_not_used(made: plan.Plan) -> None:
    """Issue 22 case 3: the jail rewrote the plan and recomputed the unkeyed digest."""
    from _blake2 import blake2b  # noqa: PLC0415 - this test only

    assert planning.store("key", made)
    (path,) = plan_files()
    longer = _with(made, wall_clock_ms=120_000)
    _rewrite(path, "key", longer)
    found = plan.load("key")  # control: a body sealed with the user's key is used
    assert found is not None
    assert found.wall_clock_ms == 120_000
    body = planning.encode(longer)
    head = plan.file_head("key")
    forgeries = {
        "unkeyed digest of the body": blake2b(body, digest_size=32).digest(),
        "unkeyed digest of head and body": blake2b(head + body, digest_size=32).digest(),
        "another key": userstate.mac(os.urandom(32), userstate.PLAN, head + body),
        "the seccomp purpose": userstate.mac(
            userstate.key(create=False) or b"", userstate.SECCOMP, head + body
        ),
    }
    for what, tag in forgeries.items():
        _rewrite(path, "key", longer, tag)
        assert plan.load("key") is None, what
    # Sealed, then a byte of the head (the key) or of the body altered.
    _rewrite(path, "key", longer)
    sealed = path.read_bytes()
    for at in (len(plan.MAGIC) + 1, len(sealed) - 5):
        blob = bytearray(sealed)
        blob[at] ^= 0x01
        path.write_bytes(bytes(blob))
        assert plan.load("key") is None, at
    # The previous format (an unkeyed digest of the body after the head).
    old = b"panday-jail-plan 1\n" + b"key\n\x00"
    path.write_bytes(old + blake2b(body, digest_size=32).digest() + body)
    assert plan.load("key") is None


def test_without_a_usable_key_nothing_is_cached(made: plan.Plan, cache: Path) -> None:
    assert planning.store("key", made)
    assert plan.load("key") is not None  # control
    key = cache / "panday" / userstate.KEY_NAME
    key.chmod(0o640)
    assert plan.load("key") is None
    assert not planning.store("key", made)
    key.chmod(0o600)
    assert plan.load("key") is not None


def test_a_plan_for_another_bwrap_than_a_session_would_use_now_is_a_miss(
    made: plan.Plan, tmp_path: Path
) -> None:
    """Even sealed with the user's key: a plan naming another binary, or a bwrap whose
    identity changed since, is not launched."""
    assert planning.store("key", made)
    (path,) = plan_files()
    assert plan.load("key") is not None  # control
    script = tmp_path / "bwrap"
    script.write_text("#!/bin/sh\ntouch /tmp/never\n", encoding="utf-8")
    script.chmod(0o755)
    _rewrite(path, "key", _with(made, bwrap=str(script)))
    assert plan.load("key") is None
    _rewrite(path, "key", _with(made, bwrap=str(script), bwrap_id=plan.bwrap_identity(str(script))))
    assert plan.load("key") is None
    assert made.bwrap_id is not None
    dev, ino, size, mtime = made.bwrap_id
    for changed in (
        (dev, ino + 1, size, mtime),
        (dev, ino, size + 1, mtime),
        (dev, ino, size, mtime + 1),
    ):
        _rewrite(path, "key", _with(made, bwrap_id=changed))
        assert plan.load("key") is None, changed
    _rewrite(path, "key", made)
    assert plan.load("key") is not None


def test_a_plan_others_can_write_is_not_used(made: plan.Plan, cache: Path) -> None:
    assert planning.store("key", made)
    (path,) = plan_files()
    assert plan.load("key") is not None  # control
    path.chmod(0o620)
    assert plan.load("key") is None
    path.chmod(0o600)
    assert plan.load("key") is not None
    (cache / "panday" / "plans").chmod(0o777)
    assert plan.load("key") is None
    (cache / "panday" / "plans").chmod(0o700)
    (cache / "panday").chmod(0o757)
    assert plan.load("key") is None


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_a_plan_owned_by_another_user_is_not_used(made: plan.Plan) -> None:
    assert planning.store("key", made)
    (path,) = plan_files()
    assert plan.load("key") is not None  # control
    os.chown(path, 65534, 65534)
    assert plan.load("key") is None


def test_a_plan_directory_reached_through_a_link_is_not_used(
    made: plan.Plan, cache: Path, tmp_path: Path
) -> None:
    assert planning.store("key", made)
    assert plan.load("key") is not None  # control
    elsewhere = tmp_path / "elsewhere"
    (cache / "panday" / "plans").rename(elsewhere)
    (cache / "panday" / "plans").symlink_to(elsewhere)
    assert plan.load("key") is None
    assert not planning.store("key", made)


def test_plans_are_kept_under_a_permissive_umask(ws: Path, cache: Path) -> None:
    """umask 002 (user private groups) must not leave panday's state group-writable, or
    nothing would ever be cached (and the plan directory would be refused)."""
    old = os.umask(0o002)
    try:
        session = session_for(ws)
        try:
            found = plan_of(session)
        finally:
            session.close()
        assert found is not None
        assert planning.store("key", found)
    finally:
        os.umask(old)
    assert (cache / "panday").stat().st_mode & 0o777 == 0o700
    assert plan.load("key") is not None


def test_old_plans_are_pruned(made: plan.Plan, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planning, "MAX_PLANS", 3)
    for i in range(5):
        assert planning.store(f"key {i}", made)
    assert len(plan_files()) == 3
    assert plan.load("key 4") is not None
    assert plan.load("key 0") is None


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not marshal",
        __import__("marshal").dumps(("a tuple", "of strings")),
        __import__("marshal").dumps((2, *([None] * 14))),
    ],
)
def test_what_is_not_a_plan_decodes_to_none(body: bytes) -> None:
    assert plan.Plan.decode(body) is None


def test_a_plan_round_trips(made: plan.Plan) -> None:
    again = plan.Plan.decode(planning.encode(made))
    assert again is not None
    assert fields(again) == fields(made)


# ---------------------------------------------------------------------- the host facts


def test_the_host_facts_name_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    before = plan.host_facts()
    real = os.uname()
    changed = os.uname_result(
        (real.sysname, real.nodename, real.release + "-other", real.version, real.machine)
    )
    monkeypatch.setattr(os, "uname", lambda: changed)
    after = plan.host_facts()
    assert before is not None
    assert after is not None
    assert before != after


def test_the_host_facts_name_the_bwrap_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    found = host.find_bwrap()
    assert found is not None
    before = plan.host_facts()
    copy = tmp_path / "bwrap"
    shutil.copy2(found.path, copy)
    monkeypatch.setattr(host, "_BWRAP", [host.Bwrap(str(copy), "system")])
    moved = plan.host_facts()
    copy.write_bytes(copy.read_bytes() + b"\0")  # the same path, another file
    rebuilt = plan.host_facts()
    assert before != moved
    assert moved != rebuilt


def test_no_bwrap_means_no_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "_BWRAP", [None])
    assert plan.host_facts() is None


# ---------------------------------------------------------------------- making one


def test_only_sessions_a_plan_can_hold_are_planned(ws: Path) -> None:
    assert planning.plannable(SandboxPolicy(fs=FsPolicy(workspace=str(ws))))
    for limits in ({"mem_bytes": 1 << 30}, {"pids": 64}, {"cpu_ms": 1000}):
        policy = SandboxPolicy(fs=FsPolicy(workspace=str(ws)), limits=Limits(**limits))
        assert planning.plannable(policy), limits
    disk = SandboxPolicy(fs=FsPolicy(workspace=str(ws)), limits=Limits(disk_bytes=1 << 20))
    assert not planning.plannable(disk)


def test_values_from_the_callers_environment_stay_out_of_the_plan(ws: Path) -> None:
    secret = "s3cret-" + os.urandom(8).hex()
    session = session_for(ws, env={"TOKEN": secret})
    try:
        made = plan_of(session, caller_env=("TOKEN",))
    finally:
        session.close()
    assert made is not None
    assert secret.encode() not in planning.encode(made)
    assert planning.store("key", made)
    assert all(secret.encode() not in p.read_bytes() for p in plan_files())
    out, _err, ended = captured(made, ["/bin/sh", "-c", 'echo "$TOKEN"'], {"TOKEN": secret})
    assert out == secret.encode() + b"\n"
    assert ended is not None
    assert ended.exit_code == 0
    assert plan.launch(made, ["/bin/true"], {}) is None  # the value is gone: not planned


# ---------------------------------------------------------------------- running one


def test_a_planned_command_runs_in_the_sessions_jail(made: plan.Plan, ws: Path) -> None:
    out, err, ended = captured(
        made, ["/bin/sh", "-c", 'echo "$FOO $HOME"; touch made; cat /etc/shadow; exit 3']
    )
    assert out == f"bar {ws}\n".encode()
    assert b"/etc/shadow: No such file or directory" in err
    assert ended is not None  # it ran
    assert (ended.exit_code, ended.signal, ended.breach) == (3, None, None)
    assert (ws / "made").exists()
    assert not (ws / ".git").exists()  # the placeholder went with the command


def test_the_wall_clock_and_the_output_cap_hold(ws: Path) -> None:
    session = session_for(ws, wall_clock_ms=300, output_bytes=1024)
    try:
        made = plan_of(session)
    finally:
        session.close()
    assert made is not None
    out, _err, ended = captured(made, ["/bin/sh", "-c", "head -c 5000 /dev/zero"])
    assert len(out) == 1024 + len(
        b"\n[panday: stdout exceeded 1024 bytes; the rest was discarded]\n"
    )
    assert ended is not None
    assert ended.breach == ("output", "stdout exceeded limits.output_bytes=1024; truncated")
    _out, _err, ended = captured(made, ["/bin/sleep", "30"])
    assert ended is not None
    assert ended.breach is not None
    assert ended.breach[0] == "wall_clock"
    assert ended.signal == 9


def test_a_program_bwrap_cannot_start_is_a_setup_failure(made: plan.Plan) -> None:
    out, err, ended = captured(made, ["/no/such/program"])
    assert ended is None  # it never ran
    assert (out, err) == (b"", b"")  # bwrap's own line is held back, as the session's guard does


def test_launch_refuses_a_workspace_that_became_a_link(
    made: plan.Plan, ws: Path, tmp_path: Path
) -> None:
    assert plan.launch(made, ["/bin/true"], {}) is not None or pytest.fail("control")
    ws.rename(tmp_path / "real")
    ws.symlink_to(tmp_path / "real")
    assert plan.launch(made, ["/bin/true"], {}) is None


def test_launch_refuses_a_workspace_that_became_a_home(
    made: plan.Plan, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    control = plan.launch(made, ["/bin/true"], {})
    assert control is not None
    control.close()
    monkeypatch.setenv("HOME", str(ws))
    assert plan.launch(made, ["/bin/true"], {}) is None


def test_launch_refuses_a_protected_entry_that_became_a_link(
    made: plan.Plan, ws: Path, tmp_path: Path
) -> None:
    control = plan.launch(made, ["/bin/true"], {})
    assert control is not None
    control.close()
    (tmp_path / "hooks").mkdir()
    (ws / ".git").symlink_to(tmp_path / "hooks")
    assert plan.launch(made, ["/bin/true"], {}) is None


def _cgroups_here() -> bool:
    from panday_tier_linux.capabilities import probe_cgroups  # noqa: PLC0415

    return not probe_cgroups()


def test_a_planned_command_is_held_by_its_cgroup_ceilings(ws: Path) -> None:
    if not _cgroups_here():  # the session refuses the ceilings by name: nothing to plan
        with pytest.raises(PolicyViolation):
            session_for(ws, pids=16)
        return
    # cpu_ms is far above what the memory step costs even while the kernel reclaims before
    # its OOM kill (300 ms was crossed first once, under a parallel test run), and the wall
    # clock far above cpu_ms on a loaded host, so each step ends by its own ceiling.
    session = session_for(ws, pids=16, mem_bytes=64 << 20, cpu_ms=2000, wall_clock_ms=120_000)
    try:
        made = plan_of(session)
    finally:
        session.close()
    assert made is not None
    assert dict(made.explicit) == {"pids": 16, "mem_bytes": 64 << 20, "cpu_ms": 2000}
    assert made.held == tuple(sorted(made.explicit))  # the policy's own: nothing added
    out, _err, ended = captured(made, ["/bin/sh", "-c", "echo fine"])  # control
    assert ended is not None
    assert (out, ended.breach) == (b"fine\n", None)
    bomb = "for i in $(seq 40); do sleep 5 & done; wait"
    _out, _err, ended = captured(made, ["/bin/sh", "-c", bomb])
    assert ended is not None
    assert ended.breach is not None
    assert ended.breach[0] == "pids"
    # Touches 300 MB in a few milliseconds of CPU: the memory ceiling, not cpu_ms, ends it
    # (a shell filling a variable byte by byte crossed the CPU ceiling first under load).
    hog = "x = b'a' * (300 << 20); print(len(x))"
    _out, _err, ended = captured(made, ["/usr/bin/python3", "-c", hog])
    assert ended is not None
    assert ended.breach is not None
    assert ended.breach[0] == "memory"
    _out, _err, ended = captured(made, ["/bin/sh", "-c", "while :; do :; done"])
    assert ended is not None
    assert ended.breach is not None
    assert ended.breach[0] == "cpu"
    assert ended.signal == 9


# ---------------------------------------------------------------------- the host's protection

LIMITS_PROBE = ["/bin/sh", "-c", "grep -E '^Max (address space|processes)' /proc/self/limits"]


def _bounds_of_a_planned_jail(made: plan.Plan) -> tuple[dict[str, str], str]:
    """The planned jail's cgroup ceilings as the kernel holds them, and its rlimits as a
    process inside it reads them."""
    launched = plan.launch(made, LIMITS_PROBE, {})
    assert launched is not None
    held = {} if launched.sup.cgroup is None else launched.sup.cgroup.read_back()
    out: dict[str, bytes] = {"stdout": b"", "stderr": b""}

    def write(stream: str, data: bytes) -> None:
        out[stream] += data

    ended = plan.run(launched, made, write=write)
    assert ended is not None
    assert ended.exit_code == 0, out
    return held, out["stdout"].decode()


def _bounds_of_a_sessions_jail(session: LinuxSession) -> tuple[dict[str, str], str]:
    seen = session.enforcement()
    return dict(seen.cgroup_limits), session.run(LIMITS_PROBE).stdout.decode()


def test_a_planned_jail_is_bounded_as_the_sessions_jail(ws: Path) -> None:
    # The default policy sets no pid or memory ceiling: the host's protection applies, as a
    # cgroup's ceilings where this caller can write one, else as rlimits.
    session = session_for(ws)
    try:
        made = plan_of(session)
        theirs = _bounds_of_a_sessions_jail(session)
    finally:
        session.close()
    assert made is not None
    cgroup, rlimits = theirs
    if not cgroup and "unlimited" in rlimits.split("address space", 1)[1].split("\n", 1)[0]:
        pytest.fail(f"inconclusive: the session's jail is not bounded: {theirs}")
    planned = _bounds_of_a_planned_jail(made)
    assert planned == theirs
    if planned[0]:  # a cgroup: the kernel holds the host's protection ceilings themselves
        from panday_tier_linux import hostguard  # noqa: PLC0415 - the ceilings expected

        expected = hostguard.ceilings()
        assert planned[0].get("pids.max") == str(expected["pids"]), planned
        memory = planned[0].get("memory.max", planned[0].get("memory.limit_in_bytes"))
        assert memory == str(expected["mem_bytes"]), planned


def test_without_a_writable_cgroup_a_planned_jail_gets_the_sessions_rlimits(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from panday_tier_linux import cgroups, hostguard  # noqa: PLC0415 - this test's subject

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise cgroups.CgroupUnavailable("no cgroup in this test")

    monkeypatch.setattr(cgroups, "open_session", refuse)
    session = session_for(ws)
    try:
        made = plan_of(session)
        theirs = _bounds_of_a_sessions_jail(session)
    finally:
        session.close()
    assert made is not None
    assert made.held == ()  # no cgroup: the host's protection as rlimits (the jail blocks)
    memory = hostguard.ceilings()["mem_bytes"]
    # Control: the session's jail has the host's RLIMIT_AS.
    assert f"Max address space         {memory:<21}{memory:<21}bytes" in theirs[1], theirs
    assert _bounds_of_a_planned_jail(made) == theirs


def test_a_plan_is_used_only_where_its_bounds_are_what_a_session_would_get(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from panday_tier_linux import cgroups  # noqa: PLC0415 - this test's subject

    real = cgroups.open_session

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise cgroups.CgroupUnavailable("no cgroup in this test")

    session = session_for(ws)
    try:
        here = plan_of(session)
    finally:
        session.close()
    monkeypatch.setattr(cgroups, "open_session", refuse)
    session = session_for(ws)
    try:
        elsewhere = plan_of(session)
    finally:
        session.close()
    assert here is not None
    assert elsewhere is not None
    if not here.held:
        pytest.fail("inconclusive: no writable cgroup here, so both plans are the same")
    # Cgroups refused now: the plan made with them must not run with rlimits instead ...
    assert plan.launch(here, ["/bin/true"], {}) is None
    control = plan.launch(elsewhere, ["/bin/true"], {})
    assert control is not None
    control.close()
    # ... and with cgroups back, the plan made without them must not run with rlimits only.
    monkeypatch.setattr(cgroups, "open_session", real)
    assert plan.launch(elsewhere, ["/bin/true"], {}) is None
    control = plan.launch(here, ["/bin/true"], {})
    assert control is not None
    control.close()


def test_launch_refuses_a_workspace_the_jail_cannot_enter(
    made: plan.Plan, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from panday_core.process import spawn as real  # noqa: PLC0415 - what jail.start calls

    spawned: list[object] = []

    def spawn(*args: object, **kwargs: object) -> object:
        spawned.append(args)
        return real(*args, **kwargs)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType] - passed through

    monkeypatch.setattr(jail, "spawn", spawn)
    control = plan.launch(made, ["/bin/true"], {})
    assert control is not None
    control.close()
    assert len(spawned) == 1
    if os.geteuid() == 0:  # root without capabilities inside: another owner's 0700 is closed
        os.chown(ws, 65534, 65534)
    ws.chmod(0o700 if os.geteuid() == 0 else 0o600)
    try:
        # Refused before anything is spawned (bwrap would fail to enter it, later).
        assert plan.launch(made, ["/bin/true"], {}) is None
        assert len(spawned) == 1
    finally:
        ws.chmod(0o755)
        if os.geteuid() == 0:
            os.chown(ws, 0, 0)


def test_a_command_printing_bwraps_words_keeps_its_own_exit(made: plan.Plan) -> None:
    script = 'echo "bwrap: execvp nothing: No such file or directory" >&2; exit 125'
    out, err, ended = captured(made, ["/bin/sh", "-c", script])
    assert ended is not None  # its own exit, not a setup failure
    assert ended.exit_code == 125
    assert (out, err) == (b"", b"bwrap: execvp nothing: No such file or directory\n")


def test_the_model_defaults_and_unbounded_are_planned_as_the_session_applies_them(
    ws: Path,
) -> None:
    session = session_for(ws)  # nothing written: the model's defaults
    try:
        made = plan_of(session)
    finally:
        session.close()
    assert made is not None
    assert (made.output_bytes, made.wall_clock_ms) == (16 << 20, 600_000)
    session = session_for(ws, output_bytes="unbounded", wall_clock_ms="unbounded")
    try:
        made = plan_of(session)
    finally:
        session.close()
    assert made is not None
    assert (made.output_bytes, made.wall_clock_ms) == (None, None)
    assert plan.Plan.decode(planning.encode(made)) is not None
    out, _err, ended = captured(made, ["/bin/sh", "-c", "head -c 20000000 /dev/zero"])
    assert ended is not None
    assert (len(out), ended.breach) == (20_000_000, None)
