"""T1's launcher: a sacrificial thread restricts itself, then spawns the command.

Landlock domains, seccomp filters (without TSYNC), ``no_new_privs``, capabilities and
(after ``unshare(CLONE_FS)``) the working directory all belong to one *thread*, and a
child inherits them from the thread that spawned it. So each command gets a new thread
that: unshares its file-system context and enters the command's directory; sets
``PR_SET_NO_NEW_PRIVS``; drops every capability from its bounding, inheritable, permitted
and effective sets (a root caller's command runs as uid 0 with none); restricts itself
with the command's Landlock ruleset; loads the seccomp program (compiled by `seccomp`,
per-user cache); and makes the one ``posix_spawn`` (`panday_core.process.spawn`'s
`run_in`). The thread then ends, and its restrictions with it; the caller's other threads
never had them. No ``preexec_fn`` (unsafe in a threaded caller), no re-exec of an
interpreter (14 ms here against 1.1 ms for ``posix_spawn`` of /bin/true).

Everything the thread needs after restricting itself is computed before (the spawn's file
actions, the program's path): it cannot read /proc or panday's own code any more.
"""

from __future__ import annotations

import _thread
import ctypes
import os

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
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


def drop_capabilities() -> None:
    """Empty this thread's bounding set and its capability sets (only a root caller has
    any): with no_new_privs, an exec'd program gets none back."""
    for cap in range(_CAP_LAST + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            if err == 22:  # noqa: PLR2004 - EINVAL: past the kernel's last capability
                break
            if err != 1:
                raise OSError(err, f"PR_CAPBSET_DROP: {os.strerror(err)}")
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(_libc.capset(header, data), "capset")


def load_seccomp(program: bytes) -> None:
    """Install the BPF `program` (an array of sock_filter) on this thread only."""
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buf))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")


class RestrictError(Exception):
    """The spawning thread could not restrict itself (a host that refuses a Landlock or
    seccomp call): nothing was spawned."""


class Restrictions:
    """What one command's thread applies to itself before it spawns."""

    __slots__ = ("cwd_fd", "program", "root", "ruleset")

    def __init__(self, *, ruleset: Ruleset, program: bytes, cwd_fd: int, root: bool) -> None:
        self.ruleset = ruleset
        self.program = program
        self.cwd_fd = cwd_fd
        self.root = root

    def apply(self) -> None:
        """Restrict the calling thread (irreversibly: call it on a thread of its own)."""
        _check(_libc.unshare(CLONE_FS), "unshare(CLONE_FS)")
        os.fchdir(self.cwd_fd)
        no_new_privs()
        if self.root:
            drop_capabilities()
        self.ruleset.restrict()
        load_seccomp(self.program)


_GC_LOCK = _thread.allocate_lock()
_GC_HELD = [0, False]
"""Spawning threads running now, and whether the collector was enabled before the first."""


def _hold_gc(*, hold: bool) -> None:
    """Keep the cyclic collector off while any spawning thread runs: a collection there
    would run the caller's finalizers under the command's restrictions (where they fail)."""
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


def run_restricted(restrictions: Restrictions) -> Callable[[Callable[[], int]], int]:
    """`spawn`'s `run_in`: make the spawn on a new thread that first restricts itself."""

    def run_in(call: Callable[[], int]) -> int:
        box: list[int | BaseException] = []
        done = _thread.allocate_lock()
        done.acquire()

        def body() -> None:
            try:
                try:
                    restrictions.apply()
                except OSError as exc:
                    raise RestrictError(str(exc)) from exc
                box.append(call())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                box.append(exc)
            finally:
                done.release()

        # `_thread` rather than `threading`: the thread is started and awaited here and
        # nowhere else, and `threading` costs `panday run`'s start-up time to import.
        _hold_gc(hold=True)
        try:
            _thread.start_new_thread(body, ())
            done.acquire()
        finally:
            _hold_gc(hold=False)
        found = box[0] if box else RuntimeError("the spawning thread ended without a result")
        if isinstance(found, BaseException):
            raise found
        return found

    return run_in
