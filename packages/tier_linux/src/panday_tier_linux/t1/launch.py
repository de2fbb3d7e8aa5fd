"""T1's launcher: a session's spawning thread, restricted once, starts each command's
thread, which restricts itself further and spawns the command.

Landlock domains, seccomp filters (without TSYNC), ``no_new_privs``, capabilities and
(after ``unshare(CLONE_FS)``) the working directory all belong to one *thread*, and a
thread or child inherits them from the thread that made it. Two kinds of thread:

* a `Spawner`, one per session, kept until the session closes: it sets
  ``PR_SET_NO_NEW_PRIVS``, empties its capability bounding set (a root caller's: with
  no_new_privs, an exec'd program gets nothing back), and loads the seccomp program
  (compiled by `seccomp`, per-user cache). These are the same for every command of the
  session, and loading the program is most of their cost (the kernel runs it once per
  syscall number to cache what it always allows: ~0.35 ms here, every command before);
* a command's thread, started by the spawner (so it inherits the above) for one command:
  it unshares its file-system context and enters the command's directory, empties its
  capability sets (a root caller's command runs as uid 0 with none), restricts itself
  with the command's Landlock ruleset (built for each command: the workspace's entries
  are listed again), and makes the one ``posix_spawn`` (`panday_core.process.spawn`'s
  `run_in`). It then ends, and its ruleset with it.

The caller's other threads never have any of it. No ``preexec_fn`` (unsafe in a threaded
caller), no re-exec of an interpreter (14 ms here against 1.1 ms for ``posix_spawn`` of
/bin/true). The spawner keeps its capabilities (only its bounding set is emptied), so a
caller that changes its uid later (glibc makes every thread follow) is not refused.

Everything a command's thread needs after restricting itself is computed before (the
spawn's file actions, the program's path): it cannot read /proc or panday's own code.
"""

from __future__ import annotations

import _thread
import ctypes
import os

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from _queue import SimpleQueue
    from collections.abc import Callable

    from panday_tier_linux.t1.landlock import Ruleset

PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
CLONE_FS = 0x00000200
_CAP_VERSION_3 = 0x20080522
_CAP_LAST = 63

_libc = ctypes.CDLL(None, use_errno=True)


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def no_new_privs() -> None:
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")


def drop_bounding_set() -> None:
    """Empty this thread's capability bounding set (only a root caller's is droppable):
    with no_new_privs, no program it or its children exec gets a capability back."""
    for cap in range(_CAP_LAST + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            if err == 22:  # noqa: PLR2004 - EINVAL: past the kernel's last capability
                break
            if err != 1:
                raise OSError(err, f"PR_CAPBSET_DROP: {os.strerror(err)}")


def clear_capabilities() -> None:
    """Empty this thread's effective, permitted and inheritable sets (and so the ambient)."""
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(_libc.capset(header, data), "capset")


def load_seccomp(program: bytes) -> None:
    """Install the BPF `program` (an array of sock_filter) on this thread only."""
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buf))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")


class RestrictError(Exception):
    """A thread could not restrict itself (a host that refuses a Landlock or seccomp
    call): nothing was spawned."""


class Restrictions:
    """What one command's thread applies to itself before it spawns (on top of what it
    inherits from the session's `Spawner`)."""

    __slots__ = ("cwd_fd", "root", "ruleset")

    def __init__(self, *, ruleset: Ruleset, cwd_fd: int, root: bool) -> None:
        self.ruleset = ruleset
        self.cwd_fd = cwd_fd
        self.root = root

    def apply(self, spawner: Spawner) -> None:
        """Restrict the calling thread (irreversibly: a command's thread of its own)."""
        _check(_libc.unshare(CLONE_FS), "unshare(CLONE_FS)")
        os.fchdir(self.cwd_fd)
        if self.root:
            if not spawner.bounding_dropped:  # the caller became root after it started
                drop_bounding_set()
            clear_capabilities()
        self.ruleset.restrict()


_GC_LOCK = _thread.allocate_lock()
_GC_HELD = [0, False]
"""Commands being spawned now, and whether the collector was enabled before the first."""


def _hold_gc(*, hold: bool) -> None:
    """Keep the cyclic collector off while any command is being spawned: a collection on
    its thread would run the caller's finalizers under the command's restrictions (where
    they fail). The spawner allocates almost nothing of its own between two commands; a
    collection that still began there would run under its seccomp program and without
    capabilities, never under a command's Landlock ruleset."""
    import gc

    with _GC_LOCK:
        if hold:
            if _GC_HELD[0] == 0:
                _GC_HELD[1] = gc.isenabled()
                gc.disable()
            _GC_HELD[0] += 1
        else:
            _GC_HELD[0] -= 1
            if _GC_HELD[0] == 0 and _GC_HELD[1]:
                gc.enable()


class _Job:
    """One command's spawn, handed to the spawner and run on a thread it starts."""

    __slots__ = ("box", "call", "done", "restrictions", "spawner")

    def __init__(
        self, spawner: Spawner, restrictions: Restrictions, call: Callable[[], int]
    ) -> None:
        self.spawner = spawner
        self.restrictions = restrictions
        self.call = call
        self.box: list[int | BaseException] = []
        self.done = _thread.allocate_lock()
        self.done.acquire()

    def run(self) -> None:
        """On the command's own thread: restrict it, then spawn."""
        try:
            try:
                self.restrictions.apply(self.spawner)
            except OSError as exc:
                raise RestrictError(str(exc)) from exc
            self.box.append(self.call())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self.box.append(exc)
        finally:
            self.done.release()

    def fail(self, exc: BaseException) -> None:
        """The spawner could not start the command's thread (or is gone)."""
        self.box.append(exc)
        self.done.release()


class Spawner:
    """A session's spawning thread (see the module docstring), started at its first
    command and ended by `close`. Commands may be spawned from several threads at once:
    each gets a thread of its own, started in turn."""

    __slots__ = ("_ended", "_failed", "_jobs", "_lock", "_pid", "bounding_dropped", "program")

    def __init__(self, program: bytes) -> None:
        self.program = program
        """The seccomp program (`seccomp.FilterSpec(namespaces=False)`, compiled)."""
        self.bounding_dropped = False
        self._lock = _thread.allocate_lock()
        self._jobs: SimpleQueue[_Job | None] | None = None
        self._pid = 0
        self._failed = ""
        self._ended = _thread.allocate_lock()

    def run(self, restrictions: Restrictions, call: Callable[[], int]) -> int:
        """`call` (the spawn) on a new thread that inherits the spawner's restrictions and
        applies `restrictions`; its result, or its exception raised here."""
        job = _Job(self, restrictions, call)
        _hold_gc(hold=True)
        try:
            self._submit(job)
            job.done.acquire()
        finally:
            _hold_gc(hold=False)
        found = job.box[0] if job.box else RuntimeError("the spawning thread gave no result")
        if isinstance(found, BaseException):
            raise found
        return found

    def _submit(self, job: _Job) -> None:
        with self._lock:
            if self._jobs is None or self._pid != os.getpid():  # first, or a forked child
                self._start()
            if self._failed:
                raise RestrictError(self._failed)
            jobs = self._jobs
            assert jobs is not None  # noqa: S101 - set by _start
            jobs.put(job)

    def _start(self) -> None:
        """Start the spawner and wait until it has restricted itself (or failed to)."""
        from _queue import SimpleQueue

        self._jobs = SimpleQueue()
        self._pid = os.getpid()
        self._failed = ""
        ready = _thread.allocate_lock()
        ready.acquire()
        self._ended.acquire(blocking=False)
        # `_thread` rather than `threading`: `threading` costs `panday run`'s start-up time.
        _thread.start_new_thread(self._loop, (self._jobs, ready))
        ready.acquire()

    def _loop(self, jobs: SimpleQueue[_Job | None], ready: _thread.LockType) -> None:
        try:
            try:
                no_new_privs()
                if os.geteuid() == 0:
                    drop_bounding_set()
                    self.bounding_dropped = True
                load_seccomp(self.program)
            except OSError as exc:
                self._failed = str(exc) or "the spawning thread could not restrict itself"
            finally:
                ready.release()
            while not self._failed:
                job = jobs.get()
                if job is None:
                    break
                try:
                    _thread.start_new_thread(job.run, ())
                except BaseException as exc:  # noqa: BLE001 - handed to the command's caller
                    job.fail(exc)
        finally:
            self._ended.release()

    def close(self) -> None:
        """End the spawning thread (idempotent); commands already handed over start first."""
        with self._lock:
            jobs, self._jobs = self._jobs, None
            if jobs is None or self._pid != os.getpid():
                return
            jobs.put(None)
        # It ends at once (it only starts threads); bounded all the same.
        if self._ended.acquire(timeout=5):
            self._ended.release()


def run_restricted(
    spawner: Spawner, restrictions: Restrictions
) -> Callable[[Callable[[], int]], int]:
    """`spawn`'s `run_in`: make the spawn on a command's thread started by `spawner`."""

    def run_in(call: Callable[[], int]) -> int:
        return spawner.run(restrictions, call)

    return run_in
