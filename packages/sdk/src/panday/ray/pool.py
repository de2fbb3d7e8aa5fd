# Over 500 lines: queue, running commands, futures and fault rules share one lock and thread.
"""`Pool`: actors holding warm panday sessions, one policy, on every node that can enforce
it; commands submitted from any thread (futures), a dispatcher thread that routes replies,
retires failing nodes, admits late ones and probes health, all within fixed bounds."""

# Ray is an optional extra that the static gates' environment does not install; pyright
# checks this module against the stub in typings/ray instead of Ray's source.
# pyright: reportMissingModuleSource=false

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import os
import queue
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Self, TypeVar

import msgspec

from panday._shared import DEFAULT_GET_BYTES, exec_spec
from panday.ray.actor import AUTO, NodeWorker
from panday.ray.errors import BatchFailed, ClusterRefused, PoolClosed, WorkerLost, error_of
from panday.ray.nodes import CLOSE_WAIT_S, Members, Options, Slot
from panday.ray.wire import (
    Call,
    CommandRecord,
    Done,
    EgressRecord,
    Job,
    encoder,
    events_dec,
    reply_dec,
)
from panday_core.errors import Internal, LimitExceeded, SandboxError
from panday_core.policy import policy_to_dict

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    from ray.types import ObjectRef

    from panday.ray.nodes import Retired
    from panday.ray.wire import NodeReport, PoolEvent
    from panday_core.policy import SandboxPolicy
    from panday_core.types import ExecResult

T = TypeVar("T")

DEFAULT_START_TIMEOUT_S = 60.0
"""How long every actor has to reach its node and judge the policy there."""
DEFAULT_GRACE_S = 30.0
"""Beyond a command's own time limit, how long its answer may take before the actor is
taken for hung (killed, and the command reported lost)."""
_TICK_S = 0.25
"""The dispatcher's housekeeping period (verdicts, closing actors, hung commands)."""
_MAX_BOUNCES = 16
"""How often a command that never started is sent elsewhere before it fails NotStarted."""


class PoolFuture(concurrent.futures.Future[T], Generic[T]):
    """A command's future. `cancel` works while it runs, too: the pool then kills its jail
    (the future is cancelled at once; the record says ``cancelled``)."""


@dataclass(eq=False)
class _Task:
    job: Job
    call_id: int
    call: bytes
    deadline_s: float | None
    future: PoolFuture[Done] | PoolFuture[ExecResult]
    unwrap: bool
    attempts: int = 0
    bounces: int = 0
    """Sends that came back never started (a broken or retired actor): not a lost worker."""
    slot: Slot | None = None
    sent: float = 0.0


class Pool:
    """Actors holding warm panday sessions, one policy, on every node that can enforce it.

    `policy` is what `panday.open` takes (None for the embedded default); a policy without
    ``fs.workspace`` gets a fresh workspace per session on its node, removed at close.
    `tier` is ``auto`` (each node's own command tier) or a tier every node must run.
    `nodes` limits the pool to those node ids (default: every live node with CPUs, and
    nodes that join later). `slots_per_node` is how many sessions each node holds (default:
    its CPU count); each takes `num_cpus` of the node's CPUs. `depth` is how many commands
    are queued on one actor at a time (default: from the node's CPUs, `nodes.depth_for`; a
    queued command is lost with its actor). `require_all` refuses the whole pool when any
    node refuses at start. `retries` is how often an idempotent command is re-sent after
    losing its worker.

    Health: a node whose jail fails to spawn, or whose tier becomes unavailable, is
    retired at once (its queued idempotent commands re-routed, the others `WorkerLost`) and
    judged again after `rejudge_after` seconds, doubling up to `rejudge_max`. Every
    `watch_interval` seconds the pool looks at the cluster (late joiners judged and
    admitted, dead nodes retired); every `health_interval` seconds each node runs one jailed
    ``/bin/true`` between its commands. `records` keeps the last `record_limit` command
    records (`counts` counts them all; `record_sink` gets every one), `events` the last
    `event_limit` membership events.

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
        depth: int | None = None,
        require_all: bool = False,
        retries: int = 1,
        start_timeout: float = DEFAULT_START_TIMEOUT_S,
        grace: float = DEFAULT_GRACE_S,
        watch_interval: float = 5.0,
        health_interval: float = 30.0,
        rejudge_after: float = 2.0,
        rejudge_max: float = 120.0,
        record_limit: int = 10_000,
        event_limit: int = 1_000,
        record_sink: Callable[[CommandRecord], None] | None = None,
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
        if (depth is not None and depth < 1) or retries < 0 or num_cpus <= 0:
            raise ValueError("depth must be >= 1, retries >= 0 and num_cpus > 0")
        if min(record_limit, event_limit) < 1 or min(watch_interval, health_interval) <= 0:
            raise ValueError("the record limits and the intervals must be positive")
        # Validated here, once, so a malformed policy is one PolicyError on the driver, not
        # one refusal per node. The workspace is left as given: each node resolves its own.
        self.policy = _policy_of(policy)
        self.tier = tier
        self.retries = retries
        self.grace = grace
        self.closed = False
        self.lost: dict[str, str] = {}
        """Actors lost since the pool started: node id -> the last reason."""
        self.records: deque[CommandRecord] = deque(maxlen=record_limit)
        """The last `record_limit` audit records, one per attempt, each with the node id."""
        self.counts: Counter[str] = Counter()
        """Every record's outcome, counted (the ring above keeps only the last ones)."""
        self.egress: deque[EgressRecord] = deque(maxlen=record_limit)
        """The egress proxies' audit events (T2 Linux nodes), each with its node id."""
        self._sink = record_sink
        self._late = nodes is None
        self._watch_s, self._health_s = watch_interval, health_interval
        options = Options(
            tier=tier,
            slots_per_node=slots_per_node,
            num_cpus=num_cpus,
            depth=depth,
            start_timeout=start_timeout,
            rejudge_after=rejudge_after,
            rejudge_max=rejudge_max,
            only=None if nodes is None else frozenset(nodes),
        )
        doc = msgspec.msgpack.encode(policy_to_dict(self.policy))
        self._members = Members(ray.remote(NodeWorker), doc, options, event_limit)
        self._lock = threading.RLock()
        self._inbox: queue.SimpleQueue[tuple[ObjectRef, concurrent.futures.Future[bytes]]] = (
            queue.SimpleQueue()
        )
        self._queue: deque[_Task] = deque()
        self._running: dict[ObjectRef, _Task] = {}
        self._by_call: dict[int, _Task] = {}
        self._probes: dict[ObjectRef, Slot] = {}
        self._calls = itertools.count(1)
        self._next = 0
        self._resolve: list[tuple[concurrent.futures.Future[object], object]] = []
        self._thread: threading.Thread | None = None
        try:
            self._start(options.only)
            self._check_verdicts(require_all=require_all)
        except BaseException:
            self.close()
            raise
        now = time.monotonic()
        self._next_watch, self._next_health = now + watch_interval, now + health_interval
        self._thread = threading.Thread(target=self._loop, name="panday-ray-pool", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- members

    @property
    def nodes(self) -> dict[str, NodeReport]:
        """Accepted nodes: node id -> report (tier, slots, actor pids)."""
        return self._members.nodes

    @property
    def refused(self) -> dict[str, NodeReport]:
        """Refusing nodes: node id -> report with every refused field and reason."""
        return self._members.refused

    @property
    def retired(self) -> dict[str, Retired]:
        """Nodes taken out after a failure (or gone): node id -> reason and next judgement."""
        return self._members.retired

    @property
    def events(self) -> deque[PoolEvent]:
        """The last membership events: admitted, refused, retired, re-admitted."""
        return self._members.events

    @property
    def slots(self) -> int:
        """Live sessions in the pool."""
        return sum(1 for s in self._members.slots if s.alive)

    def refusals(self) -> Iterator[tuple[str, str, str]]:
        """(node id, dotted field, reason) for every refusal of every refusing node."""
        for node_id, report in self.refused.items():
            for field_name, reason in report.refusals:
                yield node_id, field_name, reason

    def _check_verdicts(self, *, require_all: bool) -> None:
        if not self.nodes:
            refused = list(self.refused.values())
            raise ClusterRefused(refused, why="no node can enforce this policy")
        if require_all and self.refused:
            refused = list(self.refused.values())
            raise ClusterRefused(refused, why="some nodes cannot enforce this policy")

    def _start(self, only: frozenset[str] | None) -> None:
        import ray  # noqa: PLC0415

        seen: set[str] = set()
        for node in ray.nodes():
            node_id = str(node["NodeID"])
            if not node.get("Alive") or (only is not None and node_id not in only):
                continue
            cpus = float(node.get("Resources", {}).get("CPU", 0.0))
            if self._members.begin(node_id, str(node.get("NodeManagerAddress", "")), cpus):
                seen.add(node_id)
        for node_id in sorted((only or frozenset()) - seen):
            why = "not a live node with CPUs in this cluster"
            self.refused[node_id] = _missing(node_id, why)
        self._members.wait_all(self._members.options.start_timeout)

    # ----------------------------------------------------------------- running

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
        future = self.submit(cmd, stdin=stdin, cwd=cwd, timeout=timeout, idempotent=idempotent)
        return _wait(future)

    def run_job(self, job: Job) -> Done:
        """Run one `Job` (files in, files out); raises what `run` raises."""
        return _wait(self.submit_job(job))

    def submit(
        self,
        cmd: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        idempotent: bool = False,
    ) -> PoolFuture[ExecResult]:
        """Send one command now; its future (`asyncio.wrap_future` awaits it)."""
        job = Job(argv=cmd, stdin=stdin, cwd=cwd, timeout=timeout, idempotent=idempotent)
        future: PoolFuture[ExecResult] = PoolFuture()
        self._submit([self._task(job, future, unwrap=True)])
        return future

    def submit_job(self, job: Job) -> PoolFuture[Done]:
        """`submit` for a `Job`: a future of its `Done`."""
        future: PoolFuture[Done] = PoolFuture()
        self._submit([self._task(job, future, unwrap=False)])
        return future

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
        futures = self.submit_jobs(jobs)
        done: list[Done | SandboxError] = []
        try:
            for future in futures:
                try:
                    done.append(_wait(future))
                except SandboxError as exc:
                    done.append(exc)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        if not return_exceptions and any(isinstance(o, SandboxError) for o in done):
            raise BatchFailed([o if isinstance(o, SandboxError) else o.result for o in done])
        return done

    def submit_jobs(self, jobs: Iterable[Job]) -> list[PoolFuture[Done]]:
        """Send every job now (all checked first: none is sent if one is refused)."""
        futures: list[PoolFuture[Done]] = []
        tasks: list[_Task] = []
        for job in jobs:
            future: PoolFuture[Done] = PoolFuture()
            tasks.append(self._task(job, future, unwrap=False))
            futures.append(future)
        self._submit(tasks)
        return futures

    def _task(
        self, job: Job, future: PoolFuture[Done] | PoolFuture[ExecResult], *, unwrap: bool
    ) -> _Task:
        spec = exec_spec(job.argv, stdin=job.stdin, cwd=job.cwd, timeout=job.timeout)
        files = {p: d.encode() if isinstance(d, str) else d for p, d in job.files.items()}
        self._check_files(files)
        limits = self.policy.limits
        call_id = next(self._calls)
        # The session's own `get` also holds each file to limits.output_bytes, as locally.
        call = Call(
            call_id,
            spec.argv,
            spec.stdin,
            spec.cwd,
            job.timeout,
            files,
            tuple(job.fetch),
            DEFAULT_GET_BYTES,
        )
        budget = [v / 1000 for v in (spec.timeout_ms, limits.wall_clock_cap) if v is not None]
        deadline = min(budget) + self.grace if budget else None
        return _Task(job, call_id, encoder.encode(call), deadline, future, unwrap)

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

    def _submit(self, tasks: list[_Task]) -> None:
        with self._lock:
            if self.closed:
                for task in tasks:
                    self._fail(task, PoolClosed("the pool is closed"))
            else:
                for task in tasks:
                    self._by_call[task.call_id] = task
                    task.future.add_done_callback(lambda f, t=task: self._on_done(t, f.cancelled()))
                self._queue.extend(tasks)
                self._pump()
        self._flush()

    def _on_done(self, task: _Task, cancelled: bool) -> None:  # noqa: FBT001 - a callback's
        if cancelled:
            with self._lock:
                self._cancel(task)

    def _cancel(self, task: _Task) -> None:
        """A cancelled future: never sent if queued; its jail killed if it runs."""
        if self._by_call.pop(task.call_id, None) is None:
            return
        slot = task.slot
        if slot is not None and slot.alive:
            slot.actor.cancel.remote(task.call_id)
        self._record(task, slot.node_id if slot else "", "", "cancelled", error="cancelled")

    def _pump(self) -> None:
        """Send queued commands to live slots with room (round robin)."""
        while self._queue:
            task = self._queue[0]
            if task.future.done():
                self._queue.popleft()
                continue
            slot = self._free_slot()
            if slot is None:
                break
            self._queue.popleft()
            self._send(task, slot)
        if self._queue and not self._members.slots and not self._members.judging:
            while self._queue:  # nowhere left to run them
                task = self._queue.popleft()
                why = PoolClosed("the pool was closed before it ran") if self.closed else None
                self._fail(task, why or self._lost(task, "", "no live worker is left"))

    def _send(self, task: _Task, slot: Slot) -> None:
        task.attempts += 1
        task.slot = slot
        task.sent = time.monotonic()
        slot.inflight += 1
        ref = slot.actor.run.remote(task.call)
        self._running[ref] = task
        inbox = self._inbox
        ref.future().add_done_callback(lambda f, r=ref: inbox.put((r, f)))

    def _free_slot(self) -> Slot | None:
        """The next live slot with room, round robin (None when every one is full)."""
        slots = self._members.slots
        count = len(slots)
        for step in range(count):
            slot = slots[(self._next + step) % count]
            if slot.alive and slot.inflight < slot.depth:
                self._next = (self._next + step + 1) % count
                return slot
        return None

    # -------------------------------------------------------------- the dispatcher

    def _loop(self) -> None:
        while True:
            try:
                item = self._inbox.get(timeout=_TICK_S)
            except queue.Empty:
                item = None
            with self._lock:
                while item is not None:
                    self._reply(*item)
                    try:
                        item = self._inbox.get_nowait()
                    except queue.Empty:
                        item = None
                if self._thread is None:  # closed: every answer is in
                    break
                self._housekeep()
                self._pump()
            self._flush()
        self._flush()

    def _reply(self, ref: ObjectRef, future: concurrent.futures.Future[bytes]) -> None:  # noqa: C901, PLR0911 - one branch per kind of answer
        import ray  # noqa: PLC0415

        task = self._running.pop(ref, None)
        if task is None or task.slot is None:
            return  # answered for already (its node was retired, or it was lost)
        slot = task.slot
        slot.inflight -= 1
        exc = future.exception()
        if isinstance(exc, ray.exceptions.RayTaskError):  # the worker raised: a bug
            self._fail(task, Internal(f"the node worker failed: {exc}"))
            return
        if exc is not None:
            self._lose_slot(slot, _reason(exc), first=task)
            return
        reply = reply_dec.decode(future.result())
        self.egress.extend(EgressRecord(node_id=slot.node_id, event=e) for e in reply.events)
        if task.future.done():  # cancelled: the record was written then
            return
        not_started = reply.failure is not None and reply.failure.kind == "NotStarted"
        if reply.fault is not None or (not_started and not self.closed):
            # The jail did not start, or the command never began: it did not run, so it
            # goes elsewhere, idempotent or not. A jail that failed retires its node at once;
            # the commands queued behind it there come back NotStarted and go elsewhere too.
            why = reply.fault or "its node was retired before it started"
            self._record(task, slot.node_id, slot.session_id, "rerouted", error=why)
            # The fault, or a later refusal that repeats it: whichever is handled first
            # retires the node, so nothing more is sent to the broken actor.
            cause = reply.fault or reply.broken
            if cause is not None and slot.alive:
                self._retire_node(slot.node_id, cause, rejudge=True)
            # Every bounce comes from a slot now out of the pool, and a node comes back only
            # after its back-off: the cap only stops a node that breaks at every judgement.
            task.bounces += 1
            if self._members.slots and task.bounces <= _MAX_BOUNCES:
                self._queue.appendleft(task)
            elif reply.failure is not None:
                self._fail(task, error_of(reply.failure))
            return
        self._by_call.pop(task.call_id, None)
        if reply.failure is not None:
            if reply.failure.kind in ("Closed", "NotStarted"):  # the pool's close, a retirement
                self._lose(task, slot, "its node was retired while the command ran")
                return
            error = error_of(reply.failure)
            self._record(task, slot.node_id, slot.session_id, "error", error=str(error))
            self._fail(task, error)
            return
        result = reply.result
        if result is None:
            self._fail(task, Internal("the node worker answered without a result"))
            return
        self._record(
            task,
            slot.node_id,
            slot.session_id,
            "completed",
            exit_code=result.exit_code,
            breach=result.breach.kind.value if result.breach else None,
            wall_ms=result.wall_ms,
        )
        done = Done(result=result, files=reply.files, node_id=slot.node_id, attempts=task.attempts)
        self._resolve.append((task.future, result if task.unwrap else done))  # pyright: ignore[reportArgumentType] - the future's type follows `unwrap`

    def _housekeep(self) -> None:
        import ray  # noqa: PLC0415

        now = time.monotonic()
        if self._members.poll():
            self._pump()
        self._reap_hung(now)
        if self._probes:
            ready, _ = ray.wait(list(self._probes), num_returns=len(self._probes), timeout=0)
            for ref in ready:
                slot = self._probes.pop(ref)
                with contextlib.suppress(ray.exceptions.RayError):
                    failed = ray.get(ref).decode()
                    if failed and slot.alive:
                        self._retire_node(slot.node_id, f"health probe: {failed}", rejudge=True)
        if now >= self._next_watch and not self.closed:
            self._next_watch = now + self._watch_s
            for node_id in self._members.watch(ray.nodes(), late=self._late):
                self._lose_node_tasks(node_id, "the node left the cluster")
        if now >= self._next_health and not self.closed:
            self._next_health = now + self._health_s
            probing = {s.node_id for s in self._probes.values()}
            for node_id in list(self.nodes):
                slots = [s for s in self._members.slots if s.node_id == node_id and s.alive]
                if slots and node_id not in probing:  # one probe per node per period
                    slot = min(slots, key=lambda s: s.inflight)
                    self._probes[slot.actor.probe.remote()] = slot

    def _reap_hung(self, now: float) -> None:
        """A command past its own time limit plus the grace has a hung worker: kill it."""
        for task in list(self._running.values()):
            slot = task.slot
            # Commands queued on one actor wait for those ahead of them: up to `depth` budgets.
            if slot is None or task.deadline_s is None:
                continue
            if now - task.sent > task.deadline_s * slot.depth:
                self._lose_slot(slot, "no answer within its time limit and the grace", first=None)

    # ------------------------------------------------------------------ faults

    def _retire_node(self, node_id: str, reason: str, *, rejudge: bool) -> None:
        """Out at once; its actors close, so what was queued there comes back NotStarted
        (sent elsewhere) and what ran comes back cut short (lost, or re-sent if idempotent)."""
        self._members.retire(node_id, reason, rejudge=rejudge)

    def _lose_node_tasks(self, node_id: str, reason: str) -> None:
        for ref, task in list(self._running.items()):
            if task.slot is not None and task.slot.node_id == node_id:
                del self._running[ref]
                task.slot.inflight -= 1
                self._lose(task, task.slot, reason)

    def _lose_slot(self, slot: Slot, reason: str, *, first: _Task | None) -> None:
        """The actor died (or hung): every command it held is lost with it."""
        self._members.drop_slot(slot)
        self.lost[slot.node_id] = reason
        held = [first] if first is not None else []
        for ref, task in list(self._running.items()):
            if task.slot is slot:
                del self._running[ref]
                slot.inflight -= 1
                held.append(task)
        for task in held:
            self._lose(task, slot, reason)

    def _lose(self, task: _Task, slot: Slot, reason: str) -> None:
        if task.future.done():
            return
        if self.closed:  # the pool's own close killed it: not a lost worker
            self._fail(task, PoolClosed("the pool was closed before the command finished"))
            return
        self._record(task, slot.node_id, slot.session_id, "lost", error=reason)
        if task.job.idempotent and task.attempts - task.bounces <= self.retries:
            self._queue.appendleft(task)  # sent again, to another live worker
            return
        self._fail(task, self._lost(task, slot.node_id, reason))

    def _lost(self, task: _Task, node_id: str, reason: str) -> WorkerLost:
        return WorkerLost(task.job.argv, node_id or "(none)", reason, attempts=task.attempts)

    def _fail(self, task: _Task, error: SandboxError) -> None:
        self._by_call.pop(task.call_id, None)
        self._resolve.append((task.future, error))  # pyright: ignore[reportArgumentType] - set as an exception in _flush

    def _flush(self) -> None:
        """Resolve futures outside the lock (their callbacks may call back into the pool)."""
        with self._lock:
            resolve, self._resolve = self._resolve, []
        for future, value in resolve:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                if isinstance(value, BaseException):
                    future.set_exception(value)
                else:
                    future.set_result(value)

    def _record(
        self,
        task: _Task,
        node_id: str,
        session_id: str,
        outcome: str,
        **fields: object,
    ) -> None:
        record = msgspec.convert(
            {
                "time": time.time(),
                "node_id": node_id,
                "session_id": session_id,
                "argv": tuple(task.job.argv),
                "outcome": outcome,
                "attempt": task.attempts,
                **fields,
            },
            CommandRecord,
        )
        self.records.append(record)
        self.counts[outcome] += 1
        if self._sink is not None:
            self._sink(record)

    # ----------------------------------------------------------------- closing

    def close(self) -> None:  # noqa: C901 - queued, running, judging and closing actors each end
        """Close every session (jails killed, cgroups and proxies gone, workspaces removed)
        and kill every actor. Idempotent; any thread."""
        import ray  # noqa: PLC0415

        with self._lock:
            if self.closed:
                return
            self.closed = True
            while self._queue:
                self._fail(self._queue.popleft(), PoolClosed("the pool was closed before it ran"))
            live = [s for s in self._members.slots if s.alive]
            closing = [s.actor.close.remote() for s in live]
        self._flush()
        if closing:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.wait(closing, num_returns=len(closing), timeout=30)
            for slot, ref in zip(live, closing, strict=True):
                with contextlib.suppress(ray.exceptions.RayError, msgspec.ValidationError):
                    events = events_dec.decode(ray.get(ref, timeout=0))
                    self.egress.extend(EgressRecord(node_id=slot.node_id, event=e) for e in events)
        # The answers of the commands cut short come in now (as PoolClosed).
        deadline = time.monotonic() + 10.0
        while self._running and self._thread is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        with self._lock:
            for slot in live:
                self._members.close_slot(slot, close=False)
            for judging in self._members.judging.values():
                for slot in judging.pending.values():
                    # Closed, not only killed: an actor killed while judging leaves its
                    # session's workspace behind (until the next actor on its host).
                    self._members.close_slot(slot, close=True)
            for task in self._running.values():
                self._fail(task, PoolClosed("the pool was closed before the command finished"))
            self._running.clear()
            # As long as a retired actor gets: a judging actor's close waits for its `start`
            # (which may be in its judge's jail) before it can remove the workspace.
            self._members.finish_closing(CLOSE_WAIT_S)
            thread, self._thread = self._thread, None
        self._flush()
        if thread is not None and thread is not threading.current_thread():
            self._inbox.put((None, None))  # pyright: ignore[reportArgumentType] - a wake-up
            thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _wait(future: PoolFuture[T]) -> T:
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def _missing(node_id: str, why: str) -> NodeReport:
    from panday.ray.wire import NodeReport  # noqa: PLC0415 - typing import above

    return NodeReport(
        node_id=node_id, address="", accepted=False, error="NotStarted", refusals=(("node", why),)
    )


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
