"""The Seatbelt runner is the system's /usr/bin/sandbox-exec, by absolute path (any OS).

Written out here rather than compared with `profile.SANDBOX_EXEC`: a bare ``sandbox-exec``
would be looked up through PATH, where a directory the caller (or a plugin's earlier run)
can write could put a program that applies no profile at all.
"""

from __future__ import annotations

from panday_core.policy import FsPolicy, SandboxPolicy
from panday_tier_macos.profile import SeatbeltProfile


def test_the_command_line_starts_with_the_system_sandbox_exec() -> None:
    policy = SandboxPolicy(fs=FsPolicy(workspace="/private/tmp/ws"))
    profile = SeatbeltProfile.from_policy(policy, None)
    values = {p: f"/private/tmp/{p.lower()}" for p in profile.params}
    argv = profile.argv(["/bin/echo", "hi"], values)
    assert argv[0] == "/usr/bin/sandbox-exec"
    assert argv[1:3] == ["-p", profile.text]
