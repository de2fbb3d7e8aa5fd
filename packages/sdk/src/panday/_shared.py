"""What the synchronous and asynchronous sessions share: the policy a session opens with,
the `ExecSpec` a call builds, and how a command that never started is reported."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from panday.defaults import current_directory
from panday_core.errors import CommandNotFound
from panday_core.types import ExecSpec

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from panday.changes import ChangeSet
    from panday.toolchains import Unseen
    from panday_core.capabilities import Guarantee, Refusal, TierCapabilities
    from panday_core.policy import SandboxPolicy
    from panday_core.types import ExecEvent

DEFAULT_GET_BYTES = 16 * 1024 * 1024
"""`get` reads at most this much unless told otherwise."""


class SessionInfo:
    """What a session says about itself, the same in its synchronous and async faces."""

    def __init__(
        self, *, session_id: str, tier: str, workspace: str, policy: SandboxPolicy
    ) -> None:
        self.id = session_id
        self.tier = tier
        """The tier that enforces the policy: the one asked for, or what ``auto`` picked."""
        self.workspace = workspace
        self.policy = policy
        """The policy this session enforces (workspace filled in)."""
        self._caps: TierCapabilities | None = None

    def capabilities(self) -> TierCapabilities:
        """This tier's table as it holds on this host (every policy field, every guarantee)."""
        if self._caps is None:
            from panday import tiers

            self._caps = tiers.host_capabilities(self.tier)
        return self._caps

    def guarantees(self) -> tuple[Guarantee, ...]:
        """What this session's tier guarantees here, each with its mechanism and support."""
        return self.capabilities().guarantees

    def changes(self) -> list[ChangeSet]:
        """The change sets kept for this session's workspace (``fs.writes`` checked or
        review), oldest first: what was held, or waits for review (`panday.changes`)."""
        from panday.changes import change_sets

        return change_sets(self.workspace)


def resolve_policy(
    policy: SandboxPolicy | Mapping[str, object] | str | os.PathLike[str] | None,
) -> SandboxPolicy:
    """The policy a session opens with: the embedded default when None, a loaded file for a
    path, a validated document for a mapping; the workspace filled in with the current
    directory when the policy leaves it out."""
    from panday_core.policy import SandboxPolicy

    if policy is None:
        from panday.defaults import default_policy

        return _writes_for_import_path(default_policy())
    if isinstance(policy, SandboxPolicy):
        resolved = policy
    elif isinstance(policy, str | os.PathLike):
        from panday_core.policy import load_policy

        resolved = load_policy(os.fspath(policy))
    else:
        from panday_core.policy import policy_from_dict

        resolved = policy_from_dict(policy)
    if resolved.fs.workspace is None:
        resolved = resolved.with_workspace(current_directory())
    return resolved


def _writes_for_import_path(policy: SandboxPolicy) -> SandboxPolicy:
    """The embedded default with ``fs.writes = "checked"`` when its workspace (the current
    directory) is on this Python's import path, as it is for a script saved in the project
    it sandboxes: written in place, a module there would run in this process's next
    import, so its writes become proposals (docs/workspace.md) and every Python module
    among them is held. Only the embedded default, and only on Linux (where T2 gives
    overlays; elsewhere the workspace is refused by name, as before); a policy the caller
    states is never changed. `ExecResult.writes` reports the mode."""
    if not sys.platform.startswith("linux") or policy.fs.workspace is None:
        return policy
    from panday_core.protect import sys_path_refusal

    if sys_path_refusal(policy.fs.workspace, writable=True) is None:
        return policy
    import msgspec

    return msgspec.structs.replace(policy, fs=msgspec.structs.replace(policy.fs, writes="checked"))


def exec_spec(
    cmd: Sequence[str],
    *,
    stdin: bytes | str | None,
    cwd: str | None,
    timeout: float | None,
) -> ExecSpec:
    """One command's spec; `cmd` is a list of arguments and is never given to a shell."""
    if isinstance(cmd, str | bytes):
        raise TypeError(
            "cmd: pass the program and its arguments as a list (['ls', '-l']); a string is "
            "never split or given to a shell (write ['sh', '-c', line] to run a shell line)"
        )
    argv = tuple(cmd)
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):  # pyright: ignore[reportUnnecessaryIsInstance] - callers may not be typed
            raise TypeError(f"cmd[{i}]: {arg!r} is not a string")
    data = stdin.encode() if isinstance(stdin, str) else stdin
    timeout_ms = None
    if timeout is not None:
        if isinstance(timeout, bool) or not timeout > 0:
            raise ValueError(f"timeout: {timeout!r} must be a positive number of seconds")
        timeout_ms = max(1, round(timeout * 1000))
    return ExecSpec(argv=argv, stdin=data, cwd=cwd, timeout_ms=timeout_ms)


class StartGuard:
    """Adds to the tier's `CommandNotFound` what the host knows about the program.

    The tier decides whether a command ever ran from status only its own side writes (on T2
    Linux: bwrap's status descriptor, the relay's report pipe), never from the command's
    output, and raises `CommandNotFound` itself. This only looks the program up on the host
    when it was not found (exit 127), to name what the sandbox cannot see and what to stage
    (`panday.toolchains`): a ``.venv`` whose python links into ``~/.pyenv``, a program
    found only on the caller's own PATH.
    """

    __slots__ = ("policy", "spec", "tier")

    def __init__(
        self,
        policy: SandboxPolicy | None = None,
        spec: ExecSpec | None = None,
        tier: str | None = None,
    ) -> None:
        self.policy = policy
        self.spec = spec
        self.tier = tier
        """The session's tier, whose default ``PATH`` applies (None: this host's)."""

    def feed(self, event: ExecEvent) -> list[ExecEvent]:
        """Events pass unchanged (the tier held back its own setup lines already)."""
        return [event]

    def failure(self, exc: BaseException) -> BaseException:
        """The error to raise instead of `exc` (itself unless there is more to say)."""
        if not isinstance(exc, CommandNotFound) or exc.exit_code != 127 or exc.host_path:  # noqa: PLR2004 - not found
            return exc
        hint, unseen = self._unseen(exc.program)
        if not hint:
            return exc
        return CommandNotFound(
            exc.program,
            f"{exc.reason}{hint}",
            exit_code=exc.exit_code,
            host_path=unseen.path if unseen is not None else None,
            stage=unseen.stage if unseen is not None else (),
        )

    def _unseen(self, program: str) -> tuple[str, Unseen | None]:
        if self.policy is None:
            return "", None
        from panday import tiers
        from panday.toolchains import diagnose

        env = self.policy.env
        path = env["PATH"] if "PATH" in env else tiers.default_path(self.tier)
        cwd = self.spec.cwd if self.spec is not None else None
        try:
            return diagnose(program, policy=self.policy, cwd=cwd, sandbox_path=path)
        except OSError:  # the host changed under us; the plain message still holds
            return "", None


def missing_paths(policy: SandboxPolicy) -> tuple[Refusal, ...]:
    """The policy's paths that do not exist here (or a workspace that is not a directory):
    a session could not open with them, and that is about the input, not the tier (the CLI
    exits 66 for it however the path got into the policy)."""
    from panday_core.capabilities import Refusal

    found: list[Refusal] = []
    workspace = policy.fs.workspace
    if workspace is not None:
        if not os.path.exists(workspace):
            found.append(Refusal(field="fs.workspace", reason=f"{workspace!r} does not exist"))
        elif not os.path.isdir(workspace):
            found.append(Refusal(field="fs.workspace", reason=f"{workspace!r} is not a directory"))
    for i, path in enumerate(policy.fs.staged_ro):
        if not os.path.exists(path):
            found.append(Refusal(field=f"fs.staged_ro[{i}]", reason=f"{path!r} does not exist"))
    return tuple(found)
