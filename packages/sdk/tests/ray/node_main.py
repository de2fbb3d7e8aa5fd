"""One Ray worker node in this process's (mount) namespace, joined to a running cluster.

The tests start it as ``unshare --mount ... python node_main.py GCS OBJECT_STORE_BYTES``
after hiding host facts in that namespace (see conftest.start_constrained_node): a node
that really lacks something, rather than one told to pretend. It is built exactly as
`ray.cluster_utils.Cluster.add_node` builds a worker node, prints its node id, and runs
until its standard input closes (the test ends it, or the test process died), then stops
every Ray process it started.

Started in a user namespace of its own (``unshare --user``), it also takes one command on
its standard input, ``max_user_namespaces N``: it writes N to that namespace's
``/proc/sys/user/max_user_namespaces`` (a limit of this namespace only: the host's is never
touched) and answers ``ok``. With 0, no jail can start on this node (bwrap's new user
namespace fails with ENOSPC) while everything else about it still works.
"""
# pyright: reportMissingModuleSource=false

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

from ray._private.node import Node
from ray._private.parameter import RayParams

PR_SET_PDEATHSIG = 1


PARENT_ENV = "PANDAY_TEST_NODE_PARENT"
"""The test process's pid (conftest sets it): this node's parent."""


def _end_with_the_test() -> None:
    """Killed by the kernel when the test's process ends. A test killed before it closed
    our stdin's other end, while this node was still joining (falsify's cut-off), would
    leave it connecting for ever to a cluster that is gone, never reading stdin (and in
    Ray's C++ client, where no Python thread gets to run). Ray's own processes share the
    fate of this one (Ray starts them with the same parent-death signal)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if str(os.getppid()) != os.environ.get(PARENT_ENV):  # it ended before the signal was set
        os._exit(1)


def main(gcs_address: str, object_store_bytes: int) -> None:
    _end_with_the_test()
    params = RayParams(
        gcs_address=gcs_address,
        node_ip_address="127.0.0.1",
        num_cpus=1,
        num_gpus=0,
        object_store_memory=object_store_bytes,
        min_worker_port=0,
        max_worker_port=0,
        include_log_monitor=False,
        node_manager_port=0,
    )
    node = Node(params, head=False, shutdown_at_exit=False, spawn_reaper=False)
    try:
        sys.stdout.write(f"{node.node_id}\n")
        sys.stdout.flush()
        for line in sys.stdin:  # until the test closes it (or dies)
            name, _, value = line.strip().partition(" ")
            if name == "max_user_namespaces" and value.isdigit():
                Path("/proc/sys/user/max_user_namespaces").write_text(value, encoding="ascii")
                sys.stdout.write("ok\n")
                sys.stdout.flush()
    finally:
        node.kill_all_processes(check_alive=False, allow_graceful=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
