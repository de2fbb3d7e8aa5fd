"""The seccomp filter's rules, its compilation and its per-user cache."""

from __future__ import annotations

import os
import stat
import sys
from typing import TYPE_CHECKING

import pytest

from panday_core import userstate
from panday_tier_linux import host, seccomp

if TYPE_CHECKING:
    from pathlib import Path

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="libseccomp is Linux-only")


def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A password-file home of this test's own; its ``.cache`` (the state directory is
    ``<returned>/panday``, the programs are in ``<returned>/panday/seccomp``)."""
    home = tmp_path / "pwhome"
    (home / ".cache").mkdir(parents=True)
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(home))
    return home / ".cache"


def sealed(spec: seccomp.FilterSpec, program: bytes) -> bytes:
    """A cache entry for `spec` holding `program`, as panday itself writes one (the MAC
    under this user's key)."""
    secret = userstate.key(create=True)
    assert secret is not None
    return seccomp.seal(secret, spec.text.encode(), program)


# What issue 4 requires the filter to deny (beyond the namespace-flag, ioctl, personality
# and socket-family rules checked below).
REQUIRED = {
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "mount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
}


def test_the_required_syscalls_are_denied() -> None:
    spec = seccomp.FilterSpec()
    assert set(spec.denied) >= REQUIRED
    for line in (f"deny {name} errno EPERM" for name in REQUIRED):
        assert line in spec.text
    assert "clone3 errno ENOSYS" in spec.text.splitlines()
    assert "openat2 errno ENOSYS" in spec.text.splitlines()
    assert "badarch kill-process" in spec.text


def test_namespace_creation_is_denied_for_clone_and_unshare() -> None:
    spec = seccomp.FilterSpec()
    for call in ("clone", "unshare"):
        assert (
            call,
            0,
            "MASKED_EQ",
            seccomp.CLONE_NEWUSER,
            seccomp.CLONE_NEWUSER,
        ) in spec.conditional


def test_tiocsti_and_tioclinux_are_matched_on_the_low_32_bits() -> None:
    spec = seccomp.FilterSpec()
    assert ("ioctl", 1, "MASKED_EQ", 0xFFFFFFFF, seccomp.TIOCSTI) in spec.conditional
    assert ("ioctl", 1, "MASKED_EQ", 0xFFFFFFFF, seccomp.TIOCLINUX) in spec.conditional


def test_only_unix_sockets_by_default() -> None:
    rules = [r for r in seccomp.FilterSpec().conditional if r[0] == "socket"]
    assert rules == [("socket", 0, "LT", 1, 0), ("socket", 0, "GT", 1, 0)]


def test_more_socket_families_for_an_egress_relay() -> None:
    # Designed for the egress issue: a relay inside the jail's own network namespace
    # needs AF_INET/AF_INET6; every other family stays denied.
    fams = frozenset({1, 2, 10})
    rules = [r for r in seccomp.FilterSpec(socket_families=fams).conditional if r[0] == "socket"]
    denied = {v for _, _, op, v, _ in rules if op == "EQ"}
    assert denied == set(range(3, 10))
    assert ("socket", 0, "LT", 1, 0) in rules
    assert ("socket", 0, "GT", 10, 0) in rules
    with pytest.raises(ValueError, match="socket_families"):
        seccomp.FilterSpec(socket_families=frozenset())


@linux
def test_compiles_to_bpf() -> None:
    program = seccomp.compile_program(seccomp.FilterSpec())
    assert program
    assert len(program) % 8 == 0


@linux
def test_the_cache_is_used_only_when_it_is_ours_and_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path = own_cache(tmp_path, monkeypatch)
    spec = seccomp.FilterSpec()
    compiled = seccomp.program(spec)
    directory = tmp_path / "panday" / "seccomp"
    (entry,) = directory.iterdir()
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert seccomp.program(spec) == compiled
    # A tampered entry (same rules text, different program) written group-writable is
    # not trusted: it is recompiled and replaced.
    entry.write_bytes(sealed(spec, b"\0" * 8))
    entry.chmod(0o664)
    assert seccomp.program(spec) == compiled
    # A cache entry for other rules never serves these.
    entry.write_bytes(seccomp.seal(userstate.key(create=False) or b"", b"other rules\n", b"\0" * 8))
    entry.chmod(0o600)
    assert seccomp.program(spec) == compiled
    # A directory others can write is not used at all.
    directory.chmod(0o777)
    try:
        assert seccomp.program(spec) == compiled
    finally:
        directory.chmod(0o700)


@linux
def test_no_home_means_no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(userstate, "passwd_home", lambda: None)
    assert host.cache_dir() is None
    assert userstate.key(create=True) is None
    assert seccomp.program(seccomp.FilterSpec())


def test_inet_sockets_only_with_the_egress_bridge() -> None:
    assert seccomp.socket_families(bridge=False) == frozenset({seccomp.AF_UNIX})
    assert seccomp.socket_families(bridge=True) == frozenset(
        {seccomp.AF_UNIX, seccomp.AF_INET, seccomp.AF_INET6}
    )


# One BPF instruction: `ret SECCOMP_RET_ALLOW`, a filter that lets everything through.
ALLOW_EVERYTHING = (
    (0x06).to_bytes(2, sys.byteorder) + b"\0\0" + (0x7FFF0000).to_bytes(4, sys.byteorder)
)


@linux
def test_a_cache_entry_owned_by_another_user_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path = own_cache(tmp_path, monkeypatch)
    spec = seccomp.FilterSpec()
    compiled = seccomp.program(spec)
    (entry,) = (tmp_path / "panday" / "seccomp").iterdir()
    entry.write_bytes(sealed(spec, ALLOW_EVERYTHING))
    entry.chmod(0o600)
    # Control: an entry that is ours, private and matches the rules is served as it is (so
    # the forged program below would reach bwrap if ownership were not checked).
    if seccomp.program(spec) != ALLOW_EVERYTHING:
        pytest.fail("inconclusive: control failed, the cache did not serve our own entry")
    if os.geteuid() == 0:
        # The same entry, now owned by another user (what a file planted by someone who
        # could write into the directory would look like).
        os.chown(entry, 65534, 65534)
        assert seccomp.program(spec) == compiled
        assert entry.stat().st_uid == 0  # recompiled and replaced by our own
    else:
        # An unprivileged caller cannot give a file away; it checks the same entry as if
        # the cache belonged to another uid (the directory checks are done by `program`).
        real = os.geteuid()
        path = str(entry)
        read = seccomp._read_cache  # pyright: ignore[reportPrivateUsage] - the unit under test
        secret = userstate.key(create=False)
        assert secret is not None
        assert read(path, spec.text.encode(), secret) == ALLOW_EVERYTHING
        monkeypatch.setattr(os, "geteuid", lambda: real + 1)
        assert read(path, spec.text.encode(), secret) is None


@linux
def test_the_cache_is_private_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path = own_cache(tmp_path, monkeypatch)
    old = os.umask(0)
    try:
        compiled = seccomp.program(seccomp.FilterSpec())
    finally:
        os.umask(old)
    for directory in (tmp_path / "panday", tmp_path / "panday" / "seccomp"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    (entry,) = (tmp_path / "panday" / "seccomp").iterdir()  # cached, not refused
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert entry.read_bytes().endswith(compiled)


def _forge(directory: Path, spec: seccomp.FilterSpec, program: bytes = ALLOW_EVERYTHING) -> Path:
    """Replace the one cache entry in `directory` with `program` under the same rules text,
    sealed as panday seals its own (what reaches this user's key could write)."""
    (entry,) = directory.iterdir()
    entry.write_bytes(sealed(spec, program))
    entry.chmod(0o600)
    return entry


@linux
def test_a_forged_entry_in_a_directory_others_can_write_is_never_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path = own_cache(tmp_path, monkeypatch)
    spec = seccomp.FilterSpec()
    compiled = seccomp.program(spec)
    directory = tmp_path / "panday" / "seccomp"
    _forge(directory, spec)
    if seccomp.program(spec) != ALLOW_EVERYTHING:  # control: a private directory is trusted
        pytest.fail("inconclusive: control failed, the cache did not serve our own entry")
    for writable, mode in ((directory, 0o770), (directory, 0o702), (directory.parent, 0o777)):
        writable.chmod(mode)
        try:
            assert seccomp.program(spec) == compiled, (writable, oct(mode))
        finally:
            writable.chmod(0o700)
        _forge(directory, spec)
    # Traversable by others (o+x) but not writable: still private enough to be trusted.
    directory.chmod(0o711)
    assert seccomp.program(spec) == ALLOW_EVERYTHING


@linux
def test_a_symlinked_or_malformed_entry_is_recompiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path = own_cache(tmp_path, monkeypatch)
    spec = seccomp.FilterSpec()
    compiled = seccomp.program(spec)
    directory = tmp_path / "panday" / "seccomp"
    entry = _forge(directory, spec)
    # A symlink in place of the entry, to a forged file of ours: never followed.
    elsewhere = tmp_path / "forged.bpf"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    assert seccomp.program(spec) == compiled
    assert not entry.is_symlink()  # replaced by a fresh entry
    # A program that is not whole 8-byte instructions, or empty, is not served either.
    for bad in (ALLOW_EVERYTHING + b"\0\0\0\0", b""):
        _forge(directory, spec, bad)
        assert seccomp.program(spec) == compiled


@linux
def test_the_cache_lives_under_the_password_files_home_whatever_xdg_cache_home_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pwd  # noqa: PLC0415 - this test only

    expected = f"{pwd.getpwuid(os.geteuid()).pw_dir}/.cache/panday/seccomp"
    assert host.cache_dir() == expected
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert host.cache_dir() == expected
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.delenv("HOME")
    assert host.cache_dir() == expected


@linux
def test_an_entry_whose_mac_was_recomputed_without_the_key_is_recompiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attacker of issue 22 case 3: the entry rewritten with an allow-all program and
    every check a jail could recompute (the format, the text, a digest in the MAC's place)."""
    from _blake2 import blake2b  # noqa: PLC0415 - this test only

    cache = own_cache(tmp_path, monkeypatch)
    spec = seccomp.FilterSpec()
    compiled = seccomp.program(spec)
    directory = cache / "panday" / "seccomp"
    entry = _forge(directory, spec)
    if seccomp.program(spec) != ALLOW_EVERYTHING:  # control: a sealed entry is served
        pytest.fail("inconclusive: control failed, the cache did not serve a sealed entry")
    text = spec.text.encode()
    body = text + ALLOW_EVERYTHING
    forgeries = {
        "unkeyed digest": blake2b(body, digest_size=32).digest(),
        "another key": userstate.mac(os.urandom(32), userstate.SECCOMP, body),
        "the plan purpose": userstate.mac(userstate.key(create=False) or b"", userstate.PLAN, body),
    }
    for what, tag in forgeries.items():
        entry.write_bytes(seccomp.CACHE_MAGIC + tag + body)
        entry.chmod(0o600)
        assert seccomp.program(spec) == compiled, what
        assert entry.read_bytes() == sealed(spec, compiled), what  # rewritten by the miss
    # The old format (no MAC at all) and a sealed entry whose text or program was altered.
    for blob in (
        b"panday-seccomp-bpf 1\n" + body,
        sealed(spec, compiled)[:-8] + ALLOW_EVERYTHING,
        sealed(spec, compiled).replace(b"deny keyctl", b"deny keyctX"),
    ):
        entry.write_bytes(blob)
        entry.chmod(0o600)
        assert seccomp.program(spec) == compiled


@linux
def test_without_a_known_libseccomp_path_the_program_is_compiled_uncached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path = own_cache(tmp_path, monkeypatch)
    monkeypatch.setattr(seccomp, "library_identity", lambda: None)
    spec = seccomp.FilterSpec()
    assert seccomp.program(spec) == seccomp.compile_program(spec)
    assert not (tmp_path / "panday").exists()


@linux
def test_a_missing_libseccomp_makes_the_tier_unavailable_with_the_package_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from panday_core.errors import TierUnavailable  # noqa: PLC0415 - this test only

    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # `import pyseccomp` raises ImportError
    with pytest.raises(TierUnavailable) as info:
        seccomp.compile_program(seccomp.FilterSpec())
    assert info.value.tier == "t2-linux"
    assert "install libseccomp2 (Debian/Ubuntu) or libseccomp (Fedora/Arch)" in str(info.value)
    assert "will not run without its syscall filter" in str(info.value)


def test_socket_families_must_be_valid_address_families() -> None:
    assert seccomp.FilterSpec(socket_families=frozenset({0, 1})).text  # AF_UNSPEC is a family
    assert seccomp.FilterSpec(socket_families=frozenset({seccomp.AF_MAX - 1})).text
    bad_sets: list[set[int]] = [{seccomp.AF_MAX}, {-1}, set()]
    for bad in bad_sets:
        with pytest.raises(ValueError, match=r"must be within 0\.\.45"):
            seccomp.FilterSpec(socket_families=frozenset(bad))


@linux
def test_a_cache_directory_owned_by_another_user_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path = own_cache(tmp_path, monkeypatch)
    spec = seccomp.FilterSpec()
    compiled = seccomp.program(spec)
    directory = tmp_path / "panday" / "seccomp"
    entry = _forge(directory, spec)
    entry.chmod(0o601)  # executable by others, writable by nobody else: still trusted
    if seccomp.program(spec) != ALLOW_EVERYTHING:  # control
        pytest.fail("inconclusive: control failed, the cache did not serve our own entry")
    if os.geteuid() == 0:
        os.chown(directory, 65534, 65534)
        assert seccomp.program(spec) == compiled
    else:
        real = os.geteuid()
        safe = seccomp._safe_dir  # pyright: ignore[reportPrivateUsage] - the unit under test
        assert safe(str(directory))
        monkeypatch.setattr(os, "geteuid", lambda: real + 1)
        assert not safe(str(directory))
