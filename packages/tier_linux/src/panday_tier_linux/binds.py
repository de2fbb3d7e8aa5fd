# Over 500 lines: roots, protected entries, placeholders and their locks are one protocol.
"""What a jail sees of the host's files: every path opened once, held, and bound from the
descriptor. The one module to read for "can a jail's writes change what a later jail, or
the host, sees?".

Why descriptors: bwrap's ``--bind SRC DEST`` looks SRC up again at every command. A jail
that could rename a directory above a staged path and plant a symbolic link in its place
(``mv sub sub.old; ln -s ../../../../etc sub/data``) would have the next command's bind,
or the next session's ``realpath``, mount a host directory of its choosing. So:

* `Roots.open` (at session open): the workspace and every staged path are opened from ``/``
  without following a link (`panday_core.protect.open_root`), checked against the places
  that can never be a root, and held for the session. Binds use ``--bind-fd`` /
  ``--ro-bind-fd``: bwrap mounts exactly the held directory, and checks that what it
  mounted is that inode.
* `Roots.command_binds` (before each command): the protected entries of a writable
  workspace (`panday_core.protect.protected_entries`: ``.git``, editor and agent
  configuration, panday's own interpreter ...) are opened beneath the held workspace
  without following links and bound read-only over it; a missing one gets a read-only
  empty placeholder for the command's lifetime, so it cannot be created either. Every
  directory between the workspace and a protected entry (or a staged path inside it) is
  bound onto itself, which makes it a mount point: a mount point cannot be renamed or
  removed (EBUSY), so no command can move a protected entry aside and put its own in its
  place. A staged path inside the workspace is checked to still be the held inode.
* With ``fs.writes`` ``checked`` or ``review`` the workspace is an overlay instead
  (`Roots.command_binds(overlay=...)`): every write lands in the command's change set
  (`panday_core.changes`), nothing is written in place, so no protected entry, placeholder
  or pinned directory is needed. bwrap takes the overlay's directories as paths (a
  descriptor it is given stays open in the command, and a directory descriptor on the
  workspace would write past the overlay), so the workspace path is checked to be the held
  inode, with no link on the way, just before the command (the same one lookup as above).
* `CommandBinds.close` (after the command): placeholders this process created are removed
  unless another jail still holds them (a shared lock on each placeholder; the remover
  needs the exclusive one) or something was written into them.

Remaining gap (docs/threat-model.md): bwrap looks a destination *path* up once when it
mounts. A process outside this session that can write the workspace could, in the
microseconds between our check and that mount, swap a directory on that path; bwrap then
refuses the command (the mounted inode is checked), but it may first have created an
empty directory where the swapped link pointed.
"""

from __future__ import annotations

import fcntl
import os
import stat

from panday_core.identity import forget_prefixes, remember_prefixes
from panday_core.process import proc_stat
from panday_core.protect import (
    Entry,
    RootRefused,
    fd_path,
    git_directory_refusal,
    git_entries,
    normal_path,
    open_root,
    protected_entries,
    root_refusal,
    sys_path_refusal,
    within,
)
from panday_core.startup import suppress
from panday_tier_linux.host import state_to_hide

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from typing import Protocol, Self

    from panday_core.capabilities import Refusal
    from panday_core.errors import PolicyViolation

    class RootsPolicy(Protocol):
        """What `Roots.open` reads of a policy's ``fs`` section: a `FsPolicy`, or the
        same fields from a cached jail plan (`panday_tier_linux.plan`)."""

        @property
        def workspace(self) -> str | None: ...
        @property
        def access(self) -> str: ...
        @property
        def staged_ro(self) -> tuple[str, ...]: ...
        @property
        def protect(self) -> tuple[str, ...]: ...
        @property
        def unprotect(self) -> tuple[str, ...]: ...
        @property
        def allow_home(self) -> bool: ...


TIER = "t2-linux"
_O_PATH = os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW
_MARK = "user.panday.placeholder"
"""Extended attribute naming a placeholder's creator (``pid:start``), so a later session can
tell a placeholder left by a crashed panday from a user's own empty file."""
_RETRIES = 4


class Held:
    """A host path opened once (``O_PATH``, no link followed) and the inode it named."""

    __slots__ = ("dev", "fd", "ino", "is_dir", "path")

    def __init__(self, path: str, fd: int) -> None:
        st = os.fstat(fd)
        self.path = path
        self.fd = fd
        self.dev = st.st_dev
        self.ino = st.st_ino
        self.is_dir = stat.S_ISDIR(st.st_mode)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _components(rel: str) -> list[str]:
    return [p for p in rel.split("/") if p]


def _inside(path: str, root: str) -> str | None:
    root = root.rstrip("/")
    return path[len(root) + 1 :] if path.startswith(root + "/") else None


def _start_time(pid: int) -> str:
    return (proc_stat(pid) or ("", "?"))[1]


_MARKS: dict[int, bytes] = {}


def _self_mark() -> bytes:
    pid = os.getpid()  # per pid: a forked worker marks with its own
    if pid not in _MARKS:
        _MARKS[pid] = f"{pid}:{_start_time(pid)}".encode()
    return _MARKS[pid]


_OURS: set[tuple[int, int]] = set()
"""Placeholders this process made (for file systems without user extended attributes,
where the mark cannot be written): removable by any of its commands."""


class _Placeholder:
    """A placeholder this command holds: its lock descriptor and whether we created it."""

    __slots__ = ("created", "dev", "ino", "lock_fd", "name", "parent_fd")

    def __init__(
        self,
        *,
        parent_fd: int,
        name: str,
        lock_fd: int,
        created: bool,
        ident: tuple[int, int] | None = None,
    ) -> None:
        """`lock_fd` is -1 for another name of an inode this command holds already (a hard
        link to its first placeholder): `ident` is then that inode's (st_dev, st_ino)."""
        if ident is None:
            st = os.fstat(lock_fd)
            ident = (st.st_dev, st.st_ino)
        self.parent_fd = parent_fd
        self.name = name
        self.lock_fd = lock_fd
        self.created = created
        self.dev, self.ino = ident

    def release(self, names: list[_Placeholder] | None = None) -> None:
        """Remove the placeholder (and `names`: other names of the same inode, whose lock
        descriptors the caller closed already) if nobody else holds it and each is still
        the empty, marked entry (ours or a crashed session's); then drop our descriptors."""
        group = [self, *(names or [])]
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            for member in group:
                member.close_descriptors()
            return  # another jail still has it mounted: the last one removes it
        ours = (
            any(m.created for m in group) or (self.dev, self.ino) in _OURS or _marked(self.lock_fd)
        )
        try:
            for member in group:
                with suppress(OSError):
                    st = os.lstat(member.name, dir_fd=member.parent_fd)
                    same = (st.st_dev, st.st_ino) == (self.dev, self.ino)
                    if same and ours and _empty(self.lock_fd, st):
                        if stat.S_ISDIR(st.st_mode):
                            os.rmdir(member.name, dir_fd=member.parent_fd)
                        else:
                            os.unlink(member.name, dir_fd=member.parent_fd)
            _OURS.discard((self.dev, self.ino))
        finally:
            for member in group:
                member.close_descriptors()

    def close_descriptors(self) -> None:
        for fd in (self.lock_fd, self.parent_fd):
            if fd >= 0:
                with suppress(OSError):
                    os.close(fd)
        self.lock_fd = self.parent_fd = -1


def _marked(fd: int) -> bool:
    try:
        return bool(os.getxattr(fd, _MARK))
    except OSError:
        return False


def _empty(fd: int, st: os.stat_result) -> bool:
    if stat.S_ISDIR(st.st_mode):
        try:
            with os.scandir(fd) as entries:
                return next(entries, None) is None
        except OSError:
            return False
    return stat.S_ISREG(st.st_mode) and st.st_size == 0


class CommandBinds:
    """One command's binds: the options (with descriptor numbers as the child sees them),
    the descriptors to pass, and the placeholders to release when the command ends."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, int, str]] = []
        """(bwrap option, our descriptor, destination), shallowest destination first."""
        self.placeholders: list[_Placeholder] = []
        self._fds: list[int] = []
        self.template: tuple[int, str] | None = None
        """(directory descriptor, name) of this command's first file placeholder: the
        others are hard links to it (`_make_placeholder`)."""
        self.template_id: tuple[int, int] = (-1, -1)
        """That placeholder's (st_dev, st_ino), as made and locked: a link is kept only
        when it leads to this inode."""
        self.hidden: list[str] = []
        """Covered last by an empty read-only tmpfs: panday's state (`host.state_to_hide`)."""
        self.overlay: tuple[str, str, str] | None = None
        """(workspace, upper, work) paths: the workspace as an overlay (``fs.writes``)."""

    def add(self, option: str, fd: int, dest: str) -> None:
        self.ops.append((option, fd, dest))
        self._fds.append(fd)

    @property
    def fds(self) -> list[int]:
        """The descriptors to hand to bwrap, in the order `options` numbers them."""
        return list(self._fds)

    def options(self, first_child_fd: int | None) -> list[str]:
        """bwrap's options for these binds, shallowest first, when `fds` become
        ``first_child_fd, first_child_fd + 1, ...`` in the child (None: they keep their
        numbers, as with subprocess's ``pass_fds``)."""
        numbers = {
            fd: fd if first_child_fd is None else first_child_fd + i
            for i, fd in enumerate(self._fds)
        }
        ordered = sorted(self.ops, key=lambda op: len(_components(op[2])))
        out: list[str] = []
        if self.overlay is not None:
            # First: everything else bound is either outside the workspace or inside it.
            lower, upper, work = self.overlay
            out += ["--overlay-src", lower, "--overlay", upper, work, lower]
        for option, fd, dest in ordered:
            out += [option, str(numbers[fd]), dest]
        for dest in self.hidden:
            out += ["--tmpfs", dest, "--remount-ro", dest]
        return out

    def spawned(self) -> None:
        """bwrap holds its own copies now (and closes each once mounted): drop ours."""
        for fd in self._fds:
            with suppress(OSError):
                os.close(fd)
        self._fds = []

    def close(self) -> None:
        """After the command: descriptors closed, placeholders released."""
        self.spawned()
        # Placeholders of one command share an inode (hard links of one empty file, see
        # `_make_placeholder`): flock conflicts between our own descriptors of it, so each
        # inode is released once, by one descriptor, for all its names.
        groups: dict[tuple[int, int], list[_Placeholder]] = {}
        for placeholder in self.placeholders:
            groups.setdefault((placeholder.dev, placeholder.ino), []).append(placeholder)
        # Deepest first (the reverse of the order they were made): a placeholder directory
        # is empty again only once what was made inside it is gone.
        for group in reversed(groups.values()):
            # The one that locked the inode releases it (hard links to it hold no lock).
            first = next((p for p in group if p.lock_fd >= 0), group[0])
            others = [p for p in group if p is not first]
            for other in others:
                if other.lock_fd >= 0:
                    with suppress(OSError):
                        os.close(other.lock_fd)
                other.lock_fd = -1
            first.release(others)
        self.placeholders = []
        if self.template is not None:
            with suppress(OSError):
                os.close(self.template[0])
            self.template = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Roots:
    """The session's workspace and staged paths, held open for its lifetime."""

    def __init__(
        self,
        *,
        workspace: Held,
        writable: bool,
        staged: list[Held],
        protect: tuple[str, ...],
        unprotect: tuple[str, ...],
    ) -> None:
        self.workspace = workspace
        self.writable = writable
        self.staged = staged
        self.protect = protect
        self.unprotect = unprotect

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls, fs: RootsPolicy, *, check_entries: bool = True
    ) -> tuple[Roots | None, list[Refusal]]:
        """Open the policy's roots, or say (by field) why each one cannot be a root.

        Nothing is spawned; on refusal nothing stays open. `check_entries` also resolves
        the protected entries once (a session opening refuses what is wrong already);
        without it the caller makes a command's binds at once, which refuses the same.
        """
        refusals: list[Refusal] = []
        held: list[Held] = []
        writable = fs.access == "rw"
        # fs.writes checked or review: writes are proposals judged before they land (a plan
        # from the cache has no such field: it is made for direct writes only).
        writes: object = getattr(fs, "writes", "direct")
        proposals = writes != "direct"
        paths = [("fs.workspace", fs.workspace, writable)] + [
            (f"fs.staged_ro[{i}]", p, False) for i, p in enumerate(fs.staged_ro)
        ]
        if fs.workspace is None:
            refusals.append(_refusal("fs.workspace", "not set; every session needs a workspace"))
            paths = paths[1:]
        for field, path, rw in paths:
            if field != "fs.workspace" and _shown_already(path or ""):
                continue  # the jail shows it, read-only, at that path: nothing to bind
            item = _open_root(
                field, path or "", writable=rw, allow_home=fs.allow_home, proposals=proposals
            )
            if isinstance(item, Held):
                held.append(item)
            else:
                refusals.append(item)
        if fs.workspace is not None and not refusals and not held[0].is_dir:
            refusals.append(_refusal("fs.workspace", f"{fs.workspace!r} is not a directory"))
        if refusals:
            for item in held:
                item.close()
            return None, refusals
        roots = cls(
            workspace=held[0],
            writable=writable,
            staged=held[1:],
            protect=fs.protect,
            unprotect=fs.unprotect,
        )
        if not check_entries:
            return roots, []
        from panday_core.errors import PolicyViolation

        try:
            # Fail at open, not at the first command, for what is wrong already.
            roots.command_binds(dry_run=True).close()
        except PolicyViolation as exc:
            roots.close()
            return None, list(exc.violations)
        return roots, []

    # ------------------------------------------------------------------ per command

    def entries(self) -> tuple[Entry, ...]:
        """The protected entries of this workspace now (read-only workspaces have none)."""
        if not self.writable:
            return ()
        # One memo of the file system for both listings: they look at the same
        # directories (the caller's home, /, the workspace's parents).
        remember_prefixes()
        try:
            return protected_entries(
                self.workspace.path,
                protect=self.protect,
                unprotect=self.unprotect,
                derived=git_entries(self.workspace.fd),
                root_fd=self.workspace.fd,
            )
        except RootRefused as exc:
            raise _violation("fs.protect", exc.reason) from None
        finally:
            forget_prefixes()

    def entries_for_review(self) -> tuple[Entry, ...]:
        """The protected entries the hazard rules hold at the workspace root (on top of the
        names they hold at any depth); none when they cannot be listed."""
        from panday_core.errors import PolicyViolation

        try:
            return self.entries()
        except PolicyViolation:
            return ()

    def command_binds(
        self, *, dry_run: bool = False, overlay: tuple[str, str] | None = None
    ) -> CommandBinds:
        """The binds for one command (see the module docstring). Raises `PolicyViolation`
        when a protected entry is a symbolic link or a nested staged path was replaced.
        `dry_run` checks without creating placeholders. `overlay`: (upper, work) paths of
        the command's change set: the workspace is an overlay over them."""
        binds = CommandBinds()
        pins: dict[str, int] = {}
        try:
            ws = self.workspace
            # First, so that a missing state directory is made as itself, not a placeholder.
            binds.hidden = state_to_hide([ws.path, *(s.path for s in self.staged)])
            if overlay is not None:
                _check_overlay_path(ws)
                binds.overlay = (ws.path, *overlay)
                entries: tuple[Entry, ...] = ()
            else:
                option = "--bind-fd" if self.writable else "--ro-bind-fd"
                binds.add(option, os.dup(ws.fd), ws.path)
                entries = self.entries()
            for entry in entries:
                self._protect(binds, pins, entry, dry_run=dry_run)
            for i, staged in enumerate(self.staged):
                binds.add("--ro-bind-fd", os.dup(staged.fd), staged.path)
                self._check_nested(pins, i, staged)
            # A directory inside a protected entry is read-only already; binding it onto
            # itself would make it writable again.
            for rel in list(pins):
                if any(rel == e.rel or rel.startswith(e.rel + "/") for e in entries):
                    os.close(pins.pop(rel))
            while pins:
                rel, fd = pins.popitem()
                if overlay is not None:
                    # A directory of the real workspace bound into the overlay would take
                    # writes past it; nothing needs pinning there (it is all a proposal).
                    os.close(fd)
                    continue
                binds.add("--bind-fd", fd, f"{ws.path}/{rel}")
        except BaseException:
            for fd in pins.values():
                os.close(fd)
            binds.close()
            raise
        return binds

    def _protect(
        self, binds: CommandBinds, pins: dict[str, int], entry: Entry, *, dry_run: bool
    ) -> None:
        """Bind `entry` read-only (or a placeholder for it), pinning its ancestors."""
        for _ in range(_RETRIES):
            found = _walk(self.workspace.fd, entry.rel, pins if self.writable else None)
            if isinstance(found, _LinkAt) and found.reached == entry.rel and not entry.create:
                self._linked_entry(binds, pins, entry, dry_run=dry_run)
                return
            if isinstance(found, str):
                raise _violation(
                    "fs.protect",
                    f"{self.workspace.path}/{entry.rel}: {found}; a link inside a writable "
                    "workspace can be replaced by the command, so it cannot be kept read-only "
                    "(replace it with what it points to, or leave it out with fs.unprotect)",
                )
            parent_fd, name, fd, rel = found
            if fd is not None:
                _hold_shared(binds, parent_fd, name, fd)
                binds.add("--ro-bind-fd", fd, f"{self.workspace.path}/{rel}")
                return
            if dry_run or not entry.create:
                os.close(parent_fd)
                return
            kind = entry.kind if rel == entry.rel else "dir"
            made = _make_placeholder(parent_fd, name, kind, binds)
            if made is None:
                os.close(parent_fd)
                continue  # someone made it meanwhile: resolve again
            lock_fd, path_fd = made
            binds.placeholders.append(
                _Placeholder(
                    parent_fd=parent_fd,
                    name=name,
                    lock_fd=lock_fd,
                    created=True,
                    ident=binds.template_id if lock_fd < 0 else None,
                )
            )
            binds.add("--ro-bind-fd", path_fd, f"{self.workspace.path}/{rel}")
            return
        raise _violation("fs.protect", f"{entry.rel}: kept changing while being protected")

    def _linked_entry(
        self, binds: CommandBinds, pins: dict[str, int], entry: Entry, *, dry_run: bool
    ) -> None:
        """A symbolic link stands at a protected name that may be created (``.envrc``
        -> somewhere): a command could have made it, so it must not stop every later
        session. It is reported; a new file may take the name as before (creating one is
        harmless for these names), and where the link leads inside the workspace is kept
        read-only in its place, since that is what the host's tool reads through it."""
        where = f"{self.workspace.path}/{entry.rel}"
        try:
            target = os.path.realpath(where)
        except (OSError, ValueError):
            target = ""
        rel = within(target, (self.workspace.dev, self.workspace.ino)) if target else None
        if not dry_run:
            _report(
                f"{where} is a symbolic link (to {os.readlink(where) if target else '?'}); "
                + (
                    f"its target {rel} is kept read-only instead"
                    if rel is not None
                    else "nothing it leads to is writable from the jail"
                )
            )
        if rel is None or rel == entry.rel:
            return
        found = _walk(self.workspace.fd, rel, pins if self.writable else None)
        if isinstance(found, str):
            return  # a link to a link: nothing more is followed (reported above)
        parent_fd, name, fd, reached = found
        if fd is None:
            os.close(parent_fd)
            return
        _hold_shared(binds, parent_fd, name, fd)
        binds.add("--ro-bind-fd", fd, f"{self.workspace.path}/{reached}")

    def _check_nested(self, pins: dict[str, int], index: int, staged: Held) -> None:
        """A staged path inside the workspace must still be the inode held at open; its
        ancestors there are pinned like a protected entry's."""
        # Both paths are the kernel's spelling of what was opened (`_open_root`): a string
        # test is exact here, and must not resolve links (the jail may have planted one).
        rel = _inside(staged.path, self.workspace.path)
        if rel is None:
            return
        found = _walk(self.workspace.fd, rel, pins if self.writable else None)
        if not isinstance(found, str):
            parent_fd, _name, fd, _rel = found
            os.close(parent_fd)
            if fd is not None:
                st = os.fstat(fd)
                os.close(fd)
                if (st.st_dev, st.st_ino) == (staged.dev, staged.ino):
                    return
        raise _violation(
            f"fs.staged_ro[{index}]",
            f"{staged.path!r} is no longer the directory the session opened (something moved "
            "or replaced it, or a path above it); refusing to mount anything there",
        )

    def close(self) -> None:
        self.workspace.close()
        for staged in self.staged:
            staged.close()


def _shown_already(path: str) -> bool:
    """Whether staging `path` read-only asks for nothing the jail does not show already:
    it is (by identity, not spelling) ``/usr``, which every jail has whole, read-only, at
    the same path (`argv.filesystem_args`). A virtual environment made from the
    distribution's Python has ``sys.base_prefix = /usr``, and its recipe stages that."""
    try:
        fd = open_root(normal_path(path))  # without following a link, as every root is
    except (RootRefused, OSError, ValueError):
        return False  # judged (and refused, or opened) as any other root
    try:
        return _same(os.fstat(fd), os.stat("/usr"))
    finally:
        os.close(fd)


def _check_overlay_path(ws: Held) -> None:
    """The workspace's path must still name the held directory, with no link on the way:
    bwrap mounts the overlay from the path."""
    try:
        same = os.path.realpath(ws.path) == ws.path and _same(os.stat(ws.path), os.fstat(ws.fd))
    except OSError:
        same = False
    if not same:
        raise _violation(
            "fs.workspace",
            f"{ws.path!r} no longer names the directory this session opened (moved or "
            "replaced); the overlay is mounted from the path, so the command is refused",
        )


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def entry_problem(held: Held) -> str | None:
    """Why a jail could not enter the directory `held`, or None when it can.

    The jail runs as the caller's uid without capabilities: for a root caller, uid 0 that
    cannot pass permission bits, so a directory owned by another user with mode 0700 is
    closed to it although root itself may enter it. For other callers the kernel is asked
    (access with the effective ids, ACLs included); for root the mode bits decide, as they
    will inside the jail.
    """
    st = os.fstat(held.fd)
    uid = os.geteuid()
    if uid != 0:
        if os.access(f"/proc/self/fd/{held.fd}", os.X_OK, effective_ids=True):
            return None
    else:
        groups = {os.getegid(), *os.getgroups()}
        if st.st_uid == 0:
            bit = stat.S_IXUSR
        elif st.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if st.st_mode & bit:
            return None
    who = "root without capabilities" if uid == 0 else f"uid {uid}"
    return (
        f"cannot be entered from inside the sandbox, which runs as {who} (it is "
        f"{stat.filemode(st.st_mode)}, owner uid {st.st_uid}, group {st.st_gid}); make it "
        "searchable for that user (chmod, chown), or choose another workspace"
    )


def _open_root(
    field: str, path: str, *, writable: bool, allow_home: bool, proposals: bool = False
) -> Held | Refusal:
    """Open one root and judge it by what was opened (`panday_core.protect.root_refusal`
    compares identities); the held path is the kernel's spelling of it, so ``//ws`` and
    ``/./ws`` bind, and are protected, as ``/ws``. `proposals` (``fs.writes`` checked or
    review): a workspace on the caller's sys.path is accepted, because every Python module
    written there is held for review (the ``caller-import-path`` hazard rule)."""
    path = normal_path(path)
    try:
        fd = open_root(path)
    except RootRefused as exc:
        return _refusal(field, exc.reason)
    why = root_refusal(path, writable=writable, allow_home=allow_home, fd=fd)
    if why is None and field == "fs.workspace":
        why = None if proposals else sys_path_refusal(path, writable=writable, fd=fd)
        if why is None and writable:
            why = git_directory_refusal(path, fd)
    if why is not None:
        os.close(fd)
        return _refusal(field, why)
    return Held(fd_path(fd) or path, fd)


class ProtectedLinkWarning(UserWarning):
    """A protected name is a symbolic link (the session opened; see `Roots._linked_entry`)."""


def _report(message: str) -> None:
    import warnings

    warnings.warn(message, ProtectedLinkWarning, stacklevel=4)


def _refusal(field: str, reason: str) -> Refusal:
    # Imported here: the capability model needs msgspec, which `panday run`'s start-up path
    # never loads unless something is refused (nor the errors, unless something fails).
    from panday_core.capabilities import Refusal

    return Refusal(field=field, reason=reason)


def _violation(field: str, reason: str) -> PolicyViolation:
    from panday_core.errors import PolicyViolation

    return PolicyViolation(TIER, [_refusal(field, reason)])


class _LinkAt(str):
    """`_walk`'s answer when it met a symbolic link: why, and where (`reached`)."""

    __slots__ = ("reached",)

    def __new__(cls, reached: str) -> Self:
        made = super().__new__(cls, f"{reached!r} is a symbolic link")
        made.reached = reached
        return made

    reached: str


def _walk(
    root_fd: int, rel: str, pins: dict[str, int] | None
) -> str | tuple[int, str, int | None, str]:
    """Walk `rel` beneath `root_fd` without following links.

    Returns why not (a link on the way, a file where a directory must be), or
    ``(parent_fd, name, fd, reached)``: `fd` an ``O_PATH`` descriptor on the whole entry, or
    None when the component `reached` (relative to the root) is missing -- then `name` is
    that component and `parent_fd` its directory (the caller owns `parent_fd`). Existing
    directories above the last component are added to `pins` (when given) as descriptors.
    """
    parts = _components(rel)
    parent = os.dup(root_fd)
    reached = ""
    try:
        for i, part in enumerate(parts):
            reached = f"{reached}/{part}" if reached else part
            try:
                fd = os.open(part, _O_PATH, dir_fd=parent)
            except FileNotFoundError:
                return parent, part, None, reached
            st = os.fstat(fd)
            last = i == len(parts) - 1
            if stat.S_ISLNK(st.st_mode):
                os.close(fd)
                os.close(parent)
                return _LinkAt(reached)
            if last:
                return parent, part, fd, reached
            if not stat.S_ISDIR(st.st_mode):
                os.close(fd)
                os.close(parent)
                return f"{reached!r} is not a directory"
            if pins is not None and reached not in pins:
                pins[reached] = os.dup(fd)
            os.close(parent)
            parent = fd
    except BaseException:
        with suppress(OSError):
            os.close(parent)
        raise
    os.close(parent)
    return "an empty path"


def _hold_shared(binds: CommandBinds, parent_fd: int, name: str, path_fd: int) -> None:
    """Hold a shared lock on an existing entry that may be a placeholder (empty), so the
    session that made it does not remove it while this command has it mounted."""
    st = os.fstat(path_fd)
    lock_fd = -1
    if stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_size == 0):
        with suppress(OSError):
            lock_fd = os.open(f"/proc/self/fd/{path_fd}", os.O_RDONLY | os.O_CLOEXEC)
    if lock_fd < 0:
        os.close(parent_fd)
        return
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_SH)
        held = _empty(lock_fd, os.fstat(lock_fd))
    except OSError:
        held = False
    if not held:  # something was written into it: not a placeholder, nothing to release
        os.close(lock_fd)
        os.close(parent_fd)
        return
    binds.placeholders.append(
        _Placeholder(parent_fd=parent_fd, name=name, lock_fd=lock_fd, created=False)
    )


def _link_placeholder(parent_fd: int, name: str, binds: CommandBinds) -> int | None:
    """A hard link, at `name`, to this command's first file placeholder: an ``O_PATH``
    descriptor of it; None when there is none yet or linking is not possible (another
    file system). Why: creating an inode costs ~1.5 ms on an ext4 mounted with
    ``discard`` (measured here), a link ~0.015 ms, and a command may need twenty
    placeholders. The link needs no lock, mark or check of its own: its inode is the
    first placeholder's, which this command has marked and holds locked already."""
    if binds.template is None:
        return None
    template_dir, template = binds.template
    try:
        os.link(
            template, name, src_dir_fd=template_dir, dst_dir_fd=parent_fd, follow_symlinks=False
        )
    except FileExistsError:
        raise
    except OSError:
        return None
    path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    st = os.fstat(path_fd)
    if (st.st_dev, st.st_ino) != binds.template_id:
        # The template's name was replaced before the link: our new name leads to someone
        # else's file, at a protected name. It is ours, so it goes again.
        os.close(path_fd)
        with suppress(OSError):
            os.unlink(name, dir_fd=parent_fd)
        raise FileExistsError(name)
    return path_fd


def _make_placeholder(
    parent_fd: int, name: str, kind: str, binds: CommandBinds
) -> tuple[int, int] | None:
    """Create an empty, marked, read-only placeholder; (lock fd, O_PATH fd), or None when
    the name appeared meanwhile. A file is a hard link to the command's first one when it
    can be (`_link_placeholder`; its lock fd is then -1)."""
    try:
        linked = _link_placeholder(parent_fd, name, binds) if kind != "dir" else None
        if linked is not None:
            return -1, linked
        if kind == "dir":
            os.mkdir(name, 0o555, dir_fd=parent_fd)
            lock_fd = os.open(
                name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd
            )
        else:
            lock_fd = os.open(
                name,
                os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o444,
                dir_fd=parent_fd,
            )
    except FileExistsError:
        return None
    with suppress(OSError):
        os.setxattr(lock_fd, _MARK, _self_mark())
    fcntl.flock(lock_fd, fcntl.LOCK_SH)
    # Another session may have removed it between our mkdir and our lock (it saw a marked,
    # unheld, empty entry): then it is not at the name any more, and we start again.
    try:
        now = os.lstat(name, dir_fd=parent_fd)
    except OSError:
        now = None
    st = os.fstat(lock_fd)
    if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        os.close(lock_fd)
        return None
    _OURS.add((st.st_dev, st.st_ino))
    if kind != "dir" and binds.template is None:
        binds.template = (os.dup(parent_fd), name)
        binds.template_id = (st.st_dev, st.st_ino)
    path_fd = os.open(f"/proc/self/fd/{lock_fd}", os.O_PATH | os.O_CLOEXEC)
    return lock_fd, path_fd
