"""Each command tier's declared capability table, as data, in core.

A tier's package holds how it enforces (and probes this host); the table saying *what* it
enforces lives here, so that `panday` installed on one OS can still judge a policy for the
other OS's tier, whose package is not installed there (`panday policy check`), and so the
docs can be generated anywhere. T0's table is in `panday_core.t0.capabilities`: T0 itself
is part of core.
"""

AT_DEPTH_NOTE = (
    "direct (write-in-place) mode, today's only one: the protected names are protected at "
    "the workspace root (and git's metadata where git finds it), not in subdirectories, "
    "where a tool opened on that subdirectory reads them (a nested .vscode, .claude, "
    ".mcp.json); a new *.code-workspace cannot be blocked by name (list an existing one in "
    "fs.protect). A command can also write the workspace's own source code and create new "
    "repositories in subdirectories: running those later is running the workspace's code. "
    "Checking a command's whole change set at any depth is the transactional workspace's "
    "job (issue 24), which does not exist yet"
)
"""Why the "nothing a jail writes runs outside it later" row is partial on every tier."""

ALLOW_HOME_NOTE = (
    "a list of a home's start-up files is never complete: a program that runs code from "
    "another file of the home is not covered, nor are package caches and stores the next "
    "install or build takes code from (.cache's pip and uv caches, .npm, go/pkg/mod, .gem); "
    "the list, with why each is there, is in docs/threat-model.md"
)
"""Why ``fs.allow_home`` is partial on every tier."""
