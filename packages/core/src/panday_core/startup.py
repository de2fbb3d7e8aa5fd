"""Stand-ins that keep `panday run`'s start-up path off costly standard-library imports.

`panday run` starts once per tool call an agent makes, and its cached-plan path
(`panday.cli_fast`) imports only what that run needs. `contextlib` imports `collections`
and `functools`, and `signal` wraps its numbers in an `enum`: about 4 ms of every start
here, for one context manager and a few signal numbers. Modules on that path use
`suppress` below and CPython's `_signal` (the numbers and `signal()` that `signal`
re-exports) instead. Everything else may import the standard modules freely.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag without importing typing
if TYPE_CHECKING:
    from types import TracebackType


class suppress:  # noqa: N801 - named as the contextlib original it stands in for
    """`contextlib.suppress`: leave the ``with`` block quietly on one of `exceptions`."""

    __slots__ = ("exceptions",)

    def __init__(self, *exceptions: type[BaseException]) -> None:
        self.exceptions = exceptions

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        return exc_type is not None and issubclass(exc_type, self.exceptions)
