"""T1's Landlock binding and its rules as data: which rights each ABI handles, what a rule
on a file may carry, and the seccomp spec T1 uses (socket(2) denied, socketpair kept).

The kernel is asked only for its ABI (and a ruleset made and closed); what a ruleset
enforces is the escape suite's job (tests/escape/test_t1.py)."""

from __future__ import annotations

import os
import sys

import pytest

from panday_core.capabilities import Support
from panday_core.declared.t1_linux import capabilities, declared_capabilities
from panday_tier_linux import host, seccomp
from panday_tier_linux.t1 import doctor as t1doctor
from panday_tier_linux.t1 import landlock

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock is Linux's")


def test_each_abi_handles_every_right_it_knows() -> None:
    assert landlock.handled_fs(1) == (1 << 13) - 1
    assert landlock.handled_fs(2) == landlock.handled_fs(1) | landlock.REFER
    assert landlock.handled_fs(3) == landlock.handled_fs(2) | landlock.TRUNCATE
    assert landlock.handled_fs(4) == landlock.handled_fs(3)
    assert landlock.handled_fs(5) == landlock.handled_fs(3) | landlock.IOCTL_DEV
    assert landlock.handled_fs(7) == (1 << 16) - 1


def test_a_writable_place_never_gets_devices() -> None:
    granted = landlock.READ | landlock.WRITE
    assert not granted & (landlock.MAKE_CHAR | landlock.MAKE_BLOCK | landlock.IOCTL_DEV)


@linux
def test_this_kernel_has_an_abi_and_a_ruleset_can_be_made() -> None:
    abi = landlock.abi()
    if isinstance(abi, str):
        pytest.fail(f"inconclusive: no Landlock here: {abi}")
    ruleset = landlock.Ruleset(abi)
    try:
        assert ruleset.fs == landlock.handled_fs(abi)
        assert bool(ruleset.net) == (abi >= landlock.NET_ABI)
        assert bool(ruleset.scoped) == (abi >= landlock.SCOPE_ABI)
        # A file rule carries only file rights (the kernel refuses others: EINVAL).
        ruleset.allow_path("/dev/null", landlock.READ | landlock.WRITE)
        assert ruleset.allow_path("/usr", landlock.READ)
        assert not ruleset.allow_path("/nonexistent-panday-path", landlock.READ)
    finally:
        ruleset.close()


def test_t1_denies_socket_and_keeps_socketpair() -> None:
    spec = seccomp.FilterSpec(namespaces=False)
    assert "socket" in spec.denied
    assert "deny socket errno EPERM\n" in spec.text
    # socketpair(2) stays ruled by family: AF_UNIX only.
    pairs = [c for c in spec.conditional if c[0] == "socketpair"]
    assert pairs
    assert "socket" not in seccomp.FilterSpec().denied  # T2's filter is unchanged


def test_the_table_follows_the_abi() -> None:
    signal = "Host processes cannot be signalled"
    full = {g.name: g for g in declared_capabilities().guarantees}
    old = {g.name: g for g in capabilities(5).guarantees}
    assert full[signal].support is Support.STRICT
    assert old[signal].support is Support.NOT_ENFORCED
    assert "ABI 6" in old[signal].mechanism
    refused = {f.field for f in declared_capabilities().fields if f.support is Support.NOT_ENFORCED}
    assert {"net.allow", "limits.mem_bytes", "limits.pids", "limits.cpu_ms"} <= refused


def test_doctor_explains_t2_on_an_apparmor_restricted_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways forward: T1 now, or T2 with a profile naming the bwrap panday uses."""

    monkeypatch.setattr(host, "userns_restriction", lambda: t1doctor.APPARMOR)
    monkeypatch.setattr(host, "find_bwrap", lambda: host.Bwrap("/opt/wheel/bwrap", "wheel"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    text = t1doctor.t2_way_forward()
    assert text is not None
    assert "profile panday-bwrap /opt/wheel/bwrap" in text
    assert "userns" in text
