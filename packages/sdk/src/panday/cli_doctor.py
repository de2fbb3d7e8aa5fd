"""`panday doctor [--json] [--probe]`: each tier, available or not and why; what the host's
tier uses (bwrap, libseccomp, cgroups) and enforces here; optionally, escape probes."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from panday import exitcodes, tiers

if TYPE_CHECKING:
    from panday.reports import DoctorReport, ProbeOutcome, TierStatus

_SUPPORT = {
    "strict": "strict",
    "partial": "partial",
    "not-enforced": "refused",
    "not-applicable": "n/a",
}


def _cgroup_mechanism() -> str:
    """How T2 Linux would hold ceilings here: a throwaway session cgroup, made and removed."""
    from panday_tier_linux import cgroups  # noqa: PLC0415 - doctor only

    try:
        made = cgroups.open_session(
            {"mem_bytes": 1 << 26, "pids": 64, "cpu_ms": 1000}, f"doctor-{os.urandom(3).hex()}"
        )
    except cgroups.CgroupUnavailable as exc:
        return f"none: {exc.reason}"
    except OSError as exc:
        return f"none: {exc.strerror}"
    made.remove()
    return made.mechanism


def _linux_details() -> dict[str, str]:
    from panday_tier_linux import host_report  # noqa: PLC0415 - doctor only

    details = host_report()
    jail = details.pop("jail", None)
    details["cgroups"] = _cgroup_mechanism()
    if jail is not None:
        details["jail"] = jail
    return details


def _status(tier: str, host_tier: str | None) -> TierStatus:
    from panday.reports import TierStatus  # noqa: PLC0415

    here = tier == host_tier
    details = _linux_details() if here and tier == "t2-linux" else {}
    reason = tiers.unavailable_reason(tier)
    return TierStatus(
        tier=tier,
        host_tier=here,
        runs_commands=tier in tiers.COMMAND_TIERS,
        available=reason is None,
        unavailable_reason=reason,
        details=details,
    )


def collect(*, probe: bool) -> DoctorReport:
    from panday import __version__  # noqa: PLC0415
    from panday.reports import DoctorReport  # noqa: PLC0415

    host_tier = tiers.host_command_tier()
    statuses = tuple(_status(tier, host_tier) for tier in tiers.ALL_TIERS)
    table = tiers.host_capabilities(host_tier) if host_tier is not None else None
    usable = any(s.available for s in statuses if s.host_tier)
    probes: tuple[ProbeOutcome, ...] | None = None
    if probe:
        from panday.probes import run_probes  # noqa: PLC0415

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
    )


def _exit_code(report: DoctorReport) -> int:
    if not any(s.available for s in report.tiers if s.host_tier):
        return exitcodes.TIER_UNAVAILABLE
    if report.probes is not None and any(p.verdict != "pass" for p in report.probes):
        return exitcodes.FAILED
    return exitcodes.OK


def render(report: DoctorReport) -> str:
    who = "root" if report.euid == 0 else f"uid {report.euid}"
    lines = [f"panday {report.panday_version} on {report.platform}, as {who}", ""]
    for status in report.tiers:
        mark = " (this host's command tier)" if status.host_tier else ""
        if status.available:
            what = "" if status.runs_commands else " (file tools in-process; never runs commands)"
            lines.append(f"{status.tier}: available{mark}{what}")
        else:
            lines.append(f"{status.tier}: unavailable{mark}: {status.unavailable_reason}")
        width = max((len(k) for k in status.details), default=0)
        lines.extend(f"  {k.ljust(width)}  {v}" for k, v in status.details.items())
    if report.host_tier is not None:
        lines += ["", f"Policy fields on {report.host_tier} here:"]
        width = max(len(f.field) for f in report.fields)
        previous = ""
        for entry in report.fields:
            word = _SUPPORT[entry.support.value]
            note = entry.note if word in {"partial", "refused"} else ""
            shown = "(as above)" if note and note == previous else note
            previous = note
            lines.append(f"  {word:<8} {entry.field.ljust(width)}  {shown}".rstrip())
        lines += ["", f"Guarantees of {report.host_tier} here:"]
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


def doctor(*, as_json: bool, probe: bool) -> int:
    report = collect(probe=probe)
    if as_json:
        from panday.reports import encode  # noqa: PLC0415

        sys.stdout.write(encode(report))
    else:
        sys.stdout.write(render(report))
    return _exit_code(report)
