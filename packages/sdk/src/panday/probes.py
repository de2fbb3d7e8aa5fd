"""`panday doctor --probe`: a fast subset of the escape suite, run on this host.

Each probe is a must-fail operation with a positive control: the same operation is first
done outside the sandbox, where it must work (otherwise the probe would prove nothing and
is reported *inconclusive*), then inside a session with the embedded default policy, where
it must be blocked (*pass*); if it works inside, the guarantee does not hold here (*fail*).
Everything the probes touch is their own: files in a fresh temporary directory, a TCP
listener on 127.0.0.1 that they open, a ``sleep`` they start; nothing else is contacted.
The full escape suites (packages/*/tests/escape) go much further; these are a smoke test
of the installed jail on the machine it will run on.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import tempfile
from typing import TYPE_CHECKING, Literal, NamedTuple

from panday.reports import ProbeOutcome

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from panday.session import Session

Verdict = Literal["pass", "fail", "inconclusive"]
_TIMEOUT_S = 20.0
_CANARY_ENV = "PANDAY_DOCTOR_CANARY"

# A probe prints exactly one of these; anything else is a broken probe (inconclusive).
_OK, _BLOCKED = "RESULT ok", "RESULT blocked"


def _sh(test: str) -> list[str]:
    """``/bin/sh -c`` printing RESULT ok when `test` (a shell condition) succeeds."""
    return ["/bin/sh", "-c", f'if {test}; then echo "{_OK}"; else echo "{_BLOCKED}"; fi', "sh"]


class Context:
    """What the probes share: a temporary tree, a loopback listener, a host process."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.workspace = os.path.join(base, "workspace")
        self.next_door = os.path.join(base, "next-door")
        os.mkdir(self.workspace)
        os.mkdir(self.next_door)
        self.secret = os.path.join(self.next_door, "secret")
        with open(self.secret, "w", encoding="ascii") as fh:
            fh.write(secrets.token_hex(8))
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.setblocking(False)  # noqa: FBT003 - socket's own API
        self.port: int = self.listener.getsockname()[1]
        self.sleeper: int | None = None

    def accepted(self) -> int:
        """Connections that reached the listener since the last call."""
        count = 0
        while True:
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1

    def close(self) -> None:
        self.listener.close()
        if self.sleeper is not None:
            import signal

            os.kill(self.sleeper, signal.SIGKILL)
            os.waitpid(self.sleeper, 0)
            self.sleeper = None
        shutil.rmtree(self.base, ignore_errors=True)


def _outside(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """Run `argv` on the host, unsandboxed (the control), through the same exec machinery."""
    from panday_core.execution import Supervisor, collect, spawn, stream

    proc = spawn(list(argv), env=dict(env or {"PATH": "/usr/bin:/bin"}))
    result = collect(stream(proc, Supervisor(), timeout_ms=int(_TIMEOUT_S * 1000)))
    return result.stdout.decode("utf-8", "replace")


def _inside(session: Session, argv: Sequence[str]) -> str:
    result = session.run(list(argv), timeout=_TIMEOUT_S)
    return result.stdout.decode("utf-8", "replace")


def judge(control: str, probe: str) -> tuple[Verdict, str]:
    """Judge one probe: `control` ran outside, `probe` inside (their stdout)."""
    if control.strip() != _OK:
        return "inconclusive", f"control failed outside the sandbox: {control.strip()!r}"
    if probe.strip() == _BLOCKED:
        return "pass", "works outside, blocked inside"
    if probe.strip() == _OK:
        return "fail", "works inside the sandbox too"
    return "inconclusive", f"the probe printed no verdict inside: {probe.strip()!r}"


def _secret_next_door(ctx: Context, session: Session) -> tuple[Verdict, str]:
    argv = _sh(f"cat '{ctx.secret}' >/dev/null 2>&1")
    return judge(_outside(argv), _inside(session, argv))


def _write_next_door(ctx: Context, session: Session) -> tuple[Verdict, str]:
    target = os.path.join(ctx.next_door, "written")
    argv = _sh(f"echo x > '{target}' 2>/dev/null")
    control = _outside(argv)
    if os.path.exists(target):
        os.unlink(target)
    outcome, detail = judge(control, _inside(session, argv))
    if outcome == "pass" and os.path.exists(target):
        return "fail", "the file appeared outside the workspace"
    return outcome, detail


def _etc_shadow(ctx: Context, session: Session) -> tuple[Verdict, str]:
    del ctx
    argv = _sh("test -e /etc/shadow")
    return judge(_outside(argv), _inside(session, argv))


def _host_loopback(ctx: Context, session: Session) -> tuple[Verdict, str]:
    bash = next((b for b in ("/bin/bash", "/usr/bin/bash") if os.access(b, os.X_OK)), None)
    if bash is None:
        return "inconclusive", "no bash on this host to open a TCP connection with"
    connect = f"{{ exec 3<>/dev/tcp/127.0.0.1/{ctx.port}; }} 2>/dev/null"
    argv = [bash, "-c", f'if {connect}; then echo "{_OK}"; else echo "{_BLOCKED}"; fi']
    control = _outside(argv)
    reached = ctx.accepted()
    if control.strip() == _OK and not reached:
        return "inconclusive", "the control connected, but the listener saw nothing"
    outcome, detail = judge(control, _inside(session, argv))
    if ctx.accepted():
        return "fail", f"the host listener on 127.0.0.1:{ctx.port} saw a connection from inside"
    return outcome, detail


def _host_process(ctx: Context, session: Session) -> tuple[Verdict, str]:
    from panday_core.execution import spawn

    sleeper = spawn(["/bin/sh", "-c", "exec sleep 60"], env={"PATH": "/usr/bin:/bin"})
    ctx.sleeper = sleeper.pid
    sleeper.close()
    argv = _sh(f"kill -0 {ctx.sleeper} 2>/dev/null")
    return judge(_outside(argv), _inside(session, argv))


def _environment(ctx: Context, session: Session) -> tuple[Verdict, str]:
    del ctx
    canary = secrets.token_hex(8)
    argv = _sh(f'[ "${{{_CANARY_ENV}:-}}" = {canary} ]')
    control = _outside(argv, {"PATH": "/usr/bin:/bin", _CANARY_ENV: canary})
    os.environ[_CANARY_ENV] = canary  # in panday's own environment while the probe runs
    try:
        probe = _inside(session, argv)
    finally:
        del os.environ[_CANARY_ENV]
    return judge(control, probe)


def _wall_clock(ctx: Context, session: Session) -> tuple[Verdict, str]:
    del ctx
    quick = session.run(["/bin/sh", "-c", f'sleep 0.01; echo "{_OK}"'], timeout=_TIMEOUT_S)
    if quick.exit_code != 0 or quick.stdout.decode().strip() != _OK:
        return "inconclusive", f"a quick command did not run to completion inside: {quick}"
    slow = session.run(["/bin/sh", "-c", "sleep 60 & sleep 60"], timeout=0.3)
    if slow.breach is None or slow.breach.kind.value != "wall_clock":
        return "fail", f"a command past its wall clock was not stopped: {slow}"
    if slow.wall_ms > 10_000:  # noqa: PLR2004 - far beyond the 300 ms ceiling
        return "fail", f"the wall clock took {slow.wall_ms:.0f} ms to end a 300 ms command"
    return "pass", f"ended after {slow.wall_ms:.0f} ms with a wall_clock breach"


class Probe(NamedTuple):
    name: str
    guarantee: str
    check: Callable[[Context, Session], tuple[Verdict, str]]


PROBES: tuple[Probe, ...] = (
    Probe(
        "read-next-to-workspace",
        "Reads are an allowlist",
        _secret_next_door,
    ),
    Probe(
        "write-next-to-workspace",
        "Writes only to the workspace",
        _write_next_door,
    ),
    Probe("etc-shadow", "No /etc/shadow inside", _etc_shadow),
    Probe(
        "host-loopback-tcp",
        "No network: no host loopback",
        _host_loopback,
    ),
    Probe(
        "host-process-signal",
        "Host processes cannot be signalled",
        _host_process,
    ),
    Probe(
        "environment-canary",
        "Nothing of the caller's environment is inherited",
        _environment,
    ),
    Probe(
        "wall-clock",
        "The wall clock ends the whole command",
        _wall_clock,
    ),
)


def run_probes(tier: str) -> Iterator[ProbeOutcome]:
    """Every probe that applies to `tier`, in order, as it finishes."""
    import panday
    from panday import tiers

    # realpath: on macOS the temp directory is spelt through the /var link, which no root
    # may pass through.
    ctx = Context(os.path.realpath(tempfile.mkdtemp(prefix="panday-doctor-")))
    try:
        with panday.open(panday.default_policy(ctx.workspace, {}), tier=tier) as session:
            claimed = tiers.entry(tier).probes
            for probe in PROBES:
                if probe.name not in claimed:
                    continue
                try:
                    verdict, detail = probe.check(ctx, session)
                except Exception as exc:  # noqa: BLE001 - a probe that breaks is reported, not fatal
                    verdict, detail = "inconclusive", f"{type(exc).__name__}: {exc}"
                yield ProbeOutcome(
                    name=probe.name, guarantee=probe.guarantee, verdict=verdict, detail=detail
                )
    finally:
        ctx.close()
