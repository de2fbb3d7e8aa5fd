"""T0 behind the async `Sandbox` protocol: sessions of file tools with no exec."""

from __future__ import annotations

import hashlib
import os
import secrets
from typing import TYPE_CHECKING, Final

from panday_core.capabilities import require_enforceable
from panday_core.errors import PathRefused, SandboxError, Unsupported
from panday_core.paths import check_readable, read_bytes, walk_tree
from panday_core.t0.capabilities import declared_capabilities
from panday_core.t0.session import T0Session
from panday_core.types import FileEntry, SandboxHandle, SandboxTier, Snapshot

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from panday_core.capabilities import TierCapabilities
    from panday_core.paths import Backend
    from panday_core.types import ExecEvent, ExecSpec, SessionSpec

MAX_SNAPSHOT_ENTRIES: Final = 100_000
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class T0Sandbox:
    """The T0 tier. `session(handle)` gives the tools (read, write, list, glob, grep, stat)."""

    def __init__(self, *, backend: Backend | None = None) -> None:
        self._backend: Backend | None = backend
        self._sessions: dict[str, T0Session] = {}

    @property
    def tier(self) -> SandboxTier:
        return SandboxTier.T0

    def capabilities(self) -> TierCapabilities:
        return declared_capabilities(self._backend)

    def unavailable_reason(self) -> str | None:
        return None  # plain file I/O: T0 runs wherever Python does

    async def create(self, spec: SessionSpec) -> SandboxHandle:
        # First, before anything is opened: refuse what T0 cannot enforce.
        require_enforceable(spec.policy, self.capabilities())
        session_id = spec.session_id or f"t0-{secrets.token_hex(6)}"
        if session_id in self._sessions:
            raise SandboxError(f"session {session_id!r} is already open")
        session = T0Session(spec.policy, session_id=session_id, backend=self._backend)
        self._sessions[session_id] = session
        return SandboxHandle(id=session_id, tier=SandboxTier.T0, workspace=session.workspace)

    def session(self, handle: SandboxHandle) -> T0Session:
        session = self._sessions.get(handle.id)
        if session is None:
            raise SandboxError(f"no open T0 session {handle.id!r}")
        return session

    def exec(self, handle: SandboxHandle, spec: ExecSpec) -> AsyncIterator[ExecEvent]:
        del handle, spec
        raise Unsupported(
            "T0 has no exec: it serves file tools in-process and never starts a process; "
            "use a T2 tier to run commands"
        )

    async def put(self, handle: SandboxHandle, path: str, data: bytes) -> None:
        self.session(handle).write(path, data, make_parents=True)

    async def get(self, handle: SandboxHandle, path: str, *, max_bytes: int) -> bytes:
        return self.session(handle).read_all(path, max_bytes=max_bytes)

    async def snapshot(self, handle: SandboxHandle) -> Snapshot:
        """Regular files of the workspace with size, mode and SHA-256 (see `snapshot_of`)."""
        return snapshot_of(self.session(handle), handle.id)

    async def destroy(self, handle: SandboxHandle) -> None:
        session = self._sessions.pop(handle.id, None)
        if session is not None:
            session.close()


def snapshot_of(session: T0Session, session_id: str) -> Snapshot:
    """Regular files of `session`'s workspace with size, mode and SHA-256. Files with more
    than one hard link are listed with an empty hash: their content is not read. Shared by
    every tier whose put/get/snapshot go through a T0 session (T2 Linux, T2 macOS)."""
    root = session.resolver.resolve(".")
    entries: list[FileEntry] = []
    truncated = False
    for item in walk_tree(session.resolver, root):
        if item.kind != "file":
            continue
        if len(entries) == MAX_SNAPSHOT_ENTRIES:
            truncated = True
            break
        try:
            fd = os.open(item.name, _READ, dir_fd=item.dir_fd)
        except OSError:
            continue  # gone or swapped for a link since the listing
        try:
            st = os.fstat(fd)
            digest = ""
            try:
                check_readable(st, item.rel)
            except PathRefused:
                pass
            else:
                digest = _sha256(fd, st.st_size)
        finally:
            os.close(fd)
        entries.append(
            FileEntry(path=item.rel, size=st.st_size, mode=st.st_mode & 0o7777, sha256=digest)
        )
    return Snapshot(session_id=session_id, entries=tuple(entries), truncated=truncated)


def _sha256(fd: int, size: int) -> str:
    digest = hashlib.sha256()
    left = size
    while left > 0:
        chunk = read_bytes(fd, min(left, 1 << 20))
        if not chunk:
            break
        digest.update(chunk)
        left -= len(chunk)
    return digest.hexdigest()
