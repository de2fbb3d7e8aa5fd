"""The `panday` command line.

Start-up cost matters (it wraps every tool call an agent makes), so this module imports
only argparse at load time; each subcommand imports what it needs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, NoReturn

from panday import exitcodes

if TYPE_CHECKING:
    from collections.abc import Sequence


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting with 2."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _build_parser() -> _Parser:
    parser = _Parser(prog="panday", description="Run commands under a fail-closed policy.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    policy = sub.add_parser("policy", help="check a policy file or print its schema")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True, parser_class=_Parser)
    check = policy_sub.add_parser("check", help="validate a policy and say where it is enforceable")
    check.add_argument("file", help="policy file (.toml or .json)")
    check.add_argument("--json", action="store_true", help="machine-readable output")
    policy_sub.add_parser("schema", help="print the policy's JSON Schema")
    return parser


def _policy_check(file: str, *, as_json: bool) -> int:
    from panday import tiers  # noqa: PLC0415
    from panday_core.capabilities import check_policy  # noqa: PLC0415 - lazy, see module doc
    from panday_core.policy import load_policy  # noqa: PLC0415

    policy = load_policy(file)
    if policy.fs.workspace is None:
        import os  # noqa: PLC0415

        policy = policy.with_workspace(os.getcwd())  # noqa: PTH109 - os is already loaded
    host_tier = tiers.host_command_tier()
    report: list[dict[str, object]] = []
    verdict = False
    for tier in tiers.COMMAND_TIERS:
        refusals = check_policy(policy, tiers.declared(tier))
        unavailable = tiers.unavailable_reason(tier)
        enforceable = not refusals and unavailable is None
        if tier == host_tier:
            verdict = enforceable
        report.append(
            {
                "tier": tier,
                "host_tier": tier == host_tier,
                "available": unavailable is None,
                "unavailable_reason": unavailable,
                "enforceable": enforceable,
                "refused": [{"field": r.field, "reason": r.reason} for r in refusals],
            }
        )
    if as_json:
        import json  # noqa: PLC0415

        doc = {"file": file, "valid": True, "enforceable_here": verdict, "tiers": report}
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        where = f"on {host_tier}" if host_tier else "on this OS (panday has no tier for it)"
        state = "enforceable" if verdict else "NOT enforceable"
        print(f"{file}: valid policy, {state} {where}")
        for row in report:
            mark = " (this host)" if row["host_tier"] else ""
            if row["enforceable"]:
                print(f"  {row['tier']}{mark}: enforceable")
                continue
            print(f"  {row['tier']}{mark}: not enforceable")
            if not row["available"]:
                print(f"    unavailable: {row['unavailable_reason']}")
            refused: list[dict[str, str]] = row["refused"]  # pyright: ignore[reportAssignmentType] - built above
            for item in refused:
                print(f"    refused {item['field']}: {item['reason']}")
    return exitcodes.OK if verdict else exitcodes.FAILED


def _policy_schema() -> int:
    from panday_core.policy import SandboxPolicy  # noqa: PLC0415
    from panday_core.schema import json_schema, render  # noqa: PLC0415

    sys.stdout.write(render(json_schema(SandboxPolicy, "policy")))
    return exitcodes.OK


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "policy":
        if args.policy_command == "check":
            return _policy_check(args.file, as_json=args.json)
        return _policy_schema()
    raise _UsageError(f"unknown command {args.command!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `panday` console script; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list
    try:
        args = _build_parser().parse_args(args_list)
        return _dispatch(args)
    except _UsageError as exc:
        print(f"panday: usage: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    except Exception as exc:
        if debug:
            raise
        from panday_core.errors import (  # noqa: PLC0415
            PolicyError,
            PolicyViolation,
            TierUnavailable,
        )

        if isinstance(exc, PolicyError):
            print(f"panday: invalid policy: {exc}", file=sys.stderr)
            return (
                exitcodes.NO_INPUT
                if not exc.field and "cannot read" in exc.reason
                else exitcodes.INVALID_POLICY
            )
        if isinstance(exc, PolicyViolation):
            print(f"panday: refused: {exc}", file=sys.stderr)
            return exitcodes.POLICY_REFUSED
        if isinstance(exc, TierUnavailable):
            print(f"panday: {exc}", file=sys.stderr)
            return exitcodes.TIER_UNAVAILABLE
        name = type(exc).__name__
        print(f"panday: internal error: {name}: {exc} (--debug shows a traceback)", file=sys.stderr)
        return exitcodes.INTERNAL


if __name__ == "__main__":
    raise SystemExit(main())
