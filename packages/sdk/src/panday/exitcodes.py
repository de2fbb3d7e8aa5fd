"""The CLI's exit codes (documented in docs/cli.md).

panday's own outcomes use 64-86, apart from a command's usual 0-2 and the shell's
126/127/128+N. `panday run` otherwise exits with the command's own code, so a command that
itself exits 65 looks like panday's 65: `--json` tells them apart.
"""

OK = 0
FAILED = 1
"""The check ran and its answer is no (a policy this host cannot enforce, a doctor probe
that failed or was inconclusive, a plugin that cannot run here)."""
USAGE = 64
"""Bad command line: unknown option, malformed value, missing argument, empty command."""
INVALID_POLICY = 65
"""A policy or manifest document is malformed (wrong type, unknown key, bad value)."""
NO_INPUT = 66
"""An input does not exist or cannot be read (policy file, workspace, staged path)."""
TIER_UNAVAILABLE = 69
"""The tier cannot run on this host (`panday doctor` says why)."""
INTERNAL = 70
"""panday itself failed (a bug or an unexpected host state); `--debug` shows a traceback."""
OS_ERROR = 71
"""An operating-system resource failed: the egress proxy could not listen or open its log."""
OUTPUT_ERROR = 74
"""panday could not write its own output (a full disk, an I/O error), or could not build a
`--json` document: what was written is incomplete, and the exit code says so."""
POLICY_REFUSED = 77
"""A valid policy asks for something the tier cannot enforce here (refused before spawning)."""

LIMIT_MEMORY = 81
LIMIT_PIDS = 82
LIMIT_CPU = 83
LIMIT_WALL_CLOCK = 84
LIMIT_DISK = 85
LIMIT_OUTPUT = 86
LIMITS = {
    "memory": LIMIT_MEMORY,
    "pids": LIMIT_PIDS,
    "cpu": LIMIT_CPU,
    "wall_clock": LIMIT_WALL_CLOCK,
    "disk": LIMIT_DISK,
    "output": LIMIT_OUTPUT,
}
"""A ceiling the command crossed (`LimitKind` value -> exit code); it takes precedence over
the command's own exit, which is shown on the message line."""

NOT_EXECUTABLE = 126
"""The program exists inside the sandbox but cannot be executed there."""
NOT_FOUND = 127
"""The program does not exist inside the sandbox (not on its PATH, or not visible there)."""
SIGNAL_BASE = 128
"""A command killed by signal N exits 128 + N, as in a shell; so does panday when it is
interrupted (Ctrl-C: 130) or terminated (SIGTERM: 143), after killing the jailed tree."""
