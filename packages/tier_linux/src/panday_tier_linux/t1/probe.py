"""Whether T1 Linux runs here, and if not, why (one line naming the cause).

T1 needs Linux, Landlock at ABI 3 or later (`landlock.MIN_ABI`) with its three calls let
through (a container runtime's seccomp profile may refuse them), libseccomp for its
filter, and a thread that may restrict itself and spawn: all probed by a command run in
a real session, not assumed.
"""

from __future__ import annotations

from panday_tier_linux.t1.landlock import kernel_abi

_PROBED: list[str | None] = []


def unavailable_reason() -> str | None:
    """None when T1 runs here; else why not. Probed, not assumed (once per process): the
    kernel's ABI, then a real session around /usr/bin/true, so a seccomp profile that lets
    landlock_create_ruleset through but refuses restricting a thread, or loading a filter,
    is named."""
    abi = kernel_abi()
    if isinstance(abi, str):
        return abi
    if not _PROBED:
        _PROBED.append(_probe())
    return _PROBED[0]


def _probe() -> str | None:
    import shutil
    import tempfile

    from panday_core.errors import SandboxError, TierUnavailable
    from panday_core.policy import FsPolicy, SandboxPolicy
    from panday_tier_linux.t1.session import open_session

    workspace = tempfile.mkdtemp(prefix="panday-t1-probe-")
    try:
        with open_session(SandboxPolicy(fs=FsPolicy(workspace=workspace))) as session:
            result = session.run(["/usr/bin/true"], timeout_ms=30_000)
    except TierUnavailable as exc:
        return exc.reason
    except SandboxError as exc:
        return f"the probe session failed: {exc}"
    except OSError as exc:  # a call the host refuses (a container's seccomp profile)
        return f"the probe command could not be started: {exc}"
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    if result.exit_code != 0:
        return f"the probe command failed (exit {result.exit_code})"
    return None
