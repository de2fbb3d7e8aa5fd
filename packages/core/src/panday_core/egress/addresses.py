"""Which resolved addresses the egress proxy refuses to connect to, and why.

The allowlist says which *names* a command may reach; this module stops an allowlisted
name from being turned into a door to the host or its network: a name whose DNS answer is
loopback, private, link-local, site-local, CGNAT, multicast, unspecified, reserved or a
cloud metadata endpoint is refused, unless that exact IP literal is itself in
``net.allow``. Addresses that embed an IPv4 address (IPv4-mapped, 6to4, NAT64) are judged
by the address they embed, so ``::ffff:127.0.0.1`` is as loopback as ``127.0.0.1``.

The rule is "globally routable, or refused", not a list of what to refuse: an IPv6 address
must lie in the global unicast space IANA allocates (``2000::/3``), and ranges Python's
`ipaddress` still calls global although they are not (site-local ``fec0::/10``, the
documentation prefix ``3fff::/20``, the deprecated 6to4 relay anycast ``192.88.99.0/24``,
SRv6 ``5f00::/16``) are named below.
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Metadata services answer on addresses that look harmless to a range check (Azure's wire
# server is a public address), so they are listed by name as well.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle instance metadata
        "169.254.169.253",  # AWS VPC DNS resolver
        "169.254.170.2",  # AWS ECS task metadata and credentials
        "169.254.169.123",  # AWS time sync
        "168.63.129.16",  # Azure wire server (a public address)
        "100.100.100.200",  # Alibaba Cloud metadata
        "192.0.0.192",  # Oracle Cloud metadata
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS DNS over IPv6
        "fd00:ec2::123",  # AWS time sync over IPv6
    )
)

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")
# Not globally routable, although `ipaddress` (3.11 to 3.13) reports them as global.
_NOT_GLOBAL: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...] = (
    (ipaddress.ip_network("192.88.99.0/24"), "the deprecated 6to4 relay anycast range"),
    (ipaddress.ip_network("3fff::/20"), "the IPv6 documentation range"),
    (ipaddress.ip_network("2001:db8::/32"), "the IPv6 documentation range"),
    (ipaddress.ip_network("5f00::/16"), "the SRv6 SID range"),
)
_IETF_PROTOCOL = ipaddress.ip_network("192.0.0.0/24")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")
"""RFC 8215's local-use NAT64 prefix: a network carves its own translator prefix of any
RFC 6052 length out of it, so where the IPv4 address sits cannot be known from outside
(judging the last 32 bits let the /48 encoding of 169.254.169.254 pass as 8.8.8.8)."""
_V4_COMPATIBLE = ipaddress.ip_network("::/96")


def _embedded_v4(addr: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address an IPv6 address stands for, with the name of the embedding."""
    if addr.ipv4_mapped is not None:
        return "IPv4-mapped", addr.ipv4_mapped
    if addr.sixtofour is not None:
        return "6to4", addr.sixtofour
    if addr in _NAT64:
        return "NAT64", ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def address_refusal(addr: IPAddress) -> str | None:  # noqa: C901, PLR0911, PLR0912 - one branch per named class
    """Why the proxy must not connect to `addr` (a resolved address), or None if it may."""
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.scope_id:
            return f"{addr} carries a zone index, which only makes sense on a local link"
        if addr in _LOCAL_NAT64:
            return (
                f"{addr} is in the local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215), whose "
                "embedded IPv4 address cannot be located (not globally routable)"
            )
        embedded = _embedded_v4(addr)
        if embedded is not None:
            how, v4 = embedded
            inner = address_refusal(v4)
            return None if inner is None else f"{addr} is {how} for {inner}"
        if addr in _V4_COMPATIBLE and not addr.is_loopback and not addr.is_unspecified:
            return f"{addr} is a deprecated IPv4-compatible address (reserved)"
    if addr in METADATA_ADDRESSES:
        return f"{addr} is a cloud metadata address"
    if addr.is_unspecified:
        return f"{addr} is the unspecified address"
    if addr.is_loopback:
        return f"{addr} is a loopback address"
    if addr.is_link_local:
        return f"{addr} is a link-local address"
    if addr.is_multicast:
        return f"{addr} is a multicast address"
    if isinstance(addr, ipaddress.IPv4Address) and addr in _CGNAT:
        return f"{addr} is in the shared (CGNAT) address space"
    if addr.is_reserved or (isinstance(addr, ipaddress.IPv4Address) and addr in _IETF_PROTOCOL):
        return f"{addr} is a reserved address"
    if addr.is_private:
        return f"{addr} is a private address"
    if isinstance(addr, ipaddress.IPv6Address) and addr not in _GLOBAL_UNICAST_V6:
        where = (
            "a site-local address"
            if addr in _SITE_LOCAL
            else "outside the global unicast space 2000::/3"
        )
        return f"{addr} is {where} (not globally routable)"
    for net, what in _NOT_GLOBAL:
        if addr in net:
            return f"{addr} is in {what} (not globally routable)"
    if not addr.is_global:
        return f"{addr} is not a globally routable address"
    return None
