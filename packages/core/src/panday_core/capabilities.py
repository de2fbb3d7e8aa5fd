"""Capabilities as data: what each tier enforces, how, and what it must refuse.

A tier declares, for every policy field, whether it enforces it (`STRICT`), enforces it
with a stated gap (`PARTIAL`), cannot enforce it (`NOT_ENFORCED`: asking for it is refused),
or that it has no meaning there (`NOT_APPLICABLE`, with a reason). `check_policy` compares a
policy with those declarations; every tier's `create` refuses by it (`check_policy`, or
`require_enforceable` where the tier has nothing of its own to add) before it spawns
anything. A field a tier says nothing about is refused: silence is not permission;
so is a not-applicable field given a value other than its default, which would be a
setting that does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import cast

import msgspec

from panday_core.errors import PolicyViolation
from panday_core.policy import UNBOUNDED, FsPolicy, Limits, NetPolicy, SandboxPolicy
from panday_core.refusal import Refusal

__all__ = [
    "NO_EGRESS_PROXY",
    "FieldSupport",
    "Guarantee",
    "Refusal",
    "Support",
    "TierCapabilities",
    "check_policy",
    "egress_fields",
    "field_value",
    "is_requested",
    "no_egress_proxy",
    "policy_fields",
    "require_enforceable",
]


class Support(StrEnum):
    STRICT = "strict"
    PARTIAL = "partial"
    NOT_ENFORCED = "not-enforced"
    NOT_APPLICABLE = "not-applicable"


class FieldSupport(msgspec.Struct, frozen=True, kw_only=True):
    """How one tier treats one policy field."""

    field: str
    support: Support
    mechanism: str
    """What enforces it (``bwrap --unshare-net``, ``cgroup memory.max``), or why nothing can."""
    note: str = ""
    """The gap for PARTIAL, the reason for NOT_ENFORCED / NOT_APPLICABLE."""


class Guarantee(msgspec.Struct, frozen=True, kw_only=True):
    """A row of a tier's guarantee table: a property a user relies on, and how it holds."""

    name: str
    mechanism: str
    support: Support
    note: str = ""


class TierCapabilities(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a tier declares about itself, on this host."""

    tier: str
    """A `SandboxTier` for panday's own tiers; any registered tier's name (panday.tiers)."""
    fields: tuple[FieldSupport, ...]
    guarantees: tuple[Guarantee, ...] = ()

    def for_field(self, name: str) -> FieldSupport | None:
        for entry in self.fields:
            if entry.field == name:
                return entry
        return None


# Shared wording, so every tier refuses an allowlist the same way when it cannot enforce it.
NO_EGRESS_PROXY = (
    "no egress proxy serves this tier, so nothing can restrict egress to these hosts; "
    "refused rather than opening the whole network (or silently giving none)"
)


def no_egress_proxy(cause: str) -> str:
    """`NO_EGRESS_PROXY` for a tier that has an egress proxy but cannot use it here.

    `cause` says why (a missing interpreter for the bridge, a proxy that could not start);
    the rest is the same refusal every tier gives.
    """
    return (
        f"the egress proxy cannot serve this session ({cause}), so nothing can restrict "
        "egress to these hosts; refused rather than opening the whole network (or silently "
        "giving none)"
    )


def egress_fields(
    mechanisms: Mapping[str, str], unavailable: str | None
) -> tuple[FieldSupport, ...]:
    """The net fields of a tier whose egress proxy enforces them: `mechanisms` maps each
    field to how; strict, or refused with `no_egress_proxy(unavailable)` when the proxy
    cannot serve sessions here."""
    if unavailable is None:
        return tuple(
            FieldSupport(field=name, support=Support.STRICT, mechanism=mechanism)
            for name, mechanism in mechanisms.items()
        )
    return tuple(
        FieldSupport(
            field=name,
            support=Support.NOT_ENFORCED,
            mechanism=mechanism,
            note=no_egress_proxy(unavailable),
        )
        for name, mechanism in mechanisms.items()
    )


def _sections() -> tuple[tuple[str, type[msgspec.Struct]], ...]:
    return (("fs", FsPolicy), ("net", NetPolicy), ("limits", Limits))


def policy_fields() -> tuple[str, ...]:
    """Every dotted policy field, derived from the model (so a new field cannot be missed)."""
    names: list[str] = []
    sections = dict(_sections())
    for name in SandboxPolicy.__struct_fields__:
        model = sections.get(name)
        if model is None:
            names.append(name)
        else:
            names.extend(f"{name}.{sub}" for sub in model.__struct_fields__)
    return tuple(names)


def field_value(policy: SandboxPolicy, field: str) -> object:
    """The value of a dotted field of `policy`."""
    node: object = policy
    for part in field.split("."):
        node = getattr(node, part)
    return node


_DEFAULT = SandboxPolicy()


def is_requested(policy: SandboxPolicy, field: str) -> bool:
    """Whether `policy` asks the tier to do something for `field`.

    A field at its default asks for nothing new (no ceiling beyond the model's own, no
    extra paths), except the workspace, which every session has. `net.deny` and
    `net.ports` only narrow an allowlist, so with no allowlist they are satisfied by "no
    network" and ask for nothing. ``"unbounded"`` asks a tier for nothing either (it is
    shown, not refused: `Limits.unbounded`).
    """
    if field == "version":
        return False
    if field == "fs.workspace":
        return True
    if field in {"net.deny", "net.ports"} and not policy.net.allow:
        return False
    value = field_value(policy, field)
    if value == UNBOUNDED:
        return False
    return value != field_value(_DEFAULT, field)


def _shown(value: object) -> str:
    if isinstance(value, tuple):
        items: tuple[object, ...] = value  # pyright: ignore[reportUnknownVariableType] - policy tuples
        return repr(list(items))
    if isinstance(value, Mapping):
        # env values may be secrets: only the names are ever shown.
        names = sorted(str(k) for k in cast("Mapping[object, object]", value))
        return "[" + ", ".join(repr(n) for n in names) + "]"
    return repr(value)


def check_policy(policy: SandboxPolicy, caps: TierCapabilities) -> tuple[Refusal, ...]:
    """Every requested field `caps` cannot enforce, in model order, with the reason."""
    refusals: list[Refusal] = []
    for field in policy_fields():
        if not is_requested(policy, field):
            continue
        entry = caps.for_field(field)
        value = _shown(field_value(policy, field))
        if entry is None:
            refusals.append(
                Refusal(
                    field=field,
                    reason=f"{value}: tier {caps.tier} declares no enforcement for this field",
                )
            )
        elif entry.support is Support.NOT_ENFORCED:
            refusals.append(
                Refusal(field=field, reason=f"{value}: {entry.note or entry.mechanism}")
            )
        elif entry.support is Support.NOT_APPLICABLE:
            # Nothing on this tier acts on the field, so a value other than the default
            # would be a setting that silently does nothing: refused like one it cannot do.
            why = entry.note or entry.mechanism
            refusals.append(
                Refusal(
                    field=field,
                    reason=f"{value}: not applicable on {caps.tier} ({why}); leave it unset",
                )
            )
    return tuple(refusals)


def require_enforceable(policy: SandboxPolicy, caps: TierCapabilities) -> None:
    """Raise `PolicyViolation` listing every field `caps` cannot enforce. Call before spawning."""
    refusals = check_policy(policy, caps)
    if refusals:
        raise PolicyViolation(str(caps.tier), refusals)
