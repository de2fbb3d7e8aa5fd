"""panday_tier_linux: T2 on Linux through bubblewrap, seccomp and cgroups.

Names are imported lazily (PEP 562): the CLI's start-up path pays only for what it uses.
"""

from __future__ import annotations

from panday_core.lazy import lazy_getattr

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)

if TYPE_CHECKING:
    from panday_tier_linux.argv import JailSpec, build_argv
    from panday_tier_linux.capabilities import declared_capabilities, host_capabilities
    from panday_tier_linux.enforcement import Enforcement
    from panday_tier_linux.probe import host_report, unavailable_reason
    from panday_tier_linux.sandbox import T2LinuxSandbox
    from panday_tier_linux.session import LinuxSession, open_session

_LAZY = {
    "Enforcement": "panday_tier_linux.enforcement",
    "JailSpec": "panday_tier_linux.argv",
    "LinuxSession": "panday_tier_linux.session",
    "T2LinuxSandbox": "panday_tier_linux.sandbox",
    "build_argv": "panday_tier_linux.argv",
    "declared_capabilities": "panday_tier_linux.capabilities",
    "host_capabilities": "panday_tier_linux.capabilities",
    "host_report": "panday_tier_linux.probe",
    "open_session": "panday_tier_linux.session",
    "unavailable_reason": "panday_tier_linux.probe",
}

__all__ = [
    "Enforcement",
    "JailSpec",
    "LinuxSession",
    "T2LinuxSandbox",
    "build_argv",
    "declared_capabilities",
    "host_capabilities",
    "host_report",
    "open_session",
    "unavailable_reason",
]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
