"""A real Ray cluster on this machine for the panday.ray tests (no mocks of Ray).

One cluster per test run: a head and two worker nodes (separate raylets, one CPU and a
100 MiB object store each), all on 127.0.0.1. Tests that need a node of their own (one to
kill, one that lacks a host fact) add it and remove it. Every Ray process the fixtures
start is recorded by PID and must be gone after shutdown, checked on the host.

Ray advertises this machine's interface address unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
is set before it is imported; with it, every node runs on loopback (checked below).
These tests need Ray (the ``ray`` extra); the ``ray`` nox session installs it from the lock.
On an OS other than Linux they are skipped with the reason (the pool's tier is T2 Linux).
"""
# pyright: reportMissingModuleSource=false
# (Ray is not installed for the static gates; pyright checks against typings/ray.)

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback only (module docstring)
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # no usage report is ever sent
# Under `uv run` (nox itself runs so), Ray would start its workers with the same `uv run`
# command line, i.e. run nox or pytest again instead of a worker; they use this interpreter.
os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
# Ray starts its workers at nice 15, and a jail inherits it: beside CPU burners (issue 28's
# loaded runs) the actors got a few percent of a core and the Ray suite ran for an hour.
# Nothing here judges speed; at nice 0 the suite only finishes sooner on a busy machine.
os.environ["RAY_worker_niceness"] = "0"  # noqa: SIM112 - Ray reads this exact spelling

import pytest  # after the environment Ray reads at import
import ray
from ray.cluster_utils import Cluster

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from ray._private.node import Node

OBJECT_STORE = 100 * 1024 * 1024
NODE_MAIN = Path(__file__).with_name("node_main.py")
START_TIMEOUT_S = 60.0

if not sys.platform.startswith("linux"):
    pytest.skip("panday.ray tests run T2 Linux pools: Linux only", allow_module_level=True)


# ------------------------------------------------------------------------ /proc helpers


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def descendants(roots: Iterable[int]) -> set[int]:
    """Every live process below `roots` (by parent links in /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (ppid := _ppid(int(entry.name))) is not None:
            parents[int(entry.name)] = ppid
    found: set[int] = set()
    frontier = set(roots)
    while frontier:
        children = {p for p, pp in parents.items() if pp in frontier and p not in found}
        found |= children
        frontier = children
    return found


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def describe(pids: Iterable[int]) -> str:
    """What /proc says of each pid: its name, state, parent, where it sleeps in the kernel,
    its command line and its children; for a failure message (which process outlived what,
    and what it was waiting for)."""
    lines: list[str] = []
    for pid in sorted(pids):
        base = Path(f"/proc/{pid}")
        try:
            stat = (base / "stat").read_text(encoding="ascii", errors="replace")
            wchan = (base / "wchan").read_text(encoding="ascii", errors="replace")
            argv = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            lines.append(f"{pid}: gone")
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        kids = sorted(descendants([pid]))
        lines.append(
            f"{pid} {comm(pid)!r} state {state} ppid {ppid} wchan {wchan!r} "
            f"argv {argv[:200]!r} descendants {kids}"
        )
    return "; ".join(lines)


def wait_gone(pids: Iterable[int], timeout: float = 20.0) -> set[int]:
    """The pids still alive after waiting up to `timeout` seconds for all to exit."""
    left = set(pids)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        left = {p for p in left if alive(p)}
        if left:
            time.sleep(0.1)
    return left


def wait_for(predicate: object, timeout: float, what: str) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def node_pids(node: Node) -> set[int]:
    """The processes Ray started for `node` (raylet, object store, GCS on the head...)."""
    return {info.process.pid for infos in node.all_processes.values() for info in infos}


def live_nodes() -> set[str]:
    return {str(n["NodeID"]) for n in ray.nodes() if n.get("Alive")}


def cgroup_dirs(pids: Iterable[int]) -> set[str]:
    """The tier's cgroup directories (``panday-<pid>.<start time>-<session>``) of the
    processes `pids`."""
    root = Path("/sys/fs/cgroup")
    return {str(p) for pid in pids for p in root.glob(f"**/panday-{pid}.*-*")}


def unix_socket_paths(pids: Iterable[int]) -> set[str]:
    """Paths of the unix sockets the processes `pids` hold open (/proc/net/unix by inode):
    here, the egress proxies' sockets inside their runtime directories."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                link = str(fd.readlink())
            except OSError:
                continue  # closed meanwhile
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    paths: set[str] = set()
    for line in Path("/proc/net/unix").read_text(encoding="utf-8").splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[6] in inodes:
            paths.add(fields[7])
    return paths


class Host:
    """The /proc helpers above, for tests (a fixture: test modules do not import conftest)."""

    cgroup_dirs = staticmethod(cgroup_dirs)
    unix_socket_paths = staticmethod(unix_socket_paths)
    alive = staticmethod(alive)
    describe = staticmethod(describe)
    comm = staticmethod(comm)
    descendants = staticmethod(descendants)
    wait_for = staticmethod(wait_for)
    wait_gone = staticmethod(wait_gone)


@pytest.fixture
def host() -> Host:
    return Host()


# ---------------------------------------------------------------------------- the cluster


class LocalCluster:
    """The test cluster and every PID it started, for the leftover check."""

    def __init__(self) -> None:
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "object_store_memory": OBJECT_STORE,
                "include_dashboard": False,
            },
        )
        self.started: set[int] = set()
        self.base: list[str] = []
        head = self.cluster.head_node
        assert head is not None
        self.head = head
        self.workers = [self.add_node() for _ in range(2)]
        ray.init(address=self.cluster.address, log_to_driver=False)
        self.cluster.wait_for_nodes(timeout=START_TIMEOUT_S)
        self.base = sorted(live_nodes())
        self._check_loopback()

    def add_node(self) -> Node:
        node = self.cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE)
        self.started |= node_pids(node)
        return node

    def remove_node(self, node: Node, *, graceful: bool) -> None:
        self.cluster.remove_node(node, allow_graceful=graceful)

    def _check_loopback(self) -> None:
        addresses = {str(n["NodeManagerAddress"]) for n in ray.nodes()}
        assert addresses == {"127.0.0.1"}, f"Ray nodes must be on loopback, got {addresses}"

    def record_tree(self) -> None:
        """Remember every process now below the Ray processes (workers, actors, jails)."""
        self.started |= node_pids(self.head)
        for node in self.cluster.worker_nodes:
            self.started |= node_pids(node)
        self.started |= descendants(self.started)

    def shutdown(self) -> None:
        self.record_tree()
        try:
            ray.shutdown()
        finally:
            self.cluster.shutdown()


# Above the product's 60 s (which refused a cold cluster's nodes at load 9) and below the
# tests' default 120 s bound, so that a pool whose actors cannot start (a node's CPU still
# held by a pool a failed test left open) fails with the pool's own reasons, not a timeout.
POOL_START_TIMEOUT_S = 100.0


@pytest.fixture(scope="session", autouse=True)
def _patient_pools() -> Iterator[None]:
    """Every pool these tests open waits up to 100 s for its actors to start.

    No test here is about how long a start takes (a named node the cluster lacks is refused
    at once, whatever the timeout), but the product's 60 s refused both nodes of a freshly
    started cluster at load 9 (each actor is a Python worker that imports Ray and panday and
    runs a jail): a verdict that depended on load. The default is changed, not each call,
    so a test cannot forget it."""
    from panday.ray import Pool  # noqa: PLC0415 - after the environment Ray reads at import

    defaults = Pool.__init__.__kwdefaults__
    assert defaults is not None
    assert "start_timeout" in defaults  # the name this patches is still the product's
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(defaults, "start_timeout", POOL_START_TIMEOUT_S)
        yield


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    local = LocalCluster()
    try:
        yield local
    finally:
        local.shutdown()
        left = wait_gone(local.started)
        assert not left, f"Ray processes left after shutdown: {sorted(left)}"


# ---------------------------------------------------------- a node that lacks a host fact


class ConstrainedNode:
    """A Ray worker node whose processes live in a mount namespace where some host facts
    differ: files made to vanish (a char device bound over them, so they are no longer
    regular executable files) or directories covered by an empty read-only tmpfs.

    The node is real (its own raylet, object store and workers); what it lacks, it really
    lacks: `panday.open` in an actor there sees the same filesystem its commands would.
    """

    @staticmethod
    def _launch(user_namespaces: int | None) -> dict[str, str]:
        """A node whose user namespaces are limited gives each command a bwrap of its own.
        Its tests break the node while a pool runs on it (no more user namespaces): a
        session jail made before the break would go on serving its commands, enforced as
        before, and the node would not be broken for them (a new session there, an actor's,
        is what the break refuses, and the judge's jailed probe sees that)."""
        return {} if user_namespaces is None else {"PANDAY_T2_SESSION_JAIL": "0"}

    def __init__(
        self,
        gcs: str,
        *,
        hide_files: Iterable[str],
        cover_dirs: Iterable[str],
        user_namespaces: int | None = None,
        replace: Mapping[str, str] | None = None,
    ) -> None:
        mounts = [f"mount --bind /dev/null {shlex.quote(p)}" for p in hide_files]
        mounts += [f"mount -t tmpfs -o ro,size=4k none {shlex.quote(d)}" for d in cover_dirs]
        # target -> what this node sees there instead (a bind of the test's own file).
        mounts += [
            f"mount --bind {shlex.quote(src)} {shlex.quote(dst)}"
            for dst, src in (replace or {}).items()
        ]
        unshare = ["unshare", "--mount", "--propagation", "private"]
        if user_namespaces is not None:
            # A user namespace of its own (root mapped to root): its limit is its own.
            unshare[1:1] = ["--user", "--map-root-user"]
            mounts.append(f"echo {user_namespaces} > /proc/sys/user/max_user_namespaces")
        node = f"exec {shlex.quote(sys.executable)} {shlex.quote(str(NODE_MAIN))}"
        script = " && ".join([*mounts, f"{node} {shlex.quote(gcs)} {OBJECT_STORE}"])
        before = live_nodes()
        self.proc = subprocess.Popen(
            [*unshare, "sh", "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
            # The node ends with this process (node_main's parent-death signal) if it is
            # killed before it can stop the node: it checks it was not too late to ask.
            env={
                **os.environ,
                "PANDAY_TEST_NODE_PARENT": str(os.getpid()),
                **self._launch(user_namespaces),
            },
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        if not line:
            self.stop()
            pytest.fail("the constrained Ray node did not start (see its stderr above)")
        self.node_id = line
        wait_for(lambda: self.node_id in live_nodes() - before, START_TIMEOUT_S, "the node")

    def pids(self) -> set[int]:
        return {self.proc.pid} | descendants([self.proc.pid])

    def set_user_namespaces(self, limit: int) -> None:
        """Set this node's own user-namespace limit (0: no jail can start here)."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(f"max_user_namespaces {limit}\n".encode())
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == b"ok"

    def stop(self) -> set[int]:
        """End the node (its stdin closes: it stops its own Ray processes); the PIDs it had."""
        pids = self.pids()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # our own session (start_new_session)
            self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return pids


def bwrap_paths() -> list[str]:
    """Every bubblewrap panday would find here (the system's and the wheel's)."""
    from panday_tier_linux import host  # noqa: PLC0415 - the tier's own search list

    found = [p for p in host.SYSTEM_BWRAP if Path(p).is_file()]
    wheel = host._wheel_bwrap()  # pyright: ignore[reportPrivateUsage] - the tier's own lookup
    if wheel is not None:
        found.append(wheel.path)
    return sorted({str(Path(p).resolve()) for p in found})


class NodeMaker:
    """Starts constrained nodes for one test module and stops them all at its end."""

    def __init__(self, gcs: str) -> None:
        self.gcs = gcs
        self.started: list[ConstrainedNode] = []
        self.bwrap_paths = bwrap_paths

    def __call__(
        self,
        *,
        hide_files: Iterable[str] = (),
        cover_dirs: Iterable[str] = (),
        user_namespaces: int | None = None,
        replace: Mapping[str, str] | None = None,
    ) -> ConstrainedNode:
        node = ConstrainedNode(
            self.gcs,
            hide_files=hide_files,
            cover_dirs=cover_dirs,
            user_namespaces=user_namespaces,
            replace=replace,
        )
        self.started.append(node)
        return node

    def stop_all(self) -> set[int]:
        pids: set[int] = set()
        for node in self.started:
            pids |= node.stop()
        return pids


@pytest.fixture(scope="module")
def make_node(cluster: LocalCluster) -> Iterator[NodeMaker]:
    maker = NodeMaker(cluster.cluster.gcs_address)
    try:
        yield maker
    finally:
        left = wait_gone(maker.stop_all())
        assert not left, f"processes of the constrained nodes were left: {sorted(left)}"
