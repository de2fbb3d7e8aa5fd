"""The pool's own errors: a lost worker, a closed pool, a refusing cluster, a failed batch
(a command's own errors are the local session's: `panday_core.errors`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from panday_core.errors import SandboxError

if TYPE_CHECKING:
    from collections.abc import Sequence

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
