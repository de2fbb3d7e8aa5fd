"""Gates round three (issue 28): T2 macOS's exec path holds the output ceiling on any OS.

The command runs without sandbox-exec (a profile whose argv is the command itself): what
is checked is the session's own exec path, whose streaming must stop at
``limits.output_bytes`` and say so, not what Seatbelt denies (the escape suite's, on
macOS). Kills "T2 macOS: no output ceiling on exec".
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

from panday_core.policy import policy_from_dict
from panday_core.types import ExecExit, ExecSpec, OutputChunk, SandboxHandle, SandboxTier
from panday_tier_macos import T2MacosSandbox
from panday_tier_macos.profile import SeatbeltProfile
from panday_tier_macos.sandbox import (
    _Session,  # pyright: ignore[reportPrivateUsage] - a session without sandbox-exec
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path


class _BareProfile(SeatbeltProfile, frozen=True, kw_only=True):
    """Runs the command itself, without sandbox-exec (which only macOS has)."""

    def argv(self, command: Sequence[str], values: Mapping[str, str]) -> list[str]:
        del values
        return list(command)


def _run(tmp_path: Path, output_bytes: int, size: int) -> tuple[int, ExecExit | None]:
    policy = policy_from_dict({"limits": {"output_bytes": output_bytes}}).with_workspace(
        str(tmp_path)
    )
    sandbox = T2MacosSandbox()
    handle = SandboxHandle(id="t2m-gate", tier=SandboxTier.T2_MACOS, workspace=str(tmp_path))
    sandbox._sessions[handle.id] = _Session(  # pyright: ignore[reportPrivateUsage] - see above
        session_id=handle.id,
        policy=policy,
        profile=_BareProfile(text="", params=()),
        params={},
        workspace=str(tmp_path),
        tmpdir=str(tmp_path),
        files=SandboxHandle(id=handle.id, tier=SandboxTier.T0, workspace=str(tmp_path)),
    )
    script = f"import sys; sys.stdout.buffer.write(b'x' * {size})"

    async def run() -> tuple[int, ExecExit | None]:
        got, end = 0, None
        spec = ExecSpec(argv=(sys.executable, "-I", "-c", script))
        async for event in sandbox.exec(handle, spec):
            if isinstance(event, OutputChunk) and event.stream == "stdout":
                got += len(event.data)
            elif isinstance(event, ExecExit):
                end = event
        return got, end

    try:
        return asyncio.run(run())
    finally:
        sandbox._sessions.pop(handle.id, None)  # pyright: ignore[reportPrivateUsage] - see above


def test_exec_stops_the_output_at_the_policys_ceiling(tmp_path: Path) -> None:
    # Control: under the ceiling, every byte arrives and nothing is cut.
    got, end = _run(tmp_path, output_bytes=1 << 20, size=50_000)
    assert end is not None
    assert (got, end.truncated_stdout) == (50_000, False)
    got, end = _run(tmp_path, output_bytes=4096, size=200_000)
    assert end is not None
    # The ceiling's bytes, and at most a short notice that the rest was cut.
    assert got < 4096 + 512, f"{got} bytes reached the caller past a 4096-byte ceiling"
    assert end.truncated_stdout
