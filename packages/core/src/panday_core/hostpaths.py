"""Where this host and this Python keep what runs next: the home directories a jail's writes
could reach, panday's own interpreter, code and import path, the places the caller's own
environment runs code from, and panday's per-user state (used by `panday_core.rootrules`
to refuse roots and by `panday_core.protect` to protect entries).
"""

from __future__ import annotations

import os
import sys

from panday_core.envhooks import ENV_HOOK_PREFIXES, ENV_HOOKS, env_hook_reason
from panday_core.identity import lexists_all, listing_extra, real_dir

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Final, TypeVar

    T = TypeVar("T")


_NOLOGIN_SHELLS: Final = ("nologin", "false", "sync", "shutdown", "halt")


def kept_answer(slot: list[tuple[object, T]], find: Callable[[], T]) -> T:
    """`find()`, or the answer kept in `slot` when the caller's state is what it was then:
    its environment, its euid and the password file's identity, all that git's
    configuration files, panday's state and the places the caller runs code from are made
    of besides the file system. Every command asks, and finding them decodes the whole
    environment."""
    state = caller_state()
    kept = slot[0] if slot else None  # read once: another thread may replace it
    if kept is not None and kept[0] is state:
        return kept[1]
    found = find()
    slot[:] = [(state, found)]
    return found


def caller_state() -> object:
    """An object that stands for the caller's state (`kept_answer`): the same object
    while the environment (its bytes, compared whole: one dict comparison), the euid and
    the password file are the same, a new one when any differs. Asked once per listing,
    whatever number of answers it keys."""
    extra = listing_extra()
    if extra is not None and "caller" in extra:
        return extra["caller"]
    now = (getattr(os.environ, "_data", None), os.geteuid(), _passwd_stamp())
    kept = _CALLER_STATE[0] if _CALLER_STATE else None  # read once: another thread may replace it
    if kept is not None and kept[0] == now:
        token = kept[1]
    else:
        token = object()
        # A copy of the environment is kept (an object equal to no other when it is not
        # the dict CPython keeps, so no token is ever found again then).
        _CALLER_STATE[:] = [((_copy(now[0]), now[1], now[2]), token)]
    if extra is not None:
        extra["caller"] = token
    return token


_CALLER_STATE: list[tuple[tuple[object, int, object], object]] = []
"""The caller's state last seen, and the object that stands for it."""


def _passwd_stamp() -> object:
    """The password file's identity, size and time (None without one)."""
    try:
        passwd = os.stat("/etc/passwd")
    except OSError:
        return None
    return (passwd.st_ino, passwd.st_size, passwd.st_mtime_ns)


def _copy(data: object) -> object:
    if isinstance(data, dict):
        return data.copy()  # pyright: ignore[reportUnknownVariableType] - os.environ's private bytes mapping, only compared
    return object()


def home_directories() -> frozenset[str]:
    """Home directories a jail's writes could turn into code run at someone's next login:
    the caller's (``$HOME`` and its password-file entry) and, for a root caller (whose jail
    writes as root), every account that can log in."""
    return kept_answer(_HOMES, _find_home_directories)


def _find_home_directories() -> frozenset[str]:
    env_home = os.environ.get("HOME")
    homes: set[str] = set()
    if env_home and env_home.startswith("/"):
        homes.add(os.path.normpath(env_home))
    try:
        import pwd

        homes.add(pwd.getpwuid(os.geteuid()).pw_dir)
        if os.geteuid() == 0:
            for entry in pwd.getpwall():
                if not entry.pw_shell.endswith(_NOLOGIN_SHELLS):
                    homes.add(entry.pw_dir)
    except (ImportError, KeyError):
        pass
    return frozenset(h for h in homes if h.startswith("/") and h != "/")


_HOMES: list[tuple[object, frozenset[str]]] = []
"""The last answer of `home_directories` (every command asks, and a root caller's answer
reads the whole password file)."""


def panday_packages() -> list[object]:
    """panday's own top-level packages loaded now (``panday``, ``panday_core``, every
    ``panday_tier_*``): a tier shipped as its own distribution is protected like the rest
    without being named here."""
    modules = sys.modules
    kept = _PACKAGES[0] if _PACKAGES else None  # read once: another thread may replace it
    names = None if kept is None else _new_since(modules, kept)
    if names is None:
        names = {name for name in list(modules) if _is_panday(name)}
    try:
        last = next(reversed(modules))
    except (StopIteration, RuntimeError):  # empty, or changed meanwhile: scan next time
        _PACKAGES[:] = []
    else:
        _PACKAGES[:] = [(len(modules), last, modules.get(last), frozenset(names))]
    return [modules[name] for name in sorted(names) if name in modules]


def _is_panday(name: str) -> bool:
    return name.startswith("panday") and "." not in name and (name == "panday" or name[6] == "_")


def _new_since(
    modules: dict[str, ModuleType], kept: tuple[int, str, object, frozenset[str]]
) -> set[str] | None:
    """The names `kept` found, with the panday packages imported since, or None when only
    a whole scan can say. A host imports thousands of modules, and every command asks:
    a scan of all of them took 0.36 ms for 5,000. sys.modules keeps insertion order, so
    what was imported since lies after the newest module of the last scan, found walking
    back from the end; the count then says that nothing was removed meanwhile (else the
    newest one may have been removed and imported again, after others)."""
    count, last, module, names = kept
    if modules.get(last) is not module:
        return None
    found = set(names)
    added = 0
    try:
        for name in reversed(modules):
            if name == last:
                break
            added += 1
            if _is_panday(name):
                found.add(name)
        else:
            return None
    except RuntimeError:  # changed while walked (another thread's import)
        return None
    return found if count + added == len(modules) else None


_PACKAGES: list[tuple[int, str, object, frozenset[str]]] = []
"""(how many modules, the newest one's name and module, the panday packages among them)
at the last scan."""


def interpreter_paths() -> tuple[str, ...]:
    """Where the calling Python (panday's own interpreter) loads code from: its prefixes,
    its executable, every ``sys.path`` entry, and panday's own packages (an editable
    install may map them from anywhere). A jail that could write any of these would run
    its code in the caller's next import or the user's next ``panday`` command."""
    candidates = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        sys.executable,
        *(p for p in sys.path if p),
    ]
    for module in panday_packages():
        candidates += list(getattr(module, "__path__", ()))
    # Which exist is part of the key: one created since (by the user) must be resolved.
    key = (*candidates, *lexists_all(candidates))
    kept = _INTERPRETER[0] if _INTERPRETER else None
    if kept is not None and kept[0] == key:
        return kept[1]
    out: list[str] = []
    for candidate in candidates:
        real = real_dir(candidate)
        if real is not None and real not in out:
            out.append(real)
    _INTERPRETER[:] = [(key, tuple(out))]
    return tuple(out)


_INTERPRETER: list[tuple[tuple[str | bool, ...], tuple[str, ...]]] = []
"""The last answer of `interpreter_paths` for the same candidates, each existing or not as
then: resolving ~20 paths is a few hundred ``lstat`` calls, and every command asks."""


def missing_import_paths() -> tuple[str, ...]:
    """``sys.path`` entries (``PYTHONPATH``'s among them) that do not exist yet: a jail that
    could create one would put a ``sitecustomize.py`` in it, run by the next ``panday``."""
    out: list[str] = []
    for entry in sys.path:
        if not entry or not os.path.isabs(entry) or real_dir(entry) is not None:
            continue
        real = os.path.realpath(entry)
        if real not in out:
            out.append(real)
    return tuple(out)


def state_directories() -> tuple[str, ...]:
    """panday's own per-user state (cached seccomp programs, /etc views, jail plans and the
    key that seals them; the user's default policy): a jail that rewrote them would widen
    every later jail."""
    return kept_answer(_STATE, _find_state_directories)


_STATE: list[tuple[object, tuple[str, ...]]] = []


def _find_state_directories() -> tuple[str, ...]:
    from panday_core import userstate

    # The caches and their key where `userstate` keeps them (the password file's home, never
    # $XDG_CACHE_HOME); the per-user policy where `panday.defaults` reads it
    # ($XDG_CONFIG_HOME when absolute, else ~/.config) and the password file's ~/.config.
    home = os.path.expanduser("~")
    base = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(home, ".config")
    candidates = [
        userstate.state_dir(),
        os.path.join(base, "panday") if os.path.isabs(base) else None,
        userstate.config_dir(),
    ]
    out: list[str] = []
    for path in candidates:
        if path is not None and path not in out:
            out.append(path)
    return tuple(out)


CALLER_PATH_LISTS: Final = {
    "PATH": "on the caller's PATH: a program planted there runs in place of ls or git in the "
    "caller's next shell command",
}
"""Variables of the caller's environment that list directories its programs are run from."""

CALLER_PREFIXES: Final = {
    "VIRTUAL_ENV": "the caller's active virtual environment: its python and scripts run "
    "next, and a .pth in its site-packages runs in every Python it starts",
    "CONDA_PREFIX": "the caller's active conda environment: its programs run next, and a .pth "
    "in its site-packages runs in every Python it starts",
}
"""Variables of the caller's environment that name a whole environment it runs code from."""


_NOT_WHOLE: Final = frozenset({"HOME"})
"""Hooks whose place is not protected whole: a home's start-up files are (`home_directories`
and `protected_names.HOME_ENTRIES`), and a home may be the workspace (``fs.allow_home``)."""


_HOOK_PREFIXES: Final = tuple(ENV_HOOK_PREFIXES)


def _caller_candidates() -> list[tuple[str, str]]:
    return kept_answer(_CANDIDATES, _find_caller_candidates)


_CANDIDATES: list[tuple[object, list[tuple[str, str]]]] = []


def _find_caller_candidates() -> list[tuple[str, str]]:
    environ = os.environ
    # The names first, in one pass without decoding values (every command asks).
    names = sorted(
        name
        for name in environ
        if name in CALLER_PATH_LISTS
        or name in CALLER_PREFIXES
        or ((name in ENV_HOOKS or name.startswith(_HOOK_PREFIXES)) and name not in _NOT_WHOLE)
    )
    out: list[tuple[str, str]] = []
    for name in names:
        value = environ.get(name, "")
        why = CALLER_PATH_LISTS.get(name)
        if why is not None:
            tokens = value.split(":")
        elif (why := CALLER_PREFIXES.get(name)) is not None:
            tokens = [value]
        else:
            # Any absolute path in the value: a file, a path list, an option's argument
            # (NODE_OPTIONS='--require=/x.js'), a command (EDITOR=/x/ed --wait).
            why = f"named by the caller's {name} ({env_hook_reason(name)})"
            spaced = value
            for sep in (":", "=", ","):
                spaced = spaced.replace(sep, " ")
            tokens = spaced.split()
        out += [(token, why) for token in tokens if token.startswith("/")]
    return out


def caller_code_paths() -> tuple[tuple[str, str], ...]:
    """``(resolved path, why)`` for each place the caller's own environment runs or loads
    code from: every directory on its ``PATH``, its active virtual or conda environment,
    and every absolute path in the value of a variable that is a start-up hook
    (`panday_core.envhooks`: ``PYTHONSTARTUP``, ``BASH_ENV``, ``ZDOTDIR``,
    ``LD_LIBRARY_PATH``, ``NODE_OPTIONS``' ``--require`` ...). A jail that wrote one of them
    would have its code run by the caller's next command. A list (partial): what the
    caller's programs read from elsewhere is not known here."""
    candidates = _caller_candidates()
    # Which exist is part of the key: one created since must be resolved again.
    key = (*candidates, *lexists_all(path for path, _why in candidates))
    kept = _CALLER[0] if _CALLER else None
    if kept is not None and kept[0] == key:
        return kept[1]
    out: dict[str, str] = {}
    for path, why in candidates:
        try:
            real = os.path.realpath(path)
        except (OSError, ValueError):
            continue
        out.setdefault(real, why)
    found = tuple(out.items())
    _CALLER[:] = [(key, found)]
    return found


_CALLER: list[tuple[tuple[object, ...], tuple[tuple[str, str], ...]]] = []
"""The last answer of `caller_code_paths` for the same environment, each path existing or not
as then: resolving them is an ``lstat`` per component, and every command asks."""
