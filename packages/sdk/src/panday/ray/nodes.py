"""The pool's membership: actors started per node and judged there, nodes admitted or
refused, retired after a failure and re-judged on a back-off, late joiners admitted, dead
nodes dropped, and every change an event in a bounded record."""

# Ray is an optional extra that the static gates' environment does not install; pyright
# checks this module against the stub in typings/ray instead of Ray's source.
# pyright: reportMissingModuleSource=false

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from panday.ray.wire import NodeReport, PoolEvent, Started, started_dec

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ray.actor import ActorClass, ActorHandle
    from ray.types import ObjectRef

    from panday.ray.wire import NodeEventKind

CLOSE_WAIT_S = 10.0
"""How long a retired actor has to close its session before it is killed anyway."""


@dataclass(eq=False)
class Slot:
    actor: ActorHandle
    node_id: str
    session_id: str = ""
    inflight: int = 0
    alive: bool = True
    depth: int = 2


@dataclass(eq=False)
class Judging:
    """Actors started on one node, waiting for their verdicts."""

    node_id: str
    address: str
    deadline: float
    pending: dict[ObjectRef, Slot] = field(default_factory=dict["ObjectRef", Slot])
    started: list[tuple[Slot, Started]] = field(default_factory=list[tuple[Slot, Started]])
    failed: tuple[str, str] | None = None


@dataclass
class Retired:
    """A node taken out of the pool: why, and when it is judged again (never: inf)."""

    reason: str
    backoff: float
    next_check: float


@dataclass(frozen=True, kw_only=True)
class Options:
    tier: str
    slots_per_node: int | None
    num_cpus: float
    depth: int | None
    start_timeout: float
    rejudge_after: float
    rejudge_max: float
    only: frozenset[str] | None


def depth_for(cpus: int, slots: int) -> int:
    """Commands queued per actor, from the node's CPUs: one running and enough behind it to
    cover the round trip to the driver, more where the host has cores to spare per slot."""
    return max(2, min(4, 1 + math.ceil(cpus / max(1, slots))))


class Members:
    """Who is in the pool. Not thread-safe: the pool calls it under its lock."""

    def __init__(self, remote: ActorClass, doc: bytes, options: Options, events: int) -> None:
        self._remote = remote
        self._doc = doc
        self.options = options
        self.nodes: dict[str, NodeReport] = {}
        self.refused: dict[str, NodeReport] = {}
        self.retired: dict[str, Retired] = {}
        self.events: deque[PoolEvent] = deque(maxlen=events)
        self.slots: list[Slot] = []
        self.judging: dict[str, Judging] = {}
        self._closing: list[tuple[ObjectRef | None, Slot, float]] = []

    # ------------------------------------------------------------------ judging

    def begin(self, node_id: str, address: str, cpus: float) -> bool:
        """Start the node's actors (their verdicts come later); False: no CPU to give."""
        from ray.util.scheduling_strategies import (  # noqa: PLC0415
            NodeAffinitySchedulingStrategy,
        )

        o = self.options
        count = o.slots_per_node if o.slots_per_node is not None else int(cpus // o.num_cpus)
        if count < 1 or node_id in self.judging:
            return False
        judging = Judging(node_id, address, time.monotonic() + o.start_timeout)
        for _ in range(count):
            actor = self._remote.options(
                num_cpus=o.num_cpus,
                max_concurrency=(o.depth or 4) + 2,  # + 2: close, cancel or a probe beside
                max_restarts=0,
                max_task_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(self._doc, o.tier, node_id)
            slot = Slot(actor, node_id)
            judging.pending[actor.start.remote()] = slot
        self.judging[node_id] = judging
        return True

    def poll(self, timeout: float = 0.0) -> list[str]:
        """Collect the verdicts that are in (waiting up to `timeout`), settle every node whose
        actors have all answered or whose time is up; the nodes admitted now."""
        import ray  # noqa: PLC0415

        refs = [ref for j in self.judging.values() for ref in j.pending]
        if refs:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
            owner = {ref: j for j in self.judging.values() for ref in j.pending}
            for ref in ready:
                judging = owner[ref]
                slot = judging.pending.pop(ref)
                try:
                    judging.started.append((slot, started_dec.decode(ray.get(ref))))
                except ray.exceptions.RayError as exc:
                    judging.failed = ("WorkerError", f"the actor failed to start: {exc}")
                    self._kill(slot)
        admitted: list[str] = []
        now = time.monotonic()
        for node_id, judging in list(self.judging.items()):
            if judging.pending and now < judging.deadline:
                continue
            if judging.pending:
                why = f"its actor did not start within {self.options.start_timeout:.0f} s"
                judging.failed = judging.failed or ("NotStarted", why)
                for slot in judging.pending.values():
                    self._kill(slot)
            del self.judging[node_id]
            if self._settle(judging):
                admitted.append(node_id)
        self._reap_closing(now)
        return admitted

    def wait_all(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout + 1.0
        while self.judging and time.monotonic() < deadline:
            self.poll(timeout=0.5)

    def _settle(self, j: Judging) -> bool:
        refusal = next((r for _, r in j.started if r.error is not None), None)
        pids = tuple(r.pid for _, r in j.started)
        first = j.started[0][1] if j.started else None
        hostname, cpus = (first.hostname, first.cpus) if first else ("", 0)
        again = j.node_id in self.retired
        if j.failed is not None or refusal is not None:
            # One refusing actor refuses the node: the host is the same for all of them.
            kind, refusals = (
                (refusal.error or "", refusal.refusals)
                if refusal is not None
                else (j.failed[0] if j.failed else "", (("node", j.failed[1] if j.failed else ""),))
            )
            report = NodeReport(
                node_id=j.node_id,
                address=j.address,
                accepted=False,
                error=kind,
                refusals=refusals,
                hostname=hostname,
                pids=pids,
                cpus=cpus,
            )
            self.refused[j.node_id] = report
            self.nodes.pop(j.node_id, None)
            self.event(j.node_id, "refused", report.summary())
            for slot, _ in j.started:
                self.close_slot(slot, close=True)  # nothing is ever sent to a refusing node
            if again:
                self._backoff(j.node_id)
            return False
        depth = self.options.depth or depth_for(cpus, len(j.started))
        for slot, report in j.started:
            slot.session_id = report.session_id or ""
            slot.depth = depth
            self.slots.append(slot)
        self.nodes[j.node_id] = NodeReport(
            node_id=j.node_id,
            address=j.address,
            accepted=True,
            tier=first.tier if first else None,
            slots=len(j.started),
            hostname=hostname,
            pids=pids,
            cpus=cpus,
        )
        self.refused.pop(j.node_id, None)
        if again:
            del self.retired[j.node_id]
        self.event(
            j.node_id, "readmitted" if again else "admitted", self.nodes[j.node_id].summary()
        )
        return True

    # -------------------------------------------------------------- retiring

    def retire(self, node_id: str, reason: str, *, rejudge: bool) -> set[Slot]:
        """Take every slot of the node out at once (closed, then killed); judged again after
        the back-off when `rejudge`. The slots retired now."""
        gone = {s for s in self.slots if s.node_id == node_id and s.alive}
        for slot in gone:
            self.close_slot(slot, close=rejudge)
        self.slots = [s for s in self.slots if s.alive]
        if node_id in self.nodes or gone:
            self.nodes.pop(node_id, None)
            self.event(node_id, "retired", reason)
        first = self.options.rejudge_after
        self.retired[node_id] = Retired(
            reason, first, time.monotonic() + first if rejudge else math.inf
        )
        return gone

    def _backoff(self, node_id: str) -> None:
        entry = self.retired[node_id]
        entry.backoff = min(self.options.rejudge_max, entry.backoff * 2)
        entry.next_check = time.monotonic() + entry.backoff

    def drop_slot(self, slot: Slot) -> None:
        """One actor lost (not its node): its slot goes; the node stays while others live."""
        self.close_slot(slot, close=False)
        self.slots = [s for s in self.slots if s.alive]
        if not any(s.node_id == slot.node_id for s in self.slots):
            report = self.nodes.pop(slot.node_id, None)
            if report is not None:
                self.event(slot.node_id, "retired", "its last actor was lost")
                self.retired[slot.node_id] = Retired("its last actor was lost", 0.0, math.inf)

    def close_slot(self, slot: Slot, *, close: bool) -> None:
        """Out of the pool for good: its session closed first when `close` (the jail killed,
        the workspace removed), then its actor killed (a lost one may be only unreachable,
        and must not come back with a half-known state)."""
        if not slot.alive:
            return
        slot.alive = False
        ref = slot.actor.close.remote() if close else None
        self._closing.append((ref, slot, time.monotonic() + CLOSE_WAIT_S))
        if ref is None:
            self._kill(slot)

    def _reap_closing(self, now: float) -> None:
        import ray  # noqa: PLC0415

        keep: list[tuple[ObjectRef | None, Slot, float]] = []
        for ref, slot, deadline in self._closing:
            if ref is not None and now < deadline and not ray.wait([ref], timeout=0)[0]:
                keep.append((ref, slot, deadline))
                continue
            self._kill(slot)
        self._closing = keep

    def finish_closing(self, timeout: float) -> None:
        import ray  # noqa: PLC0415

        refs = [ref for ref, _, _ in self._closing if ref is not None]
        if refs:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.wait(refs, num_returns=len(refs), timeout=timeout)
        self._reap_closing(math.inf)

    @staticmethod
    def _kill(slot: Slot) -> None:
        import ray  # noqa: PLC0415

        with contextlib.suppress(ray.exceptions.RayError, ValueError):
            ray.kill(slot.actor, no_restart=True)

    # ------------------------------------------------------------- watching

    def watch(self, cluster: Iterable[dict[str, object]], *, late: bool) -> list[str]:
        """One look at the cluster: nodes gone are retired for good (the ids they return),
        retired nodes due are judged again, and (with `late`) new nodes are judged."""
        alive: dict[str, tuple[str, float]] = {}
        for node in cluster:
            resources = node.get("Resources")
            cpus = (
                cast("dict[str, float]", resources).get("CPU", 0.0)
                if isinstance(resources, dict)
                else 0.0
            )
            if node.get("Alive"):
                alive[str(node["NodeID"])] = (str(node.get("NodeManagerAddress", "")), float(cpus))
        gone = [n for n in self.nodes if n not in alive]
        for node_id in gone:
            self.retire(node_id, "the node left the cluster", rejudge=False)
        now = time.monotonic()
        for node_id, (address, cpus) in alive.items():
            retired = self.retired.get(node_id)
            if retired is not None:
                if now >= retired.next_check and self.begin(node_id, address, cpus):
                    retired.next_check = math.inf  # until this verdict is in
                continue
            known = node_id in self.nodes or node_id in self.refused or node_id in self.judging
            wanted = self.options.only is None or node_id in self.options.only
            if late and not known and wanted:
                self.begin(node_id, address, cpus)
        return gone

    def event(self, node_id: str, kind: NodeEventKind, reason: str) -> None:
        self.events.append(PoolEvent(time=time.time(), node_id=node_id, kind=kind, reason=reason))
