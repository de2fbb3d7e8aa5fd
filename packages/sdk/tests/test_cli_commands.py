"""The CLI's shape (pip's model): one module per command, one `COMMANDS` table, and the
dispatcher knows nothing else. A new command is its module plus one row in `COMMANDS` (and
its section of docs/cli.md): shown here with a fake command added the same way."""

from __future__ import annotations

import subprocess
import sys
import types
from typing import TYPE_CHECKING

from panday import cli, exitcodes
from panday.cli import COMMANDS, Command

if TYPE_CHECKING:
    import pytest


def test_every_command_is_a_module_with_its_own_main() -> None:
    for name, command in COMMANDS.items():
        __import__(command.module)
        module = sys.modules[command.module]
        assert callable(module.main), name
        assert command.lines, name
        # Each command's lines are in `panday --help`, in the table's order.
        for usage, summary in command.lines:
            assert f"  {usage}" in cli.HELP
            assert summary in cli.HELP


def test_a_new_command_is_one_row_in_the_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = types.ModuleType("panday_fake_command")

    def main(args: list[str]) -> int:
        if args == ["--bad"]:
            raise cli.UsageError("hello: --bad is not an option")
        sys.stdout.write(f"hello {' '.join(args)}\n")
        return exitcodes.OK

    module.__dict__["main"] = main
    monkeypatch.setitem(sys.modules, "panday_fake_command", module)
    monkeypatch.setitem(COMMANDS, "hello", Command("panday_fake_command", ("hello", "greet")))
    assert cli.main(["hello", "world"]) == exitcodes.OK
    assert capsys.readouterr().out == "hello world\n"
    # Its errors go through the same table as every command's.
    assert cli.main(["hello", "--bad"]) == exitcodes.USAGE
    assert capsys.readouterr().err == "panday: usage: hello: --bad is not an option\n"
    # An unknown command lists the table.
    assert cli.main(["nope"]) == exitcodes.USAGE
    assert (
        "commands: run, doctor, policy, shell, changes, plugin, proxy, hello"
        in capsys.readouterr().err
    )


def test_no_cli_module_imports_the_dispatcher_back() -> None:
    # errors.py holds the exceptions: a command module needs nothing from panday.cli's
    # own __init__, so loading one alone loads no other command.
    script = (
        "import sys; import panday.cli.policy; "
        "print(sorted(m for m in sys.modules if m.startswith('panday.cli.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(eval(done.stdout))  # noqa: S307 - our own printed list
    assert loaded == {"panday.cli.common", "panday.cli.errors", "panday.cli.policy"}
