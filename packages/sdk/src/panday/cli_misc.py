"""`panday policy check|schema`, `panday plugin inspect` and `panday proxy`."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from panday import exitcodes, tiers
from panday.cli import UsageError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from panday.reports import PolicyCheckReport, TierCheck
    from panday_core.capabilities import Refusal, TierCapabilities
    from panday_core.policy import SandboxPolicy


def _host_table(tier: str | None) -> TierCapabilities:
    if tier is None:
        from panday_core.errors import TierUnavailable  # noqa: PLC0415 - error path

        raise TierUnavailable("auto", f"panday has no tier that runs commands on {sys.platform}")
    return tiers.host_capabilities(tier)


def _root_refusals(policy: SandboxPolicy) -> tuple[Refusal, ...]:
    """The roots this host's tier would refuse at open (the same identity checks), so that
    `policy check` and `run` answer alike: ``//etc`` is no more enforceable than ``/etc``."""
    from panday_core.capabilities import Refusal  # noqa: PLC0415 - lazy: only this path needs it
    from panday_core.protect import roots_refusals  # noqa: PLC0415 - lazy: only this path needs it

    fs = policy.fs
    found = roots_refusals(
        fs.workspace, fs.staged_ro, writable=fs.access == "rw", allow_home=fs.allow_home
    )
    return tuple(Refusal(field=field, reason=reason) for field, reason in found)


def _tier_rows(policy: SandboxPolicy) -> list[TierCheck]:
    """Per command tier: the table it is judged by, and what that table refuses.

    The host's own tier is judged by its host-probed table (a ceiling this host cannot hold
    is refused here as `create` would refuse it); another OS's tier, or one whose package
    is not installed here, by the table core declares for it.
    """
    from panday.reports import TierCheck  # noqa: PLC0415 - lazy: only this path needs it
    from panday_core.capabilities import check_policy  # noqa: PLC0415

    host_tier = tiers.host_command_tier()
    rows: list[TierCheck] = []
    for tier in tiers.COMMAND_TIERS:
        here = tier == host_tier
        unavailable = tiers.unavailable_reason(tier)
        by_host = here and tiers.absent_reason(tier) is None
        table = tiers.host_capabilities(tier) if by_host else tiers.declared(tier)
        refusals = check_policy(policy, table)
        if here:
            refusals = (*refusals, *_root_refusals(policy))
        rows.append(
            TierCheck(
                tier=tier,
                host_tier=here,
                available=unavailable is None,
                unavailable_reason=unavailable,
                enforceable=not refusals and unavailable is None,
                refused=refusals,
                judged_by="host" if by_host else "declared",
            )
        )
    return rows


def _check_one(file: str, *, debug: bool) -> PolicyCheckReport:
    """One file's report; a document that cannot be read or parsed is reported, not raised
    (with `debug`, its traceback is printed first)."""
    from panday import cli_input  # noqa: PLC0415 - lazy: only this path needs it
    from panday._shared import missing_paths  # noqa: PLC0415
    from panday.cli import InvalidInputError, NoInputError  # noqa: PLC0415 - lazy: only this path needs it
    from panday.reports import PolicyCheckReport  # noqa: PLC0415 - lazy: only this path needs it

    try:
        policy = cli_input.load_policy(file)
    except (NoInputError, InvalidInputError) as exc:
        if debug:
            import traceback  # noqa: PLC0415 - --debug only

            traceback.print_exception(exc)
        code = exitcodes.NO_INPUT if isinstance(exc, NoInputError) else exitcodes.INVALID_POLICY
        return PolicyCheckReport(
            file=file, valid=False, enforceable_here=False, tiers=(), error=str(exc),
            exit_code=code,
        )  # fmt: skip
    unusable: tuple[Refusal, ...] = ()
    if policy.fs.workspace is None:
        from panday._shared import current_directory  # noqa: PLC0415 - lazy: only this path needs it
        from panday_core.errors import WorkspaceUnusable  # noqa: PLC0415 - lazy: only this path needs it

        try:
            policy = policy.with_workspace(current_directory())
        except WorkspaceUnusable as exc:
            from panday_core.capabilities import Refusal  # noqa: PLC0415 - error path

            unusable = (Refusal(field=exc.field, reason=f"{exc.path!r} {exc.reason}"),)
            policy = policy.with_workspace("/")  # judged for the tiers; reported missing
    missing = unusable or missing_paths(policy)
    rows = _tier_rows(policy)
    verdict = not missing and any(row.enforceable for row in rows if row.host_tier)
    code = exitcodes.OK if verdict else exitcodes.FAILED
    if missing:
        code = exitcodes.NO_INPUT
    return PolicyCheckReport(
        file=file, valid=True, enforceable_here=verdict, tiers=tuple(rows), missing=missing,
        exit_code=code, unbounded=policy.limits.unbounded(),
    )  # fmt: skip


def _render_check(report: PolicyCheckReport) -> list[str]:
    from panday import cli_input  # noqa: PLC0415 - lazy: only this path needs it

    name = cli_input.shown(report.file)
    host_tier = tiers.host_command_tier()
    where = f"on {host_tier}" if host_tier else "on this OS (panday has no tier for it)"
    state = "enforceable here" if report.enforceable_here else "NOT enforceable here"
    lines = [f"{name}: valid policy, {state} ({where})"]
    lines.extend(
        f"  missing here: {m.field}: {m.reason} (a session would not open)" for m in report.missing
    )
    lines.extend(
        f"  unbounded: {field}: no ceiling at all (written 'unbounded'; leave it out for the "
        "default)"
        for field in report.unbounded
    )
    for row in report.tiers:
        if row.host_tier and row.available:
            head = f"  {row.tier} (this host's tier)"
        elif row.host_tier:
            head = f"  {row.tier} (this host's tier, unavailable here: {row.unavailable_reason})"
        else:
            head = f"  {row.tier} (not this host: {row.unavailable_reason})"
        judged = "" if row.judged_by == "host" else "its declared table "
        if not row.refused:
            lines.append(f"{head}: {judged}enforces every field")
            continue
        would = "refuses" if row.judged_by == "host" else "would refuse"
        lines.append(f"{head}: {judged}{would}:")
        lines.extend(f"    {r.field}: {r.reason}" for r in row.refused)
    return lines


def policy_check(files: Sequence[str], *, as_json: bool, debug: bool = False) -> int:
    """Validate each file; per command tier, whether it enforces the policy, and if not why.

    The exit code is the highest of the files' own: 0 enforceable here, 1 valid but not
    enforceable here, 65 malformed, 66 unreadable or naming a path that does not exist.
    """
    from panday.reports import encode_many  # noqa: PLC0415 - lazy: only this path needs it

    if isinstance(files, str):
        files = [files]
    if list(files).count("-") > 1:
        raise UsageError("policy check: '-' (standard input) can be given once")
    reports = [_check_one(file, debug=debug) for file in files]
    for report in reports:
        if report.error is not None:
            sys.stderr.write(f"panday: {report.error}\n")
    if as_json:
        sys.stdout.write(encode_many(reports))
    else:
        lines = [line for report in reports if report.valid for line in _render_check(report)]
        if lines:
            sys.stdout.write("\n".join(lines) + "\n")
    return max(report.exit_code for report in reports)


def policy_schema() -> int:
    from panday_core.policy import SandboxPolicy  # noqa: PLC0415
    from panday_core.schema import json_schema, render  # noqa: PLC0415

    sys.stdout.write(render(json_schema(SandboxPolicy, "policy")))
    return exitcodes.OK


def plugin_inspect(file: str, *, as_json: bool) -> int:
    """What this host's tier would really grant the plugin: the consent summary."""
    from panday.cli_input import load_manifest  # noqa: PLC0415
    from panday.reports import encode  # noqa: PLC0415

    manifest = load_manifest(file)
    host_tier = tiers.host_command_tier()
    summary = manifest.consent_summary(
        _host_table(host_tier), os.environ, wording=tiers.consent(host_tier or "")
    )
    sys.stdout.write(encode(summary) if as_json else summary.render())
    return exitcodes.OK if summary.runnable else exitcodes.FAILED


def _port(option: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{option} {text!r}: not a port number") from None
    return value


def proxy(ns: argparse.Namespace) -> int:
    """Run the egress proxy until Ctrl-C (or SIGTERM); exit 71 when it cannot listen."""
    from panday import cli_input  # noqa: PLC0415
    from panday_core.domains import normalize_pattern  # noqa: PLC0415
    from panday_core.policy import FieldError, NetPolicy  # noqa: PLC0415

    base = cli_input.load_policy(ns.policy).net if ns.policy else NetPolicy()
    for option, hosts in (("--allow", ns.allow), ("--deny", ns.deny)):
        for host in hosts:
            try:
                normalize_pattern(host)
            except ValueError as exc:
                raise UsageError(f"{option} {host!r}: {exc}") from None
    ports = tuple(_port("--port", p) for p in ns.port) or base.ports
    listen_port = _port("--listen-port", ns.listen_port)
    if not 0 <= listen_port <= 65535:  # noqa: PLR2004 - TCP port range
        raise UsageError(f"--listen-port {ns.listen_port!r}: not a TCP port (0-65535)")
    try:
        net = NetPolicy(allow=(*base.allow, *ns.allow), deny=(*base.deny, *ns.deny), ports=ports)
    except FieldError as exc:
        raise UsageError(f"--port: {exc.reason}") from None
    from panday_core.egress.standalone import run_proxy  # noqa: PLC0415 - asyncio: this path only

    try:
        return run_proxy(
            net,
            listen_host=ns.listen,
            listen_port=listen_port,
            session_id=ns.session_id,
            audit_jsonl=ns.audit_jsonl,
        )
    except OSError as exc:
        what = f"open {exc.filename}" if exc.filename else f"listen on {ns.listen}:{listen_port}"
        sys.stderr.write(f"panday: the egress proxy cannot {what}: {exc.strerror or exc}\n")
        return exitcodes.OS_ERROR
