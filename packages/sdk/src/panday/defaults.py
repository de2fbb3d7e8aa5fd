"""The policy a session gets when nobody wrote one (docs/policy.md, "The embedded default").

Workspace: the current directory, read-write. Network: none. Environment: only the caller's
locale selection (LANG, LANGUAGE, LC_ALL and the standard LC_* categories) and terminal
type (TERM) are copied in; the tier adds PATH and sets HOME to the workspace; nothing else
of the caller's environment is inherited (an ``LC_SECRET`` is not a locale category, so it
stays out). Limits: the model's own defaults, a wall clock per command and a cap on the
output kept (`panday_core.policy.DEFAULT_WALL_CLOCK_MS`, `DEFAULT_OUTPUT_BYTES`), which
every policy has unless it writes ``"unbounded"``. Memory and process ceilings are not
policy fields of the default: T2 macOS cannot enforce either and T2 Linux needs a writable
cgroup, so a default asking for them would be refused on those hosts (fail closed), i.e.
nothing would run. T2 Linux protects the host from a fork or memory bomb by itself instead,
as strongly as the host allows (docs/tiers/linux.md, "Host protection"). Ask for ceilings
explicitly (`panday run --mem 2G --pids 512`, or ``[limits]`` in a policy file).

`examples/default.toml` is this policy written out (a test keeps the two equal).

A per-user default (`user_policy_path`) replaces it for `panday run` when it exists.
"""

from __future__ import annotations

import os

# `panday run`'s cached start-up (panday.cli_fast) reads `passthrough_env` and
# `user_policy_path` from here, so loading this module imports neither typing nor the
# policy model (msgspec): the model's defaults are re-exported on first use (`__getattr__`).
TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from collections.abc import Mapping

    from panday_core.policy import DEFAULT_OUTPUT_BYTES, DEFAULT_WALL_CLOCK_MS, SandboxPolicy

__all__ = [
    "DEFAULT_OUTPUT_BYTES",
    "DEFAULT_WALL_CLOCK_MS",
    "ENV_PASSTHROUGH",
    "default_policy",
    "passthrough_env",
    "user_policy_path",
]

ENV_PASSTHROUGH = (
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_ADDRESS",
    "LC_COLLATE",
    "LC_CTYPE",
    "LC_IDENTIFICATION",
    "LC_MEASUREMENT",
    "LC_MESSAGES",
    "LC_MONETARY",
    "LC_NAME",
    "LC_NUMERIC",
    "LC_PAPER",
    "LC_TELEPHONE",
    "LC_TIME",
    "TERM",
)
"""Caller variables copied into the default policy's environment: the ones that select a
locale (POSIX and glibc's categories, by name: a prefix match would pass ``LC_SECRET``)
and the terminal type."""


def __getattr__(name: str) -> int:
    """`DEFAULT_WALL_CLOCK_MS` and `DEFAULT_OUTPUT_BYTES`: the model's own, loaded with it."""
    if name in {"DEFAULT_WALL_CLOCK_MS", "DEFAULT_OUTPUT_BYTES"}:
        from panday_core import policy

        value: int = getattr(policy, name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def passthrough_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's locale selection and TERM (only `ENV_PASSTHROUGH`; values as they are)."""
    return {
        name: value
        for name, value in sorted(environ.items())
        if name in ENV_PASSTHROUGH and "\x00" not in value
    }


def current_directory() -> str:
    """The current directory, which a session takes as its workspace when none is given, or
    `WorkspaceUnusable` saying it no longer exists (a deleted directory has no path)."""
    try:
        return os.getcwd()
    except OSError as exc:
        try:
            was = os.readlink("/proc/self/cwd").removesuffix(" (deleted)")
        except OSError:
            was = "."
        from panday_core.errors import WorkspaceUnusable

        why = (
            "no longer exists (it was deleted)"
            if isinstance(exc, FileNotFoundError)
            else (f"cannot be named ({exc.strerror})")
        )
        raise WorkspaceUnusable(
            "fs.workspace",
            was,
            f"is the current directory, which a session without fs.workspace works in, and "
            f"it {why}; change to an existing directory or give the workspace (--workspace, "
            "or fs.workspace in the policy)",
        ) from None


def default_policy(
    workspace: str | None = None, environ: Mapping[str, str] | None = None
) -> SandboxPolicy:
    """The embedded default for `workspace` (the current directory when None), with the
    locale and terminal type of `environ` (this process's environment when None)."""
    import os

    from panday_core.policy import FsPolicy, SandboxPolicy

    if environ is None:
        environ = os.environ
    return SandboxPolicy(
        fs=FsPolicy(workspace=workspace or current_directory(), access="rw"),
        env=passthrough_env(environ),
    )


def user_policy_path(environ: Mapping[str, str] | None = None) -> str:
    """Where the per-user default policy lives: ``$XDG_CONFIG_HOME/panday/policy.toml``, or
    ``~/.config/panday/policy.toml`` when that variable is unset or not absolute (as the XDG
    base-directory specification says).

    `panday run` starts from this file when it exists and no ``--policy`` is given; it
    replaces the embedded default as a whole, exactly as ``--policy`` would. The library's
    `panday.open()` does not read it: a program states its policy itself.
    """
    import os

    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):
        home = env.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".config")
    return os.path.join(base, "panday", "policy.toml")
