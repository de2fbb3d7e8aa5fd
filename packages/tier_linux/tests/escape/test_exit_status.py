"""Escape probes: a command cannot change how panday classifies its exit.

Whether a command ran is read from what only panday's side writes: bwrap's status
descriptor, and in a session with ``net.allow`` the relay's report pipe (close-on-exec in
the relay, closed in its loop). A command that could write that pipe could make panday
report a command that ran as "not found" (or a relay failure), whatever it really did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

FORGE = """
import subprocess
r, w = os.pipe()
helper = subprocess.Popen(["/bin/sleep", "30"], pass_fds=[w])
os.close(w)
me = os.getpid()
control, forged = 0, 0
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == me:
        continue
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for fd in fds:
        path = f"/proc/{pid}/fd/{fd}"
        try:
            if not os.readlink(path).startswith("pipe:"):
                continue
            wfd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if int(pid) == helper.pid:
                control += 1
            else:
                os.write(wfd, b"E2\\n")  # what the relay writes when its exec failed
                forged += 1
        except OSError:
            pass
        os.close(wfd)
for fd in os.listdir("/proc/self/fd"):  # and anything this process holds itself
    if int(fd) > 2:
        try:
            os.write(int(fd), b"E2\\n")
            forged += 1
        except OSError:
            pass
helper.kill()
if not control:
    print("RESULT none: the helper's pipe was not found")
    sys.exit(0)
ok(f"control {control} forged {forged}")
"""


def test_a_command_cannot_write_the_relays_report(esc: Escape) -> None:
    """With the relay (net.allow), the command reopens every pipe it can through /proc and
    writes the relay's "exec failed" report into it. Control: it does reach a pipe held by
    a process it started itself. It exits 0 and must be reported as having run."""
    with esc.open(allow=["allowed.test"]) as session:
        result = session.run(esc.py(FORGE), timeout_ms=60_000)
    outcome = esc.parse("inside a jail with the egress relay", result.stdout, result.stderr, 0)
    esc.control(outcome)  # the helper's pipe was reopened and written: the probe can
    assert result.exit_code == 0, result
    assert result.breach is None
    esc.held()


@pytest.mark.parametrize("code", [1, 125])
def test_a_command_printing_setup_lines_keeps_its_exit(esc: Escape, code: int) -> None:
    """bwrap's and the relay's own failure lines, printed by a command that then exits
    with their code, with and without the relay: still the command's own exit."""
    lines = "echo 'bwrap: execvp x: No such file or directory' >&2; echo 'panday-relay: x' >&2"
    argv = ["/bin/sh", "-c", f"{lines}; exit {code}"]
    for allow in ((), ("allowed.test",)):
        with esc.open(allow=allow) as session:
            control = session.run(["/bin/sh", "-c", "exit 0"])
            if control.exit_code != 0:
                pytest.fail(f"inconclusive: control failed: {control}")
            result = session.run(argv)
        assert result.exit_code == code, (allow, result)
        assert result.stderr.startswith(b"bwrap: execvp x:"), result
    esc.held()
