"""Files in and out of the workspace: put, get, snapshot. Paths cannot leave the workspace."""

import panday

with panday.open() as session:
    session.put("input/data.txt", "3\n1\n2\n")
    session.run(["sh", "-c", "sort input/data.txt > sorted.txt"])
    assert session.get("sorted.txt") == b"1\n2\n3\n"
    for entry in session.snapshot().entries:
        print(entry.path, entry.size, entry.sha256[:12])
    try:
        session.get("../../etc/passwd")
    except panday.PathRefused as refused:
        print("refused:", refused)
    else:
        raise AssertionError("a path outside the workspace was read")
