"""What the CLI prints with ``--json``: one model per command, each with a committed JSON
Schema (``schemas/cli-*.schema.json``, rendered by ``tools/schemas.py`` from `cli_models`).

Fields are only ever added; a consumer can validate output against the schema of the
version it was written for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import msgspec

from panday_core.capabilities import FieldSupport, Guarantee, Refusal
from panday_core.egress.audit import AuditEvent
from panday_core.types import LimitBreach, WriteReport

if TYPE_CHECKING:
    from collections.abc import Sequence


class _Report(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Immutable; unknown keys refused when read back."""


class TierCheck(_Report, frozen=True, kw_only=True):
    """One tier's answer to `panday policy check`."""

    tier: str
    host_tier: bool
    """Whether this is the tier this host runs commands with."""
    available: bool
    unavailable_reason: str | None
    enforceable: bool
    """Available here and refusing no field (host-probed table for the host's tier)."""
    refused: tuple[Refusal, ...]
    """What the table in `judged_by` refuses (for another OS's tier: would refuse there)."""
    judged_by: Literal["host", "declared"] = "host"
    """host: the table as probed on this host (the host's own tier, installed); declared:
    the table core declares for the tier (another OS's tier, or one not installed here)."""


class PolicyCheckReport(_Report, frozen=True, kw_only=True):
    """`panday policy check --json FILE` (with several files: a list of these)."""

    file: str
    """As given; ``-`` is standard input."""
    valid: bool
    enforceable_here: bool
    """Valid, every path it names exists, and the host's tier enforces every field here."""
    tiers: tuple[TierCheck, ...]
    """Empty when the file is not a valid policy."""
    error: str | None = None
    """Why the file could not be read or is not a valid policy (the line also on stderr)."""
    missing: tuple[Refusal, ...] = ()
    """Paths the policy names that do not exist on this host (a session would not open)."""
    exit_code: int = 0
    """This file's own exit code; `panday policy check` exits with the highest of them."""
    unbounded: tuple[str, ...] = ()
    """Limits the policy explicitly leaves without a ceiling (written ``"unbounded"``;
    absent, they take the model's finite default)."""


class RunReport(_Report, frozen=True, kw_only=True):
    """`panday run --json -- CMD`: the finished command (its output is not also streamed)."""

    tier: str
    session_id: str
    workspace: str
    argv: tuple[str, ...]
    exit_code: int | None
    """The command's own exit status; None when a signal ended it (see `signal`)."""
    signal: int | None
    wall_ms: float
    breach: LimitBreach | None
    """The ceiling the command crossed, if any (kind and detail)."""
    stdout: str
    """UTF-8; bytes that are not valid UTF-8 are replaced with U+FFFD."""
    stderr: str
    truncated_stdout: bool
    truncated_stderr: bool
    panday_exit_code: int
    """What `panday run` exits with (docs/cli.md)."""
    writes: WriteReport | None = None
    """``fs.writes`` checked or review: what was applied, held, or waits for review."""
    events: tuple[AuditEvent, ...] = ()
    """The egress proxy's events for the command (with ``net.allow``): every connection
    it allowed, refused (with the reason) or could not complete."""
    error: str | None = None
    """Why the command never ran (the line also on stderr: a refused policy field, a
    program missing inside, a bad option); then `tier` and `session_id` may be empty and
    `panday_exit_code` is the error's code."""


class TierStatus(_Report, frozen=True, kw_only=True):
    """One tier in `panday doctor`."""

    tier: str
    host_tier: bool
    runs_commands: bool
    available: bool
    unavailable_reason: str | None
    details: dict[str, str]
    """Host facts the tier depends on (bwrap, user namespaces, libseccomp, cgroups...)."""


class ProbeOutcome(_Report, frozen=True, kw_only=True):
    """One `panday doctor --probe` check: its positive control, then the must-fail probe."""

    name: str
    guarantee: str
    verdict: Literal["pass", "fail", "inconclusive"]
    """pass: the control worked and the probe was blocked; fail: the probe got through;
    inconclusive: the control did not work here, so the probe would prove nothing."""
    detail: str


class UserPolicyStatus(_Report, frozen=True, kw_only=True):
    """The per-user default policy `panday run` starts from when no --policy is given."""

    path: str
    """``$XDG_CONFIG_HOME/panday/policy.toml`` (``~/.config/...`` when that is unset)."""
    present: bool
    valid: bool
    error: str | None
    """Why it cannot be used (it is present but unreadable or not a valid policy)."""
    unbounded: tuple[str, ...] = ()
    """Limits it explicitly leaves without a ceiling (written ``"unbounded"``)."""


class DoctorReport(_Report, frozen=True, kw_only=True):
    """`panday doctor --json`."""

    panday_version: str
    platform: str
    euid: int
    host_tier: str | None
    """The tier this host runs commands with (None: panday has none for this OS)."""
    tiers: tuple[TierStatus, ...]
    fields: tuple[FieldSupport, ...]
    """How the host tier treats each policy field here (probed, not only declared)."""
    guarantees: tuple[Guarantee, ...]
    probes: tuple[ProbeOutcome, ...] | None
    """None unless --probe was given."""
    user_policy: UserPolicyStatus | None = None
    """The per-user default policy (always reported by this version)."""


def cli_models() -> dict[str, type[msgspec.Struct]]:
    """Schema name -> model for every ``--json`` output."""
    from panday_core.manifest import ConsentSummary

    return {
        "cli-doctor": DoctorReport,
        "cli-plugin-inspect": ConsentSummary,
        "cli-policy-check": PolicyCheckReport,
        "cli-run": RunReport,
    }


def rendered_schemas() -> dict[str, str]:
    """File name -> text, rendered like the core's schemas."""
    from panday_core.schema import json_schema, render

    return {
        f"{name}.schema.json": render(json_schema(model, name))
        for name, model in sorted(cli_models().items())
    }


def encode(report: msgspec.Struct) -> str:
    """Stable JSON text: fields in model order, two-space indent, one trailing newline."""
    return encode_bytes(report).decode()


def encode_bytes(report: msgspec.Struct) -> bytes:
    """`encode` as UTF-8 bytes (what a large document is written as: no text copy)."""
    return msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n"


def encode_many(reports: Sequence[msgspec.Struct]) -> str:
    """One report as its object (what the schema describes); several as a list of them."""
    if len(reports) == 1:
        return encode(reports[0])
    return msgspec.json.format(msgspec.json.encode(list(reports)), indent=2).decode() + "\n"
