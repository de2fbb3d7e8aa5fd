"""Host patterns for `net.allow` / `net.deny` and the manifest's `net` capability.

Accepted forms (anything else is refused with a reason that says what was wrong):

* an exact host name: ``api.github.com`` -- letters, digits and hyphens in dot-separated
  labels of 1-63 characters, at most 253 characters, case-insensitive (stored lowercase);
* a subdomain wildcard: ``*.example.com`` -- the ``*`` must be the whole leftmost label and
  be followed by at least two labels. It matches every name *below* ``example.com`` at any
  depth (``a.example.com``, ``a.b.example.com``) and never the apex ``example.com`` itself:
  write both when both are meant;
* an IP literal: ``203.0.113.7`` or ``2001:db8::1`` (no brackets, no zone). The egress
  proxy connects to an IP literal only when that literal is listed.

Refused: URLs (``https://...``), ``host:port``, paths, user-info, bracketed IPv6, wildcards
anywhere but a whole leftmost label (``*``, ``*example.com``, ``api.*.com``), a wildcard
over a single label (``*.com``), non-ASCII names (write the ``xn--`` punycode form), a
trailing dot, whitespace, empty strings.

Deliberately free of `re` and heavy imports: this module is on the CLI's start-up path.
"""

from __future__ import annotations

import functools

_MAX_NAME = 253
_MAX_LABEL = 63
_LDH = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")

EXACT = "exact"
WILDCARD = "wildcard"
IP = "ip"


def _label_problem(label: str) -> str | None:
    if not label:
        return "has an empty label (two dots in a row, or a leading dot)"
    if len(label) > _MAX_LABEL:
        return f"has a label longer than {_MAX_LABEL} characters"
    if not set(label) <= _LDH:
        return f"label {label!r} may contain only letters, digits and hyphens"
    if label.startswith("-") or label.endswith("-"):
        return f"label {label!r} may not start or end with a hyphen"
    return None


@functools.lru_cache(maxsize=4096)
def _ip_literal(text: str) -> str | None:
    """The canonical form of an IP literal, None for anything else. Cached, and names are
    ruled out without parsing: the egress proxy asks this several times per request."""
    if not (text[:1].isdigit() or ":" in text):
        return None  # an IPv4 literal starts with a digit; an IPv6 one has a colon
    import ipaddress

    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _form_problem(text: str) -> str | None:  # noqa: PLR0911 - one early return per refused form
    """Name the first way `text` is not a host pattern, in words a user can act on."""
    if not text:
        return "is empty"
    if text != text.strip() or any(c.isspace() for c in text):
        return "contains whitespace"
    if not text.isascii():
        return "is not ASCII; write the punycode (xn--) form of the name"
    if "://" in text:
        return "is a URL; write only the host name (e.g. 'api.github.com')"
    if "/" in text:
        return "contains '/'; write only the host name, without a path"
    if "@" in text:
        return "contains '@'; write only the host name, without user info"
    if text.startswith("["):
        return "is a bracketed address; write an IPv6 literal without brackets"
    if ":" in text and _ip_literal(text) is None:
        return "looks like host:port; ports go in net.ports, not in the host pattern"
    if text.endswith("."):
        return "ends with a dot; write the name without the trailing dot"
    return None


def normalize_pattern(text: str) -> str:
    """Return the canonical form of a host pattern, or raise ValueError saying why not."""
    problem = _form_problem(text)
    if problem is not None:
        raise ValueError(f"{text!r} {problem}")
    literal = _ip_literal(text)
    if literal is not None:
        return literal
    name = text.lower()
    if len(name) > _MAX_NAME:
        raise ValueError(f"{text!r} is longer than {_MAX_NAME} characters")
    labels = name.split(".")
    wildcard = labels[0] == "*"
    if wildcard:
        labels = labels[1:]
        if len(labels) < 2:  # noqa: PLR2004 - "*.com" would cover a whole top-level domain
            raise ValueError(
                f"{text!r} is a wildcard over a single label; "
                "a wildcard needs at least two labels after '*.' (e.g. '*.example.com')"
            )
    if any("*" in label for label in labels):
        raise ValueError(
            f"{text!r} has a '*' that is not the whole leftmost label; "
            "only the form '*.example.com' is accepted"
        )
    for label in labels:
        problem = _label_problem(label)
        if problem is not None:
            raise ValueError(f"{text!r} {problem}")
    if labels[-1].isdigit():
        raise ValueError(f"{text!r} ends in an all-digit label but is not a valid IP address")
    return name


def pattern_kind(pattern: str) -> str:
    """`EXACT`, `WILDCARD` or `IP` for an already-normalised pattern."""
    if pattern.startswith("*."):
        return WILDCARD
    if _ip_literal(pattern) is not None:
        return IP
    return EXACT


def host_matches(pattern: str, host: str) -> bool:
    """Whether `host` (a request's host, any case) is covered by a normalised pattern.

    A wildcard covers strict subdomains only, never the apex; IP literals compare as
    addresses (so ``::1`` and ``0:0::1`` are the same host).
    """
    literal = _ip_literal(host)
    if literal is not None:
        return pattern_kind(pattern) == IP and _ip_literal(pattern) == literal
    name = host.lower().removesuffix(".")
    if pattern.startswith("*."):
        suffix = pattern[1:]  # ".example.com"
        return name.endswith(suffix) and len(name) > len(suffix)
    return name == pattern
