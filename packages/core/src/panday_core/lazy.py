"""Lazy package attributes (PEP 562), shared by every panday package's ``__init__``.

A package lists ``name -> module`` and binds ``__getattr__ = lazy_getattr(...)``: a name is
imported the first time it is used, so importing one submodule on the CLI's start-up path
does not pay for all of them.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, MutableMapping


def lazy_getattr(
    package: str, table: Mapping[str, str], namespace: MutableMapping[str, object]
) -> Callable[[str], object]:
    """A module ``__getattr__`` importing `table[name]` on first use and caching it."""

    def __getattr__(name: str) -> object:  # noqa: N807 - the PEP 562 hook's own name
        module = table.get(name)
        if module is None:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        import importlib

        value: object = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
