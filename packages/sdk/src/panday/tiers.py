# Over 500 lines: the built-in entries (100 lines of data) sit beside the registry on purpose.
"""The tier registry: every tier panday knows, each declared by one `Tier` entry.

An entry carries everything tier-specific the rest of panday needs: its package and the
platform it runs on, its declared capability table (in core), the host probe, its openers
(async `Sandbox`, and a synchronous session where it has one), the plan-cache hook of
`panday run` (`planner`), doctor's details, the default ``PATH`` inside, the consent
wording, the source roots the fields lint reads, the doctor probes that apply to it, and
the requirement that installs it. Everything else (which tier `auto` picks, whether a tier
is available here and why not, which table a policy is judged by) is derived from the
entries. Nothing outside this module names a tier or imports a tier's internals: they are
reached through the entry's dotted paths (``module:attribute``), imported only when asked
for, so the CLI pays for the one tier it uses, and a tier whose package is not installed
on this platform is *unavailable, with its reason*, never a `ModuleNotFoundError`.

Adding a tier is its package (or module) + one `register(Tier(...))` + its docs. Python
entry points are not read: `importlib.metadata` alone costs more than `panday run`'s whole
cached start-up (docs/architecture.md, "Adding things"); a tier outside panday's own
packages calls `register` when it is imported, as the test suite's fake tier does.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing's flag without importing typing: `panday run`'s start-up path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from types import ModuleType
    from typing import Protocol

    from panday_core.capabilities import TierCapabilities
    from panday_core.egress.thread import ProxySettings
    from panday_core.policy import SandboxPolicy
    from panday_core.protocol import Sandbox
    from panday_core.types import ExecEvent, ExecSpec, Snapshot

    class SyncSession(Protocol):
        """What a tier's synchronous opener returns: one open session, no event loop."""

        @property
        def id(self) -> str: ...
        @property
        def workspace(self) -> str: ...
        def exec(
            self,
            spec: ExecSpec,
            *,
            stdin_source: int | None = None,
            tty: tuple[int, int] | None = None,
        ) -> Iterator[ExecEvent]: ...
        def put(self, path: str, data: bytes) -> None: ...
        def get(self, path: str, *, max_bytes: int) -> bytes: ...
        def snapshot(self) -> Snapshot: ...
        def enforcement(self) -> object: ...
        def close(self) -> None: ...

    Opener = Callable[..., SyncSession]


class Tier:
    """One entry of the registry. A plain class: a NamedTuple costs a millisecond to create,
    and this module is on `panday run`'s start-up path. Every ``module:attribute`` string
    is imported only when it is used."""

    __slots__ = (
        "consent",
        "declared",
        "declared_args",
        "distribution",
        "doctor",
        "host",
        "maker",
        "name",
        "opener",
        "package",
        "path",
        "planner",
        "platform",
        "probes",
        "requirement",
        "roots",
        "runs_commands",
        "sandbox",
        "strength",
        "title",
        "unavailable",
    )

    def __init__(
        self,
        *,
        name: str,
        title: str,
        package: str,
        distribution: str,
        requirement: str | None,
        platform: str | None,
        runs_commands: bool,
        strength: int,
        declared: str,
        declared_args: tuple[str, ...] = (),
        host: str,
        unavailable: str | None,
        sandbox: str,
        opener: str | None = None,
        planner: str | None = None,
        maker: str | None = None,
        doctor: str | None = None,
        path: str | None = None,
        consent: tuple[str, str],
        roots: tuple[str, ...],
        probes: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.title = title
        """How messages name it."""
        self.package = package
        """The import package that implements it; its absence makes the tier unavailable."""
        self.distribution = distribution
        """The distribution (what pip installs) that ships `package`."""
        self.requirement = requirement
        """Its line in the panday distribution's dependencies (None: panday-core ships it)."""
        self.platform = platform
        """The `sys.platform` prefix it runs on; None: wherever Python runs."""
        self.runs_commands = runs_commands
        self.strength = strength
        """Its isolation (T2: 2): `auto` tries the strongest first."""
        self.declared = declared
        """``module:function`` of the capability table it declares, in core (its
        ``declared/*`` table): what a policy is judged by wherever the tier is not here."""
        self.declared_args = declared_args
        """Arguments that function takes for the documented table."""
        self.host = host
        """``module:function``: its capability table as probed on this host."""
        self.unavailable = unavailable
        """``module:function``: why it cannot run here, or None; None: it runs wherever
        its package imports."""
        self.sandbox = sandbox
        """``module:Class`` of its async `Sandbox` (the async opener)."""
        self.opener = opener
        """``module:function`` opening a synchronous session (policy, egress=); None: the
        synchronous face runs the async `Sandbox` on a private event loop, and proxy
        settings (`egress`) are refused."""
        self.planner = planner
        """The module `panday run` launches cached jails through (host_facts, load, launch,
        run); None: every run takes the full path."""
        self.maker = maker or planner
        """The module that makes and stores a plan on a miss of the cache (make, store),
        imported only then; None: `planner` itself. A module of its own when making a plan
        opens a session whose code imports the planner (no import circle)."""
        self.doctor = doctor
        """``module:function`` returning doctor's details of this host (name -> text)."""
        self.path = path
        """``module:NAME`` of the ``PATH`` a command gets inside when the policy sets none
        (a string, or the tier's base environment holding it)."""
        self.consent = consent
        """How a consent prompt names its sandbox, and what a plugin cannot reach in it."""
        self.roots = roots
        """Import packages whose source holds its enforcement code (the fields lint reads)."""
        self.probes = probes
        """The doctor probes (`panday.probes.PROBES` names) whose guarantee it claims."""

    def __repr__(self) -> str:
        return f"Tier(name={self.name!r}, package={self.package!r}, platform={self.platform!r})"


AUTO = "auto"
REGISTRY: tuple[Tier, ...] = ()
"""Command tiers strongest first, then the rest (`register` keeps it so)."""
COMMAND_TIERS: tuple[str, ...] = ()
"""Tiers that run commands, strongest first."""
ALL_TIERS: tuple[str, ...] = ()
"""Every tier the registry knows. T0 serves file tools in-process and never runs commands."""
TIER_CHOICES: tuple[str, ...] = (AUTO,)

_PLATFORMS = {"linux": "Linux", "darwin": "macOS"}


def _publish(rows: list[Tier]) -> None:
    """Rebind the registry and every name derived from it (read as module attributes, so
    a tier registered later is seen by everyone who reads `tiers.COMMAND_TIERS`)."""
    rows.sort(key=lambda r: (not r.runs_commands, -r.strength))  # stable: ties keep order
    table = tuple(rows)
    names = tuple(t.name for t in table)
    globals().update(
        REGISTRY=table,
        COMMAND_TIERS=tuple(t.name for t in table if t.runs_commands),
        ALL_TIERS=names,
        TIER_CHOICES=(AUTO, *names),
    )


def register(row: Tier) -> Tier:
    """Add `row` to the registry (replacing an entry of the same name); every derived name
    (`COMMAND_TIERS`, `ALL_TIERS`, `TIER_CHOICES`) follows."""
    if row.name == AUTO:
        raise ValueError(f"tier: {AUTO!r} is a choice, not a tier name")
    _publish([*(r for r in REGISTRY if r.name != row.name), row])
    return row


def unregister(name: str) -> None:
    """Remove the entry `name` (a test's fake tier); `KeyError` when there is none."""
    entry(name)
    _publish([r for r in REGISTRY if r.name != name])


register(
    Tier(
        name="t2-linux",
        title="T2 Linux",
        package="panday_tier_linux",
        distribution="panday-tier-linux",
        requirement="panday-tier-linux; sys_platform == 'linux'",
        platform="linux",
        runs_commands=True,
        strength=2,
        declared="panday_core.declared.t2_linux:declared_capabilities",
        host="panday_tier_linux.capabilities:host_capabilities",
        unavailable="panday_tier_linux.probe:unavailable_reason",
        sandbox="panday_tier_linux.sandbox:T2LinuxSandbox",
        opener="panday_tier_linux.session:open_session",
        planner="panday_tier_linux.plan",
        maker="panday_tier_linux.planning",
        doctor="panday_tier_linux.doctor:details",
        path="panday_tier_linux.argv:DEFAULT_PATH",
        consent=(
            "panday's Linux sandbox",
            (
                "see any of your other files (only the workspace and the system's own programs "
                "and libraries are visible)"
            ),
        ),
        roots=("panday_tier_linux",),
        probes=(
            "read-next-to-workspace",
            "write-next-to-workspace",
            "etc-shadow",
            "host-loopback-tcp",
            "host-process-signal",
            "environment-canary",
            "wall-clock",
        ),
    )
)
register(
    Tier(
        name="t1-linux",
        title="T1 Linux",
        package="panday_tier_linux.t1",
        distribution="panday-tier-linux",
        requirement="panday-tier-linux; sys_platform == 'linux'",
        platform="linux",
        runs_commands=True,
        strength=1,
        declared="panday_core.declared.t1_linux:declared_capabilities",
        host="panday_tier_linux.t1.capabilities:host_capabilities",
        unavailable="panday_tier_linux.t1.probe:unavailable_reason",
        sandbox="panday_tier_linux.t1.sandbox:T1LinuxSandbox",
        opener="panday_tier_linux.t1.session:open_session",
        planner="panday_tier_linux.t1.plan",
        doctor="panday_tier_linux.t1.doctor:details",
        path="panday_tier_linux.t1.session:DEFAULT_PATH",
        consent=(
            "panday's Landlock sandbox (T1: no namespaces)",
            (
                "read any of your other files or write outside the workspace, or use the "
                "network; note that it CAN see that your other processes exist"
            ),
        ),
        roots=("panday_tier_linux.t1",),
        probes=(
            "read-next-to-workspace",
            "write-next-to-workspace",
            "host-loopback-tcp",
            "host-process-signal",
            "environment-canary",
            "wall-clock",
        ),
    )
)
register(
    Tier(
        name="t2-macos",
        title="T2 macOS",
        package="panday_tier_macos",
        distribution="panday-tier-macos",
        requirement="panday-tier-macos; sys_platform == 'darwin'",
        platform="darwin",
        runs_commands=True,
        strength=2,
        declared="panday_core.declared.t2_macos:declared_capabilities",
        host="panday_tier_macos.capabilities:host_capabilities",
        unavailable="panday_tier_macos.capabilities:unavailable_reason",
        sandbox="panday_tier_macos.sandbox:T2MacosSandbox",
        path="panday_tier_macos.sandbox:BASE_ENV",
        consent=(
            "panday's macOS sandbox",
            (
                "change anything outside the workspace; note that it CAN read most other files "
                "on this computer, all but keys, credentials, keychains, shell histories and "
                "browser data"
            ),
        ),
        roots=("panday_tier_macos",),
        probes=(
            "write-next-to-workspace",
            "host-loopback-tcp",
            "host-process-signal",
            "environment-canary",
            "wall-clock",
        ),
    )
)
register(
    Tier(
        name="t0",
        title="T0",
        package="panday_core.t0",
        distribution="panday-core",
        requirement=None,
        platform=None,
        runs_commands=False,
        strength=0,
        # The table with the kernel's openat2 resolver; docs/tiers/t0.md states the
        # fallback walk's mechanism beside it.
        declared="panday_core.t0.capabilities:declared_capabilities",
        declared_args=("openat2",),
        host="panday_core.t0.capabilities:declared_capabilities",
        unavailable=None,  # in-process: runs wherever Python does
        sandbox="panday_core.t0.sandbox:T0Sandbox",
        consent=(
            "panday's in-process file tools (it cannot start programs)",
            "reach any file outside the workspace",
        ),
        roots=("panday_core.t0",),
    )
)


def entry(tier: str) -> Tier:
    """The registry entry of `tier` (`KeyError` for a name that is not a tier)."""
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


def in_force() -> str | None:
    """The command tier `auto` opens here when the policy asks nothing only a stronger one
    enforces: the strongest of this OS's tiers that runs (T1 Linux where bubblewrap cannot
    run); the strongest of them, unavailable, when none runs; None when panday has none."""
    found = host_command_tiers()
    return next((t for t in found if unavailable_reason(t) is None), found[0] if found else None)


def check_name(tier: str) -> str:
    """`tier` when it names a tier (or auto); otherwise a `ValueError` listing the choices."""
    if tier not in TIER_CHOICES:
        choices = ", ".join(TIER_CHOICES)
        raise ValueError(f"tier: {tier!r} is not a tier; choose one of {choices}")
    return tier


def import_module(name: str) -> ModuleType:
    """The module `name`, imported now (``__import__``: importlib costs start-up time)."""
    __import__(name)
    return sys.modules[name]


def resolve(dotted: str) -> object:
    """What ``module:attribute`` names (the module alone without ``:``), imported now."""
    module, _, attribute = dotted.partition(":")
    found = import_module(module)
    return getattr(found, attribute) if attribute else found


def absent_reason(tier: str) -> str | None:
    """Why `tier` cannot even be loaded here (another platform's tier, or its package not
    installed), or None when its package imports. Nothing is probed."""
    row = entry(tier)
    if not _on_this_platform(row):
        assert row.platform is not None  # noqa: S101 - _on_this_platform is true for None
        needs = _PLATFORMS.get(row.platform, row.platform)
        return f"{row.title} needs {needs}; this host is {sys.platform}"
    try:
        import_module(row.package)
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
    """The registry entry of `tier`, or `TierUnavailable` when its package cannot load here."""
    reason = absent_reason(tier)
    if reason is not None:
        from panday_core.errors import TierUnavailable

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

    With a single candidate nothing is probed here: the tier's own `create` checks the
    policy against what this host can enforce, before spawning, and refuses by field.
    With several (Linux: T2, then T1), each one's availability and host table are checked
    in order (`_strongest`).
    """
    if check_name(tier) != AUTO:
        require(tier)
        return tier
    found = tuple(candidates) if candidates is not None else host_command_tiers()
    if not found:
        from panday_core.errors import TierUnavailable

        raise TierUnavailable(AUTO, f"panday has no tier that runs commands on {sys.platform}")
    if len(found) == 1:
        require(found[0])
        return found[0]
    return _strongest(policy, found, capabilities or host_capabilities)


def _strongest(
    policy: SandboxPolicy, found: Sequence[str], table: Callable[[str], TierCapabilities]
) -> str:
    """`choose`'s pick among several candidates, strongest first: the first that can run
    here and enforces the whole policy. Never a silent fallback: when none does, the
    refusal names why each stronger tier is out (it cannot run here) beside the
    strongest runnable tier's refusals; when none can run, every reason."""
    from panday_core.capabilities import Refusal, check_policy
    from panday_core.errors import PolicyViolation, TierUnavailable

    out: list[str] = []
    first: tuple[str, tuple[Refusal, ...]] | None = None
    for name in found:
        # A name outside the registry (a caller's own table) has no probe to ask.
        reason = unavailable_reason(name) if name in ALL_TIERS else None
        if reason is not None:
            out.append(f"{name} cannot run here: {reason}")
            continue
        refusals = check_policy(policy, table(name))
        if not refusals:
            return name
        if first is None:
            first = (name, refusals)
    if first is None:  # named by the strongest, with every tier's reason
        raise TierUnavailable(found[0], "; ".join(out))
    name, refusals = first
    if out:  # a stronger tier might enforce it: say why that one is not chosen
        why = "; ".join(out)
        refusals = tuple(Refusal(field=r.field, reason=f"{r.reason} ({why})") for r in refusals)
    raise PolicyViolation(name, refusals)


def host_capabilities(tier: str) -> TierCapabilities:
    """The capability table of `tier` as it holds on this host (probed where it must be);
    `TierUnavailable` when its package cannot load here (`declared` still answers)."""
    probe: Callable[[], TierCapabilities] = resolve(require(tier).host)  # pyright: ignore[reportAssignmentType] - the entry names a table function
    return probe()


def declared(tier: str) -> TierCapabilities:
    """The capability table a tier declares, from core: available whatever is installed."""
    row = entry(tier)
    table: Callable[..., TierCapabilities] = resolve(row.declared)  # pyright: ignore[reportAssignmentType] - the entry names a table function
    return table(*row.declared_args)


def unavailable_reason(tier: str) -> str | None:
    """None when `tier` can run on this host; otherwise why not, in one line."""
    absent = absent_reason(tier)
    if absent is not None:
        return absent
    row = entry(tier)
    if row.unavailable is None:
        return None
    probe: Callable[[], str | None] = resolve(row.unavailable)  # pyright: ignore[reportAssignmentType] - the entry names a probe function
    return probe()


def sandbox(tier: str) -> Sandbox:
    """A fresh instance of `tier`'s async `Sandbox` (`TierUnavailable` when it cannot load)."""
    made: Callable[[], Sandbox] = resolve(require(tier).sandbox)  # pyright: ignore[reportAssignmentType] - the entry names a Sandbox class
    return made()


def opener(tier: str) -> Opener | None:
    """`tier`'s synchronous opener (``opener(policy, egress=...)``), or None when it has
    none (its sessions run its async `Sandbox` on a private loop)."""
    row = require(tier)
    if row.opener is None:
        return None
    found: Opener = resolve(row.opener)  # pyright: ignore[reportAssignmentType] - the entry names an opener
    return found


def open_sync(tier: str, policy: SandboxPolicy, egress: ProxySettings | None) -> SyncSession | None:
    """`tier`'s synchronous session on `policy`, or None when it has no synchronous opener;
    `Unsupported` when `egress` is given to a tier that cannot take it."""
    found = opener(tier)
    if found is not None:
        return found(policy, egress=egress)
    if egress is not None:
        from panday_core.errors import Unsupported

        takes = " and ".join(t.name for t in REGISTRY if t.opener is not None) or "no tier"
        raise Unsupported(f"egress: proxy settings are passed through on {takes} only, not {tier}")
    return None


def default_path(tier: str | None) -> str:
    """The ``PATH`` a command gets inside `tier` (None: this host's command tier) when its
    policy sets none (a plain system ``PATH`` when the tier does not say, or cannot load
    here)."""
    from collections.abc import Mapping

    fallback = "/usr/bin:/bin:/usr/sbin:/sbin"
    try:
        row = entry(tier or host_command_tier() or "")
    except KeyError:
        return fallback
    if row.path is None or absent_reason(row.name) is not None:
        return fallback
    found = resolve(row.path)
    if isinstance(found, Mapping):  # the tier's base environment
        found = found.get("PATH")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType] - any mapping
    return found if isinstance(found, str) else fallback


def doctor_details(tier: str) -> dict[str, str]:
    """What doctor shows under `tier` on this host (empty when the tier says nothing)."""
    row = require(tier)
    if row.doctor is None:
        return {}
    details: Callable[[], dict[str, str]] = resolve(row.doctor)  # pyright: ignore[reportAssignmentType] - the entry names a details function
    return details()


def consent(tier: str) -> tuple[str, str]:
    """How a consent prompt names `tier`'s sandbox, and what a plugin cannot reach there."""
    return entry(tier).consent


def planners() -> tuple[str, ...]:
    """The tiers `panday run` can serve from a cached plan (those with a `planner`)."""
    return tuple(t.name for t in REGISTRY if t.planner is not None)


def planner(tier: str) -> ModuleType:
    """`tier`'s plan-cache module (`KeyError`-free: only called for `planners()`)."""
    row = entry(tier)
    assert row.planner is not None  # noqa: S101 - callers pick from planners()
    return import_module(row.planner)


def maker(tier: str) -> ModuleType:
    """`tier`'s plan-making module, for a miss of the cache (only called for `planners()`)."""
    row = entry(tier)
    assert row.maker is not None  # noqa: S101 - callers pick from planners()
    return import_module(row.maker)
