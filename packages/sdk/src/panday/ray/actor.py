"""The node actor: one warm session on one node, judged by what it will do (a real jailed
``/bin/true`` at start and, with ``net.allow``, a jailed connect through the relay to a
canary on the node's loopback), and a command runner that reports failures as data."""

# Ray is an optional extra that the static gates' environment does not install; pyright
# checks this module against the stub in typings/ray instead of Ray's source.
# pyright: reportMissingModuleSource=false

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import threading
from collections import deque
from typing import TYPE_CHECKING

import msgspec

from panday.ray.errors import failure_of
from panday.ray.wire import (
    CANCELLED,
    CLOSED,
    NOT_STARTED,
    Call,
    Failure,
    Reply,
    Started,
    call_dec,
    encoder,
)
from panday_core.errors import PolicyViolation, SandboxError, TierUnavailable
from panday_core.process import proc_stat

if TYPE_CHECKING:
    from collections.abc import Sequence

    from panday.session import Session
    from panday_core.egress.audit import AuditEvent
    from panday_core.egress.thread import ProxySettings
    from panday_core.policy import SandboxPolicy

AUTO = "auto"
JUDGE_TIMEOUT_S = 20.0
"""How long the jailed judge commands may take (a healthy node needs milliseconds)."""
WORKSPACE_PREFIX = "panday-ray-"
_CANCELLED_KEPT = 1024
"""Cancellations remembered for calls not yet started (a bound; they arrive in order)."""


def _true() -> str:
    return next((p for p in ("/bin/true", "/usr/bin/true") if os.access(p, os.X_OK)), "/bin/true")


def judge_jail(session: Session) -> str | None:
    """Why a real jail of `session` cannot run a command here (None: it can)."""
    try:
        result = session.run([_true()], timeout=JUDGE_TIMEOUT_S)
    except SandboxError as exc:
        return f"a jailed /bin/true failed: {type(exc).__name__}: {exc}"
    except OSError as exc:
        return f"a jailed /bin/true could not be spawned: {type(exc).__name__}: {exc}"
    if result.exit_code != 0 or result.breach is not None:
        stderr = result.stderr[-300:].decode("utf-8", "replace").strip()
        return f"a jailed /bin/true exited {result.exit_code} ({result.breach}): {stderr!r}"
    return None


# The jail connects once straight to the canary (its own loopback: must fail) and once
# through the relay named in $HTTP_PROXY, asking the egress proxy for the canary (the proxy
# must answer, and must not connect to the node's loopback).
_EGRESS_SCRIPT = r"""
if { exec 3<>/dev/tcp/127.0.0.1/{port}; } 2>/dev/null; then echo DIRECT; exit 0; fi
p=${HTTP_PROXY#http://}; p=${p%/}; creds=; case $p in *@*) creds=${p%@*}; p=${p##*@};; esac
[ -n "$p" ] || { echo NOPROXY; exit 0; }
exec 4<>"/dev/tcp/${p%:*}/${p##*:}" || { echo NORELAY; exit 0; }
auth=; [ -n "$creds" ] && auth="Proxy-Authorization: Basic $(printf %s "$creds" | base64 -w0)\r\n"
printf "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\n${auth}Connection: close\r\n\r\n" >&4
head -c 12 <&4
"""


def judge_egress(session: Session) -> str | None:
    """Why the egress path (jail -> relay -> proxy) does not work here (None: it does)."""
    bash = next((b for b in ("/bin/bash", "/usr/bin/bash") if os.access(b, os.X_OK)), None)
    if bash is None:
        return "no bash on this node to judge the egress path with"
    canary = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        canary.bind(("127.0.0.1", 0))
        canary.listen(4)
        canary.setblocking(False)  # noqa: FBT003 - socket's own API
        port = str(canary.getsockname()[1])
        script = _EGRESS_SCRIPT.replace("{port}", port)
        try:
            result = session.run([bash, "-c", script], timeout=JUDGE_TIMEOUT_S)
        except (SandboxError, OSError) as exc:
            return f"the jailed egress canary failed: {type(exc).__name__}: {exc}"
        out = result.stdout.decode("utf-8", "replace").strip()
        try:
            canary.accept()[0].close()
        except BlockingIOError:
            pass
        else:
            return "the canary on the node's loopback was reached from the jail"
    finally:
        canary.close()
    if out == "DIRECT":
        return "the jail reached the node's loopback directly"
    if not out.startswith("HTTP/1."):
        return f"the jail got no answer from the egress proxy through its relay: {out[:80]!r}"
    return None


class NodeWorker:
    """One warm session on one node (a Ray actor; one command at a time).

    Created with the policy document, the tier the pool requires and the node it was
    pinned to; `start` judges the policy on this host by opening the session and running
    real jails in it, or says why it cannot. Never raises out of `start` or `run`: refusals
    and command errors come back as data, so a Ray-level error on the driver always means
    the worker itself was lost.
    """

    def __init__(self, policy: bytes, tier: str, node_id: str) -> None:
        self._policy = policy
        self._tier = tier
        self._node_id = node_id
        self._session: Session | None = None
        self._workdir: str | None = None
        # Commands run one at a time (the lock); `close` and `cancel` run beside a command
        # (the actor has threads more than the pool queues on it), so they can kill a jail.
        self._one = threading.Lock()
        # Held by `start` while it opens and judges: `close` waits for it, so a session (and
        # workspace) that `start` makes is never left behind by a close that came first.
        self._life = threading.Lock()
        self._closing = False
        self._broken: str | None = None  # a jail failed to start (why): nothing more is tried
        self._current: int | None = None
        self._cancelled: deque[int] = deque(maxlen=_CANCELLED_KEPT)
        # The session proxy's audit events, appended on its thread (deque: atomic ends).
        self._events: deque[AuditEvent] = deque()

    def start(self) -> bytes:  # noqa: PLR0911 - one refusal per way a start can end
        import ray  # noqa: PLC0415 - the actor runs under Ray, which is imported by then

        here = ray.get_runtime_context().get_node_id()
        pid, hostname, cpus = os.getpid(), socket.gethostname(), os.cpu_count() or 1

        def refuse(kind: str, refusals: Sequence[tuple[str, str]]) -> bytes:
            started = Started(here, pid, hostname, None, None, kind, tuple(refusals), cpus)
            return encoder.encode(started)

        # Hard node affinity puts the actor where it was asked; this checks it, because a
        # command must only ever run on the node whose host was judged.
        if here != self._node_id:
            return refuse("Misplaced", [("node", f"scheduled on {here}, not {self._node_id}")])
        with self._life:
            if self._closing:
                return refuse("NotStarted", [("node", "the pool closed before it was judged")])
            try:
                session = self._open()
            except PolicyViolation as exc:
                return refuse("PolicyViolation", [(v.field, v.reason) for v in exc.violations])
            except TierUnavailable as exc:
                return refuse("TierUnavailable", [("tier", f"{exc.tier}: {exc.reason}")])
            except (SandboxError, OSError, ValueError) as exc:
                return refuse("WorkerError", [("", f"{type(exc).__name__}: {exc}")])
            # Judged by what it will do: a session that opens may still be unable to start
            # a jail (user namespaces exhausted, a broken bwrap), so one must run here, now.
            failed = self._judge(session, egress=True)
            if failed is not None:
                self._close_session()
                field = "net.allow" if failed[0] == "egress" else "tier"
                return refuse("JailFailed", [(field, failed[1])])
            return encoder.encode(
                Started(here, pid, hostname, session.tier, session.id, None, (), cpus)
            )

    def _judge(self, session: Session, *, egress: bool) -> tuple[str, str] | None:
        failed = judge_jail(session)
        if failed is not None:
            return ("jail", failed)
        if egress and session.policy.net.allow:
            failed = judge_egress(session)
            if failed is not None:
                return ("egress", failed)
        return None

    def _open(self) -> Session:
        import panday  # noqa: PLC0415 - on the node, not at import
        from panday_core.policy import policy_from_dict  # noqa: PLC0415

        policy = policy_from_dict(msgspec.msgpack.decode(self._policy, type=dict[str, object]))
        if policy.fs.workspace is None:
            # Each session gets its own workspace on its node (the driver's directory means
            # nothing here); it is removed at close. One left by an actor that was killed
            # (its pid is gone) is removed by the next actor that starts on the host.
            reap_workspaces(tempfile.gettempdir())
            self._workdir = tempfile.mkdtemp(prefix=workspace_prefix())
            policy = policy.with_workspace(self._workdir)
        try:
            self._session = panday.open(policy, tier=self._tier, egress=self._egress(policy))
        except BaseException:
            self._remove_workdir()
            raise
        return self._session

    def _egress(self, policy: SandboxPolicy) -> ProxySettings | None:
        """An audit sink for the session's egress proxy, where the tier takes one (T2
        Linux); elsewhere the proxy still enforces the allowlist, unaudited here."""
        from panday import tiers  # noqa: PLC0415

        if not policy.net.allow or tiers.host_command_tier() != "t2-linux":
            return None
        if self._tier not in (AUTO, "t2-linux"):
            return None
        from panday_core.egress.thread import ProxySettings  # noqa: PLC0415 - net.allow only

        return ProxySettings(audit=self._events.append)

    def _drain(self) -> list[AuditEvent]:
        events: list[AuditEvent] = []
        while self._events:
            events.append(self._events.popleft())
        return events

    def run(self, call: bytes) -> bytes:
        c = call_dec.decode(call)
        with self._one:
            if c.call_id in self._cancelled:
                reply = Reply(None, {}, CANCELLED)
            else:
                self._current = c.call_id
                try:
                    reply = self._run(c)
                finally:
                    self._current = None
                if c.call_id in self._cancelled:  # killed by cancel, not finished
                    reply = Reply(None, {}, CANCELLED)
        return encoder.encode(msgspec.structs.replace(reply, events=self._drain()))

    def _run(self, c: Call) -> Reply:  # noqa: C901, PLR0911 - one reply per way a step ends
        session = self._session
        if session is None or self._closing or self._broken is not None:
            return Reply(None, {}, NOT_STARTED, broken=None if self._closing else self._broken)
        try:
            for path, data in c.files.items():
                session.put(path, data)
        except SandboxError as exc:
            return Reply(None, {}, CLOSED if self._closing else failure_of(exc))
        except (OSError, ValueError, TypeError) as exc:
            return self._internal(exc)
        try:
            result = session.run(c.argv, stdin=c.stdin, cwd=c.cwd, timeout=c.timeout)
        except TierUnavailable as exc:
            # The tier no longer starts jails here: the command did not run.
            fault = f"TierUnavailable: {exc.reason}"
            self._broken = fault
            return Reply(None, {}, CLOSED if self._closing else failure_of(exc), fault=fault)
        except SandboxError as exc:
            return Reply(None, {}, CLOSED if self._closing else failure_of(exc))
        except OSError as exc:
            # bubblewrap could not be spawned: the command did not run.
            fault = f"the jail could not be spawned: {type(exc).__name__}: {exc}"
            self._broken = fault
            return Reply(None, {}, CLOSED if self._closing else failure_of_os(exc), fault=fault)
        except (ValueError, TypeError) as exc:
            return self._internal(exc)
        try:
            files = {p: session.get(p, max_bytes=c.fetch_max) for p in c.fetch}
        except SandboxError as exc:
            return Reply(None, {}, CLOSED if self._closing else failure_of(exc))
        except (OSError, ValueError, TypeError) as exc:
            return self._internal(exc)
        if self._closing:
            # Killed by close, not finished: never passed off as the command's result.
            return Reply(None, {}, CLOSED)
        return Reply(result, files, None)

    def _internal(self, exc: Exception) -> Reply:
        failure = Failure("Internal", (f"{type(exc).__name__}: {exc}",))
        return Reply(None, {}, CLOSED if self._closing else failure)

    def cancel(self, call_id: int) -> bool:
        """Cancel call `call_id`: killed if it is running (its jail, by pid), never started
        if it is still queued here. True when a running jail was killed."""
        self._cancelled.append(call_id)
        if self._current == call_id:
            return kill_jails() > 0
        return False

    def probe(self) -> bytes:
        """The health probe: a real jailed ``/bin/true`` in the session, between commands
        (the reason it failed, or an empty string)."""
        with self._one:
            session = self._session
            if session is None or self._closing:
                return b""
            failed = self._judge(session, egress=False)
        return (failed[1] if failed else "").encode()

    def close(self) -> bytes:
        """Close the session; the proxy's audit events not yet sent back. Beside a `start`
        still judging, its jail is killed (the session closed) and the rest waits for
        `start` to end, so what it made is closed and removed here too."""
        self._closing = True
        self._close_session()
        with self._life:
            self._close_session()
        return encoder.encode(self._drain())

    def _close_session(self) -> None:
        session, self._session = self._session, None
        try:
            if session is not None:
                session.close()
        finally:
            self._remove_workdir()

    def _remove_workdir(self) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


def failure_of_os(exc: OSError) -> Failure:
    return Failure("TierUnavailable", ("jail", f"{type(exc).__name__}: {exc}"))


def kill_jails() -> int:
    """SIGKILL this process's bubblewrap children (the running command's jail; its pid 1
    dies with it, and the pid namespace with that), as the tier's own kill does. They are
    our unreaped children, so their pids are still ours to signal."""
    me, killed = os.getpid(), 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        comm = stat[stat.find("(") + 1 : stat.rfind(")")]
        fields = stat[stat.rfind(")") + 1 :].split()
        if comm == "bwrap" and len(fields) > 1 and fields[1] == str(me):
            try:
                os.kill(int(name), signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed += 1
    return killed


# A process's states in /proc after its exit: zombie (exited, not reaped) and dead.
_ENDED = ("Z", "X")


def _pid_namespace() -> str:
    """This process's pid namespace (its inode), "0" where there is no /proc."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _start_time(pid: int) -> str | None:
    """When `pid` started (clock ticks since boot, from /proc): with the pid, it names one
    process for as long as it lives. "" when there is no such process, or only its zombie:
    an actor whose raylet was killed is re-parented, and where the new parent does not reap
    (a container whose pid 1 is no init) it stays a zombie for good. It will never run
    again, and its jails died with it (bwrap's --die-with-parent fires at its exit). None
    when it cannot be read (no /proc, or hidden from us)."""
    found = proc_stat(pid)
    if found is not None:
        return "" if found[0] in _ENDED else found[1]
    return "" if os.path.isdir("/proc/self") and not os.path.lexists(f"/proc/{pid}") else None


def workspace_prefix() -> str:
    """``panday-ray-<pid>-<start time>-<pid namespace>-``: the actor process that owns a
    workspace, named so that another process with the same pid later (pids are reused),
    or one in another pid namespace sharing this /tmp (containers), is never taken for it."""
    pid = os.getpid()
    return f"{WORKSPACE_PREFIX}{pid}-{_start_time(pid) or 0}-{_pid_namespace()}-"


def reap_workspaces(base: str) -> None:
    """Remove the workspaces (`workspace_prefix`) whose actor process is gone: named in
    this pid namespace, for a pid that no process has now, or that a process which started
    at another time has now. A workspace named in another pid namespace is left alone (its
    pids mean nothing here), and so is one whose owner cannot be told (no /proc: judged by
    the pid alone, this process's own pid kept)."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    here = _pid_namespace()
    for name in names:
        parts = name.removeprefix(WORKSPACE_PREFIX).split("-", 3)
        if not name.startswith(WORKSPACE_PREFIX) or len(parts) != 4:  # noqa: PLR2004 - the four parts of `workspace_prefix` (and mkdtemp's)
            continue
        pid, start, namespace = parts[0], parts[1], parts[2]
        if not (pid.isdigit() and start.isdigit() and namespace == here):
            continue
        if start != "0" and here != "0":
            now = _start_time(int(pid))
            if now is not None and now != start:
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)
            continue
        if int(pid) == os.getpid():
            continue  # its own, or an earlier owner's of this pid: cannot be told apart
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        except PermissionError:
            continue  # alive, someone else's
