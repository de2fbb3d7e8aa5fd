"""`panday shell [RUN OPTIONS]`: an interactive shell in the jail (`panday run --tty --
bash -i`, or ``sh -i`` where the host has no bash; the jail shows the host's /usr)."""

from __future__ import annotations

import os

from panday.cli import run


def main(args: list[str]) -> int:
    """`panday shell ARGS`: `panday run --tty ARGS -- SHELL -i`."""
    if "--" in args or any(a in {"-h", "--help"} for a in args):
        from panday.cli.errors import UsageError

        if "--" in args:
            raise UsageError("shell: takes run's options only; for a command, use panday run --tty")
        return run.main(["--help"])
    shell = "/usr/bin/bash" if os.access("/usr/bin/bash", os.X_OK) else "/bin/sh"
    return run.main(["--tty", *args, "--", shell, "-i"])
