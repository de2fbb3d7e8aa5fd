"""Ceilings and breaches: a crossed ceiling is a typed `LimitBreach` on the result."""

import panday
from panday import LimitKind, Limits, SandboxPolicy

policy = SandboxPolicy(limits=Limits(wall_clock_ms=10_000, output_bytes=1024))
with panday.open(policy) as session:
    slow = session.run(["sleep", "30"], timeout=0.2)  # the stricter of the two applies
    loud = session.run(["head", "-c", "5000", "/dev/zero"])

assert slow.breach is not None
assert slow.breach.kind is LimitKind.WALL_CLOCK
print("slow:", slow.breach.kind.value, "-", slow.breach.detail)
assert loud.breach is not None
assert loud.breach.kind is LimitKind.OUTPUT
assert loud.truncated_stdout
print("loud:", loud.breach.kind.value, "-", loud.breach.detail)

# A ceiling this host cannot hold is refused when the session opens, by field name.
refused_field = None
try:
    with panday.open(SandboxPolicy(limits=Limits(disk_bytes=1 << 20))):
        pass
except panday.PolicyViolation as refused:
    print("refused:", refused.field, "-", refused.reason[:60], "...")
    refused_field = refused.field
assert refused_field == "limits.disk_bytes", "a disk ceiling over a writable workspace ran"
