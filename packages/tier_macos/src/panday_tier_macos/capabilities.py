"""What T2 macOS enforces on this host (rendered by `doctor`, the docs and the run report).

The table itself is data in core (`panday_core.declared.t2_macos`), so a host without this
package can still judge a policy against it. Two views of it:

* `declared_capabilities()` is host-independent. The docs generator renders it on any OS, so
  it must never probe anything.
* `host_capabilities()` is what `create` and `doctor` use on this machine. It equals the
  declared table, narrowed (never widened) when the session's egress proxy could not start:
  then ``net.allow``, ``net.deny`` and ``net.ports`` are refused with the cause.

`unavailable_reason()` says, in one line, why the tier cannot run here. On macOS it refuses a
root caller (`caller_reason`), and it does not trust that `/usr/bin/sandbox-exec` exists: it
runs it once with a profile that denies one file and checks that the denial holds (inside
another sandbox, `sandbox-exec` exits 71 with "sandbox_apply: Operation not permitted", and a
command there would run unconfined by us).
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING

from panday_core.declared.t2_macos import caller_reason, capabilities, declared_capabilities
from panday_tier_macos.profile import SANDBOX_EXEC, sbpl_string

if TYPE_CHECKING:
    from panday_core.capabilities import TierCapabilities

__all__ = ["declared_capabilities", "host_capabilities", "unavailable_reason"]


def host_capabilities(proxy_reason: str | None = None) -> TierCapabilities:
    """The table as it holds on this host (`create` and `doctor` use this one).

    `proxy_reason` is why the session's egress proxy could not start; the net fields are then
    refused with it (never approximated by no network, nor by the whole network).
    """
    return capabilities(proxy_reason)


_PROBE_SECRET = b"panday-probe-secret\n"


def _probe() -> str | None:
    import os  # noqa: PLC0415 - only the probe needs these; keep import cost off the CLI path
    import subprocess  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    if not os.access(SANDBOX_EXEC, os.X_OK):
        return f"{SANDBOX_EXEC} is missing or not executable"
    with tempfile.TemporaryDirectory(prefix="panday-probe-") as tmp:
        secret = os.path.join(os.path.realpath(tmp), "secret")  # noqa: PTH118 - os is loaded
        with open(secret, "wb") as fh:  # noqa: PTH123 - as above
            fh.write(_PROBE_SECRET)
        profile = f"(version 1)(allow default)(deny file-read* (literal {sbpl_string(secret)}))"
        try:
            done = subprocess.run(
                [SANDBOX_EXEC, "-p", profile, "/bin/cat", secret],
                capture_output=True,
                timeout=10,
                check=False,
                env={"PATH": "/usr/bin:/bin"},
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{SANDBOX_EXEC} could not be run: {exc}"
    err = done.stderr.decode("utf-8", "replace").strip().splitlines()
    detail = err[-1] if err else f"exit status {done.returncode}"
    if _PROBE_SECRET in done.stdout:
        return f"{SANDBOX_EXEC} ran but did not enforce a deny rule"
    if "sandbox_apply" in detail or "sandbox-exec:" in detail:
        return f"{SANDBOX_EXEC} cannot apply a profile here (already inside a sandbox?): {detail}"
    if done.returncode == 0 or "Operation not permitted" not in detail:
        return f"{SANDBOX_EXEC} probe gave an unexpected result: {detail}"
    return None


@functools.cache
def unavailable_reason() -> str | None:
    """None when T2 macOS can run here; otherwise one line saying why not (probed once)."""
    if sys.platform != "darwin":
        return f"T2 macOS needs macOS; this host is {sys.platform}"
    import os  # noqa: PLC0415 - macOS only; keep import cost off the CLI path

    reason = caller_reason(os.geteuid())
    if reason is not None:
        return reason
    return _probe()
