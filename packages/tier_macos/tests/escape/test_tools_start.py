"""Ordinary tools start and work under the profile (macOS only).

The escape probes show what the profile denies; these show it is not denying what a shell
session needs, so that a deny in the probes means the sandbox and not a broken profile. The
`/usr/bin` developer-tool shims (`git`, `python3`) go through xcrun, which is the usual
casualty of narrow profiles, so they are here by name.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from macos_escape_helpers import Jail, inconclusive

TOOLS: dict[str, tuple[str, ...]] = {
    "sh-pipeline": ("/bin/sh", "-c", "echo hello | tr a-z A-Z | grep -q HELLO"),
    "ls-long": ("/bin/ls", "-l", "/"),
    "id": ("/usr/bin/id", "-un"),
    "date": ("/bin/date",),
    "uname": ("/usr/bin/uname", "-a"),
    "awk": ("/usr/bin/awk", "BEGIN { print 6 * 7 }"),
    "sed": ("/bin/sh", "-c", "echo abc | /usr/bin/sed s/b/B/"),
    "find": ("/usr/bin/find", ".", "-maxdepth", "1"),
    "files": ("/bin/sh", "-c", "mkdir -p a/b && touch a/b/c && cat /etc/hosts > a/h && wc -l a/h"),
    "tar": (
        "/bin/sh",
        "-c",
        "mkdir -p t && echo x > t/x && /usr/bin/tar -cf t.tar t && tar -tf t.tar",
    ),
    "xargs": ("/bin/sh", "-c", "echo a b c | xargs -n1 echo"),
    "mktemp": ("/bin/sh", "-c", 'f=$(mktemp) && echo hi > "$f" && cat "$f"'),
    "python": (sys.executable, "-c", "import json, sqlite3, ssl, multiprocessing; print('ok')"),
    "python-multiprocessing-lock": (
        sys.executable,
        "-c",
        "import multiprocessing as m; l = m.Lock(); l.acquire(); l.release(); print('ok')",
    ),
    "git-shim": ("/usr/bin/git", "--version"),
    "git-init": ("/bin/sh", "-c", "/usr/bin/git init -q repo && /usr/bin/git -C repo status"),
    "python3-shim": ("/usr/bin/python3", "--version"),
}


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_a_common_tool_works_in_the_sandbox(jail: Jail, workspace: Path, name: str) -> None:
    argv = TOOLS[name]
    if not Path(argv[0]).exists():
        inconclusive(f"{argv[0]} is not installed on this runner")
    handle = jail.create(workspace)
    result = jail.run(handle, *argv)
    stderr = result.stderr.decode("utf-8", "replace")[-800:]
    assert result.exit_code == 0, f"{name}: exit {result.exit_code}, stderr: {stderr}"
