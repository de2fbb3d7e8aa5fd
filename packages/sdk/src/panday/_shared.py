"""What the synchronous and asynchronous sessions share: the policy a session opens with,
the `ExecSpec` a call builds, and how a command that never started is reported."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from panday_core.errors import CommandNotFound, TierUnavailable
from panday_core.types import ExecSpec, OutputChunk

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from panday.toolchains import Unseen
    from panday_core.capabilities import Guarantee, Refusal, TierCapabilities
    from panday_core.policy import SandboxPolicy
    from panday_core.types import ExecEvent

DEFAULT_GET_BYTES = 16 * 1024 * 1024
"""`get` reads at most this much unless told otherwise."""

_EXECVP = "bwrap: execvp "
_ENOENT = "No such file or directory"


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
            from panday import tiers  # noqa: PLC0415 - reports only

            self._caps = tiers.host_capabilities(self.tier)
        return self._caps

    def guarantees(self) -> tuple[Guarantee, ...]:
        """What this session's tier guarantees here, each with its mechanism and support."""
        return self.capabilities().guarantees


def resolve_policy(
    policy: SandboxPolicy | Mapping[str, object] | str | os.PathLike[str] | None,
) -> SandboxPolicy:
    """The policy a session opens with: the embedded default when None, a loaded file for a
    path, a validated document for a mapping; the workspace filled in with the current
    directory when the policy leaves it out."""
    from panday_core.policy import SandboxPolicy  # noqa: PLC0415 - lazy, see panday.cli

    if policy is None:
        from panday.defaults import default_policy  # noqa: PLC0415

        return default_policy()
    if isinstance(policy, SandboxPolicy):
        resolved = policy
    elif isinstance(policy, str | os.PathLike):
        from panday_core.policy import load_policy  # noqa: PLC0415

        resolved = load_policy(os.fspath(policy))
    else:
        from panday_core.policy import policy_from_dict  # noqa: PLC0415

        resolved = policy_from_dict(policy)
    if resolved.fs.workspace is None:
        resolved = resolved.with_workspace(os.getcwd())
    return resolved


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
    """Reports a command that never started as `CommandNotFound`, not as a broken tier.

    When bubblewrap cannot exec the command (no such program, not executable), the T2 Linux
    tier sees bwrap exit without the command's status and raises `TierUnavailable` with
    bwrap's message, after passing that message on as the command's stderr. The sandbox
    works; the command is what is missing. So while the start of stderr still reads like
    one bwrap line (``bwrap: ...``, possibly in several chunks), it is held back: anything
    else (stdout, more stderr after that line, the exit) releases it unchanged, in order;
    the tier's start failure drops it, and `failure` turns that into `CommandNotFound`
    (exit code 127, or 126 when the program exists but cannot be executed).
    """

    __slots__ = ("deciding", "held", "policy", "spec")

    _MARK = b"bwrap: "

    def __init__(self, policy: SandboxPolicy | None = None, spec: ExecSpec | None = None) -> None:
        self.deciding = True
        self.held: list[OutputChunk] = []
        self.policy = policy
        """The session's policy and the command: with them, a program that was not found
        is looked up on the host, to name what the sandbox cannot see (`panday.toolchains`)."""
        self.spec = spec

    def _could_be_bwrap(self, data: bytes) -> bool:
        if not data.startswith(self._MARK):
            return self._MARK.startswith(data)
        end = data.find(b"\n")
        return end < 0 or end == len(data) - 1  # one line so far, and nothing after it

    def feed(self, event: ExecEvent) -> list[ExecEvent]:
        if not self.deciding:
            return [event]
        if isinstance(event, OutputChunk) and event.stream == "stderr":
            so_far = b"".join(c.data for c in self.held) + event.data
            if self._could_be_bwrap(so_far):
                self.held.append(event)
                return []
        self.deciding = False
        held, self.held = self.held, []
        return [*held, event]

    def failure(self, exc: BaseException) -> BaseException:
        """The error to raise instead of `exc` (itself unless the command never started)."""
        if not isinstance(exc, TierUnavailable) or not exc.reason.startswith(_EXECVP):
            return exc
        program, _, why = exc.reason.removeprefix(_EXECVP).rpartition(": ")
        if not program:
            return exc
        if why == _ENOENT:
            hint, unseen = self._unseen(program)
            return CommandNotFound(
                program,
                f"not found inside the sandbox{hint}",
                exit_code=127,
                host_path=unseen.path if unseen is not None else None,
                stage=unseen.stage if unseen is not None else (),
            )
        return CommandNotFound(
            program, f"cannot be executed inside the sandbox ({why})", exit_code=126
        )

    def _unseen(self, program: str) -> tuple[str, Unseen | None]:
        if self.policy is None:
            return "", None
        from panday.toolchains import diagnose  # noqa: PLC0415 - lazy: only this path needs it
        from panday_tier_linux.argv import DEFAULT_PATH  # noqa: PLC0415 - lazy: only this path needs it

        path = self.policy.env.get("PATH", DEFAULT_PATH)
        cwd = self.spec.cwd if self.spec is not None else None
        try:
            return diagnose(program, policy=self.policy, cwd=cwd, sandbox_path=path)
        except OSError:  # the host changed under us; the plain message still holds
            return "", None


def missing_paths(policy: SandboxPolicy) -> tuple[Refusal, ...]:
    """The policy's paths that do not exist here (or a workspace that is not a directory):
    a session could not open with them, and that is about the input, not the tier (the CLI
    exits 66 for it however the path got into the policy)."""
    from panday_core.capabilities import Refusal  # noqa: PLC0415 - loaded with the tier - lazy: only this path needs it

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
