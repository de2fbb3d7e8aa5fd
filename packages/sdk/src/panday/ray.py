"""The same policy on a Ray cluster: a pool of actors, each holding a warm panday session on
its node, judged and refused per node (``pip install 'panday[ray]'``).

>>> import ray, panday.ray
>>> ray.init(address="auto")  # the cluster you already run
>>> with panday.ray.Pool({"limits": {"mem_bytes": 256 << 20}}) as pool:
...     result = pool.run(["echo", "hello"])
...     results = pool.map([["true"], ["false"]])
>>> result.stdout, [r.exit_code for r in results]
(b'hello\\n', [0, 1])
>>> pool.refused  # nodes that cannot enforce the policy, each with its reasons

Why it is shaped like this:

* **Fail closed per node.** Each actor opens its session with `panday.open` on its own node,
  so the node is judged by exactly the check a local session gets (the tier's host
  capability table, cgroups, bubblewrap, the egress bridge). A node that refuses is listed
  in `Pool.refused` with every field and reason, its actors are killed, and nothing is
  sent there. Actors are pinned to their node with a hard node-affinity strategy, and each
  one checks the node it landed on, so a command can only run where the policy was judged.
* **A named tier is never replaced.** ``tier="t2-linux"`` refuses on a node that cannot run
  T2 Linux; ``auto`` lets each node pick its own command tier (never T0, which runs no
  commands), and `Pool.nodes` says which it picked.
* **Faults are explicit.** A command whose actor or node died before it answered raises
  `WorkerLost` (in `map`, in its own position): the pool cannot know whether it ran, so it
  never reports it as done, and it runs it again elsewhere only when the caller marked it
  idempotent. Other commands are unaffected; the dead actor's slot leaves the pool.
* **Nothing is left behind.** `close` closes every session (jails killed, cgroups removed,
  egress proxies stopped, the per-node workspaces deleted) and then kills the actors.

Ray is imported here only, so ``import panday`` and the CLI never pay for it.
"""

# Ray is an optional extra that the static gates' environment does not install; pyright
# checks this module against the stub in typings/ray instead of Ray's source.
# pyright: reportMissingModuleSource=false

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Self

import msgspec

from panday._shared import DEFAULT_GET_BYTES, exec_spec
from panday_core.egress.audit import AuditEvent
from panday_core.errors import (
    CommandNotFound,
    Internal,
    LimitExceeded,
    PathRefused,
    PolicyViolation,
    SandboxError,
    TierUnavailable,
)
from panday_core.policy import policy_to_dict
from panday_core.types import ExecResult

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    from ray.actor import ActorHandle
    from ray.types import ObjectRef

    from panday.session import Session
    from panday_core.egress.thread import ProxySettings
    from panday_core.policy import SandboxPolicy

__all__ = [
    "BatchFailed",
    "ClusterRefused",
    "CommandRecord",
    "Done",
    "EgressRecord",
    "Job",
    "NodeReport",
    "Pool",
    "PoolClosed",
    "WorkerLost",
]

DEFAULT_START_TIMEOUT_S = 60.0
"""How long every actor has to reach its node and judge the policy there."""
DEFAULT_GRACE_S = 30.0
"""Beyond a command's own time limit, how long its answer may take before the actor is
taken for hung (killed, and the command reported lost)."""
_POLL_S = 1.0
AUTO = "auto"


# ------------------------------------------------------------------------------ errors


class WorkerLost(SandboxError):  # noqa: N818 - the name says what happened, like the others
    """The actor (or the whole node) running a command died before it answered.

    The command may or may not have run; its result is unknown, so it is never reported as
    done. It was retried elsewhere only if the caller marked it idempotent (`attempts` says
    how many times it was sent).
    """

    def __init__(self, argv: Sequence[str], node_id: str, reason: str, *, attempts: int) -> None:
        self.argv = tuple(argv)
        self.node_id = node_id
        self.reason = reason
        self.attempts = attempts
        super().__init__(
            f"{self.argv[0]!r}: its worker on node {node_id} was lost ({reason}); the result "
            f"is unknown (sent {attempts} time{'s' if attempts != 1 else ''})"
        )


class PoolClosed(SandboxError):  # noqa: N818 - a state, like the others
    """The pool was closed before the command finished (its jail was killed, not finished)."""


class ClusterRefused(SandboxError):  # noqa: N818 - a verdict, like PolicyViolation
    """No node can enforce the policy (or, with ``require_all``, some node cannot).

    `refused` holds every refusing node's report, with each refused field and reason.
    """

    def __init__(self, refused: Sequence[NodeReport], *, why: str) -> None:
        self.refused = tuple(refused)
        detail = "; ".join(f"node {r.node_id}: {r.summary()}" for r in self.refused)
        super().__init__(f"{why}: {detail}" if detail else why)


class BatchFailed(SandboxError):  # noqa: N818 - a verdict on the batch, not an error type
    """Some commands of a `Pool.map` failed; `outcomes` holds, in input order, each
    command's `ExecResult` or the error it raised (`errors` the failed positions)."""

    def __init__(self, outcomes: Sequence[ExecResult | SandboxError]) -> None:
        self.outcomes = tuple(outcomes)
        self.errors = {i: o for i, o in enumerate(self.outcomes) if isinstance(o, SandboxError)}
        first = min(self.errors)
        super().__init__(
            f"{len(self.errors)} of {len(self.outcomes)} commands failed; "
            f"the first (#{first}): {self.errors[first]}"
        )


# ------------------------------------------------------------------------- value types


@dataclass(frozen=True, kw_only=True)
class Job:
    """One command for the pool: what `Session.run` takes, plus files and a retry mark.

    `files` are written into the session's workspace before the command runs and `fetch`
    names workspace files read back after it; both travel through Ray's object store.
    `idempotent` allows the pool to run the command again on another worker when the one
    running it is lost.
    """

    argv: Sequence[str]
    stdin: bytes | str | None = None
    cwd: str | None = None
    timeout: float | None = None
    files: Mapping[str, bytes | str] = field(default_factory=dict[str, bytes | str])
    fetch: Sequence[str] = ()
    idempotent: bool = False


@dataclass(frozen=True, kw_only=True)
class Done:
    """A finished job: the command's `ExecResult`, the fetched files, and where it ran."""

    result: ExecResult
    files: Mapping[str, bytes]
    node_id: str
    attempts: int


class NodeReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one node said about the policy: accepted (with its tier) or refused (why)."""

    node_id: str
    address: str
    accepted: bool
    tier: str | None = None
    """The tier its sessions run on (accepted nodes)."""
    error: str | None = None
    """The refusal's kind: ``PolicyViolation``, ``TierUnavailable``, ``Misplaced``,
    ``NotStarted`` or ``WorkerError``."""
    refusals: tuple[tuple[str, str], ...] = ()
    """(dotted field, reason) for each thing the node cannot enforce."""
    slots: int = 0
    hostname: str = ""
    pids: tuple[int, ...] = ()
    """The actor processes on that node (for checks on the host)."""

    def summary(self) -> str:
        if self.accepted:
            return f"accepted ({self.tier}, {self.slots} slots)"
        reasons = "; ".join(f"{f}: {r}" for f, r in self.refusals)
        return f"refused ({self.error}): {reasons}"


class CommandRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The pool's audit record of one attempt of one command, with the node it ran on."""

    time: float
    node_id: str
    session_id: str
    argv: tuple[str, ...]
    outcome: Literal["completed", "error", "lost"]
    exit_code: int | None = None
    breach: str | None = None
    error: str | None = None
    wall_ms: float = 0.0
    attempt: int = 1


class EgressRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One request a node's egress proxy answered (`AuditEvent`), with that node's id."""

    node_id: str
    event: AuditEvent


# ----------------------------------------------------------------- the wire (msgpack)


class _Call(msgspec.Struct, frozen=True, array_like=True):
    argv: tuple[str, ...]
    stdin: bytes | None
    cwd: str | None
    timeout: float | None
    files: dict[str, bytes]
    fetch: tuple[str, ...]
    fetch_max: int


class _Failure(msgspec.Struct, frozen=True, array_like=True):
    kind: str
    args: tuple[str, ...]
    exit_code: int = 127


class _Reply(msgspec.Struct, frozen=True, array_like=True):
    result: ExecResult | None
    files: dict[str, bytes]
    failure: _Failure | None
    events: list[AuditEvent] = []


class _Started(msgspec.Struct, frozen=True, array_like=True):
    node_id: str
    pid: int
    hostname: str
    tier: str | None
    session_id: str | None
    error: str | None
    refusals: tuple[tuple[str, str], ...]


_call_enc = msgspec.msgpack.Encoder()
_call_dec = msgspec.msgpack.Decoder(_Call)
_reply_dec = msgspec.msgpack.Decoder(_Reply)
_events_dec = msgspec.msgpack.Decoder(list[AuditEvent])
_started_dec = msgspec.msgpack.Decoder(_Started)


_CLOSED = _Failure("Closed", ("the pool was closed before the command finished",))


def _failure_of(exc: SandboxError) -> _Failure:
    """An SDK error as data, so the driver raises the same type the local session would."""
    if isinstance(exc, CommandNotFound):
        return _Failure("CommandNotFound", (exc.program, exc.reason), exc.exit_code)
    if isinstance(exc, LimitExceeded):
        return _Failure("LimitExceeded", (exc.kind, exc.detail))
    if isinstance(exc, PathRefused):
        return _Failure("PathRefused", (exc.path, exc.reason))
    if isinstance(exc, TierUnavailable):
        return _Failure("TierUnavailable", (exc.tier, exc.reason))
    return _Failure(type(exc).__name__, (str(exc),))


_TWO_ARGS: dict[str, Callable[[str, str], SandboxError]] = {
    "LimitExceeded": LimitExceeded,
    "PathRefused": PathRefused,
    "TierUnavailable": TierUnavailable,
}
_ONE_ARG: dict[str, Callable[[str], SandboxError]] = {"Internal": Internal, "Closed": PoolClosed}


def _error_of(failure: _Failure) -> SandboxError:
    """The SDK error a `_Failure` stands for (`SandboxError` for any other kind)."""
    a = failure.args
    if failure.kind == "CommandNotFound":
        return CommandNotFound(a[0], a[1], exit_code=failure.exit_code)
    two = _TWO_ARGS.get(failure.kind)
    if two is not None:
        return two(a[0], a[1])
    return _ONE_ARG.get(failure.kind, SandboxError)(a[0])


# --------------------------------------------------------------------- the node actor


class NodeWorker:
    """One warm session on one node (a Ray actor; one command at a time).

    Created with the policy document, the tier the pool requires and the node it was
    pinned to; `start` judges the policy on this host and opens the session, or says why
    it cannot. Never raises out of `start` or `run`: refusals and command errors come back
    as data, so a Ray-level error on the driver always means the worker itself was lost.
    """

    def __init__(self, policy: bytes, tier: str, node_id: str) -> None:
        self._policy = policy
        self._tier = tier
        self._node_id = node_id
        self._session: Session | None = None
        self._workdir: str | None = None
        # Commands run one at a time (the lock); `close` runs beside a command (the actor
        # has a thread more than the pool queues on it), so it can kill the jail.
        self._one = threading.Lock()
        self._closing = False
        # The session proxy's audit events, appended on its thread (deque: atomic ends).
        self._events: deque[AuditEvent] = deque()

    def start(self) -> bytes:
        import ray  # noqa: PLC0415 - the actor runs under Ray, which is imported by then

        here = ray.get_runtime_context().get_node_id()
        pid, hostname = os.getpid(), socket.gethostname()

        def refuse(kind: str, refusals: Sequence[tuple[str, str]]) -> bytes:
            return _call_enc.encode(
                _Started(here, pid, hostname, None, None, kind, tuple(refusals))
            )

        # Hard node affinity puts the actor where it was asked; this checks it, because a
        # command must only ever run on the node whose host was judged.
        if here != self._node_id:
            return refuse("Misplaced", [("node", f"scheduled on {here}, not {self._node_id}")])
        try:
            session = self._open()
        except PolicyViolation as exc:
            return refuse("PolicyViolation", [(v.field, v.reason) for v in exc.violations])
        except TierUnavailable as exc:
            return refuse("TierUnavailable", [("tier", f"{exc.tier}: {exc.reason}")])
        except (SandboxError, OSError, ValueError) as exc:
            return refuse("WorkerError", [("", f"{type(exc).__name__}: {exc}")])
        started = _Started(here, pid, hostname, session.tier, session.id, None, ())
        return _call_enc.encode(started)

    def _open(self) -> Session:
        import panday  # noqa: PLC0415 - on the node, not at import
        from panday_core.policy import policy_from_dict  # noqa: PLC0415

        policy = policy_from_dict(msgspec.msgpack.decode(self._policy, type=dict[str, object]))
        if policy.fs.workspace is None:
            # Each session gets its own workspace on its node (the driver's directory means
            # nothing here); it is removed at close. One left by an actor that was killed
            # (its pid is gone) is removed by the next actor that starts on the host.
            _reap_workspaces(tempfile.gettempdir())
            self._workdir = tempfile.mkdtemp(prefix=f"{_WORKSPACE_PREFIX}{os.getpid()}-")
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
        with self._one:
            reply = self._run(_call_dec.decode(call))
        return _call_enc.encode(msgspec.structs.replace(reply, events=self._drain()))

    def _run(self, c: _Call) -> _Reply:
        session = self._session
        if session is None or self._closing:
            return _Reply(None, {}, _CLOSED)
        try:
            for path, data in c.files.items():
                session.put(path, data)
            result = session.run(c.argv, stdin=c.stdin, cwd=c.cwd, timeout=c.timeout)
            files = {p: session.get(p, max_bytes=c.fetch_max) for p in c.fetch}
        except SandboxError as exc:
            failure = _CLOSED if self._closing else _failure_of(exc)
            return _Reply(None, {}, failure)
        except (OSError, ValueError, TypeError) as exc:
            failure = _Failure("Internal", (f"{type(exc).__name__}: {exc}",))
            return _Reply(None, {}, _CLOSED if self._closing else failure)
        if self._closing:
            # Killed by close, not finished: never passed off as the command's result.
            return _Reply(None, {}, _CLOSED)
        return _Reply(result, files, None)

    def close(self) -> bytes:
        """Close the session; the proxy's audit events not yet sent back."""
        self._closing = True
        session, self._session = self._session, None
        try:
            if session is not None:
                session.close()
        finally:
            self._remove_workdir()
        return _call_enc.encode(self._drain())

    def _remove_workdir(self) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


_WORKSPACE_PREFIX = "panday-ray-"


def _reap_workspaces(base: str) -> None:
    """Remove ``panday-ray-<pid>-*`` workspaces whose actor process no longer exists."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        pid, _, rest = name.removeprefix(_WORKSPACE_PREFIX).partition("-")
        if not name.startswith(_WORKSPACE_PREFIX) or not pid.isdigit() or not rest:
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        except PermissionError:
            continue  # alive, someone else's


# ----------------------------------------------------------------------------- the pool


@dataclass
class _Slot:
    actor: ActorHandle
    node_id: str
    session_id: str = ""
    inflight: int = 0
    alive: bool = True


@dataclass
class _Task:
    index: int
    job: Job
    call: bytes
    deadline_s: float | None
    attempts: int = 0


class Pool:
    """Actors holding warm panday sessions, one policy, on every node that can enforce it.

    `policy` is what `panday.open` takes (None for the embedded default); a policy without
    ``fs.workspace`` gets a fresh workspace per session on its node, removed at close.
    `tier` is ``auto`` (each node's own command tier) or a tier every node must run.
    `nodes` limits the pool to those node ids (default: every live node with CPUs).
    `slots_per_node` is how many sessions each node holds (default: its CPU count); each
    takes `num_cpus` of the node's CPUs. `depth` is how many commands are queued on one
    actor at a time (2 hides the round trip; a queued command is lost with its actor).
    `require_all` refuses the whole pool when any node refuses. `retries` is how often an
    idempotent command is re-sent after losing its worker.

    Ray must be initialised (``ray.init(address=...)``) by the caller: the pool runs on the
    cluster the caller chose and never starts one itself.
    """

    def __init__(
        self,
        policy: SandboxPolicy | Mapping[str, object] | str | os.PathLike[str] | None = None,
        *,
        tier: str = "auto",
        nodes: Iterable[str] | None = None,
        slots_per_node: int | None = None,
        num_cpus: float = 1.0,
        depth: int = 2,
        require_all: bool = False,
        retries: int = 1,
        start_timeout: float = DEFAULT_START_TIMEOUT_S,
        grace: float = DEFAULT_GRACE_S,
    ) -> None:
        import ray  # noqa: PLC0415 - the optional engine, imported only by a pool

        from panday import tiers  # noqa: PLC0415

        if not ray.is_initialized():
            raise SandboxError(
                "panday.ray: Ray is not initialised; call ray.init(address=...) first "
                "(the pool never starts a cluster of its own)"
            )
        if tiers.check_name(tier) not in (AUTO, *tiers.COMMAND_TIERS):
            raise ValueError(f"tier: {tier!r} runs no commands; a pool needs a command tier")
        if depth < 1 or retries < 0 or num_cpus <= 0:
            raise ValueError("depth must be >= 1, retries >= 0 and num_cpus > 0")
        # Validated here, once, so a malformed policy is one PolicyError on the driver, not
        # one refusal per node. The workspace is left as given: each node resolves its own.
        self.policy = _policy_of(policy)
        self.tier = tier
        self.depth = depth
        self.retries = retries
        self.grace = grace
        self.closed = False
        self.nodes: dict[str, NodeReport] = {}
        """Accepted nodes: node id -> report (tier, slots, actor pids)."""
        self.refused: dict[str, NodeReport] = {}
        """Refusing nodes: node id -> report with every refused field and reason."""
        self.lost: dict[str, str] = {}
        """Actors lost since the pool started: node id -> the last reason."""
        self.records: list[CommandRecord] = []
        """Audit records, one per attempt, each with the node id."""
        self.egress: list[EgressRecord] = []
        """The egress proxies' audit events (T2 Linux nodes), each with its node id."""
        self._slots: list[_Slot] = []
        self._next = 0
        self._remote = ray.remote(NodeWorker)
        doc = msgspec.msgpack.encode(policy_to_dict(self.policy))
        try:
            self._start(doc, nodes, slots_per_node, num_cpus, start_timeout)
            self._check_verdicts(require_all=require_all)
        except BaseException:
            self.close()
            raise

    def _check_verdicts(self, *, require_all: bool) -> None:
        if not self.nodes:
            refused = list(self.refused.values())
            raise ClusterRefused(refused, why="no node can enforce this policy")
        if require_all and self.refused:
            refused = list(self.refused.values())
            raise ClusterRefused(refused, why="some nodes cannot enforce this policy")

    # -------------------------------------------------------------------- starting

    def _start(
        self,
        doc: bytes,
        only: Iterable[str] | None,
        slots_per_node: int | None,
        num_cpus: float,
        timeout: float,
    ) -> None:
        import ray  # noqa: PLC0415
        from ray.util.scheduling_strategies import (  # noqa: PLC0415
            NodeAffinitySchedulingStrategy,
        )

        wanted = set(only) if only is not None else None
        pending: dict[ObjectRef, _Slot] = {}
        addresses: dict[str, str] = {}
        for node in ray.nodes():
            node_id = str(node["NodeID"])
            if not node.get("Alive") or (wanted is not None and node_id not in wanted):
                continue
            cpus = float(node.get("Resources", {}).get("CPU", 0.0))
            count = slots_per_node if slots_per_node is not None else int(cpus // num_cpus)
            if count < 1:
                continue  # no CPU to give: not a refusal, just not a place for commands
            addresses[node_id] = str(node.get("NodeManagerAddress", ""))
            for _ in range(count):
                actor = self._remote.options(
                    num_cpus=num_cpus,
                    max_concurrency=self.depth + 1,  # + 1: close beside a command
                    max_restarts=0,
                    max_task_retries=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                ).remote(doc, self.tier, node_id)
                slot = _Slot(actor, node_id)
                self._slots.append(slot)
                pending[actor.start.remote()] = slot
        if wanted is not None and (missing := wanted - set(addresses)):
            for node_id in sorted(missing):
                why = "not a live node with CPUs in this cluster"
                self.refused[node_id] = NodeReport(
                    node_id=node_id,
                    address="",
                    accepted=False,
                    error="NotStarted",
                    refusals=(("node", why),),
                )
        started, failed = _await_starts(pending, timeout)
        self._judge_nodes(addresses, started, failed)

    def _judge_nodes(
        self,
        addresses: dict[str, str],
        started: dict[str, list[tuple[_Slot, _Started]]],
        failed: dict[str, tuple[str, str]],
    ) -> None:
        """Sort nodes into accepted and refused; the refused ones' actors go at once."""

        for node_id, address in addresses.items():
            reports = started.get(node_id, [])
            refusal = next((r for _, r in reports if r.error is not None), None)
            pids = tuple(r.pid for _, r in reports)
            hostname = reports[0][1].hostname if reports else ""
            if node_id in failed or refusal is not None:
                # One refusing actor refuses the node: the host is the same for all of them.
                kind, refusals = (
                    (refusal.error or "", refusal.refusals)
                    if refusal is not None
                    else (failed[node_id][0], (("node", failed[node_id][1]),))
                )
                self.refused[node_id] = NodeReport(
                    node_id=node_id,
                    address=address,
                    accepted=False,
                    error=kind,
                    refusals=refusals,
                    hostname=hostname,
                    pids=pids,
                )
                continue
            for slot, report in reports:
                slot.session_id = report.session_id or ""
            self.nodes[node_id] = NodeReport(
                node_id=node_id,
                address=address,
                accepted=True,
                tier=reports[0][1].tier,
                slots=len(reports),
                hostname=hostname,
                pids=pids,
            )
        # Nothing is ever sent to a refusing node: its actors go now, sessions or not.
        for slot in self._slots:
            if slot.node_id not in self.nodes:
                self._retire(slot, close=True)
        self._slots = [s for s in self._slots if s.alive]

    # ------------------------------------------------------------------- running

    def run(
        self,
        cmd: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        idempotent: bool = False,
    ) -> ExecResult:
        """Run one command on some accepted node; the same `ExecResult` a local session
        returns, or the same error it raises, or `WorkerLost`."""
        job = Job(argv=cmd, stdin=stdin, cwd=cwd, timeout=timeout, idempotent=idempotent)
        return self.run_job(job).result

    def run_job(self, job: Job) -> Done:
        """Run one `Job` (files in, files out); raises what `run` raises."""
        (outcome,) = self.map_jobs([job], return_exceptions=True)
        if isinstance(outcome, SandboxError):
            raise outcome
        return outcome

    def map(
        self,
        cmds: Iterable[Sequence[str]],
        *,
        timeout: float | None = None,
        idempotent: bool = False,
        return_exceptions: bool = False,
    ) -> list[ExecResult | SandboxError]:
        """Run every command, spread over the pool; results in input order.

        Every command finishes (or is lost) before this returns. With `return_exceptions`
        a failed command's error takes its place; otherwise `BatchFailed` is raised when
        any failed, holding every outcome.
        """
        jobs = [Job(argv=c, timeout=timeout, idempotent=idempotent) for c in cmds]
        outcomes = self.map_jobs(jobs, return_exceptions=True)
        flat: list[ExecResult | SandboxError] = [
            o if isinstance(o, SandboxError) else o.result for o in outcomes
        ]
        if not return_exceptions and any(isinstance(o, SandboxError) for o in flat):
            raise BatchFailed(flat)
        return flat

    def map_jobs(
        self, jobs: Iterable[Job], *, return_exceptions: bool = False
    ) -> list[Done | SandboxError]:
        """`map` for `Job`s: each outcome is a `Done` or the command's error."""
        if self.closed:
            raise SandboxError("the pool is closed")
        tasks = deque(self._task(i, job) for i, job in enumerate(jobs))
        outcomes: list[Done | SandboxError | None] = [None] * len(tasks)
        self._drive(tasks, outcomes)
        done = [o for o in outcomes if o is not None]
        if len(done) != len(outcomes):
            raise Internal("the pool lost track of a command")  # never reported as done
        if not return_exceptions and any(isinstance(o, SandboxError) for o in done):
            raise BatchFailed([o if isinstance(o, SandboxError) else o.result for o in done])
        return done

    def _task(self, index: int, job: Job) -> _Task:
        spec = exec_spec(job.argv, stdin=job.stdin, cwd=job.cwd, timeout=job.timeout)
        files = {p: d.encode() if isinstance(d, str) else d for p, d in job.files.items()}
        self._check_files(files)
        limits = self.policy.limits
        # The session's own `get` also holds each file to limits.output_bytes, as locally.
        fetch_max = DEFAULT_GET_BYTES
        call = _Call(
            spec.argv, spec.stdin, spec.cwd, job.timeout, files, tuple(job.fetch), fetch_max
        )
        budget = [v / 1000 for v in (spec.timeout_ms, limits.wall_clock_cap) if v is not None]
        deadline = min(budget) + self.grace if budget else None
        return _Task(index, job, _call_enc.encode(call), deadline)

    def _check_files(self, files: Mapping[str, bytes]) -> None:
        """Files in are bounded before anything is sent: each by what `get` would read back,
        all together by ``limits.disk_bytes`` when the policy sets it."""
        total = 0
        for path, data in files.items():
            if len(data) > DEFAULT_GET_BYTES:
                detail = f"file {path!r} is {len(data)} bytes, over {DEFAULT_GET_BYTES}"
                raise LimitExceeded("disk", detail)
            total += len(data)
        cap = self.policy.limits.disk_bytes
        if cap is not None and total > cap:
            detail = f"files in total {total} bytes, over limits.disk_bytes {cap}"
            raise LimitExceeded("disk", detail)

    def _drive(self, tasks: deque[_Task], outcomes: list[Done | SandboxError | None]) -> None:
        import ray  # noqa: PLC0415

        running: dict[ObjectRef, tuple[_Slot, _Task, float]] = {}
        while tasks or running:
            if self.closed:  # closed from another thread: nothing new is sent
                for task in tasks:
                    outcomes[task.index] = PoolClosed("the pool was closed before it ran")
                tasks.clear()
            while tasks:
                slot = self._free_slot()
                if slot is None:
                    break
                task = tasks.popleft()
                task.attempts += 1
                slot.inflight += 1
                running[slot.actor.run.remote(task.call)] = (slot, task, time.monotonic())
            if not running:
                for task in tasks:  # nowhere left to run them
                    outcomes[task.index] = (
                        PoolClosed("the pool was closed before it ran")
                        if self.closed
                        else self._lost(task, "", "no live worker is left")
                    )
                return
            ready, _ = ray.wait(list(running), num_returns=1, timeout=_POLL_S)
            for ref in ready:
                slot, task, _sent = running.pop(ref)
                slot.inflight -= 1
                self._finish(ref, slot, task, tasks, outcomes)
            self._reap_hung(running, tasks, outcomes)

    def _finish(
        self,
        ref: ObjectRef,
        slot: _Slot,
        task: _Task,
        tasks: deque[_Task],
        outcomes: list[Done | SandboxError | None],
    ) -> None:
        import ray  # noqa: PLC0415

        try:
            reply = _reply_dec.decode(ray.get(ref))
        except ray.exceptions.RayTaskError as exc:  # the worker raised: a bug, not a loss
            outcomes[task.index] = Internal(f"the node worker failed: {exc}")
            return
        except ray.exceptions.RayError as exc:
            self._lose(slot, task, _reason(exc), tasks, outcomes)
            return
        now = time.time()
        self.egress += [EgressRecord(node_id=slot.node_id, event=e) for e in reply.events]
        if reply.failure is not None:
            error = _error_of(reply.failure)
            self.records.append(
                CommandRecord(
                    time=now,
                    node_id=slot.node_id,
                    session_id=slot.session_id,
                    argv=tuple(task.job.argv),
                    outcome="error",
                    error=str(error),
                    attempt=task.attempts,
                )
            )
            outcomes[task.index] = error
            return
        result = reply.result
        if result is None:
            outcomes[task.index] = Internal("the node worker answered without a result")
            return
        self.records.append(
            CommandRecord(
                time=now,
                node_id=slot.node_id,
                session_id=slot.session_id,
                argv=tuple(task.job.argv),
                outcome="completed",
                exit_code=result.exit_code,
                breach=result.breach.kind.value if result.breach else None,
                wall_ms=result.wall_ms,
                attempt=task.attempts,
            )
        )
        outcomes[task.index] = Done(
            result=result, files=reply.files, node_id=slot.node_id, attempts=task.attempts
        )

    def _reap_hung(
        self,
        running: dict[ObjectRef, tuple[_Slot, _Task, float]],
        tasks: deque[_Task],
        outcomes: list[Done | SandboxError | None],
    ) -> None:
        """A command past its own time limit plus the grace has a hung worker: kill it."""
        now = time.monotonic()
        for ref, (slot, task, sent) in list(running.items()):
            # Commands queued on one actor wait for those ahead of them: up to `depth` budgets.
            if task.deadline_s is None or now - sent <= task.deadline_s * self.depth:
                continue
            self._retire(slot, close=False)
            running.pop(ref)
            self._lose(slot, task, "no answer within its time limit and the grace", tasks, outcomes)

    def _lose(
        self,
        slot: _Slot,
        task: _Task,
        reason: str,
        tasks: deque[_Task],
        outcomes: list[Done | SandboxError | None],
    ) -> None:
        self._retire(slot, close=False)
        if self.closed:  # the pool's own close killed it: not a lost worker
            outcomes[task.index] = PoolClosed("the pool was closed before the command finished")
            return
        self.lost[slot.node_id] = reason
        self.records.append(
            CommandRecord(
                time=time.time(),
                node_id=slot.node_id,
                session_id=slot.session_id,
                argv=tuple(task.job.argv),
                outcome="lost",
                error=reason,
                attempt=task.attempts,
            )
        )
        if task.job.idempotent and task.attempts <= self.retries:
            tasks.appendleft(task)  # sent again, to another live worker
            return
        outcomes[task.index] = self._lost(task, slot.node_id, reason)

    def _lost(self, task: _Task, node_id: str, reason: str) -> WorkerLost:
        return WorkerLost(task.job.argv, node_id or "(none)", reason, attempts=task.attempts)

    def _free_slot(self) -> _Slot | None:
        """The next live slot with room, round robin (None when every one is full)."""
        count = len(self._slots)
        for step in range(count):
            slot = self._slots[(self._next + step) % count]
            if slot.alive and slot.inflight < self.depth:
                self._next = (self._next + step + 1) % count
                return slot
        return None

    def _retire(self, slot: _Slot, *, close: bool) -> None:
        """Take a slot out of the pool for good; its actor is killed (a lost one may be
        only unreachable, and must not come back with a half-known state)."""
        import ray  # noqa: PLC0415

        if not slot.alive:
            return
        slot.alive = False
        if close:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(slot.actor.close.remote(), timeout=10)
        with contextlib.suppress(ray.exceptions.RayError, ValueError):
            ray.kill(slot.actor, no_restart=True)

    # ------------------------------------------------------------------- reports

    @property
    def slots(self) -> int:
        """Live sessions in the pool."""
        return sum(1 for s in self._slots if s.alive)

    def refusals(self) -> Iterator[tuple[str, str, str]]:
        """(node id, dotted field, reason) for every refusal of every refusing node."""
        for node_id, report in self.refused.items():
            for field_name, reason in report.refusals:
                yield node_id, field_name, reason

    # --------------------------------------------------------------------- closing

    def close(self) -> None:
        """Close every session (jails killed, cgroups and proxies gone, workspaces removed)
        and kill every actor. Idempotent."""
        import ray  # noqa: PLC0415

        if self.closed:
            return
        self.closed = True
        live = [s for s in self._slots if s.alive]
        closing = [s.actor.close.remote() for s in live]
        if closing:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.wait(closing, num_returns=len(closing), timeout=30)
            for slot, ref in zip(live, closing, strict=True):
                with contextlib.suppress(ray.exceptions.RayError, msgspec.ValidationError):
                    events = _events_dec.decode(ray.get(ref, timeout=0))
                    self.egress += [EgressRecord(node_id=slot.node_id, event=e) for e in events]
        for slot in live:
            self._retire(slot, close=False)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _await_starts(
    pending: dict[ObjectRef, _Slot], timeout: float
) -> tuple[dict[str, list[tuple[_Slot, _Started]]], dict[str, tuple[str, str]]]:
    """Every actor's verdict on its node, by node; and the nodes whose actors failed or did
    not answer within `timeout` (kind, reason)."""
    import ray  # noqa: PLC0415

    started: dict[str, list[tuple[_Slot, _Started]]] = {}
    failed: dict[str, tuple[str, str]] = {}
    deadline = time.monotonic() + timeout
    waiting = list(pending)
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=min(left, 1.0))
        for ref in ready:
            slot = pending[ref]
            try:
                report = _started_dec.decode(ray.get(ref))
            except ray.exceptions.RayError as exc:
                failed[slot.node_id] = ("WorkerError", f"the actor failed to start: {exc}")
                continue
            started.setdefault(slot.node_id, []).append((slot, report))
    for ref in waiting:
        slot = pending[ref]
        why = f"its actor did not start within {timeout:.0f} s"
        failed.setdefault(slot.node_id, ("NotStarted", why))
    return started, failed


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _policy_of(
    policy: SandboxPolicy | Mapping[str, object] | str | os.PathLike[str] | None,
) -> SandboxPolicy:
    """The validated policy with its workspace as given: unset, each node makes its own."""
    from panday_core.policy import SandboxPolicy  # noqa: PLC0415

    if policy is None:
        from panday.defaults import default_policy  # noqa: PLC0415

        default = default_policy()
        fs = msgspec.structs.replace(default.fs, workspace=None)
        return msgspec.structs.replace(default, fs=fs)
    if isinstance(policy, SandboxPolicy):
        return policy
    if isinstance(policy, str | os.PathLike):
        from panday_core.policy import load_policy  # noqa: PLC0415

        return load_policy(os.fspath(policy))
    from panday_core.policy import policy_from_dict  # noqa: PLC0415

    return policy_from_dict(policy)
