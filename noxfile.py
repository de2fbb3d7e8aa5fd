"""panday's gates. (On the `linux` branch this file holds only the T2 Linux sessions; the
lead merges them, as the clearly separated block at the end, into the full noxfile.)"""

from __future__ import annotations

import os
import sys

import nox

nox.options.default_venv_backend = "none"

# ------------------------------------------------------------------ T2 Linux (issue 4)
# `escape`: the T2 Linux escape suite as the current user (fails on Linux when the jail
# cannot run; skipped with the reason elsewhere). The root + unprivileged double run is
# tools/ci/escape-as-user.sh, which `.ci/run` calls as root.
# `bench`: the benchmark harness (not a default session: it is slow and measures this
# machine); writes benchmarks/results.json and docs/benchmarks.md, fails over a budget.


@nox.session(python=False)
def escape(session: nox.Session) -> None:
    """T2 Linux escape suite (probes with positive controls) as the current user."""
    session.run(
        "uv",
        "run",
        "--frozen",
        "pytest",
        "packages/tier_linux/tests/escape",
        "-q",
        "-p",
        "no:cacheprovider",
        *session.posargs,
    )


@nox.session(python=False, default=False)
def escape_both(session: nox.Session) -> None:
    """The escape suite as root and as an unprivileged user (run as root, on Linux)."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        session.error("escape_both needs root on Linux (it creates an unprivileged user)")
    session.run("bash", "tools/ci/escape-as-user.sh", *session.posargs, external=True)


@nox.session(python=False, default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks, measured side by side; budgets are ratios (see docs/benchmarks.md)."""
    session.run(
        "uv",
        "run",
        "--frozen",
        "--group",
        "bench",
        "python",
        "tools/bench/run.py",
        *session.posargs,
    )
