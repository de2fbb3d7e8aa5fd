"""The bubblewrap command line, built by a pure function from a `JailSpec`.

Pure (no host inspection, no I/O) so tests can read exactly what the jail will be, and so
`available()` probes with the same builder `exec` uses. Host facts arrive in the spec's
`layout`.

What every jail gets, unconditionally (no code path omits any of these):

* new user, pid, ipc, uts, cgroup and **network** namespaces; no further user namespaces
  inside (``--disable-userns``);
* ``--die-with-parent`` (the jail dies with its caller), ``--new-session`` (no terminal to
  inject keystrokes into), ``--cap-drop ALL`` (also when the caller is root, whom bwrap
  would otherwise leave every capability inside the namespace);
* a read-only root holding only /usr, the top-level links into it, an allowlist of /etc,
  a fresh, read-only /proc for the new pid namespace, a minimal /dev (null, zero,
  urandom; /dev/shm is /tmp), a private /tmp, the workspace (rw or ro) and the staged
  paths (ro), bound from descriptors the session holds, with the protected entries of a
  writable workspace read-only over it (binds.py). Nothing else of the host exists inside;
* an environment built from nothing: a fixed small set plus the policy's ``env``.

With ``net.allow`` the jail is the same (``--unshare-net`` included) plus the egress bridge
(`RelaySpec`): the session's runtime directory (the relay program and the proxy's unix
socket) bound read-only at `BRIDGE_DIR`, the relay run in front of the command
(`jail_command`), and the proxy variables in the command's environment.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag without importing typing: a cached run builds options
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from panday_tier_linux.host import HostLayout

NAMESPACES = (
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup",
    "--unshare-net",
)
PROCESS = ("--disable-userns", "--die-with-parent", "--new-session", "--cap-drop", "ALL")
HOSTNAME = "panday"

# /dev is a directory of the read-only root holding three device nodes and links, not
# bwrap's --dev (a tmpfs, six device binds and a devpts instance): every mount costs
# start-up time, and inside a new session with no controlling terminal /dev/tty and
# pseudo-terminals have no use. /dev/shm points to /tmp, so POSIX shared memory works and
# counts against the one disk ceiling.
DEVICES = (
    *("--dev-bind", "/dev/null", "/dev/null"),
    *("--dev-bind", "/dev/zero", "/dev/zero"),
    *("--dev-bind", "/dev/urandom", "/dev/urandom"),
    *("--symlink", "urandom", "/dev/random"),
    *("--symlink", "/proc/self/fd", "/dev/fd"),
    *("--symlink", "/proc/self/fd/0", "/dev/stdin"),
    *("--symlink", "/proc/self/fd/1", "/dev/stdout"),
    *("--symlink", "/proc/self/fd/2", "/dev/stderr"),
    *("--symlink", "/tmp", "/dev/shm"),  # noqa: S108 - the jail's own /tmp and /dev/shm
)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"

BRIDGE_DIR = "/run/panday"
"""Where the egress bridge appears inside a jail (on its read-only root, nowhere else)."""
RELAY_IN_JAIL = f"{BRIDGE_DIR}/relay.py"
SOCKET_IN_JAIL = f"{BRIDGE_DIR}/egress.sock"
HTTP_PORT = 3128
"""The relay's HTTP proxy port on the jail's own 127.0.0.1 (the conventional one)."""
SOCKS_PORT = 1081
"""The relay's SOCKS5 port (1080 is below 1024, which a jail without capabilities cannot
bind)."""


class RelaySpec:
    """The egress bridge of a session with ``net.allow`` (see relay.py and bridge.py)."""

    __slots__ = ("directory", "python")

    def __init__(self, *, python: str, directory: str) -> None:
        self.python = python
        """The interpreter that runs the relay inside the jail (under /usr, which it shows)."""
        self.directory = directory
        """The session's runtime directory on the host, holding ``relay.py`` and the proxy's
        ``egress.sock``; bound read-only at `BRIDGE_DIR`. The directory, not the socket
        file: a jail still starts (and learns why it has no network) after the proxy died
        and its socket is gone."""


class JailSpec:
    """Everything that decides a session's jail (one per session; commands share it)."""

    __slots__ = (
        "env",
        "etc_view",
        "layout",
        "relay",
        "tmp_bytes",
        "wall",
        "workspace",
        "workspace_rw",
    )

    def __init__(
        self,
        *,
        layout: HostLayout,
        workspace: str,
        workspace_rw: bool,
        env: Mapping[str, str] | None = None,
        tmp_bytes: int | None = None,
        etc_view: str | None = None,
        relay: RelaySpec | None = None,
        wall: bool = False,
    ) -> None:
        self.layout = layout
        self.workspace = workspace
        """Where the workspace appears (its host path); HOME and the default cwd."""
        self.workspace_rw = workspace_rw
        self.env = dict(env or {})
        self.tmp_bytes = tmp_bytes
        """Size of /tmp (which /dev/shm points to) when the disk is limited."""
        self.etc_view = etc_view
        """A directory holding copies of the /etc allowlist (one mount instead of many)."""
        self.relay = relay
        """The egress bridge, for a session with ``net.allow``; None: no network at all."""
        self.wall = wall
        """Whether each command starts behind the Landlock wall (wall.py): True wherever
        the host has it (`wall.unavailable_reason`)."""

    @property
    def reports(self) -> bool:
        """Whether a program of ours runs in front of the command (the wall, the relay)
        and says on a report pipe whether it exec'd it (`jail.Start`)."""
        return self.wall or self.relay is not None


def jail_env(spec: JailSpec, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The command's whole environment: the fixed set, the policy's variables, then `extra`
    (the egress proxy's variables: a policy value for them could only point a tool at a
    route the jail does not have)."""
    env = {"PATH": DEFAULT_PATH, "HOME": spec.workspace, "LANG": "C.UTF-8", "TERM": "dumb"}
    env.update(spec.env)
    if extra:
        env.update(extra)
    return env


def jail_command(
    spec: JailSpec,
    command: Sequence[str],
    *,
    report_fd: int | None = None,
    wall_fd: int | None = None,
) -> list[str]:
    """What bwrap runs: `command`, behind the relay when the session has the bridge, and
    behind the Landlock wall (wall.py) first when `wall_fd` (the memfd holding it) is given.

    `report_fd` (the number the jail sees) is the pipe on which the wall and the relay say
    whether they exec'd what follows them (relay.py, wall_x86_64.S): how the session tells
    a command that never ran from one that printed the same words and exited 125 itself.
    The wall comes first, so the relay (and everything it forks) is behind it too."""
    words = list(command)
    if spec.relay is not None:
        ports = (str(HTTP_PORT), str(SOCKS_PORT))
        relay = [spec.relay.python, "-I", "-S", "-B", RELAY_IN_JAIL, *ports, SOCKET_IN_JAIL]
        if report_fd is not None:
            relay.append(str(report_fd))
        words = [*relay, "--", *words]
    if wall_fd is not None and report_fd is not None:
        from panday_tier_linux import wall

        workspace = spec.workspace if spec.workspace_rw else None
        words = [
            *wall.command(
                report_fd=report_fd,
                keep_report=spec.relay is not None,
                self_fd=wall_fd,
                writable=wall.writable(workspace),
            ),
            *words,
        ]
    return words


def filesystem_args(spec: JailSpec, binds: Sequence[str] = ()) -> list[str]:
    """The jail's file system: a read-only root of /usr, the /etc view, /proc, /dev, a
    private /tmp, then `binds` (the workspace, staged paths and protected entries, bound
    from descriptors the session holds; see binds.py), then the egress bridge."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name, kind, target in spec.layout.top:
        args += (
            ["--symlink", target, f"/{name}"]
            if kind == "link"
            else ["--ro-bind", f"/{name}", f"/{name}"]
        )
    if spec.etc_view is not None:
        args += ["--ro-bind", spec.etc_view, "/etc"]
    else:
        for name, kind, target in spec.layout.etc:
            path = f"/etc/{name}"
            args += ["--symlink", target, path] if kind == "link" else ["--ro-bind", path, path]
    # /proc read-only: a root caller's jail runs as the host's uid 0 (without capabilities),
    # and procfs checks sysctl writes against that uid alone, so a writable /proc would let
    # it rewrite host-wide settings such as kernel.core_pattern.
    args += ["--proc", "/proc", "--remount-ro", "/proc"]
    # Files that describe the host's kernel, not the jail (host.PROC_MASKED): empty and
    # read-only inside, also for a root caller's jail, whose uid 0 passes their 0400.
    for name in spec.layout.proc:
        args += ["--ro-bind", "/dev/null", f"/proc/{name}"]
    args += DEVICES
    if spec.tmp_bytes is not None:
        args += ["--size", str(spec.tmp_bytes)]
    args += ["--tmpfs", "/tmp"]  # noqa: S108 - the jail's own private /tmp
    args += binds
    if spec.relay is not None:
        # Read-only: connecting to a unix socket needs no write access to its mount.
        args += ["--ro-bind", spec.relay.directory, BRIDGE_DIR]
    args += ["--remount-ro", "/"]
    return args


def build_options(
    spec: JailSpec,
    *,
    cwd: str,
    seccomp_fd: int,
    status_fd: int | None = None,
    env: Mapping[str, str] | None = None,
    binds: Sequence[str] = (),
) -> list[str]:
    """bwrap's options for one command (descriptor numbers as the child will see them;
    `binds` from `binds.CommandBinds.options`).

    At exec they travel through ``--args FD`` rather than the command line, because
    /proc/<pid>/cmdline is readable by every user of the host and the options carry the
    policy's environment, which may hold secrets (and the proxy credentials in `env`).
    """
    args = [*NAMESPACES, *PROCESS, "--hostname", HOSTNAME]
    args += filesystem_args(spec, binds)
    args += ["--chdir", cwd, "--clearenv"]
    for name, value in jail_env(spec, env).items():
        args += ["--setenv", name, value]
    args += ["--seccomp", str(seccomp_fd)]
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    return args


def build_argv(
    spec: JailSpec,
    command: Sequence[str],
    *,
    bwrap: str,
    cwd: str,
    seccomp_fd: int,
    status_fd: int | None = None,
    env: Mapping[str, str] | None = None,
    binds: Sequence[str] = (),
) -> list[str]:
    """The whole bwrap command line for `command`, as one list (what tests inspect)."""
    options = build_options(
        spec,
        cwd=cwd,
        seccomp_fd=seccomp_fd,
        status_fd=status_fd,
        env=env,
        binds=binds,
    )
    return [bwrap, *options, "--", *jail_command(spec, command)]
