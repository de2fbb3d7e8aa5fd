"""The egress proxy: the only way out for a session whose policy has a `net.allow` list.

Platform-neutral asyncio; a tier runs one `EgressProxy` per session and points the jail's
proxy variables at it (see docs/egress.md). Nothing here is imported by
``panday_core/__init__.py``: asyncio costs start-up time the CLI does not pay unless a
session needs the network.
"""

from __future__ import annotations

from panday_core.egress.audit import AuditEvent, JsonlAuditLog, encode_event
from panday_core.egress.limits import ProxyLimits
from panday_core.egress.resolver import ResolveError, Resolver, StaticResolver, SystemResolver
from panday_core.egress.rules import EgressRules
from panday_core.egress.server import SESSION_USER, EgressProxy
from panday_core.egress.thread import ProxySettings, ProxyThread

__all__ = [
    "SESSION_USER",
    "AuditEvent",
    "EgressProxy",
    "EgressRules",
    "JsonlAuditLog",
    "ProxyLimits",
    "ProxySettings",
    "ProxyThread",
    "ResolveError",
    "Resolver",
    "StaticResolver",
    "SystemResolver",
    "encode_event",
]
