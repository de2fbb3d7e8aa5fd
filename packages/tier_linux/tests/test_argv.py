"""The argv builder is a pure function: what every jail gets, read straight off the list."""

from __future__ import annotations

import pytest

from panday_tier_linux.argv import (
    BRIDGE_DIR,
    HTTP_PORT,
    NAMESPACES,
    RELAY_IN_JAIL,
    SOCKET_IN_JAIL,
    SOCKS_PORT,
    JailSpec,
    RelaySpec,
    build_argv,
    build_options,
    jail_command,
    jail_env,
)
from panday_tier_linux.host import HostLayout

LAYOUT = HostLayout(
    top=(("bin", "link", "usr/bin"), ("lib", "link", "usr/lib"), ("lib64", "dir", "")),
    etc=(("passwd", "bind", ""), ("localtime", "link", "/usr/share/zoneinfo/UTC")),
)


def spec(
    *,
    workspace_rw: bool = True,
    env: dict[str, str] | None = None,
    tmp_bytes: int | None = None,
    relay: RelaySpec | None = None,
) -> JailSpec:
    return JailSpec(
        layout=LAYOUT,
        workspace="/work/ws",
        workspace_rw=workspace_rw,
        env=env,
        tmp_bytes=tmp_bytes,
        relay=relay,
    )


RELAY = RelaySpec(python="/usr/bin/python3", directory="/rt/panday-egress-1")
BIND_OPTIONS = ("--bind-fd", "--ro-bind-fd")


def workspace_binds(s: JailSpec) -> list[str]:
    """What binds.CommandBinds gives for a bare workspace (descriptor 7 in the child)."""
    return ["--bind-fd" if s.workspace_rw else "--ro-bind-fd", "7", s.workspace]


def argv(s: JailSpec | None = None, binds: list[str] | None = None) -> list[str]:
    s = s or spec()
    return build_argv(
        s,
        ["/bin/true"],
        bwrap="/usr/bin/bwrap",
        cwd="/work/ws",
        seccomp_fd=4,
        binds=workspace_binds(s) if binds is None else binds,
    )


def pairs(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


VARIANTS = [
    spec(),
    spec(workspace_rw=False),
    spec(tmp_bytes=1 << 20, workspace_rw=False),
    spec(env={"TOKEN": "x"}),
    spec(relay=RELAY),
]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_jail_gets_every_wall(variant: JailSpec) -> None:
    args = argv(variant)
    for flag in NAMESPACES:
        assert flag in args
    assert "--unshare-net" in args  # unconditional: no variant may omit it
    for flag in ("--disable-userns", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in args
    assert pairs(args, "--cap-drop") == ["ALL"]
    assert "--cap-add" not in args
    assert pairs(args, "--seccomp") == ["4"]
    sep = args.index("--")
    assert args[sep - 2 : sep] == ["--seccomp", "4"]
    assert args[sep + 1 :] == jail_command(variant, ["/bin/true"])
    assert args[-1] == "/bin/true"
    # The read-only remount of / comes after every bind, so it covers them all.
    binds = {"--bind", "--ro-bind", "--symlink", *BIND_OPTIONS}
    last_bind = max(i for i, a in enumerate(args) if a in binds)
    assert args.index("--remount-ro", last_bind) < args.index("--chdir")
    assert args[args.index("--remount-ro", last_bind) + 1] == "/"


def test_reads_are_an_allowlist() -> None:
    args = argv()
    sources = pairs(args, "--ro-bind") + pairs(args, "--bind")
    assert sorted(sources) == ["/etc/passwd", "/lib64", "/usr"]
    assert "/" not in sources
    assert "/etc" not in sources
    # The workspace is never bound by path: only from the session's held descriptor.
    assert pairs(args, "--bind") == []
    assert [args[i + 2] for i, a in enumerate(args) if a in BIND_OPTIONS] == ["/work/ws"]
    assert pairs(args, "--symlink")[:3] == ["usr/bin", "usr/lib", "/usr/share/zoneinfo/UTC"]
    assert pairs(args, "--proc") == ["/proc"]
    assert pairs(args, "--dev-bind") == ["/dev/null", "/dev/zero", "/dev/urandom"]
    assert "--dev" not in args
    assert "/tmp" in pairs(args, "--tmpfs")


def test_the_binds_come_after_tmp_and_before_the_read_only_remount() -> None:
    binds = ["--bind-fd", "7", "/work/ws", "--ro-bind-fd", "8", "/work/ws/.git"]
    args = argv(binds=binds)
    at = args.index("--bind-fd")
    assert args[at : at + 6] == binds
    assert args.index("/tmp") < at < args.index("--remount-ro", at)
    assert "--bind" not in args


def test_a_disk_ceiling_sizes_tmp_which_is_also_dev_shm() -> None:
    args = argv(spec(tmp_bytes=65536, workspace_rw=False))
    i = args.index("--size")
    assert args[i + 1 : i + 4] == ["65536", "--tmpfs", "/tmp"]
    assert pairs(args, "--tmpfs") == ["/tmp"]  # the only writable place but the workspace
    j = args.index("/dev/shm")
    assert args[j - 2 : j] == ["--symlink", "/tmp"]
    plain = argv()
    assert "--size" not in plain


def test_the_environment_starts_from_nothing() -> None:
    s = spec(env={"TOKEN": "secret", "PATH": "/opt/bin"})
    env = jail_env(s)
    assert env == {
        "PATH": "/opt/bin",
        "HOME": "/work/ws",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "TOKEN": "secret",
    }
    args = argv(s)
    assert args.index("--clearenv") < args.index("--setenv")


def test_the_status_descriptor_is_optional() -> None:
    opts = build_options(spec(), cwd="/work/ws", seccomp_fd=4, status_fd=5)
    assert pairs(opts, "--json-status-fd") == ["5"]
    plain = build_options(spec(), cwd="/work/ws", seccomp_fd=4)
    assert "--json-status-fd" not in plain
    # A jail waits for its seccomp filter, never on --block-fd: bwrap reads that
    # descriptor's end of file as "go" (`jail.start`).
    assert "--block-fd" not in opts


def test_an_etc_view_is_one_read_only_mount_at_etc() -> None:
    s = JailSpec(layout=LAYOUT, workspace="/work/ws", workspace_rw=True, etc_view="/cache/etc-1")
    args = argv(s)
    assert args[args.index("/cache/etc-1") - 1 : args.index("/cache/etc-1") + 2] == [
        "--ro-bind",
        "/cache/etc-1",
        "/etc",
    ]
    assert "/etc/passwd" not in args


def test_the_egress_bridge_keeps_the_namespace_and_adds_one_read_only_directory() -> None:
    plain, bridged = argv(), argv(spec(relay=RELAY))
    assert "--unshare-net" in bridged
    assert [a for a in bridged if a.startswith("--unshare")] == [
        a for a in plain if a.startswith("--unshare")
    ]
    binds = [(bridged[i + 1], bridged[i + 2]) for i, a in enumerate(bridged) if a == "--ro-bind"]
    assert ("/rt/panday-egress-1", BRIDGE_DIR) in binds
    assert len(binds) == len(pairs(plain, "--ro-bind")) + 1
    assert RELAY_IN_JAIL.startswith(BRIDGE_DIR + "/")
    assert SOCKET_IN_JAIL.startswith(BRIDGE_DIR + "/")
    assert not any(BRIDGE_DIR in a for a in plain)
    sep = bridged.index("--")
    assert bridged[sep + 1 :] == [
        "/usr/bin/python3",
        "-I",
        "-S",
        "-B",
        RELAY_IN_JAIL,
        str(HTTP_PORT),
        str(SOCKS_PORT),
        SOCKET_IN_JAIL,
        "--",
        "/bin/true",
    ]


def test_the_proxy_variables_win_over_the_policys() -> None:
    s = spec(env={"HTTP_PROXY": "http://elsewhere:1", "KEEP": "1"}, relay=RELAY)
    env = jail_env(s, {"HTTP_PROXY": "http://u:t@127.0.0.1:3128"})
    assert env["HTTP_PROXY"] == "http://u:t@127.0.0.1:3128"
    assert env["KEEP"] == "1"
    options = build_options(s, cwd="/work/ws", seccomp_fd=4, env={"HTTP_PROXY": "x"})
    assert "x" in pairs(options, "HTTP_PROXY")


def test_proc_files_describing_the_host_kernel_are_covered_after_proc_is_mounted() -> None:
    layout = HostLayout(top=LAYOUT.top, etc=LAYOUT.etc, proc=("keys", "cmdline"))
    s = JailSpec(layout=layout, workspace="/work/ws", workspace_rw=True)
    args = build_options(s, cwd="/work/ws", seccomp_fd=4)
    masks = [
        args[i + 2] for i in range(len(args) - 2) if args[i : i + 2] == ["--ro-bind", "/dev/null"]
    ]
    assert masks == ["/proc/keys", "/proc/cmdline"]
    assert args.index("--proc") < args.index("/proc/keys")  # on the jail's own procfs
    plain = build_options(spec(), cwd="/work/ws", seccomp_fd=4)  # control: no names, no binds
    assert "/dev/null" not in [plain[i + 1] for i, a in enumerate(plain) if a == "--ro-bind"]


def test_the_relay_is_told_its_report_descriptor() -> None:
    command = jail_command(spec(relay=RELAY), ["/bin/true"], report_fd=7)
    sep = command.index("--")
    assert command[sep - 1] == "7"
    assert command[sep - 2] == SOCKET_IN_JAIL
    assert command[sep + 1 :] == ["/bin/true"]


def test_the_whole_command_line_carries_the_descriptors_and_the_proxy_variables() -> None:
    args = build_argv(
        spec(),
        ["/bin/true"],
        bwrap="/usr/bin/bwrap",
        cwd="/work/ws",
        seccomp_fd=4,
        status_fd=5,
        env={"HTTP_PROXY": "http://127.0.0.1:3128"},
    )
    assert pairs(args, "--json-status-fd") == ["5"]
    assert pairs(args, "HTTP_PROXY") == ["http://127.0.0.1:3128"]


def test_proc_is_the_jails_own_and_read_only() -> None:
    # A root caller's jail is the host's uid 0 to procfs: a writable /proc would let it
    # write host-wide sysctls (the escape suite checks the kernel's answer).
    args = argv()
    start = args.index("--proc")
    assert args[start : start + 4] == ["--proc", "/proc", "--remount-ro", "/proc"]


def test_the_wall_comes_first_and_keeps_the_report_pipe_only_for_the_relay() -> None:
    walled = JailSpec(layout=LAYOUT, workspace="/work/ws", workspace_rw=True, wall=True)
    command = jail_command(walled, ["/bin/true"], report_fd=6, wall_fd=7)
    assert command == [
        "/proc/self/fd/7",
        *("6", "0", "7"),  # report, close it at exec (no relay follows), its own memfd
        *("/work/ws", "/tmp", "/dev/null", "/dev/zero", "/dev/urandom"),
        "--",
        "/bin/true",
    ]
    read_only = JailSpec(layout=LAYOUT, workspace="/work/ws", workspace_rw=False, wall=True)
    assert "/work/ws" not in jail_command(read_only, ["/bin/true"], report_fd=6, wall_fd=7)
    relayed = spec(relay=RELAY)
    relayed.wall = True
    chain = jail_command(relayed, ["/bin/true"], report_fd=6, wall_fd=7)
    assert chain[:4] == ["/proc/self/fd/7", "6", "1", "7"]  # the relay reports on it next
    assert chain[chain.index("--") + 1] == RELAY.python
    # Control: without the wall's memfd, the command line is the relay's alone.
    assert jail_command(relayed, ["/bin/true"], report_fd=6)[0] == RELAY.python
