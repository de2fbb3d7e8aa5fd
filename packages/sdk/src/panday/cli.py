"""The `panday` command line (docs/cli.md).

Start-up cost matters: `panday run` wraps every tool call an agent makes. So this module
imports nothing heavy at load time, `run` has its own small argument parser (no
argparse), and each command imports what it needs when it runs. Errors are one line on
stderr with a documented exit code (`panday.exitcodes`); ``--debug`` adds the traceback.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, NoReturn

from panday import exitcodes
from panday.stdio import OutputError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

    from panday_core.errors import PolicyViolation

DOCS = "https://github.com/panday-dev/panday/blob/main/docs"
"""Where the documentation lives (the wheels do not ship docs/)."""

HELP = f"""\
usage: panday [--debug] COMMAND ...

Run commands under a fail-closed policy.

commands:
  run [OPTIONS] -- CMD [ARG]...   run a command in the sandbox (panday run --help)
  doctor [--json] [--probe]       what this host enforces, and why a tier is unavailable
  policy check [--json] FILE...   validate policies ('-': stdin); say where they are enforceable
  policy schema                   print the policy's JSON Schema
  plugin inspect [--json] FILE    a plugin.toml's consent summary for this host
  proxy [OPTIONS]                 run an egress proxy in the foreground

--debug shows a traceback with an error.
Options, exit codes and examples: {DOCS}/cli.md
"""


_debug = [False]
"""Whether ``--debug`` came before the command (for commands that report errors themselves)."""


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


def console() -> NoReturn:
    """The `panday` console script: `main`, then exit without the interpreter's teardown.

    By the time `main` returns, every session it opened is closed: its processes killed,
    its cgroups and temporary directories removed (``with`` blocks, also on errors and
    signals). What would remain is the interpreter tearing down the modules `run` loaded,
    which costs about as much as the jail itself (docs/benchmarks.md), so the streams are
    flushed and the process leaves with `os._exit`. Nothing of panday's uses atexit.

    The console script enters at `panday.cli_fast.console`, which has repaired the
    standard descriptors (`panday.stdio.repair_std_fds`) before it hands over to this.
    """
    try:
        code = main()
    except SystemExit as exc:  # argparse's --help, or a SystemExit from below
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    import contextlib  # noqa: PLC0415 - loaded by typing already

    for stream in (sys.stdout, sys.stderr):
        # A reader that went away: the exit code already says what happened.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI as a function: the process exit code for `argv` (default: sys.argv[1:])."""
    args = list(sys.argv[1:] if argv is None else argv)
    before = args[: args.index("--")] if "--" in args else args
    debug = "--debug" in before
    while args and args[0] == "--debug":
        args.pop(0)
    if not args:
        sys.stderr.write(HELP)
        return exitcodes.USAGE
    if args[0] in {"-h", "--help"}:
        sys.stdout.write(HELP)
        return exitcodes.OK
    if args[0] == "--version":
        from panday import __version__  # noqa: PLC0415

        print(f"panday {__version__}")
        return exitcodes.OK
    command, rest = args[0], args[1:]
    _debug[0] = debug
    try:
        return _handler(command)(rest)
    except BaseException as exc:  # noqa: BLE001 - every outcome becomes one line and a code
        return report(exc, debug=debug)


def _handler(command: str) -> Callable[[list[str]], int]:
    if command == "run":
        from panday.cli_run import run  # noqa: PLC0415 - each command loads its own code

        return run
    handler = _COMMANDS.get(command)
    if handler is None:
        raise UsageError(f"unknown command {command!r}; commands: run, {', '.join(_COMMANDS)}")
    return handler


def report(exc: BaseException, *, debug: bool) -> int:
    """Print `exc` as one line on stderr (plus a traceback with --debug); its exit code."""
    if isinstance(exc, SystemExit):
        raise exc
    if debug and not isinstance(exc, KeyboardInterrupt | Terminated):
        import traceback  # noqa: PLC0415 - error path

        traceback.print_exception(exc)
    code, line = _classify(exc)
    if line:
        sys.stderr.write(f"panday: {line}\n")
    return code


def _classify(exc: BaseException) -> tuple[int, str]:  # noqa: C901, PLR0911, PLR0912 - one flat mapping
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
    from panday_core.errors import (  # noqa: PLC0415 - error path
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
    from panday import tiers  # noqa: PLC0415 - lazy: only this path needs it
    from panday_core.capabilities import Support  # noqa: PLC0415 - lazy: only this path needs it
    from panday_core.errors import SandboxError  # noqa: PLC0415 - lazy: only this path needs it

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


# ------------------------------------------------------------------ argparse commands


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    """argparse that raises `UsageError` instead of printing usage and exiting with 2."""
    import argparse  # noqa: PLC0415 - not on `run`'s path

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # pyright: ignore[reportIncompatibleMethodOverride] - raises instead
            raise UsageError(f"{self.prog}: {message}")

    parser = Parser(prog=prog, description=description)
    parser.add_argument("--debug", action="store_true", help="show a traceback with an error")
    return parser


def _file_action(action: argparse.ArgumentParser, file: str, *, many: bool = False) -> None:
    """A subcommand's FILE (or FILE...), --json and --debug."""
    if many:
        action.add_argument("files", nargs="+", metavar="FILE", help=file)
    else:
        action.add_argument("file", help=file)
    action.add_argument("--json", action="store_true", help="machine-readable output")
    action.add_argument("--debug", action="store_true", help="show a traceback with an error")


def _doctor(args: list[str]) -> int:
    parser = _parser("panday doctor", "What this host enforces, tier by tier.")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--probe", action="store_true", help="run a fast subset of the escape probes"
    )
    ns = parser.parse_args(args)
    from panday.cli_doctor import doctor  # noqa: PLC0415

    return doctor(as_json=ns.json, probe=ns.probe)


def _policy(args: list[str]) -> int:
    parser = _parser("panday policy", "Check a policy file or print its schema.")
    sub = parser.add_subparsers(dest="action", required=True, parser_class=type(parser))
    _file_action(
        sub.add_parser("check", help="validate policies and say where they are enforceable"),
        "policy file (.toml or .json); '-' reads one from standard input",
        many=True,
    )
    schema = sub.add_parser("schema", help="print the policy's JSON Schema")
    schema.add_argument("--debug", action="store_true", help="show a traceback with an error")
    ns = parser.parse_args(args)
    from panday import cli_misc  # noqa: PLC0415

    if ns.action == "check":
        return cli_misc.policy_check(ns.files, as_json=ns.json, debug=ns.debug or _debug[0])
    return cli_misc.policy_schema()


def _plugin(args: list[str]) -> int:
    parser = _parser("panday plugin", "Inspect a plugin manifest.")
    sub = parser.add_subparsers(dest="action", required=True, parser_class=type(parser))
    _file_action(
        sub.add_parser("inspect", help="the consent summary of a plugin.toml for this host"),
        "the plugin's plugin.toml ('-': read it from standard input)",
    )
    ns = parser.parse_args(args)
    from panday import cli_misc  # noqa: PLC0415

    return cli_misc.plugin_inspect(ns.file, as_json=ns.json)


def _proxy(args: list[str]) -> int:
    parser = _parser(
        "panday proxy",
        "Run an egress proxy in the foreground: it prints the proxy variables, then one JSON "
        "audit event per line; Ctrl-C stops it.",
    )
    parser.add_argument("--policy", help="policy file whose [net] section applies")
    for option, metavar, what in (
        ("--allow", "HOST", "host pattern to allow (repeatable)"),
        ("--deny", "HOST", "host pattern to refuse even when allowed (repeatable)"),
        ("--port", "N", "destination port (repeatable; default 80 and 443)"),
    ):
        parser.add_argument(option, action="append", default=[], metavar=metavar, help=what)
    parser.add_argument("--listen", default="127.0.0.1", metavar="HOST", help="listen address")
    parser.add_argument("--listen-port", default="0", metavar="N", help="0: a free port")
    parser.add_argument("--session-id", help="the session id the proxy authenticates")
    parser.add_argument("--audit-jsonl", metavar="FILE", help="also append audit events to FILE")
    ns = parser.parse_args(args)
    from panday import cli_misc  # noqa: PLC0415

    return cli_misc.proxy(ns)


_COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "doctor": _doctor,
    "policy": _policy,
    "plugin": _plugin,
    "proxy": _proxy,
}


if __name__ == "__main__":
    raise SystemExit(main())
