"""The session's egress rules: which host, port and resolved address a request may reach.

Built once per proxy from the policy's `net` section. Names are matched with
`panday_core.domains.host_matches` (``*.example.com`` covers subdomains only, never the
apex); `net.deny` wins over `net.allow`; the port must be in `net.ports`. Resolved
addresses are then judged by `addresses.address_refusal`, except an address that is itself
listed as an IP literal in `net.allow`, which the user named on purpose.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from panday_core.domains import IP, host_matches, normalize_pattern, pattern_kind
from panday_core.egress.addresses import IPAddress, address_refusal

if TYPE_CHECKING:
    from panday_core.policy import NetPolicy


def normalize_host(raw: str) -> str:
    """The canonical form of a requested host, or ValueError saying why it is not a host.

    One trailing dot (an absolute name) is accepted and dropped; a wildcard is a pattern,
    never a host, so it is refused here.
    """
    text = raw.removesuffix(".") if not raw.endswith("..") else raw
    host = normalize_pattern(text)
    if host.startswith("*"):
        raise ValueError(f"{raw!r} is a wildcard pattern, not a host name")
    return host


def parse_address(text: str) -> IPAddress | None:
    """`text` as an IP address, or None when it is a name."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


class EgressRules:
    """`net.allow`, `net.deny` and `net.ports` of one session, ready to answer requests."""

    __slots__ = ("allow", "allowed_addresses", "denied_addresses", "deny", "ports")

    def __init__(self, net: NetPolicy) -> None:
        self.allow: tuple[str, ...] = net.allow
        self.deny: tuple[str, ...] = net.deny
        self.ports: frozenset[int] = frozenset(net.ports)
        self.allowed_addresses: frozenset[IPAddress] = frozenset(
            ipaddress.ip_address(p) for p in net.allow if pattern_kind(p) == IP
        )
        self.denied_addresses: frozenset[IPAddress] = frozenset(
            ipaddress.ip_address(p) for p in net.deny if pattern_kind(p) == IP
        )

    def check_host(self, host: str, port: int) -> tuple[bool, str]:
        """(allowed, reason) for a normalised host and a destination port, before resolving."""
        for pattern in self.deny:
            if host_matches(pattern, host):
                return False, f"{host} is denied by net.deny {pattern!r}"
        matched = next((p for p in self.allow if host_matches(p, host)), None)
        if matched is None:
            if not self.allow:
                return False, f"{host} is not allowed: net.allow is empty (no network)"
            return False, f"{host} is not in net.allow"
        if port not in self.ports:
            shown = ", ".join(str(p) for p in sorted(self.ports))
            return False, f"port {port} is not in net.ports [{shown}]"
        return True, f"{host} is allowed by net.allow {matched!r}"

    def check_address(self, host: str, addr: IPAddress) -> str | None:
        """Why `host`'s resolved address `addr` must not be reached, or None if it may be."""
        if addr in self.denied_addresses:
            return f"{host} resolves to {addr}, which net.deny lists"
        if addr in self.allowed_addresses:
            return None
        problem = address_refusal(addr)
        if problem is None:
            return None
        if str(addr) == host:
            return f"{problem}; the proxy does not connect there unless net.allow lists it"
        return (
            f"{host} resolves to {problem}; the proxy does not connect there "
            f"unless net.allow lists that IP literal"
        )
