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

* **Fail closed per node, judged by what it will do.** Each actor opens its session with
  `panday.open` on its own node (the same check a local session gets) and then runs a real
  jailed ``/bin/true`` there (and, with ``net.allow``, a jailed connect through the relay
  to a canary on the node's loopback). A node that refuses is listed in `Pool.refused`
  with every field and reason, its actors are killed, and nothing is sent there. Actors
  are pinned with a hard node-affinity strategy and check the node they landed on.
* **Health over time.** A node whose jail stops spawning is retired at once and judged
  again on a back-off; nodes that join later are judged and admitted; a periodic probe
  runs one jailed ``/bin/true`` per node. `Pool.events` records each change (bounded).
* **A named tier is never replaced.** ``tier="t2-linux"`` refuses on a node that cannot run
  T2 Linux; ``auto`` lets each node pick its own command tier (never T0).
* **Faults are explicit.** A command whose actor or node died before it answered raises
  `WorkerLost`: the pool never reports it as done, and runs it again elsewhere only when
  the caller marked it idempotent.
* **Sync, futures and async.** `Pool.run`/`map` block; `Pool.submit` returns a future
  (cancel kills the jailed command); `AsyncPool` (`AsyncPool.of(pool)` for a running one)
  awaits them.
* **Nothing is left behind.** `close` closes every session and kills the actors.

Ray is imported only when a pool is made, so ``import panday`` and the CLI never pay for it
(importing this package does not import Ray either).
"""

from panday.ray.actor import NodeWorker
from panday.ray.aio import AsyncPool
from panday.ray.errors import BatchFailed, ClusterRefused, PoolClosed, WorkerLost
from panday.ray.pool import Pool, PoolFuture
from panday.ray.wire import CommandRecord, Done, EgressRecord, Job, NodeReport, PoolEvent

__all__ = [
    "AsyncPool",
    "BatchFailed",
    "ClusterRefused",
    "CommandRecord",
    "Done",
    "EgressRecord",
    "Job",
    "NodeReport",
    "NodeWorker",
    "Pool",
    "PoolClosed",
    "PoolEvent",
    "PoolFuture",
    "WorkerLost",
]
