"""What several commands share: argparse that raises `UsageError`, a FILE argument with
``--json`` and ``--debug``, whether ``--debug`` came before the command, and this host's
command tier's table."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from panday import tiers
from panday.cli.errors import UsageError

if TYPE_CHECKING:
    import argparse

    from panday_core.capabilities import TierCapabilities

DEBUG = [False]
"""Whether ``--debug`` came before the command (for commands that report errors themselves)."""


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """argparse that raises `UsageError` instead of printing usage and exiting with 2."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # pyright: ignore[reportIncompatibleMethodOverride] - raises instead
            raise UsageError(f"{self.prog}: {message}")

    made = Parser(prog=prog, description=description)
    made.add_argument("--debug", action="store_true", help="show a traceback with an error")
    return made


def file_action(action: argparse.ArgumentParser, file: str, *, many: bool = False) -> None:
    """A subcommand's FILE (or FILE...), --json and --debug."""
    if many:
        action.add_argument("files", nargs="+", metavar="FILE", help=file)
    else:
        action.add_argument("file", help=file)
    action.add_argument("--json", action="store_true", help="machine-readable output")
    action.add_argument("--debug", action="store_true", help="show a traceback with an error")


def host_table(tier: str | None) -> TierCapabilities:
    """This host's command tier's table as it holds here (`TierUnavailable` without one)."""
    if tier is None:
        from panday_core.errors import TierUnavailable

        raise TierUnavailable("auto", f"panday has no tier that runs commands on {sys.platform}")
    return tiers.host_capabilities(tier)
