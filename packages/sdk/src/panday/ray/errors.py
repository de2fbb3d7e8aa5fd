"""The pool's own errors (a lost worker, a closed pool, a refusing cluster, a failed batch),
and how every error crosses the wire between a node's actor and the pool (a command's own
errors are the local session's: `panday_core.errors`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from panday.ray.wire import Failure
from panday_core.errors import (
    CommandNotFound,
    Internal,
    LimitExceeded,
    PathRefused,
    SandboxError,
    TierUnavailable,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from panday.ray.wire import NodeReport
    from panday_core.types import ExecResult


class WorkerLost(SandboxError):  # noqa: N818 - the name says what happened, like the others
    """The actor (or the whole node) running a command died, or its node was retired,
    before it answered.

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


def failure_of(exc: SandboxError) -> Failure:
    """An SDK error as data, so the driver raises the same type the local session would."""
    if isinstance(exc, CommandNotFound):
        return Failure("CommandNotFound", (exc.program, exc.reason), exc.exit_code)
    if isinstance(exc, LimitExceeded):
        return Failure("LimitExceeded", (exc.kind, exc.detail))
    if isinstance(exc, PathRefused):
        return Failure("PathRefused", (exc.path, exc.reason))
    if isinstance(exc, TierUnavailable):
        return Failure("TierUnavailable", (exc.tier, exc.reason))
    return Failure(type(exc).__name__, (str(exc),))


_TWO_ARGS: dict[str, Callable[[str, str], SandboxError]] = {
    "LimitExceeded": LimitExceeded,
    "PathRefused": PathRefused,
    "TierUnavailable": TierUnavailable,
}
_ONE_ARG: dict[str, Callable[[str], SandboxError]] = {"Internal": Internal, "Closed": PoolClosed}


def error_of(failure: Failure) -> SandboxError:
    """The SDK error a `Failure` stands for (`SandboxError` for any other kind)."""
    a = failure.args
    if failure.kind == "CommandNotFound":
        return CommandNotFound(a[0], a[1], exit_code=failure.exit_code)
    two = _TWO_ARGS.get(failure.kind)
    if two is not None:
        return two(a[0], a[1])
    return _ONE_ARG.get(failure.kind, SandboxError)(a[0])
