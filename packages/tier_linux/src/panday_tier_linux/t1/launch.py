"""T1's launcher: a session's spawning thread, restricted once, starts command threads,
which restrict themselves further and spawn the commands.

Landlock domains, seccomp filters (without TSYNC), ``no_new_privs``, capabilities and
(after ``unshare(CLONE_FS)``) the working directory all belong to one *thread*, and a
thread or child inherits them from the thread that made it. Two kinds of thread:

* a `Spawner`, one per session, kept until the session closes: it sets
  ``PR_SET_NO_NEW_PRIVS``, empties its capability bounding set (a root caller's: with
  no_new_privs, an exec'd program gets nothing back), and loads the seccomp program
  (compiled by `seccomp`, per-user cache). These are the same for every command of the
  session, and loading the program is most of their cost (the kernel runs it once per
  syscall number to cache what it always allows: ~0.35 ms here, every command before);
* a `CommandThread`, started by the spawner (so it inherits the above): it unshares its
  file-system context, empties its capability sets (a root caller's command runs as uid 0
  with none) and restricts itself with a command's Landlock ruleset, once. It then makes
  that command's one ``posix_spawn`` (`panday_core.process.spawn`'s `run_in`) from the
  command's directory, and the spawn of every later command whose ruleset has the same
  rules (the workspace's entries are listed again for each command, and compared object by
  object); the first command whose rules differ ends it and gets a new one. A thread cannot
  lift a ruleset, and each holds one domain: so rulesets never pile up (Landlock stacks at
  most 16), and commands ruled alike share one domain (Landlock's signal and abstract-socket
  scopes then join them: a process that outlived its command can be signalled by the next,
  never by anything outside).

The caller's other threads never have any of it. No ``preexec_fn`` (unsafe in a threaded
caller), no re-exec of an interpreter (14 ms here against 1.1 ms for ``posix_spawn`` of
/bin/true). The spawner keeps its capabilities (only its bounding set is emptied), so a
caller that changes its uid later (glibc makes every thread follow) is not refused.

Everything a command thread needs after restricting itself is computed before (the
spawn's file actions, the program's path): it cannot read /proc or panday's own code.
"""

from __future__ import annotations

import _thread
import ctypes
import os

from panday_core.startup import suppress

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
_SIGKILL = 9
_WAIT_S = 0.05

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
    """What a command thread applies to itself once, before its first spawn (on top of
    what it inherits from the session's `Spawner`)."""

    __slots__ = ("root", "ruleset")

    def __init__(self, *, ruleset: Ruleset, root: bool) -> None:
        self.ruleset = ruleset
        self.root = root

    def apply(self, spawner: Spawner) -> None:
        """Restrict the calling thread (irreversibly: a command thread of its own)."""
        _check(_libc.unshare(CLONE_FS), "unshare(CLONE_FS)")
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
    a command thread would run the caller's finalizers under the command's restrictions
    (where they fail). Between two spawns the command threads and the spawner wait inside
    a lock's acquire, where nothing is allocated; a collection that still began on the
    spawner would run under its seccomp program and without capabilities, never under a
    command's Landlock ruleset."""
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


class CommandThread:
    """A thread started by the session's spawner: it restricts itself once
    (`Restrictions`: the command's ruleset among them), then makes the spawn of that command
    and of each later one whose restrictions are the same (`key`: the ruleset's rules,
    object by object, and whether the caller is root), each from its own directory. The
    session ends it when a command's restrictions differ (a new one is started) or at close.

    One spawn at a time: the jail serialises its callers (a spawn takes a millisecond).

    A caller interrupted while it waits for a spawn (a signal handler raised: Ctrl-C)
    abandons it: the thread serves no later command (its answer could be taken for the
    next one's), and whichever side holds the answer kills and reaps the child (nothing
    would supervise it)."""

    __slots__ = (
        "_abandoned",
        "_answered",
        "_box",
        "_call",
        "_cwd_fd",
        "_done",
        "_go",
        "_handoff",
        "_pid",
        "_restrictions",
        "key",
    )

    def __init__(self, restrictions: Restrictions, key: object) -> None:
        self.key = key
        self._restrictions: Restrictions | None = restrictions
        self._pid = os.getpid()
        self._go = _thread.allocate_lock()
        self._go.acquire()
        self._done = _thread.allocate_lock()
        self._done.acquire()
        self._call: Callable[[], int] | None = None
        self._cwd_fd = -1
        self._box: list[int | BaseException] = []
        self._handoff = _thread.allocate_lock()
        """Held while the thread answers or the caller abandons: exactly one of them
        then holds the answer."""
        self._abandoned = False
        self._answered = False

    def serves(self, key: object) -> bool:
        """Whether the next command, restricted by `key`, can be spawned here."""
        return self._restrictions is None and self._pid == os.getpid() and self.key == key

    def start(self, spawner: Spawner) -> None:
        """Have `spawner` start the thread; back once it has restricted itself (raises
        `RestrictError` when it could not: it has ended then)."""
        _hold_gc(hold=True)
        try:
            spawner.submit(self)
            try:
                while not self._done.acquire(timeout=_WAIT_S):  # in slices: see `run`
                    pass
            except BaseException:
                self.end()  # it ends once restricted (or at once, having failed)
                raise
        finally:
            _hold_gc(hold=False)
        found = self._box.pop() if self._box else None
        if found is not None:
            raise found if isinstance(found, RestrictError) else RestrictError(str(found))

    def begin(self, spawner: Spawner) -> None:
        """The thread's body (started by the spawner)."""
        restrictions, self._restrictions = self._restrictions, None
        try:
            assert restrictions is not None  # noqa: S101 - begun once
            restrictions.apply(spawner)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._box.append(RestrictError(str(exc)) if isinstance(exc, OSError) else exc)
            self._pid = 0  # serves nothing
            self._done.release()
            return
        self._done.release()
        while True:
            # Waiting in a lock's acquire: nothing is allocated here, so the collector
            # (off while a spawn runs) never starts on this thread between two spawns.
            self._go.acquire()
            call = self._call
            if call is None:
                return
            try:
                os.fchdir(self._cwd_fd)
                self._box.append(call())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                self._box.append(exc)
            with self._handoff:
                abandoned = self._abandoned
                if not abandoned:
                    self._answered = True
                    self._done.release()
            if abandoned:
                try:
                    self._bury()
                finally:
                    _hold_gc(hold=False)  # left to this thread by the caller (`run`)
                return

    def fail(self, exc: BaseException) -> None:
        """The spawner could not start the thread (or is gone)."""
        self._restrictions = None
        self._pid = 0
        self._box.append(exc)
        self._done.release()

    def run(self, cwd_fd: int, call: Callable[[], int]) -> int:
        """`call` (the spawn) made on this thread from the directory `cwd_fd`: its result,
        or its exception raised here."""
        self._box.clear()
        self._cwd_fd = cwd_fd
        self._call = call
        self._answered = False
        _hold_gc(hold=True)
        try:
            self._go.release()
            # A wait with a timeout, again and again: a signal that arrives before the
            # wait blocks (this thread held up between the two calls) interrupts nothing,
            # and its handler runs only when Python code runs here again. Ctrl-C is then
            # seen within 50 ms, not once the spawn is made.
            while not self._done.acquire(timeout=_WAIT_S):
                pass
        except BaseException:
            # The collector stays off until the abandoned spawn is undone: by the thread
            # when it still holds it (a collection there would run the caller's
            # finalizers under the command's restrictions), else here.
            mine = True
            try:
                mine = self._abandon()
            finally:
                if mine:
                    _hold_gc(hold=False)
            raise
        _hold_gc(hold=False)
        self._call = None
        found = self._box.pop() if self._box else RuntimeError("the command thread gave no result")
        if isinstance(found, BaseException):
            raise found
        return found

    def _abandon(self) -> bool:
        """The caller stops waiting for the spawn handed over (see the class docstring).
        True when the thread had answered (the caller undid the spawn), False when the
        thread will undo it."""
        self._pid = 0  # serves no later command
        with self._handoff:
            self._abandoned = True
            # Whether the thread answered, not whether this caller took its answer: a
            # signal's handler can raise just after the wait returned.
            answered = self._answered
        if answered:  # before the caller gave up: the answer is the caller's to undo
            self._bury()
            self._call = None
            self._go.release()  # and the thread, waiting for the next spawn, ends
        return answered

    def _bury(self) -> None:
        """Kill and reap the child of an abandoned spawn (its process group: spawned with
        setsid), if one was made."""
        found = self._box.pop() if self._box else None
        if isinstance(found, int):
            with suppress(OSError):
                os.killpg(found, _SIGKILL)
            with suppress(ChildProcessError):
                os.waitpid(found, 0)

    def end(self) -> None:
        """End the thread (idempotent; a no-op in a forked child, where it does not run)."""
        if self._pid == os.getpid():
            self._pid = 0
            self._call = None
            self._go.release()


class Spawner:
    """A session's spawning thread (see the module docstring), started at its first
    command and ended by `close`; it starts the session's `CommandThread`s."""

    __slots__ = ("_ended", "_failed", "_jobs", "_lock", "_pid", "bounding_dropped", "program")

    def __init__(self, program: bytes) -> None:
        self.program = program
        """The seccomp program (`seccomp.FilterSpec(namespaces=False)`, compiled)."""
        self.bounding_dropped = False
        self._lock = _thread.allocate_lock()
        self._jobs: SimpleQueue[CommandThread | None] | None = None
        self._pid = 0
        self._failed = ""
        self._ended = _thread.allocate_lock()

    def submit(self, thread: CommandThread) -> None:
        """Have the spawning thread start `thread` (started itself first, in this process)."""
        with self._lock:
            if self._jobs is None or self._pid != os.getpid():  # first, or a forked child
                self._start()
            if self._failed:
                raise RestrictError(self._failed)
            jobs = self._jobs
            assert jobs is not None  # noqa: S101 - set by _start
            jobs.put(thread)

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

    def _loop(self, jobs: SimpleQueue[CommandThread | None], ready: _thread.LockType) -> None:
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
                thread = jobs.get()
                if thread is None:
                    break
                try:
                    _thread.start_new_thread(thread.begin, (self,))
                except BaseException as exc:  # noqa: BLE001 - handed to the command's caller
                    thread.fail(exc)
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
