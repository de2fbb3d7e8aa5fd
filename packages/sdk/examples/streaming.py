"""Stream a command's output as it is written; leaving the loop early kills the command."""

import panday
from panday import OutputChunk

with panday.open() as session:
    for event in session.stream(["sh", "-c", "for i in 1 2 3; do echo line $i; sleep 0.05; done"]):
        if isinstance(event, OutputChunk):
            print(f"{event.stream}: {event.data.decode()!r}")
        else:  # the last event: how the command ended
            print(f"exit {event.exit_code} after {event.wall_ms:.0f} ms")
            assert event.exit_code == 0

    # Stop reading after the first line: the rest of the command's tree is killed.
    for event in session.stream(["sh", "-c", "echo first; sleep 300"]):
        print("got", event)
        break
