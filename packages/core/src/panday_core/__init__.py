"""panday_core: the fail-closed policy model, errors, capabilities and the Sandbox protocol.

Imports nothing else of panday's; every tier and the SDK build on it.

The names below are imported lazily (PEP 562 `__getattr__`): importing one submodule on the
CLI's start-up path must not pay for all of them.
"""

from __future__ import annotations

from panday_core.lazy import lazy_getattr

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)

if TYPE_CHECKING:
    from panday_core.capabilities import (
        FieldSupport,
        Guarantee,
        Refusal,
        Support,
        TierCapabilities,
        check_policy,
        policy_fields,
        require_enforceable,
    )
    from panday_core.errors import (
        CommandNotFound,
        Internal,
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
        policy_from_dict,
        policy_from_json,
        policy_from_toml,
        policy_to_dict,
    )
    from panday_core.protocol import Sandbox as Sandbox
    from panday_core.types import (
        ExecEvent,
        ExecExit,
        ExecResult,
        ExecSpec,
        LimitBreach,
        LimitKind,
        OutputChunk,
        SandboxHandle,
        SandboxTier,
        SessionSpec,
        Snapshot,
    )

_LAZY = {
    "CommandNotFound": "panday_core.errors",
    "ExecEvent": "panday_core.types",
    "ExecExit": "panday_core.types",
    "ExecResult": "panday_core.types",
    "ExecSpec": "panday_core.types",
    "FieldSupport": "panday_core.capabilities",
    "FieldError": "panday_core.policy",
    "FsPolicy": "panday_core.policy",
    "Guarantee": "panday_core.capabilities",
    "Internal": "panday_core.errors",
    "LimitBreach": "panday_core.types",
    "LimitExceeded": "panday_core.errors",
    "LimitKind": "panday_core.types",
    "Limits": "panday_core.policy",
    "NetPolicy": "panday_core.policy",
    "PathRefused": "panday_core.errors",
    "OutputChunk": "panday_core.types",
    "PolicyError": "panday_core.errors",
    "PolicyViolation": "panday_core.errors",
    "Refusal": "panday_core.capabilities",
    "Sandbox": "panday_core.protocol",
    "SandboxError": "panday_core.errors",
    "SandboxHandle": "panday_core.types",
    "SandboxPolicy": "panday_core.policy",
    "SessionClosed": "panday_core.errors",
    "SandboxTier": "panday_core.types",
    "SessionSpec": "panday_core.types",
    "Snapshot": "panday_core.types",
    "Support": "panday_core.capabilities",
    "TierCapabilities": "panday_core.capabilities",
    "TierUnavailable": "panday_core.errors",
    "Unsupported": "panday_core.errors",
    "WorkspaceUnusable": "panday_core.errors",
    "check_policy": "panday_core.capabilities",
    "load_policy": "panday_core.policy",
    "policy_fields": "panday_core.capabilities",
    "policy_from_dict": "panday_core.policy",
    "policy_from_json": "panday_core.policy",
    "policy_from_toml": "panday_core.policy",
    "policy_to_dict": "panday_core.policy",
    "require_enforceable": "panday_core.capabilities",
}

__all__ = [
    "CommandNotFound",
    "ExecEvent",
    "ExecExit",
    "ExecResult",
    "ExecSpec",
    "FieldError",
    "FieldSupport",
    "FsPolicy",
    "Guarantee",
    "Internal",
    "LimitBreach",
    "LimitExceeded",
    "LimitKind",
    "Limits",
    "NetPolicy",
    "OutputChunk",
    "PathRefused",
    "PolicyError",
    "PolicyViolation",
    "Refusal",
    "Sandbox",
    "SandboxError",
    "SandboxHandle",
    "SandboxPolicy",
    "SandboxTier",
    "SessionClosed",
    "SessionSpec",
    "Snapshot",
    "Support",
    "TierCapabilities",
    "TierUnavailable",
    "Unsupported",
    "WorkspaceUnusable",
    "check_policy",
    "load_policy",
    "policy_fields",
    "policy_from_dict",
    "policy_from_json",
    "policy_from_toml",
    "policy_to_dict",
    "require_enforceable",
]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
