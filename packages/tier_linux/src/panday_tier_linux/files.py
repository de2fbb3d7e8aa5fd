"""put / get / snapshot on the host side, resolved so that no path can leave its root.

Each path is walked one component at a time from a descriptor of the root, every step
opened with O_NOFOLLOW: a symlink planted in the workspace (by a jailed command, which can
write there) is never followed, and ``..`` is refused outright. Files are read and written
by the caller's own uid, so what the jail could not reach stays out of reach here too.
"""

from __future__ import annotations

import os
import stat

from panday_core.capabilities import Refusal
from panday_core.errors import PolicyViolation
from panday_core.types import FileEntry, Snapshot

MAX_ENTRIES = 100_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _refuse(path: str, why: str) -> PolicyViolation:
    return PolicyViolation("t2-linux", [Refusal(field="fs.workspace", reason=f"{path!r}: {why}")])


def _parts(path: str) -> list[str]:
    if "\x00" in path:
        raise _refuse(path, "contains a NUL byte")
    parts = [p for p in path.split("/") if p not in {"", "."}]
    if not parts:
        raise _refuse(path, "names no file")
    if ".." in parts:
        raise _refuse(path, "contains '..'")
    return parts


def _relative(root: str, path: str) -> str | None:
    """`path` relative to `root`, or None when it lies outside (absolute or relative input)."""
    if not os.path.isabs(path):
        return path
    norm = os.path.normpath(path)
    if norm == root:
        return ""
    if norm.startswith(root.rstrip("/") + "/"):
        return norm[len(root.rstrip("/")) + 1 :]
    return None


def _open_parent(root: str, parts: list[str], *, create: bool) -> int:
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_beneath(root: str, path: str, data: bytes) -> None:
    """Write `data` to `path` inside `root`, creating parent directories as needed."""
    rel = _relative(root, path)
    if rel is None:
        raise _refuse(path, "is outside the workspace")
    parts = _parts(rel)
    parent = _open_parent(root, parts, create=True)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(parts[-1], flags, 0o644, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _read_fd(fd: int, max_bytes: int) -> bytes:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise IsADirectoryError("not a regular file")
    chunks: list[bytes] = []
    left = max_bytes
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_visible(workspace: str, staged: tuple[str, ...], path: str, *, max_bytes: int) -> bytes:
    """At most `max_bytes` of a file in the workspace or a staged path."""
    if max_bytes < 0:
        raise ValueError("max_bytes must not be negative")
    for root in (workspace, *staged):
        rel = (
            _relative(root, path) if os.path.isabs(path) else (path if root == workspace else None)
        )
        if rel is None:
            continue
        if rel == "" and not os.path.isdir(root):
            fd = os.open(root, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        else:
            parts = _parts(rel)
            parent = _open_parent(root, parts, create=False)
            try:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            finally:
                os.close(parent)
        try:
            return _read_fd(fd, max_bytes)
        finally:
            os.close(fd)
    raise _refuse(path, "is outside the workspace and every staged path")


def _sha256_fd(fd: int) -> str:
    import hashlib  # noqa: PLC0415 - snapshots only

    digest = hashlib.sha256()
    while chunk := os.read(fd, 1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def snapshot(session_id: str, workspace: str) -> Snapshot:
    """Every file below the workspace with size, mode and SHA-256; links are not followed."""
    import hashlib  # noqa: PLC0415 - snapshots only

    entries: list[FileEntry] = []
    truncated = False
    stack = [""]
    while stack and not truncated:
        rel_dir = stack.pop()
        try:
            listing = sorted(os.scandir(os.path.join(workspace, rel_dir)), key=lambda e: e.name)
        except OSError:
            continue
        for entry in listing:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                stack.append(rel)
                continue
            if len(entries) >= MAX_ENTRIES:
                truncated = True
                break
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(entry.path).encode("utf-8", "surrogateescape")
                digest = hashlib.sha256(target).hexdigest()
                size = len(target)
            elif stat.S_ISREG(st.st_mode):
                try:
                    fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    digest, size = _sha256_fd(fd), st.st_size
                finally:
                    os.close(fd)
            else:  # sockets, fifos, devices: listed, never opened
                digest, size = hashlib.sha256(b"").hexdigest(), 0
            entries.append(FileEntry(path=rel, size=size, mode=st.st_mode, sha256=digest))
    entries.sort(key=lambda e: e.path)
    return Snapshot(session_id=session_id, entries=tuple(entries), truncated=truncated)
