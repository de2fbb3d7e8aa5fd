"""The `panday` command line (docs/cli.md), on pip's model: one module per command in this
package, each owning its parser and its handler (``main(args) -> exit code``), and one
`COMMANDS` table naming them; `panday.cli.errors` holds the exceptions and the table that
turns any of them into an exit code and a line.

Start-up cost matters: `panday run` wraps every tool call an agent makes. So this module
imports nothing heavy at load time, a command's module is imported only when it runs
(`run` has its own small argument parser, no argparse), and a cached ``panday run``
(`panday.cli_fast`, where the console script enters) loads none of this package. Errors
are one line on stderr with a documented exit code (`panday.exitcodes`); ``--debug`` adds
the traceback.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, NoReturn

from panday import exitcodes
from panday.cli.common import DEBUG
from panday.cli.errors import (
    InvalidInputError,
    NoInputError,
    Terminated,
    UsageError,
    classify,
    report,
)
from panday.stdio import write_text

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

DOCS = "https://github.com/panday-dev/panday/blob/main/docs"
"""Where the documentation lives (the wheels do not ship docs/)."""


class Command:
    """One row of `COMMANDS`: the module that implements it (imported when it runs) and
    its lines in ``panday --help`` (usage, summary)."""

    __slots__ = ("lines", "module")

    def __init__(self, module: str, *lines: tuple[str, str]) -> None:
        self.module = module
        self.lines = lines


COMMANDS: dict[str, Command] = {
    "run": Command(
        "panday.cli.run",
        ("run [OPTIONS] -- CMD [ARG]...", "run a command in the sandbox (panday run --help)"),
    ),
    "doctor": Command(
        "panday.cli.doctor",
        (
            "doctor [--json] [--probe]",
            "what this host enforces, and why a tier is unavailable",
        ),
    ),
    "policy": Command(
        "panday.cli.policy",
        (
            "policy check [--json] FILE...",
            "validate policies ('-': stdin); say where they are enforceable",
        ),
        ("policy schema", "print the policy's JSON Schema"),
    ),
    "shell": Command(
        "panday.cli.shell",
        ("shell [RUN OPTIONS]", "an interactive shell in the sandbox (run --tty -- bash -i)"),
    ),
    "changes": Command(
        "panday.cli.changes",
        ("changes [list|show|apply|discard|collect]", "change sets of fs.writes checked/review"),
    ),
    "plugin": Command(
        "panday.cli.plugin",
        ("plugin inspect [--json] FILE", "a plugin.toml's consent summary for this host"),
    ),
    "proxy": Command(
        "panday.cli.proxy", ("proxy [OPTIONS]", "run an egress proxy in the foreground")
    ),
}
"""Every command, in the order ``panday --help`` lists them."""

_USAGE_WIDTH = 32
HELP = (
    "usage: panday [--debug] COMMAND ...\n\n"
    "Run commands under a fail-closed policy.\n\n"
    "commands:\n"
    + "".join(
        f"  {usage.ljust(_USAGE_WIDTH)}{summary}\n"
        for command in COMMANDS.values()
        for usage, summary in command.lines
    )
    + "\n--debug shows a traceback with an error; -V, --version prints panday's version.\n"
    f"Options, exit codes and examples: {DOCS}/cli.md\n"
)

__all__ = [
    "COMMANDS",
    "DOCS",
    "HELP",
    "Command",
    "InvalidInputError",
    "NoInputError",
    "Terminated",
    "UsageError",
    "classify",
    "console",
    "main",
    "report",
]


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
    import contextlib

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
    DEBUG[0] = debug
    try:
        if not args:
            write_text(HELP, 2)
            return exitcodes.USAGE
        if args[0] in {"-h", "--help"}:
            write_text(HELP)
            return exitcodes.OK
        if args[0] in {"-V", "--version"}:
            from panday import __version__

            write_text(f"panday {__version__}\n")
            return exitcodes.OK
        return handler(args[0])(args[1:])
    except BaseException as exc:  # noqa: BLE001 - every outcome becomes one line and a code
        return report(exc, debug=debug)


def handler(command: str) -> Callable[[list[str]], int]:
    """The `main` of `command`'s module (imported now), or `UsageError` for an unknown one."""
    found = COMMANDS.get(command)
    if found is None:
        raise UsageError(f"unknown command {command!r}; commands: {', '.join(COMMANDS)}")
    __import__(found.module)
    run: Callable[[list[str]], int] = sys.modules[found.module].main
    return run
