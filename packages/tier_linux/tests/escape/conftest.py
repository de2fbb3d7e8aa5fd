"""The T2 Linux escape suite's machinery.

Every probe is a must-fail operation with a positive control run first: the same
operation succeeding outside the jail (as this user), or inside a jail with the permission
granted (capabilities added, no seccomp filter) when the host itself would refuse it to an
unprivileged user. A failing control fails the test as inconclusive: a probe that cannot
succeed anywhere proves nothing about the jail.

Probes are small Python programs run with the system interpreter (/usr/bin/python3, the
same one inside and outside, since /usr is what the jail shows). They print exactly one
``RESULT ok ...`` (the operation worked) or ``RESULT blocked ...`` (it was refused) line;
anything else (a traceback, no output) is a broken probe and fails the test.

On Linux the suite fails, never skips, when the jail cannot run. It runs the same way as
root and as an unprivileged user; ceilings that need a cgroup the user cannot write are
then asserted to be refused by name (a refusal, counted and shown in the summary).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict, Unpack

import pytest

from panday_core.egress import AuditEvent, ProxySettings, StaticResolver
from panday_core.egress.testing import LoopbackOnly
from panday_core.execution import Supervisor, collect, spawn, stream
from panday_core.policy import FsPolicy, Limits, NetPolicy, SandboxPolicy
from panday_tier_linux.argv import build_options
from panday_tier_linux.probe import unavailable_reason
from panday_tier_linux.session import open_session

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from panday_core.types import ExecResult
    from panday_tier_linux.session import LinuxSession


class PolicyOptions(TypedDict, total=False):
    """What a probe may ask of the jail's policy (the rest stays at its default)."""

    workspace: Path
    access: Literal["rw", "ro"]
    staged: Sequence[Path]
    env: Mapping[str, str]
    cpu_ms: int
    mem_bytes: int
    pids: int
    disk_bytes: int
    wall_clock_ms: int
    output_bytes: int
    allow: Sequence[str]
    ports: Sequence[int]
    protect: Sequence[str]
    unprotect: Sequence[str]
    allow_home: bool
    writes: Literal["direct", "checked", "review"]


HERE = Path(__file__).resolve().parent
IS_LINUX = sys.platform.startswith("linux")
SYSTEM_PY = "/usr/bin/python3"
CANARY_ENV = "PANDAY_ESCAPE_CANARY"
SUID_HELPER_ENV = "PANDAY_ESCAPE_SUID_HELPER"

PRELUDE = """\
import ctypes, errno, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
def ok(detail=""):
    print("RESULT ok", detail, flush=True); sys.exit(0)
def blocked(detail=""):
    print("RESULT blocked", detail, flush=True); sys.exit(0)
def err(exc):
    return errno.errorcode.get(getattr(exc, "errno", None) or 0, repr(exc))
def sys_call(*args):
    r = libc.syscall(*[ctypes.c_long(a) for a in args])
    return r, ctypes.get_errno()
"""


# ---------------------------------------------------------------------- pytest hooks


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    del config
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.escape)
            if not IS_LINUX:
                item.add_marker(
                    pytest.mark.skip(
                        reason=f"T2 Linux escape suite needs Linux; this host is {sys.platform}"
                    )
                )


_COUNTS: dict[str, int] = {"passed": 0, "failed": 0, "skipped": 0, "refusals": 0, "held": 0}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if HERE not in Path(report.fspath).resolve().parents:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _COUNTS[report.outcome] = _COUNTS.get(report.outcome, 0) + 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not any(_COUNTS[k] for k in ("passed", "failed", "skipped")):
        return
    who = "root" if os.geteuid() == 0 else f"unprivileged uid {os.geteuid()}"
    terminalreporter.write_line(
        f"escape suite as {who}: {_COUNTS['passed']} probes passed, {_COUNTS['failed']} failed, "
        f"{_COUNTS['skipped']} skipped ({_COUNTS['held']} must-fail checks held, "
        f"{_COUNTS['refusals']} ceiling refusals asserted)"
    )


# ---------------------------------------------------------------------- outcomes


class Outcome:
    """What a probe reported: ok (the operation worked) or blocked, with the evidence."""

    def __init__(self, where: str, verdict: str | None, detail: str, raw: str) -> None:
        self.where = where
        self.verdict = verdict
        self.detail = detail
        self.raw = raw

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    @property
    def blocked(self) -> bool:
        return self.verdict == "blocked"

    def __repr__(self) -> str:
        return f"Outcome({self.where}: {self.verdict} {self.detail!r})"


def parse(where: str, stdout: bytes, stderr: bytes, code: int | None) -> Outcome:
    text = stdout.decode("utf-8", "replace")
    lines = [line for line in text.splitlines() if line.startswith("RESULT ")]
    raw = f"exit={code} stdout={text[-600:]!r} stderr={stderr.decode('utf-8', 'replace')[-600:]!r}"
    if len(lines) != 1:
        return Outcome(where, None, "no single RESULT line", raw)
    _, verdict, *rest = lines[0].split(" ", 2)
    return Outcome(where, verdict, rest[0] if rest else "", raw)


def control(outcome: Outcome) -> None:
    """The positive control must show the operation working; otherwise the probe proves
    nothing and the test fails as inconclusive."""
    if not outcome.ok:
        pytest.fail(
            f"inconclusive: control failed ({outcome.where}): "
            f"{outcome.verdict} {outcome.detail} {outcome.raw}"
        )


def must_block(outcome: Outcome) -> None:
    if outcome.verdict is None:
        pytest.fail(f"broken probe ({outcome.where}): {outcome.raw}")
    assert outcome.blocked, f"ESCAPE: {outcome.where} reported ok: {outcome.detail} {outcome.raw}"
    held()


def held() -> None:
    """Count one must-fail check that held (must_block does this itself)."""
    _COUNTS["held"] += 1


def count_refusal() -> None:
    _COUNTS["refusals"] += 1


# ---------------------------------------------------------------------- the jail


@pytest.fixture(scope="session", autouse=True)
def jail_usable() -> None:
    """On Linux, an unusable jail fails every test of the suite (it never skips)."""
    if not IS_LINUX:
        return
    reason = unavailable_reason()
    if reason is not None:
        pytest.fail(f"T2 Linux is unavailable on this Linux host: {reason}")
    if not os.access(SYSTEM_PY, os.X_OK):
        pytest.fail(f"the escape probes need {SYSTEM_PY} (install python3)")


def families_probe(names: Sequence[str]) -> str:
    """A probe that tries a socket in each family of `names`: ok (naming those it could
    create) or blocked (none)."""
    return f"""
made = []
for name in {tuple(names)!r}:
    family = getattr(socket, name, None)
    if family is None:
        continue
    try:
        socket.socket(family, socket.SOCK_DGRAM if name != "AF_PACKET" else socket.SOCK_RAW).close()
        made.append(name)
    except OSError:
        pass
if made:
    ok(",".join(made))
blocked("none of " + ",".join({tuple(names)!r}))
"""


class Escape:
    """One test's probe runner: a workspace, a place outside it, and the three ways to run."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ws = tmp / "ws"
        self.next_door = tmp / "next-door"
        for d in (self.ws, self.next_door):
            d.mkdir()
        self.root = os.geteuid() == 0
        # The egress proxy of sessions with an allowlist: names come from this table (no
        # real DNS), and its connector refuses anything off loopback, even with a guard gone.
        self.names: dict[str, list[str]] = {}
        self.connector = LoopbackOnly()
        self.events: list[AuditEvent] = []

    def egress(self) -> ProxySettings:
        return ProxySettings(
            resolver=StaticResolver(self.names), connector=self.connector, audit=self.events.append
        )

    # -- programs

    @staticmethod
    def py(code: str) -> list[str]:
        return [SYSTEM_PY, "-I", "-c", PRELUDE + code]

    # -- outside

    def outside_run(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        close_fds: bool = True,
    ) -> Outcome:
        proc = subprocess.run(  # noqa: PLW1510 - the outcome is parsed, not checked
            list(argv),
            capture_output=True,
            env=env if env is not None else {**os.environ},
            timeout=60,
            cwd=self.next_door,
            close_fds=close_fds,
        )
        return parse("outside", proc.stdout, proc.stderr, proc.returncode)

    def outside(self, code: str, *, close_fds: bool = True) -> Outcome:
        return self.outside_run(self.py(code), close_fds=close_fds)

    # -- inside

    def policy(self, **options: Unpack[PolicyOptions]) -> SandboxPolicy:
        limits = Limits(**{k: v for k, v in options.items() if k in Limits.__struct_fields__})  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType] - the TypedDict's int keys
        fs = FsPolicy(
            workspace=str(options.get("workspace", self.ws)),
            access=options.get("access", "rw"),
            staged_ro=tuple(str(p) for p in options.get("staged", ())),
            protect=tuple(options.get("protect", ())),
            unprotect=tuple(options.get("unprotect", ())),
            allow_home=options.get("allow_home", False),
            writes=options.get("writes", "direct"),
        )
        net = NetPolicy(
            allow=tuple(options.get("allow", ())), ports=tuple(options.get("ports", (80, 443)))
        )
        return SandboxPolicy(fs=fs, limits=limits, env=options.get("env", {}), net=net)

    def open(self, **options: Unpack[PolicyOptions]) -> LinuxSession:
        """A session of this policy (with an allowlist: served by this test's proxy)."""
        return open_session(self.policy(**options), egress=self.egress())

    def run(self, argv: Sequence[str], **options: Unpack[PolicyOptions]) -> ExecResult:
        with self.open(**options) as session:
            return session.run(list(argv), timeout_ms=120_000)

    def inside_run(self, argv: Sequence[str], **options: Unpack[PolicyOptions]) -> Outcome:
        result = self.run(argv, **options)
        return parse("inside the jail", result.stdout, result.stderr, result.exit_code)

    def inside(self, code: str, **options: Unpack[PolicyOptions]) -> Outcome:
        return self.inside_run(self.py(code), **options)

    # -- inside, with the permission granted

    def edited_run(
        self,
        argv: Sequence[str],
        *,
        edit: Callable[[list[str]], list[str]],
        seccomp: bool,
        where: str,
        **options: Unpack[PolicyOptions],
    ) -> Outcome:
        """Run `argv` in this policy's jail with its bwrap options edited (a control)."""
        with self.open(**options) as session, session.roots.command_binds() as binds:
            # Descriptors as the child sees them: 3 options, 4 seccomp, 5... the binds.
            bwrap_options = edit(
                build_options(
                    session.spec, cwd=session.workspace, seccomp_fd=4, binds=binds.options(5)
                )
            )
            if not seccomp:
                bwrap_options = remove_option(bwrap_options, "--seccomp", 1)
            fds: list[int] = []
            for data in (
                b"".join(o.encode() + b"\0" for o in bwrap_options),
                session.program if seccomp else b"",
            ):
                r, w = os.pipe()
                os.write(w, data)
                os.close(w)
                fds.append(r)
            try:
                proc = spawn(
                    [session.bwrap.path, "--args", "3", "--", *argv],
                    env={},
                    pass_fds=[*fds, *binds.fds],
                )
            finally:
                for fd in fds:
                    os.close(fd)
            result = collect(stream(proc, Supervisor(), timeout_ms=60_000))
        return parse(where, result.stdout, result.stderr, result.exit_code)

    def granted(self, code: str, **options: Unpack[PolicyOptions]) -> Outcome:
        """The jail with the walls an operation needs removed: capabilities kept, no
        seccomp filter, and the command left in the user namespace that owns the jail's
        mount and network namespaces (--disable-userns nests one more user namespace below
        it, from which even capabilities reach none of the jail's mounts or sockets).
        What the probe could do if exactly those walls were missing: the positive control
        for operations the host refuses to an unprivileged user."""

        def edit(args: list[str]) -> list[str]:
            args = remove_option(remove_option(args, "--cap-drop", 1), "--disable-userns", 0)
            return [*args, "--cap-add", "ALL"]

        return self.edited_run(
            self.py(code),
            edit=edit,
            seccomp=False,
            where="inside a jail with capabilities, no seccomp filter, no nested user namespace",
            **options,
        )

    def without(
        self, code: str, option: str, value: str, **options: Unpack[PolicyOptions]
    ) -> Outcome:
        """The jail minus one option (e.g. ``--remount-ro /``): the permission granted."""

        def edit(args: list[str]) -> list[str]:
            for i in range(len(args) - 1):
                if args[i] == option and args[i + 1] == value:
                    return args[:i] + args[i + 2 :]
            pytest.fail(f"the jail has no {option} {value}")

        return self.edited_run(
            self.py(code),
            edit=edit,
            seccomp=True,
            where=f"inside a jail without {option} {value}",
            **options,
        )

    def without_bind(self, code: str, dest: str, **options: Unpack[PolicyOptions]) -> Outcome:
        """The jail minus the bind at `dest` (a protected entry's read-only bind, a
        directory's pin): what the command could do if that one bind were missing."""

        def edit(args: list[str]) -> list[str]:
            for i in range(len(args) - 2):
                if args[i] in {"--ro-bind-fd", "--bind-fd"} and args[i + 2] == dest:
                    return args[:i] + args[i + 3 :]
            pytest.fail(f"the jail has no bind at {dest}")

        return self.edited_run(
            self.py(code),
            edit=edit,
            seccomp=True,
            where=f"inside a jail without its bind at {dest}",
            **options,
        )

    # -- verdicts (methods, so test modules need not import this conftest)

    parse = staticmethod(parse)
    control = staticmethod(control)
    must_block = staticmethod(must_block)
    count_refusal = staticmethod(count_refusal)
    held = staticmethod(held)
    families_probe = staticmethod(families_probe)

    def compile_c(self, name: str, source: str, *extra: str) -> Path:
        return compile_c(source, self.tmp / name, *extra)


def remove_option(options: list[str], name: str, nargs: int) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(options):
        if options[i] == name:
            i += 1 + nargs
        else:
            out.append(options[i])
            i += 1
    return out


@pytest.fixture
def esc(tmp_path: Path) -> Escape:
    # tmp_path is private (0700); the unprivileged run needs nothing else of the host.
    return Escape(tmp_path)


CHECKOUT_WAIT_S = 600.0


@pytest.fixture
def checkout_alone() -> Iterator[Path]:
    """The checkout these tests run from, for a test that opens a session on it as the
    workspace, held against every other such test (an exclusive `flock` on the checkout's
    own directory, so pytest-xdist workers and falsify's baseline chunks wait for each
    other; a scratch copy is another directory and another lock).

    While a jail runs, each missing protected name of its workspace (`uv.toml`,
    `.python-version`, ...) is an empty placeholder on the host, the mount point of its
    read-only bind. A test that checks that a name is still missing after its own jail
    saw, at load 10, the placeholder of another test's jail running there at that moment.
    """
    checkout = HERE.parents[3]
    fd = os.open(checkout, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + CHECKOUT_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"inconclusive: {checkout} stayed in use for {CHECKOUT_WAIT_S} s")
                time.sleep(0.05)
        yield checkout
    finally:
        os.close(fd)  # and with it the lock


# ---------------------------------------------------------------------- host services


@pytest.fixture
def host_sleeper(esc: Escape) -> Iterator[tuple[int, str]]:
    """A process outside the jail (same uid) with a canary in its environment."""
    canary = f"sleeper-canary-{os.urandom(4).hex()}"
    env = {"PATH": "/usr/bin:/bin", CANARY_ENV: canary}
    proc = subprocess.Popen(["sleep", "300"], env=env, cwd=esc.next_door)
    try:
        yield proc.pid, canary
    finally:
        proc.kill()
        proc.wait()


class Listener:
    """A server on the host's loopback (or a unix socket) that records what reaches it."""

    def __init__(self, sock: socket.socket, address: object, *, datagram: bool) -> None:
        self.sock = sock
        self.address = address
        self.datagram = datagram
        self.received: list[bytes] = []
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                if self.datagram:
                    data, _ = self.sock.recvfrom(65536)
                    self.received.append(data)
                else:
                    conn, _ = self.sock.accept()
                    self.accepted += 1
                    conn.close()
            except (TimeoutError, OSError):
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()

    def settle(self) -> None:
        time.sleep(0.3)  # datagrams and connections in flight reach the serving thread


@pytest.fixture
def listen(esc: Escape) -> Iterator[Callable[[str], Listener]]:
    made: list[Listener] = []

    def make(kind: str) -> Listener:
        if kind in {"tcp4", "tcp6", "udp4", "udp6"}:
            family = socket.AF_INET if kind.endswith("4") else socket.AF_INET6
            stype = socket.SOCK_STREAM if kind.startswith("tcp") else socket.SOCK_DGRAM
            sock = socket.socket(family, stype)
            sock.bind(("127.0.0.1" if family == socket.AF_INET else "::1", 0))
            address: object = sock.getsockname()[:2]
        elif kind == "abstract":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address = f"\0panday-escape-{os.getpid()}-{os.urandom(4).hex()}"
            sock.bind(address)
        elif kind == "path":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address = str(esc.next_door / "host.sock")
            sock.bind(address)
        else:
            raise ValueError(kind)
        datagram = kind.startswith("udp")
        if not datagram:
            sock.listen(64)
        listener = Listener(sock, address, datagram=datagram)
        made.append(listener)
        return listener

    yield make
    for listener in made:
        listener.close()


# ---------------------------------------------------------------------- compiled probes


def compile_c(source: str, out: Path, *extra: str) -> Path:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.fail("inconclusive: this probe needs a C compiler (gcc); CI installs it")
    src = out.with_suffix(".c")
    src.write_text(source, encoding="utf-8")
    proc = subprocess.run(
        [gcc, "-O1", "-o", str(out), str(src), *extra], capture_output=True, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"inconclusive: compiling {src.name} failed: {proc.stderr.decode()[-800:]}")
    return out
