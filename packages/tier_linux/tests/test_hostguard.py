"""The host's own pid and memory bounds under a policy that sets none (hostguard.py).

Read back from a real jail: a cgroup's ceilings where this caller can write one, else the
rlimits every process of the jail inherits. The bombs themselves are in the escape suite
(tests/escape/test_limits.py), as root and as an unprivileged user.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from panday_core.capabilities import Support
from panday_core.declared.t2_linux import HOST_GUARD, host_guard
from panday_core.errors import PolicyViolation
from panday_core.policy import FsPolicy, Limits, SandboxPolicy
from panday_tier_linux import cgroups, hostguard
from panday_tier_linux.capabilities import host_capabilities
from panday_tier_linux.session import open_session

linux = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="T2 Linux runs on Linux only"
)


@linux
def test_the_bounds_follow_the_hosts_size() -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    mem_total = next(
        int(line.split()[1]) * 1024
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    bounds = hostguard.ceilings()
    assert bounds["pids"] == min(hostguard.PIDS, pid_max // 4)
    assert mem_total // 2 - (1 << 20) < bounds["mem_bytes"] <= mem_total // 2
    assert hostguard.running_tasks() > 1


def test_the_rlimits_are_planned_only_for_what_no_cgroup_and_no_policy_holds() -> None:
    nothing = hostguard.plan(set(), set())
    assert nothing.address_space
    assert nothing.tasks == (os.geteuid() != 0)  # root ignores RLIMIT_NPROC
    assert not hostguard.plan({"pids", "mem_bytes"}, set())
    assert not hostguard.plan(set(), {"pids", "mem_bytes"})
    only_memory = hostguard.plan(set(), {"pids"})
    assert only_memory.address_space
    assert not only_memory.tasks


@linux
def test_rlimits_are_lowered_soft_and_hard_on_a_running_process() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        before = Path(f"/proc/{child.pid}/limits").read_text()
        if "Max address space         unlimited" not in before:
            pytest.fail(f"inconclusive: control failed: {before}")
        done = hostguard.Rlimits(tasks=True, address_space=True).apply(child.pid)
        after = Path(f"/proc/{child.pid}/limits").read_text()
    finally:
        child.kill()
        child.wait()
    limit = done["RLIMIT_AS"]
    assert f"Max address space         {limit:<21}{limit:<21}bytes" in after
    tasks = done["RLIMIT_NPROC"]
    assert tasks >= hostguard.ceilings()["pids"]
    assert f"Max processes             {tasks:<21}{tasks:<21}processes" in after


def _policy(tmp_path: Path, **limits: int) -> SandboxPolicy:
    return SandboxPolicy(fs=FsPolicy(workspace=str(tmp_path)), limits=Limits(**limits))


@linux
def test_a_default_session_is_bounded_as_strongly_as_this_host_allows(tmp_path: Path) -> None:
    bounds = hostguard.ceilings()
    table = host_capabilities()
    row = next(g for g in table.guarantees if g.name == HOST_GUARD)
    with open_session(_policy(tmp_path)) as session:
        seen = session.enforcement()
    if row.support is Support.STRICT:  # a writable cgroup here (root on this host)
        assert seen.cgroup is not None
        pids = seen.cgroup_limits["pids.max"]
        memory = seen.cgroup_limits.get(
            "memory.max", seen.cgroup_limits.get("memory.limit_in_bytes")
        )
        assert (pids, memory) == (str(bounds["pids"]), str(bounds["mem_bytes"]))
        assert seen.rlimits["Max address space"] == "unlimited unlimited"
    else:  # rlimits, inherited by every process of the jail, and said to be partial
        assert row.support is Support.PARTIAL
        assert "per process" in row.note
        assert seen.rlimits["Max address space"] == f"{bounds['mem_bytes']} {bounds['mem_bytes']}"
        if os.geteuid() != 0:
            soft, hard = seen.rlimits["Max processes"].split()
            assert soft == hard
            assert int(soft) >= bounds["pids"]


@linux
def test_a_policys_own_ceilings_replace_the_hosts(tmp_path: Path) -> None:
    row = next(g for g in host_capabilities().guarantees if g.name == HOST_GUARD)
    asked = _policy(tmp_path, pids=77, mem_bytes=64 << 20)
    if row.support is not Support.STRICT:
        # Without a cgroup the host's bound is rlimits, but a policy's own ceiling is never
        # approximated with one: it is refused by name.
        with pytest.raises(PolicyViolation) as refused:
            open_session(asked)
        assert {v.field for v in refused.value.violations} == {"limits.pids", "limits.mem_bytes"}
        return
    with open_session(asked) as session:
        seen = session.enforcement()
    assert seen.cgroup_limits["pids.max"] == "77"


def test_the_guarantee_row_never_says_none() -> None:
    both = {"limits.pids": "no cgroup", "limits.mem_bytes": "no cgroup"}
    strict = host_guard({}, root=False)
    assert strict.support is Support.STRICT
    user = host_guard(both, root=False)
    assert user.support is Support.PARTIAL
    assert "RLIMIT_NPROC" in user.note
    assert "per process" in user.note
    root = host_guard(both, root=True)
    assert root.support is Support.PARTIAL
    assert "no pid bound" in root.note  # said, not silent


@linux
@pytest.mark.usefixtures("launch")
def test_without_a_writable_cgroup_the_jail_inherits_the_rlimits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Any caller (root included) on a host whose cgroups it cannot write: here made so by
    # refusing every cgroup, as an unprivileged user's v1 host does.
    bounds = hostguard.ceilings()
    probe = ["/bin/sh", "-c", "grep -E '^Max (address space|processes)' /proc/self/limits"]
    with open_session(_policy(tmp_path)) as session:
        control = session.run(probe).stdout.decode()
    if os.geteuid() == 0 and "Max address space         unlimited" not in control:
        pytest.fail(f"inconclusive: control failed: {control}")

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise cgroups.CgroupUnavailable("no cgroup in this test")

    monkeypatch.setattr(cgroups, "open_session", refuse)
    with open_session(_policy(tmp_path)) as session:
        assert session.cgroup is None
        seen = session.run(probe).stdout.decode()
    memory = bounds["mem_bytes"]
    assert f"Max address space         {memory:<21}{memory:<21}bytes" in seen, seen
    if os.geteuid() != 0:  # root ignores RLIMIT_NPROC, so it is not set for root
        assert "Max processes             unlimited" not in seen, seen
