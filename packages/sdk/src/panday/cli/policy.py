"""`panday policy check FILE...` and `panday policy schema`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from panday import exitcodes, tiers
from panday.cli.common import DEBUG, file_action, parser
from panday.cli.errors import UsageError
from panday.stdio import write_text

if TYPE_CHECKING:
    from collections.abc import Sequence

    from panday.reports import PolicyCheckReport, TierCheck
    from panday_core.capabilities import Refusal
    from panday_core.policy import SandboxPolicy


def _root_refusals(policy: SandboxPolicy) -> tuple[Refusal, ...]:
    """The roots this host's tier would refuse at open (the same identity checks), so that
    `policy check` and `run` answer alike: ``//etc`` is no more enforceable than ``/etc``."""
    from panday_core.capabilities import Refusal
    from panday_core.protect import roots_refusals

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
    from panday.reports import TierCheck
    from panday_core.capabilities import check_policy

    here_tiers = tiers.host_command_tiers()  # this OS's tiers (Linux: T2, then T1)
    rows: list[TierCheck] = []
    for tier in tiers.COMMAND_TIERS:
        here = tier in here_tiers
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


def _manifest_hint(file: str) -> str:
    """A pointer to `plugin inspect` when the file that is not a policy is a plugin manifest
    (a top-level ``name`` and a ``[capabilities]`` table: docs/manifest.md)."""
    import os
    import stat
    import tomllib

    try:
        if not stat.S_ISREG(os.stat(file).st_mode):  # a FIFO would block: never opened
            return ""
        with open(file, "rb") as fh:
            doc = tomllib.load(fh)
    except (OSError, ValueError):
        return ""
    if "name" in doc and "capabilities" in doc:
        return f" (it is a plugin manifest: `panday plugin inspect {file}` judges it)"
    return ""


def _check_one(file: str, *, debug: bool) -> PolicyCheckReport:
    """One file's report; a document that cannot be read or parsed is reported, not raised
    (with `debug`, its traceback is printed first)."""
    from panday._shared import missing_paths
    from panday.cli import inputs as cli_input
    from panday.cli.errors import InvalidInputError, NoInputError
    from panday.reports import PolicyCheckReport

    try:
        policy = cli_input.load_policy(file)
    except (NoInputError, InvalidInputError) as exc:
        if debug:
            import traceback

            traceback.print_exception(exc)
        code = exitcodes.NO_INPUT if isinstance(exc, NoInputError) else exitcodes.INVALID_POLICY
        return PolicyCheckReport(
            file=file, valid=False, enforceable_here=False, tiers=(),
            error=str(exc) + _manifest_hint(file), exit_code=code,
        )  # fmt: skip
    unusable: tuple[Refusal, ...] = ()
    if policy.fs.workspace is None:
        from panday.defaults import current_directory
        from panday_core.errors import WorkspaceUnusable

        try:
            policy = policy.with_workspace(current_directory())
        except WorkspaceUnusable as exc:
            from panday_core.capabilities import Refusal

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
    from panday.cli import inputs as cli_input

    name = cli_input.shown(report.file)
    # The tier auto would open: the strongest of this OS's that runs and enforces it all.
    chosen = [r.tier for r in report.tiers if r.host_tier and r.enforceable]
    host_tier = chosen[0] if chosen else tiers.host_command_tier()
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
    from panday.reports import encode_many

    if isinstance(files, str):
        files = [files]
    if list(files).count("-") > 1:
        raise UsageError("policy check: '-' (standard input) can be given once")
    reports = [_check_one(file, debug=debug) for file in files]
    for report in reports:
        if report.error is not None:
            sys.stderr.write(f"panday: {report.error}\n")
    if as_json:
        write_text(encode_many(reports))
    else:
        lines = [line for report in reports if report.valid for line in _render_check(report)]
        if lines:
            write_text("\n".join(lines) + "\n")
    return max(report.exit_code for report in reports)


def policy_schema() -> int:
    from panday_core.policy import SandboxPolicy
    from panday_core.schema import json_schema, render

    write_text(render(json_schema(SandboxPolicy, "policy")))
    return exitcodes.OK


def main(args: list[str]) -> int:
    """`panday policy ARGS`: the exit code."""
    ns = parser("panday policy", "Check a policy file or print its schema.")
    sub = ns.add_subparsers(dest="action", required=True, parser_class=type(ns))
    file_action(
        sub.add_parser("check", help="validate policies and say where they are enforceable"),
        "policy file (.toml or .json); '-' reads one from standard input",
        many=True,
    )
    schema = sub.add_parser("schema", help="print the policy's JSON Schema")
    schema.add_argument("--debug", action="store_true", help="show a traceback with an error")
    parsed = ns.parse_args(args)
    if parsed.action == "check":
        return policy_check(parsed.files, as_json=parsed.json, debug=parsed.debug or DEBUG[0])
    return policy_schema()
