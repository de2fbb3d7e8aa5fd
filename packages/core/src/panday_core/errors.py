"""The error hierarchy every panday component raises.

Callers catch `SandboxError` for "panday said no"; each subclass carries the data a caller
needs to act (which field, which limit, why a tier is unavailable) so nobody has to parse
messages.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from panday_core.refusal import Refusal


class SandboxError(Exception):
    """Base class: anything panday refuses or fails at."""


class PolicyError(SandboxError, ValueError):
    """A policy (or manifest) is malformed: wrong type, unknown key, bad value, whether it
    was read from a document or built in Python (`panday_core.policy.FieldError`, a
    subclass, is what the models raise for a bad value).

    `field` is the dotted path of the offending value (``limits.mem_bytes``,
    ``net.allow[0]``); it is empty when the document as a whole is unusable (unreadable
    file, invalid TOML).
    """

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}" if field else reason)


class PolicyViolation(SandboxError):
    """A valid policy asks for something the chosen tier cannot enforce.

    Raised by `create` before anything is spawned. `violations` lists every refused field;
    `field` and `reason` are the first of them, for callers that handle one at a time.
    """

    def __init__(self, tier: str, violations: Sequence[Refusal]) -> None:
        if not violations:
            msg = "PolicyViolation needs at least one refused field"
            raise ValueError(msg)
        self.tier = tier
        self.violations: tuple[Refusal, ...] = tuple(violations)
        self.field = self.violations[0].field
        self.reason = self.violations[0].reason
        lines = "; ".join(f"{v.field}: {v.reason}" for v in self.violations)
        super().__init__(f"tier {tier} cannot enforce this policy: {lines}")


class Unsupported(SandboxError):
    """The operation has no meaning on this tier (e.g. `exec` on T0, which never executes)."""


class LimitExceeded(SandboxError):
    """A command crossed a resource ceiling; `kind` names which (see `LimitKind`)."""

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        self.detail = detail
        super().__init__(f"limit exceeded: {kind}: {detail}")


class TierUnavailable(SandboxError):
    """The tier's mechanism cannot run on this host; `reason` says why in one line."""

    def __init__(self, tier: str, reason: str) -> None:
        self.tier = tier
        self.reason = reason
        super().__init__(f"tier {tier} is unavailable: {reason}")


class CommandNotFound(SandboxError):
    """The command could not be started inside the sandbox: no such program on the sandbox's
    PATH or at that path (`exit_code` 127, as a shell reports it), or it is not executable
    there (126). The sandbox itself works; this is about the command.
    """

    def __init__(
        self,
        program: str,
        reason: str,
        *,
        exit_code: int = 127,
        host_path: str | None = None,
        stage: Sequence[str] = (),
    ) -> None:
        self.program = program
        self.reason = reason
        self.exit_code = exit_code
        self.host_path = host_path
        """A path the program needs that exists on the host but not inside the sandbox (the
        program, what it links to, or its script's interpreter), when there is one."""
        self.stage: tuple[str, ...] = tuple(stage)
        """The directories that, staged read-only (``fs.staged_ro``), would make it visible."""
        super().__init__(f"{program!r}: {reason}")


class SessionClosed(SandboxError):
    """The session was closed: it runs nothing more and no longer reads or writes its
    workspace. The synchronous and asynchronous sessions raise the same error, for every
    operation, as soon as it is called (also `stream`, before anything is iterated)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} is closed")


class WorkspaceUnusable(SandboxError):
    """The workspace, or the directory a command would start in, cannot be used: the current
    directory a session would take as its workspace was deleted, or the jail (which runs as
    the caller's uid without capabilities, so a root caller's jail cannot pass permission
    bits either) cannot enter it. A fault of the path, not of the tier or the policy.

    `field` is the policy field (``fs.workspace``) or ``cwd``; `path` the directory;
    `reason` what is wrong with it and what to do.
    """

    def __init__(self, field: str, path: str, reason: str) -> None:
        self.field = field
        self.path = path
        self.reason = reason
        super().__init__(f"{field}: {path!r} {reason}")


class Internal(SandboxError):
    """panday itself failed (a bug or an unexpected host state); the session is unusable."""


class PathRefused(SandboxError):
    """A path names something the session may not touch: outside the workspace and the
    staged paths (through ``..``, an absolute path, a symbolic link, a hard link, a /proc
    magic link), malformed (NUL byte, over-long), or a write to a read-only root.

    `path` is the path as the caller gave it; `reason` says which rule refused it.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path!r}: {reason}")
