"""What the pool and its node actors say to each other (msgpack over Ray) and what the
pool reports: jobs, results, node verdicts, audit records and node events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import msgspec

from panday_core.egress.audit import AuditEvent
from panday_core.types import ExecResult

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

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
    """The refusal's kind: ``PolicyViolation``, ``TierUnavailable``, ``JailFailed`` (the
    jailed ``/bin/true`` or the egress canary failed), ``Misplaced``, ``NotStarted`` or
    ``WorkerError``."""
    refusals: tuple[tuple[str, str], ...] = ()
    """(dotted field, reason) for each thing the node cannot enforce."""
    slots: int = 0
    hostname: str = ""
    pids: tuple[int, ...] = ()
    """The actor processes on that node (for checks on the host)."""
    cpus: int = 0
    """The node host's CPU count, as its actor saw it."""

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
    outcome: Literal["completed", "error", "lost", "cancelled", "rerouted"]
    exit_code: int | None = None
    breach: str | None = None
    error: str | None = None
    wall_ms: float = 0.0
    attempt: int = 1


class EgressRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One request a node's egress proxy answered (`AuditEvent`), with that node's id."""

    node_id: str
    event: AuditEvent


NodeEventKind = Literal["admitted", "refused", "retired", "readmitted"]


class PoolEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A change in the pool's membership: a node admitted, refused, retired (taken out after
    a failure, or gone) or re-admitted after a new judgement, with the reason."""

    time: float
    node_id: str
    kind: NodeEventKind
    reason: str = ""


# ----------------------------------------------------------------- the wire (msgpack)


class Call(msgspec.Struct, frozen=True, array_like=True):
    call_id: int
    argv: tuple[str, ...]
    stdin: bytes | None
    cwd: str | None
    timeout: float | None
    files: dict[str, bytes]
    fetch: tuple[str, ...]
    fetch_max: int


class Failure(msgspec.Struct, frozen=True, array_like=True):
    kind: str
    args: tuple[str, ...]
    exit_code: int = 127


class Reply(msgspec.Struct, frozen=True, array_like=True):
    result: ExecResult | None
    files: dict[str, bytes]
    failure: Failure | None
    events: list[AuditEvent] = []
    fault: str | None = None
    """Set when the node could not start a jail at all (bubblewrap failed to spawn, or the
    tier became unavailable): the command did not run, and the node is to be retired."""
    broken: str | None = None
    """On a ``NotStarted`` from an actor whose jail failed earlier: that fault again. The
    pool handles answers in the order they complete, not the order the actor gave them,
    so whichever of the two arrives first retires the node."""


class Started(msgspec.Struct, frozen=True, array_like=True):
    node_id: str
    pid: int
    hostname: str
    tier: str | None
    session_id: str | None
    error: str | None
    refusals: tuple[tuple[str, str], ...]
    cpus: int = 0


encoder = msgspec.msgpack.Encoder()
call_dec = msgspec.msgpack.Decoder(Call)
reply_dec = msgspec.msgpack.Decoder(Reply)
events_dec = msgspec.msgpack.Decoder(list[AuditEvent])
started_dec = msgspec.msgpack.Decoder(Started)

CLOSED = Failure("Closed", ("the pool was closed before the command finished",))
NOT_STARTED = Failure("NotStarted", ("the session was closed before the command started",))
"""The command never began (its actor was closing): safe to send elsewhere."""
CANCELLED = Failure("Cancelled", ("the command was cancelled",))
