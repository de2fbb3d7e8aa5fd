"""The policy a session gets when nobody wrote one (docs/policy.md, "The embedded default").

Workspace: the current directory, read-write. Network: none. Environment: only the caller's
locale and terminal type (LANG, LC_*, TERM) are copied in; the tier adds PATH and sets HOME
to the workspace; nothing else of the caller's environment is inherited. Limits: a wall
clock per command and a cap on the output kept, the two ceilings every command tier
enforces on every host. Memory and process ceilings are not in the default: T2 macOS
cannot enforce either and T2 Linux needs a writable cgroup, so a default asking for them
would be refused on those hosts (fail closed), i.e. nothing would run. Ask for them
explicitly (`panday run --mem 2G --pids 512`, or ``[limits]`` in a policy file).

`examples/default.toml` is this policy written out (a test keeps the two equal).

A per-user default (`user_policy_path`) replaces it for `panday run` when it exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from panday_core.policy import SandboxPolicy

DEFAULT_WALL_CLOCK_MS = 600_000
"""10 minutes per command."""
DEFAULT_OUTPUT_BYTES = 16 * 1024 * 1024
"""16 MiB of stdout and of stderr kept per command; the rest is discarded with a marker."""

ENV_PASSTHROUGH = ("LANG", "TERM")
"""Caller variables copied into the default policy's environment (with every ``LC_*``)."""


def passthrough_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's LANG, LC_* and TERM (only those; values as they are)."""
    return {
        name: value
        for name, value in sorted(environ.items())
        if (name in ENV_PASSTHROUGH or name.startswith("LC_")) and "\x00" not in value
    }


def default_policy(
    workspace: str | None = None, environ: Mapping[str, str] | None = None
) -> SandboxPolicy:
    """The embedded default for `workspace` (the current directory when None), with the
    locale and terminal type of `environ` (this process's environment when None)."""
    import os  # noqa: PLC0415 - loaded at interpreter start anyway

    from panday_core.policy import FsPolicy, Limits, SandboxPolicy  # noqa: PLC0415 - lazy

    if environ is None:
        environ = os.environ
    return SandboxPolicy(
        fs=FsPolicy(workspace=workspace or os.getcwd(), access="rw"),
        limits=Limits(wall_clock_ms=DEFAULT_WALL_CLOCK_MS, output_bytes=DEFAULT_OUTPUT_BYTES),
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
    import os  # noqa: PLC0415 - loaded at interpreter start anyway

    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):
        home = env.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".config")
    return os.path.join(base, "panday", "policy.toml")
