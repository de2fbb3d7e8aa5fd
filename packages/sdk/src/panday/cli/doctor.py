"""`panday doctor [--json] [--probe]`: each tier, available or not and why; what the host's
tier uses (its registry entry's doctor details: bwrap, libseccomp, cgroups on T2 Linux) and
enforces here; optionally, escape probes."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from panday import exitcodes, tiers
from panday.cli.common import parser
from panday.stdio import write_text

if TYPE_CHECKING:
    from panday.reports import DoctorReport, ProbeOutcome, TierStatus, UserPolicyStatus

_SUPPORT = {
    "strict": "strict",
    "partial": "partial",
    "not-enforced": "refused",
    "not-applicable": "n/a",
}


def _status(tier: str, host_tier: str | None) -> TierStatus:
    from panday.reports import TierStatus

    here = tier == host_tier
    installed = tiers.absent_reason(tier) is None
    this_os = tier in tiers.host_command_tiers()  # T2 and T1 on Linux: each one's rows
    details = tiers.doctor_details(tier) if (here or this_os) and installed else {}
    reason = tiers.unavailable_reason(tier)
    return TierStatus(
        tier=tier,
        host_tier=here,
        runs_commands=tiers.entry(tier).runs_commands,
        available=reason is None,
        unavailable_reason=reason,
        details=details,
    )


def _user_policy() -> UserPolicyStatus:
    """The per-user default policy: where it is looked for, and whether it is usable."""
    from panday.cli import inputs as cli_input
    from panday.cli.errors import InvalidInputError, NoInputError
    from panday.defaults import user_policy_path
    from panday.reports import UserPolicyStatus

    path = user_policy_path()
    if not os.path.lexists(path):
        return UserPolicyStatus(path=path, present=False, valid=False, error=None)
    try:
        policy = cli_input.load_policy(path, what="per-user default policy file")
    except (InvalidInputError, NoInputError) as exc:
        return UserPolicyStatus(path=path, present=True, valid=False, error=str(exc))
    return UserPolicyStatus(
        path=path, present=True, valid=True, error=None, unbounded=policy.limits.unbounded()
    )


def collect(*, probe: bool) -> DoctorReport:
    from panday import __version__
    from panday.reports import DoctorReport

    host_tier = tiers.in_force()  # the strongest of this OS's that runs here
    statuses = tuple(_status(tier, host_tier) for tier in tiers.ALL_TIERS)
    table = None
    if host_tier is not None:
        installed = tiers.absent_reason(host_tier) is None
        table = tiers.host_capabilities(host_tier) if installed else tiers.declared(host_tier)
    usable = any(s.available for s in statuses if s.host_tier)
    probes: tuple[ProbeOutcome, ...] | None = None
    if probe:
        from panday.probes import run_probes

        probes = tuple(run_probes(host_tier)) if host_tier is not None and usable else ()
    return DoctorReport(
        panday_version=__version__,
        platform=f"{sys.platform} ({os.uname().machine})",
        euid=os.geteuid(),
        host_tier=host_tier,
        tiers=statuses,
        fields=table.fields if table is not None else (),
        guarantees=table.guarantees if table is not None else (),
        probes=probes,
        user_policy=_user_policy(),
    )


def _exit_code(report: DoctorReport) -> int:
    if not any(s.available for s in report.tiers if s.host_tier):
        return exitcodes.TIER_UNAVAILABLE
    if report.probes is not None and any(p.verdict != "pass" for p in report.probes):
        return exitcodes.FAILED
    return exitcodes.OK


def render(report: DoctorReport) -> str:
    who = "root" if report.euid == 0 else f"uid {report.euid}"
    lines = [f"panday {report.panday_version} on {report.platform}, as {who}", _summary(report), ""]
    for status in report.tiers:
        mark = " (this host's command tier)" if status.host_tier else ""
        if status.available:
            what = "" if status.runs_commands else " (file tools in-process; never runs commands)"
            lines.append(f"{status.tier}: available{mark}{what}")
        else:
            lines.append(f"{status.tier}: unavailable{mark}: {status.unavailable_reason}")
        width = max((len(k) for k in status.details), default=0)
        lines.extend(f"  {k.ljust(width)}  {v}" for k, v in status.details.items())
    lines += ["", *_render_user_policy(report)]
    if report.host_tier is not None:
        host_row = next((s for s in report.tiers if s.host_tier), None)
        declared = host_row is not None and not host_row.available
        how = " (as declared; the tier is unavailable here)" if declared else " here"
        lines += ["", f"Policy fields on {report.host_tier}{how}:"]
        width = max(len(f.field) for f in report.fields)
        previous = ""
        for entry in report.fields:
            word = _SUPPORT[entry.support.value]
            note = entry.note if word in {"partial", "refused"} else ""
            shown = "(as above)" if note and note == previous else note
            previous = note
            lines.append(f"  {word:<8} {entry.field.ljust(width)}  {shown}".rstrip())
        lines += ["", f"Guarantees of {report.host_tier}{how}:"]
        for g in report.guarantees:
            note = f" ({g.note})" if g.note else ""
            lines.append(f"  {_SUPPORT[g.support.value]:<8} {g.name}{note}")
    if report.probes is not None:
        lines += ["", "Probes (control outside, then the same inside):"]
        if not report.probes:
            lines.append("  none ran: no usable command tier here")
        for p in report.probes:
            lines.append(f"  {p.verdict:<12} {p.name}: {p.detail}")
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _summary(report: DoctorReport) -> str:
    """One line first: which tier runs commands here, and what else could."""
    running = [t.tier for t in report.tiers if t.available and t.runs_commands]
    if not running:
        return "Summary: no tier can run commands here (each tier's reason is below)."
    rest = f"; also available: {', '.join(running[1:])}" if running[1:] else ""
    return f"Summary: commands run under {running[0]} here, the strongest tier available{rest}."


def _render_user_policy(report: DoctorReport) -> list[str]:
    user = report.user_policy
    if user is None:
        return []
    if not user.present:
        state = "absent: `panday run` starts from the embedded default"
    elif user.valid:
        state = "valid: `panday run` starts from it unless --policy is given"
    else:
        state = f"INVALID, so `panday run` without --policy fails: {user.error}"
    lines = [f"Per-user default policy: {user.path}", f"  {state}"]
    lines.extend(f"  unbounded: {field}: no ceiling at all" for field in user.unbounded)
    return lines


def doctor(*, as_json: bool, probe: bool) -> int:
    report = collect(probe=probe)
    if as_json:
        from panday.reports import encode

        write_text(encode(report))
    else:
        write_text(render(report))
    return _exit_code(report)


def main(args: list[str]) -> int:
    """`panday doctor ARGS`: the exit code."""
    ns = parser("panday doctor", "What this host enforces, tier by tier.")
    ns.add_argument("--json", action="store_true", help="machine-readable output")
    ns.add_argument("--probe", action="store_true", help="run a fast subset of the escape probes")
    parsed = ns.parse_args(args)
    return doctor(as_json=parsed.json, probe=parsed.probe)
