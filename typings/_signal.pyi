# CPython's C signal module: the numbers and `signal()` that `signal` re-exports, without
# the enum wrappers (enum costs about 2 ms at start-up; see panday_core/startup.py).
# Typeshed has no stub for it; this covers what panday uses.
from collections.abc import Callable
from types import FrameType
from typing import TypeAlias

SIGHUP: int
SIGINT: int
SIGKILL: int
SIGPIPE: int
SIGTERM: int
SIGXFSZ: int
SIG_DFL: int
SIG_IGN: int

_Handler: TypeAlias = Callable[[int, FrameType | None], object] | int | None

def signal(signalnum: int, handler: _Handler, /) -> _Handler: ...
def pidfd_send_signal(pidfd: int, sig: int, siginfo: None = None, flags: int = 0, /) -> None: ...
