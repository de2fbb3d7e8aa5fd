"""The CLI's errors and the one table that turns any exception into an exit code and a line.

Every command raises; nothing below the dispatcher prints an error or picks a code itself
(`panday.cli.main` calls `report`). The codes are `panday.exitcodes` (docs/cli.md), which
stays outside this package: `panday run`'s cached start-up (`panday.cli_fast`) uses it and
loads none of the CLI's modules.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from panday import exitcodes
from panday.stdio import OutputError

if TYPE_CHECKING:
    from panday_core.errors import PolicyViolation


class UsageError(Exception):
    """A bad command line: one line on stderr, exit 64."""


class NoInputError(Exception):
    """An input (policy file, workspace, staged path) does not exist or cannot be read: one
    line, exit 66."""


class InvalidInputError(Exception):
    """A policy or manifest document is malformed; the line names the file: exit 65."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: unwind (killing the jailed tree), then exit 128 + N."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"signal {signum}")


def report(exc: BaseException, *, debug: bool) -> int:
    """Print `exc` as one line on stderr (plus a traceback with --debug); its exit code."""
    if isinstance(exc, SystemExit):
        raise exc
    if debug and not isinstance(exc, KeyboardInterrupt | Terminated):
        import traceback

        traceback.print_exception(exc)
    code, line = classify(exc)
    if line:
        sys.stderr.write(f"panday: {line}\n")
    return code


def classify(exc: BaseException) -> tuple[int, str]:  # noqa: C901, PLR0911, PLR0912 - one flat mapping
    """The exit-code table: (code, the line to print; empty: silent) for any exception."""
    if isinstance(exc, KeyboardInterrupt):
        return exitcodes.SIGNAL_BASE + 2, ""  # SIGINT, silent as in a shell
    if isinstance(exc, BrokenPipeError):
        return exitcodes.SIGNAL_BASE + 13, ""  # our reader went away, as SIGPIPE would
    if isinstance(exc, Terminated):
        return exitcodes.SIGNAL_BASE + exc.signum, ""
    if isinstance(exc, UsageError):
        return exitcodes.USAGE, f"usage: {exc}"
    if isinstance(exc, NoInputError):
        return exitcodes.NO_INPUT, str(exc)
    if isinstance(exc, InvalidInputError):
        return exitcodes.INVALID_POLICY, str(exc)
    if isinstance(exc, OutputError):
        return exitcodes.OUTPUT_ERROR, str(exc)
    from panday_core.errors import (
        CommandNotFound,
        LimitExceeded,
        PolicyError,
        PolicyViolation,
        TierUnavailable,
        Unsupported,
        WorkspaceUnusable,
    )

    if isinstance(exc, WorkspaceUnusable):  # an input that cannot serve: as if missing
        return exitcodes.NO_INPUT, str(exc)
    if isinstance(exc, PolicyError):
        if not exc.field and exc.reason.startswith("cannot read"):
            return exitcodes.NO_INPUT, str(exc)
        return exitcodes.INVALID_POLICY, f"invalid policy: {exc}"
    if isinstance(exc, PolicyViolation):
        return exitcodes.POLICY_REFUSED, f"refused: {exc}{_refusal_hint(exc)}"
    if isinstance(exc, TierUnavailable):
        return exitcodes.TIER_UNAVAILABLE, f"{exc} (`panday doctor` shows what this host has)"
    if isinstance(exc, CommandNotFound):
        return exc.exit_code, str(exc)
    if isinstance(exc, Unsupported):  # e.g. a command on T0, which never executes
        return exitcodes.USAGE, str(exc)
    if isinstance(exc, LimitExceeded):
        return exitcodes.LIMITS.get(exc.kind, exitcodes.INTERNAL), str(exc)
    name = type(exc).__name__
    return exitcodes.INTERNAL, f"internal error: {name}: {exc} (--debug shows a traceback)"


def _refusal_hint(exc: PolicyViolation) -> str:
    """What to do about a refusal, when the fix is to leave fields out.

    Only the fields the tier does not enforce on this host can be fixed that way (or by
    another host); a refusal of a value (a workspace that would expose the whole host) says
    what is wrong with it in its own reason, and gets no generic advice.
    """
    from panday import tiers
    from panday_core.capabilities import Support
    from panday_core.errors import SandboxError

    try:
        table = tiers.host_capabilities(exc.tier)
    except (SandboxError, KeyError):
        return ""
    unenforced: list[str] = []
    for refusal in exc.violations:
        # fs.staged_ro[0] and env.NAME are rows fs.staged_ro and env of the table.
        entry = table.for_field(refusal.field.split("[", 1)[0])
        if entry is None and refusal.field.startswith("env."):
            entry = table.for_field("env")
        if (entry is None or entry.support is Support.NOT_ENFORCED) and (
            refusal.field not in unenforced
        ):
            unenforced.append(refusal.field)
    if not unenforced:
        return ""
    them = "it" if len(unenforced) == 1 else "them"
    return (
        f". {exc.tier} does not enforce {', '.join(unenforced)} on this host: leave {them} "
        "out of the policy, or run where it is enforced (`panday doctor` lists what this "
        "host enforces)"
    )
