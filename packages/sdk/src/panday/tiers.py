"""The tier registry: one table of every tier panday knows, and what follows from it.

Each row names the tier, the package that implements it, the platform it runs on, whether
it runs commands, and where core keeps its declared capability table. Everything else
(which tier `auto` picks, whether a tier is available here and why not, which table a
policy is judged by) is derived from that one table, so a tier whose package is not
installed on this platform (`pip install panday` installs T2 Linux only on Linux and T2
macOS only on macOS) is *unavailable, with its reason*, and never a `ModuleNotFoundError`;
a policy is still judged for it by the table core declares for it.

Tier packages are imported only when asked for, so the CLI pays for the one it uses.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import ModuleType

    from panday_core.capabilities import TierCapabilities
    from panday_core.policy import SandboxPolicy
    from panday_core.protocol import Sandbox


class Tier:
    """One row of the registry. A plain class: a NamedTuple costs a millisecond to create,
    and this module is on `panday run`'s start-up path."""

    __slots__ = (
        "distribution",
        "host",
        "name",
        "package",
        "platform",
        "runs_commands",
        "sandbox",
        "table",
        "title",
    )

    def __init__(
        self,
        *,
        name: str,
        title: str,
        package: str,
        distribution: str,
        platform: str | None,
        runs_commands: bool,
        table: str,
        host: str,
        sandbox: str,
    ) -> None:
        self.name = name
        self.title = title
        """How messages name it."""
        self.package = package
        """The import package that implements it; its absence makes the tier unavailable."""
        self.distribution = distribution
        """The distribution (what pip installs) that ships `package`."""
        self.platform = platform
        """The `sys.platform` prefix it runs on; None: wherever Python runs."""
        self.runs_commands = runs_commands
        self.table = table
        """The core module holding its declared capability table (`declared_capabilities`)."""
        self.host = host
        """The module whose `host_capabilities` and `unavailable_reason` probe this host."""
        self.sandbox = sandbox
        """``module:Class`` of its async `Sandbox`."""

    def __repr__(self) -> str:
        return f"Tier(name={self.name!r}, package={self.package!r}, platform={self.platform!r})"


REGISTRY: tuple[Tier, ...] = (
    Tier(
        name="t2-linux",
        title="T2 Linux",
        package="panday_tier_linux",
        distribution="panday-tier-linux",
        platform="linux",
        runs_commands=True,
        table="panday_core.declared.t2_linux",
        host="panday_tier_linux.capabilities",
        sandbox="panday_tier_linux.sandbox:T2LinuxSandbox",
    ),
    Tier(
        name="t2-macos",
        title="T2 macOS",
        package="panday_tier_macos",
        distribution="panday-tier-macos",
        platform="darwin",
        runs_commands=True,
        table="panday_core.declared.t2_macos",
        host="panday_tier_macos.capabilities",
        sandbox="panday_tier_macos.sandbox:T2MacosSandbox",
    ),
    Tier(
        name="t0",
        title="T0",
        package="panday_core.t0",
        distribution="panday-core",
        platform=None,
        runs_commands=False,
        table="panday_core.t0.capabilities",
        host="panday_core.t0.capabilities",
        sandbox="panday_core.t0.sandbox:T0Sandbox",
    ),
)
"""Command tiers strongest first, then the rest."""

_PLATFORMS = {"linux": "Linux", "darwin": "macOS"}

COMMAND_TIERS = tuple(t.name for t in REGISTRY if t.runs_commands)
"""Tiers that run commands, strongest first."""
ALL_TIERS = tuple(t.name for t in REGISTRY)
"""Every tier the registry knows. T0 serves file tools in-process and never runs commands."""
AUTO = "auto"
TIER_CHOICES = (AUTO, *ALL_TIERS)


def entry(tier: str) -> Tier:
    """The registry row of `tier` (`KeyError` for a name that is not a tier)."""
    for row in REGISTRY:
        if row.name == tier:
            return row
    raise KeyError(tier)


def _on_this_platform(row: Tier) -> bool:
    return row.platform is None or sys.platform.startswith(row.platform)


def host_command_tiers() -> tuple[str, ...]:
    """The tiers that can run commands on this OS, strongest first (`auto` picks from these).

    Judged by platform alone: a tier for this OS whose package is missing is still listed,
    so that opening it says why it is unavailable rather than silently choosing another.
    """
    return tuple(t.name for t in REGISTRY if t.runs_commands and _on_this_platform(t))


def host_command_tier() -> str | None:
    """The command tier for this OS, or None when panday has none for it."""
    found = host_command_tiers()
    return found[0] if found else None


def check_name(tier: str) -> str:
    """`tier` when it names a tier (or auto); otherwise a `ValueError` listing the choices."""
    if tier not in TIER_CHOICES:
        choices = ", ".join(TIER_CHOICES)
        raise ValueError(f"tier: {tier!r} is not a tier; choose one of {choices}")
    return tier


def _import(name: str) -> ModuleType:
    import importlib  # noqa: PLC0415 - lazy: only this path needs it

    return importlib.import_module(name)


def absent_reason(tier: str) -> str | None:
    """Why `tier` cannot even be loaded here (another platform's tier, or its package not
    installed), or None when its package imports. Nothing is probed."""
    row = entry(tier)
    if not _on_this_platform(row):
        assert row.platform is not None  # noqa: S101 - _on_this_platform is true for None
        needs = _PLATFORMS.get(row.platform, row.platform)
        return f"{row.title} needs {needs}; this host is {sys.platform}"
    try:
        _import(row.package)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing == row.package or row.package.startswith(f"{missing}."):
            where = _PLATFORMS.get(row.platform or "", "every OS")
            return (
                f"its package {row.distribution} is not installed in this environment "
                f"({sys.prefix}); `pip install panday` installs it on {where}"
            )
        return (
            f"{row.distribution} is installed but cannot be imported: no module named {missing!r}"
        )
    return None


def require(tier: str) -> Tier:
    """The registry row of `tier`, or `TierUnavailable` when its package cannot load here."""
    reason = absent_reason(tier)
    if reason is not None:
        from panday_core.errors import TierUnavailable  # noqa: PLC0415 - error path

        raise TierUnavailable(tier, reason)
    return entry(tier)


def choose(
    policy: SandboxPolicy,
    tier: str,
    *,
    candidates: Sequence[str] | None = None,
    capabilities: Callable[[str], TierCapabilities] | None = None,
) -> str:
    """The tier a session opens with: `tier` itself when one is named (never replaced by
    another, whatever it can or cannot do), else the strongest candidate that enforces the
    whole policy here. Either way, `TierUnavailable` with the reason when the chosen tier's
    package cannot load on this host.

    With a single candidate (every OS today) nothing is probed here: the tier's own
    `create` checks the policy against what this host can enforce, before spawning, and
    refuses by field. With several, each one's host table is checked in order; when none
    enforces everything, the strongest one's refusals are raised.
    """
    if check_name(tier) != AUTO:
        require(tier)
        return tier
    found = tuple(candidates) if candidates is not None else host_command_tiers()
    if not found:
        from panday_core.errors import TierUnavailable  # noqa: PLC0415 - error path

        raise TierUnavailable(AUTO, f"panday has no tier that runs commands on {sys.platform}")
    if len(found) == 1:
        require(found[0])
        return found[0]
    from panday_core.capabilities import check_policy  # noqa: PLC0415 - several candidates only
    from panday_core.errors import PolicyViolation  # noqa: PLC0415

    table = capabilities or host_capabilities
    first_refusals = None
    for name in found:
        refusals = check_policy(policy, table(name))
        if not refusals:
            return name
        first_refusals = first_refusals or refusals
    raise PolicyViolation(found[0], first_refusals or ())


def host_capabilities(tier: str) -> TierCapabilities:
    """The capability table of `tier` as it holds on this host (probed where it must be);
    `TierUnavailable` when its package cannot load here (`declared` still answers)."""
    row = require(tier)
    module = _import(row.host)
    if row.host == row.table:  # T0: its declared table, with the resolver this host has
        t0_table: TierCapabilities = module.declared_capabilities()
        return t0_table
    table: TierCapabilities = module.host_capabilities()
    return table


def declared(tier: str) -> TierCapabilities:
    """The capability table a tier declares, from core: available whatever is installed."""
    row = entry(tier)
    module = _import(row.table)
    if tier == "t0":
        # The table with the kernel's openat2 resolver; docs/tiers/t0.md states the
        # fallback walk's mechanism beside it.
        t0_table: TierCapabilities = module.declared_capabilities("openat2")
        return t0_table
    table: TierCapabilities = module.declared_capabilities()
    return table


def unavailable_reason(tier: str) -> str | None:
    """None when `tier` can run on this host; otherwise why not, in one line."""
    absent = absent_reason(tier)
    if absent is not None:
        return absent
    row = entry(tier)
    if row.host == row.table:  # T0: in-process, runs wherever Python does
        return None
    reason: str | None = _import(row.host).unavailable_reason()
    return reason


def sandbox(tier: str) -> Sandbox:
    """A fresh instance of `tier`'s async `Sandbox` (`TierUnavailable` when it cannot load)."""
    module, _, name = require(tier).sandbox.partition(":")
    made: Sandbox = getattr(_import(module), name)()
    return made
