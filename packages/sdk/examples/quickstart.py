"""Run a command in the jail with the embedded default policy and look at the result.

The workspace is the current directory; /etc/shadow, your home directory and the network
do not exist inside.
"""

import panday

with panday.open() as session:
    result = session.run(["sh", "-c", "echo hello; cat /etc/shadow"])

print(f"tier {session.tier}, exit {result.exit_code}, {result.wall_ms:.0f} ms")
print("stdout:", result.stdout.decode(), end="")
print("stderr:", result.stderr.decode(), end="")
assert result.stdout == b"hello\n"
assert result.exit_code == 1  # cat found no /etc/shadow
