"""panday: run semi-trusted commands under one fail-closed policy.

>>> import panday
>>> with panday.open() as session:  # the embedded default policy, the strongest tier here
...     result = session.run(["echo", "hello"])
>>> result.stdout
b'hello\\n'

`panday.open` gives a synchronous `Session`; `panday.aio.open` an asynchronous one. Names
are imported lazily (PEP 562), so ``import panday`` costs next to nothing and the CLI pays
only for what a command uses.
"""

from __future__ import annotations

from panday_core.lazy import lazy_getattr

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)

if TYPE_CHECKING:
    from panday import aio
    from panday.defaults import default_policy
    from panday.session import Session, open  # noqa: A004 - the public API's name
    from panday_core.capabilities import Guarantee, TierCapabilities
    from panday_core.errors import (
        CommandNotFound,
        LimitExceeded,
        PathRefused,
        PolicyError,
        PolicyViolation,
        SandboxError,
        SessionClosed,
        TierUnavailable,
        Unsupported,
        WorkspaceUnusable,
    )
    from panday_core.policy import (
        FieldError,
        FsPolicy,
        Limits,
        NetPolicy,
        SandboxPolicy,
        load_policy,
    )
    from panday_core.types import ExecExit, ExecResult, LimitBreach, LimitKind, OutputChunk

__version__ = "0.1.0"

_LAZY = {
    "CommandNotFound": "panday_core.errors",
    "ExecExit": "panday_core.types",
    "ExecResult": "panday_core.types",
    "FieldError": "panday_core.policy",
    "FsPolicy": "panday_core.policy",
    "Guarantee": "panday_core.capabilities",
    "LimitBreach": "panday_core.types",
    "LimitExceeded": "panday_core.errors",
    "LimitKind": "panday_core.types",
    "Limits": "panday_core.policy",
    "NetPolicy": "panday_core.policy",
    "OutputChunk": "panday_core.types",
    "PathRefused": "panday_core.errors",
    "PolicyError": "panday_core.errors",
    "PolicyViolation": "panday_core.errors",
    "SandboxError": "panday_core.errors",
    "SandboxPolicy": "panday_core.policy",
    "SessionClosed": "panday_core.errors",
    "Session": "panday.session",
    "TierCapabilities": "panday_core.capabilities",
    "TierUnavailable": "panday_core.errors",
    "Unsupported": "panday_core.errors",
    "WorkspaceUnusable": "panday_core.errors",
    "default_policy": "panday.defaults",
    "load_policy": "panday_core.policy",
    "open": "panday.session",
}

__all__ = [
    "CommandNotFound",
    "ExecExit",
    "ExecResult",
    "FieldError",
    "FsPolicy",
    "Guarantee",
    "LimitBreach",
    "LimitExceeded",
    "LimitKind",
    "Limits",
    "NetPolicy",
    "OutputChunk",
    "PathRefused",
    "PolicyError",
    "PolicyViolation",
    "SandboxError",
    "SandboxPolicy",
    "Session",
    "SessionClosed",
    "TierCapabilities",
    "TierUnavailable",
    "Unsupported",
    "WorkspaceUnusable",
    "__version__",
    "aio",
    "default_policy",
    "load_policy",
    "open",
]


_lazy = lazy_getattr(__name__, _LAZY, globals())


def __getattr__(name: str) -> object:
    if name == "aio":  # a submodule: importing it binds it here
        import importlib

        return importlib.import_module("panday.aio")
    return _lazy(name)
