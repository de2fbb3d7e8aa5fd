# Over 500 lines: the Seatbelt profile is one generated text whose rule order matters.
"""The Seatbelt profile (SBPL) a T2 macOS session runs under, generated from the policy.

`SeatbeltProfile.from_policy` is a pure function: the same policy (and proxy endpoint) always
gives the same text, on any OS, so its structure is tested everywhere and pinned by golden
files. Host paths never appear in the text. They reach the profile as parameters
(``(param "WORKSPACE")``) that `sandbox-exec -D` supplies when a command starts, which keeps
the text host-independent and leaves nothing to quote: no path a user chose is ever spliced
into SBPL.

How the profile is built, and why (sources are cited in docs/tiers/macos.md):

* ``(deny default)`` first: every operation not allowed below is refused.
* Seatbelt applies the *last* rule that matches, so the protected-path denylist comes at the
  very end; no earlier allow (not even a workspace that contains ``~/.ssh``) can reach it.
* Reads are broad (``(allow file-read*)``) and narrowed by that denylist. A deny-default read
  allowlist stops binaries before ``main`` on current macOS (dyld, the shared cache, firmlinks
  and xcrun shims read from places that move between releases), so reads are a *partial*
  guarantee on this tier.
* Writes: only the workspace (when ``fs.access`` is ``rw``), the session's private temp dir,
  and data writes to ``/dev/null``-style devices.
* Protected entries of a writable workspace (``.git``, editor and agent configuration,
  panday's own code; `panday_core.protect`) get a write deny after the workspace rule. A
  deny is path-based, so a jail that could *rename* a directory above a protected or staged
  path would carry it out from under its rule: every such directory inside the workspace
  (and the workspace itself) gets a ``file-write-unlink`` deny, which Seatbelt checks for
  the source of a rename (Anthropic's sandbox-runtime closed the same hole this way).
* Every denied path is written twice: as the resolved path and in its Data-volume spelling
  (``/System/Volumes/Data`` + path). The firmlinked spelling reaches the same file and is
  reported to slip past rules written for ``/Users/...``.
* Network: ``(deny network*)`` always. With an allowlist and an egress proxy, exactly one rule
  reopens outbound TCP to the proxy's loopback port. Never ``network-bind``, never
  ``network-inbound``, never a ``(local ...)`` filter (it matches the local end of every
  outbound socket), never port 53.
* Seatbelt matches resolved paths (``/var`` is ``/private/var``), so every parameter value must
  be a ``realpath``; the runner resolves them.
* Terminals: no command may read, write or ioctl another terminal (``/dev/ttys*``, the pty
  masters, ``/dev/ptmx``): reads are broad, and a user's other Terminal tab is a device of
  the same user (mode 620) whose keystrokes (a ``sudo`` password) would be readable. A
  command has no terminal of its own to except: it is spawned in a new session with pipes
  for stdin, stdout and stderr, so it has no controlling terminal; ``/dev/tty`` (the
  controlling terminal's alias, which then answers ENXIO) is left alone.
* File flags cannot be changed anywhere (``file-write-flags``): the runner makes the
  placeholders that hold a missing protected name immutable (``uchg``), and only a flag
  change could make one removable (`panday_tier_macos.roots`).
* Sessions do not see each other's private temp dirs: every session's temp dir is made
  inside one per-user directory (`PARAM_TMPBASE`), denied to reads and writes except the
  session's own.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from panday_core.declared.t2_macos import (
    DATA_VOLUME,
    MACH_SERVICES,
    SENSITIVE_HOME_PATHS,
    SENSITIVE_SYSTEM_PATHS,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from panday_core.policy import SandboxPolicy

SANDBOX_EXEC = "/usr/bin/sandbox-exec"
"""Always the absolute path: a `sandbox-exec` found on PATH could be anything."""

PARAM_WORKSPACE = "WORKSPACE"
PARAM_TMPDIR = "TMPDIR"
PARAM_TMPBASE = "TMPBASE"
"""The per-user directory every session's private temp dir is made in (`PARAM_TMPDIR` is one
of its children): denied except the session's own, so sessions cannot read each other's."""
PARAM_HOST_HOME = "HOST_HOME"
"""The home the runner's ``$HOME`` names (it may differ from the account's)."""
PARAM_ACCOUNT_HOME = "ACCOUNT_HOME"
"""The account's home from the user database; protected even when ``$HOME`` points elsewhere."""
PARAM_STAGED = "STAGED_"
"""Prefix: ``STAGED_0``, ``STAGED_1``... one per ``fs.staged_ro`` entry, in order."""
PARAM_PROTECTED = "PROTECTED_"
"""Prefix: one per protected entry of a writable workspace (absolute paths; the runner
computes them at `create`, see `panday_tier_macos.roots`)."""
PARAM_ANCESTOR = "ANCESTOR_"
"""Prefix: one per directory inside the workspace (the workspace included) that holds a
protected entry, a staged path or a home directory: none may be renamed or removed."""

HOME_PARAMS = (PARAM_HOST_HOME, PARAM_ACCOUNT_HOME)

STATE_DIR = ".cache/panday"
"""panday's per-user state under a home (`panday_core.userstate`: the key that seals its
caches, and the caches): denied to reads and writes like the secrets, under the account's
home (where panday keeps it) and the ``$HOME`` one alike."""
HOME_DENIED: tuple[str, ...] = (*SENSITIVE_HOME_PATHS, STATE_DIR)
"""Everything under a home that no sandboxed command may read or write."""

VAR_DB_READABLE: tuple[tuple[str, str], ...] = (
    ("subpath", "/private/var/db/timezone"),
    ("literal", "/private/var/db/xcode_select_link"),
    ("literal", "/private/var/db/DarwinDirectory/local/recordStore.data"),
)
"""Carve-outs from the ``/private/var/db`` deny that ordinary programs read: the zoneinfo
behind ``/etc/localtime``, the link the ``/usr/bin`` developer-tool shims (git, python3) follow,
and the local user records libinfo reads on recent macOS. None holds a secret."""

SYSCTL_NAMES: tuple[str, ...] = (
    "hw.activecpu",
    "hw.busfrequency_compat",
    "hw.byteorder",
    "hw.cacheconfig",
    "hw.cachelinesize_compat",
    "hw.cpufamily",
    "hw.cpufrequency",
    "hw.cpufrequency_compat",
    "hw.cputype",
    "hw.l1dcachesize_compat",
    "hw.l1icachesize_compat",
    "hw.l2cachesize_compat",
    "hw.l3cachesize_compat",
    "hw.logicalcpu",
    "hw.logicalcpu_max",
    "hw.machine",
    "hw.memsize",
    "hw.model",
    "hw.ncpu",
    "hw.nperflevels",
    "hw.packages",
    "hw.pagesize",
    "hw.pagesize_compat",
    "hw.physicalcpu",
    "hw.physicalcpu_max",
    "hw.tbfrequency_compat",
    "hw.vectorunit",
    "kern.argmax",
    "kern.hostname",
    "kern.maxfilesperproc",
    "kern.maxproc",
    "kern.osproductversion",
    "kern.osrelease",
    "kern.ostype",
    "kern.osvariant_status",
    "kern.osversion",
    "kern.secure_kernel",
    "kern.usrstack64",
    "kern.version",
    "sysctl.proc_cputype",
    "vm.loadavg",
)
SYSCTL_PREFIXES: tuple[str, ...] = (
    "hw.optional.",
    "hw.perflevel",
    "machdep.cpu.",
)
"""sysctls read at start-up by shells, language runtimes and CPU-feature detection; the list
follows the one Chromium's and Codex's profiles carry, without their ``kern.proc.pid.``
prefix: ``kern.proc.pid.<n>`` answers for *any* pid (name, uid, parent, flags), not only the
caller's own, so it lists every process of the machine."""

SYSCTL_DENIED_PREFIX = "kern.proc"
"""Denied last, whatever the allowlist says: it covers ``kern.proc.*`` (process listings by
pid, uid, tty, group or all) and ``kern.procargs*`` (other processes' arguments and
environment). The allowlist alone already leaves them out; the final deny keeps it so if a
broader allow is ever added above, and it is the one rule a test can point at."""

SETID_MODES: tuple[int, ...] = (0o4000, 0o2000)
"""The setuid and setgid bits: no file carrying either may be executed (``process-exec*``:
also as a script's interpreter)."""

TERMINAL_REGEX = "^/dev/(ttys[0-9]+|ptmx|pty[p-zP-T][0-9a-fA-F]+|tty[p-zP-T][0-9a-fA-F]+)$"
"""Every terminal device: the pseudo-terminal slaves Terminal and iTerm2 give each tab
(``/dev/ttys003``), the clone device that makes a new one (``/dev/ptmx``) and the old BSD
pty pairs. A command has none of its own (it runs on pipes, without a controlling
terminal), so none is excepted."""

POSIX_SEM_REGEX = "^/?mp-"
"""The named POSIX semaphores a command may use: CPython's multiprocessing names its own
``/mp-<random>``. Any other name could be another program's semaphore of the same user (a
``sem_wait`` on it stalls that program)."""

WRITABLE_DEVICES: tuple[str, ...] = (
    "/dev/null",
    "/dev/zero",
    "/dev/stdout",
    "/dev/stderr",
)
"""Device files a command may write data to (never create, rename or unlink)."""
DEVICE_FD_REGEX = "^/dev/fd/[0-9]+$"
"""``/dev/fd/N`` re-opens a descriptor the process already holds; it grants nothing new."""
IOCTL_DEVICES: tuple[str, ...] = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")

_LOOPBACK_NAMES = ("localhost",)


class ProxyEndpoint(msgspec.Struct, frozen=True, kw_only=True):
    """Where the egress proxy listens: a loopback address and a TCP port.

    Seatbelt can only name loopback as ``localhost``, which covers 127.0.0.1 *and* ::1 at that
    port; the proxy must therefore hold the port on both loopback addresses, so that no other
    process can listen on the one it does not use.
    """

    host: str
    port: int

    def __post_init__(self) -> None:
        if isinstance(self.port, bool) or not 1 <= self.port <= 65535:  # noqa: PLR2004 - TCP port range
            raise ValueError(f"proxy port {self.port!r} is not a TCP port (1-65535)")
        if self.host not in _LOOPBACK_NAMES:
            try:
                address = ipaddress.ip_address(self.host)
            except ValueError:
                raise ValueError(f"proxy host {self.host!r} is not a loopback address") from None
            if not address.is_loopback:
                raise ValueError(f"proxy host {self.host!r} is not a loopback address")


# ----------------------------------------------------------------------------- SBPL text


def sbpl_string(value: str) -> str:
    """An SBPL (TinyScheme) string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _regex(pattern: str) -> str:
    """An SBPL regex literal (``#"..."``); patterns here are constants without quotes."""
    if '"' in pattern:
        raise ValueError("regex patterns must not contain a double quote")
    return '#"' + pattern + '"'


def _form(*parts: str) -> str:
    return "(" + " ".join(parts) + ")"


def _param(name: str) -> str:
    return _form("param", sbpl_string(name))


class Param(NamedTuple):
    """A `(param "NAME")` as one part of a path expression."""

    name: str


Part = str | Param
"""A path expression is a sequence of parts: constants of this module, and parameters."""


def _expr(parts: Sequence[Part]) -> str:
    """The SBPL expression for `parts` joined: ``(string-append ...)``, or ``(param ...)`` for
    a lone parameter; empty constants are left out.

    Every path expression here holds a parameter (no host path reaches the text) and no two
    constants in a row, so there is nothing to fold into one literal; two constants would
    still be a correct ``string-append``, just not the shortest.
    """
    present = [part for part in parts if part]
    if len(present) == 1 and isinstance(present[0], Param):
        return _param(present[0].name)
    return _form(
        "string-append",
        *(_param(part.name) if isinstance(part, Param) else sbpl_string(part) for part in present),
    )


def _spellings(kind: str, *parts: Part) -> list[str]:
    """A path filter (`kind`: subpath or literal) for `parts`, once as given and once in the
    Data-volume spelling."""
    return [_form(kind, _expr(parts)), _form(kind, _expr((DATA_VOLUME, *parts)))]


def _rule(action: str, operations: str, filters: Sequence[str] = ()) -> str:
    """One rule; several filters go one per line so the text diffs well."""
    if not filters:
        return _form(action, operations)
    if len(filters) == 1:
        return _form(action, operations, filters[0])
    inner = "\n".join("  " + f for f in filters)
    return f"({action} {operations}\n{inner})"


def _numbered(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(count))


def _staged_params(policy: SandboxPolicy) -> tuple[str, ...]:
    return _numbered(PARAM_STAGED, len(policy.fs.staged_ro))


def _home_ancestors() -> tuple[str, ...]:
    """Directories under a home that hold a sensitive path ("" is the home itself): renaming
    one would carry the secret out from under its deny (``mv ~/.config ~/x``)."""
    out: set[str] = {""}
    for relative in HOME_DENIED:
        parts = relative.split("/")
        out.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return tuple(sorted(out))


def _protected_filters() -> list[str]:
    filters: list[str] = []
    for prefix in ("", DATA_VOLUME):
        for path in SENSITIVE_SYSTEM_PATHS:
            if path == "/private/var/db":
                keep = [
                    _form("require-not", _form(kind, sbpl_string(prefix + p)))
                    for kind, p in VAR_DB_READABLE
                ]
                filters.append(
                    _form("require-all", _form("subpath", sbpl_string(prefix + path)), *keep)
                )
            else:
                filters.append(_form("subpath", sbpl_string(prefix + path)))
    for home in HOME_PARAMS:
        for relative in HOME_DENIED:
            filters.extend(_spellings("subpath", Param(home), "/" + relative))
    # Other sessions' temp dirs: the per-user base, except this session's own.
    filters.extend(
        _form(
            "require-all",
            _form("subpath", _expr((prefix, Param(PARAM_TMPBASE)))),
            _form("require-not", _form("subpath", _expr((prefix, Param(PARAM_TMPDIR))))),
        )
        for prefix in ("", DATA_VOLUME)
    )
    return filters


def _move_blocking_filters(
    staged: Sequence[str], protected: Sequence[str], ancestors: Sequence[str]
) -> list[str]:
    """What may not be unlinked or renamed: protected entries and staged paths themselves
    (their write deny covers it already; stated again so it never rests on what the
    ``file-write*`` wildcard includes), the directories holding them inside the workspace,
    and the directories holding a home's secrets."""
    filters: list[str] = []
    for name in (*protected, *staged):
        filters.extend(_spellings("subpath", Param(name)))
    for name in ancestors:
        filters.extend(_spellings("literal", Param(name)))
    for home in HOME_PARAMS:
        for relative in _home_ancestors():
            filters.extend(_spellings("literal", Param(home), "/" + relative if relative else ""))
    return filters


def _sections(
    policy: SandboxPolicy,
    proxy: ProxyEndpoint | None,
    protected: Sequence[str],
    ancestors: Sequence[str],
) -> list[tuple[str, list[str]]]:
    staged = _staged_params(policy)
    writes = [_form("subpath", _param(PARAM_TMPDIR))]
    if policy.fs.access == "rw":
        writes.insert(0, _form("subpath", _param(PARAM_WORKSPACE)))
    network = ["(deny network*)"]
    if proxy is not None:
        endpoint = sbpl_string(f"localhost:{proxy.port}")
        network.append(_rule("allow", "network-outbound", [_form("remote", "tcp", endpoint)]))
    setid = _form("require-any", *(_form("file-mode", f"#o{mode:o}") for mode in SETID_MODES))
    return [
        (
            (
                "processes: children inherit this profile; signals and process information "
                "stay inside this sandbox; no setuid or setgid program runs"
            ),
            [
                "(allow process-fork)",
                "(allow process-exec)",
                _rule("deny", "process-exec*", [setid]),
                _rule("allow", "signal", ["(target same-sandbox)"]),
                _rule("allow", "process-info*", ["(target same-sandbox)"]),
            ],
        ),
        (
            "system information that shells and language runtimes read at start-up",
            [
                _rule(
                    "allow",
                    "sysctl-read",
                    [_form("sysctl-name", sbpl_string(n)) for n in SYSCTL_NAMES]
                    + [_form("sysctl-name-prefix", sbpl_string(p)) for p in SYSCTL_PREFIXES],
                ),
                _rule(
                    "allow",
                    "ipc-posix-sem",
                    [_form("ipc-posix-name-regex", _regex(POSIX_SEM_REGEX))],
                ),
                _rule(
                    "allow",
                    "mach-lookup",
                    [_form("global-name", sbpl_string(s)) for s in MACH_SERVICES],
                ),
            ],
        ),
        (
            "reads: broad, narrowed by the protected paths at the end (a partial guarantee)",
            ["(allow file-read*)"],
        ),
        (
            "writes: the workspace when writable, the session's temp dir, and device data",
            [
                _rule("allow", "file-write*", writes),
                _rule(
                    "allow",
                    "file-write-data",
                    [_form("literal", sbpl_string(d)) for d in WRITABLE_DEVICES]
                    + [_form("regex", _regex(DEVICE_FD_REGEX))],
                ),
                _rule(
                    "allow", "file-ioctl", [_form("literal", sbpl_string(d)) for d in IOCTL_DEVICES]
                ),
            ],
        ),
        (
            "staged inputs are read-only, even inside the workspace",
            [
                _rule(
                    "deny",
                    "file-write*",
                    [f for p in staged for f in _spellings("subpath", Param(p))],
                )
            ]
            if staged
            else [],
        ),
        (
            (
                "protected entries of the workspace (.git, editor and agent configuration, "
                "panday's own code) are read-only and cannot be created"
            ),
            [
                _rule(
                    "deny",
                    "file-write*",
                    [f for p in protected for f in _spellings("subpath", Param(p))],
                )
            ]
            if protected
            else [],
        ),
        (
            "nothing protected or staged can be renamed away, nor any directory holding one",
            [
                _rule(
                    "deny",
                    "file-write-unlink",
                    _move_blocking_filters(staged, protected, ancestors),
                )
            ],
        ),
        (
            (
                "the workspace and the directories holding protected entries keep their mode "
                "and ACL (chmod 777 . would let another local user rename .git aside)"
            ),
            [
                _rule(
                    "deny",
                    "file-write-mode file-write-acl",
                    [
                        f
                        for name in (PARAM_WORKSPACE, *ancestors)
                        for f in _spellings("literal", Param(name))
                    ],
                )
            ]
            if policy.fs.access == "rw"
            else [],
        ),
        (
            "network: none, except outbound TCP to the egress proxy's loopback port"
            if proxy is not None
            else "network: none",
            network,
        ),
        (
            (
                "protected paths and other sessions' temp dirs: last, so that no rule above "
                "can reach them; then no process listing, no set-id bit or file flag on any "
                "file, and no terminal"
            ),
            [
                _rule("deny", "file-read* file-write*", _protected_filters()),
                _rule(
                    "deny",
                    "sysctl-read",
                    [_form("sysctl-name-prefix", sbpl_string(SYSCTL_DENIED_PREFIX))],
                ),
                # Its own operation, outside the file-write* wildcard since macOS 12.3, so
                # nothing above allows it; stated so that no later allow can, either.
                "(deny file-write-setugid)",
                # The placeholders holding missing protected names are immutable (uchg);
                # only a flag change could make one removable.
                "(deny file-write-flags)",
                _rule(
                    "deny",
                    "file-read* file-write* file-ioctl",
                    [_form("regex", _regex(TERMINAL_REGEX))],
                ),
            ],
        ),
    ]


class SeatbeltProfile(msgspec.Struct, frozen=True, kw_only=True):
    """A generated profile: its SBPL text and the parameters the text needs."""

    text: str
    params: tuple[str, ...]
    """Names of every ``(param ...)`` in `text`; `argv` requires a value for each."""
    proxy: ProxyEndpoint | None = None

    @classmethod
    def from_policy(
        cls,
        policy: SandboxPolicy,
        proxy_endpoint: ProxyEndpoint | None = None,
        *,
        protected: int = 0,
        ancestors: int = 0,
    ) -> SeatbeltProfile:
        """The profile for `policy`. Pure: it reads nothing but its arguments.

        `proxy_endpoint` is where the egress proxy listens. It is required exactly when
        ``net.allow`` is non-empty: an allowlist without a proxy would have to become either
        the whole network or none, and a proxy without an allowlist would grant access that
        the policy did not ask for, so both are refused here (`create` refuses the former
        earlier, by field name).

        `protected` and `ancestors` are how many protected entries and directories holding
        them (or a staged path, or a home) the workspace has (`workspace_guards`); each
        becomes a parameter whose value the runner gives, so no path reaches the text.
        """
        if policy.net.allow and proxy_endpoint is None:
            raise ValueError("net.allow is non-empty but no egress proxy endpoint was given")
        if proxy_endpoint is not None and not policy.net.allow:
            raise ValueError("an egress proxy endpoint was given but net.allow is empty")
        if protected < 0 or ancestors < 0:
            raise ValueError("protected and ancestors are counts")
        protected_params = _numbered(PARAM_PROTECTED, protected)
        ancestor_params = _numbered(PARAM_ANCESTOR, ancestors)
        lines = [
            "(version 1)",
            "; panday T2 macOS profile, generated from the policy (do not edit).",
            "(deny default)",
        ]
        for comment, rules in _sections(policy, proxy_endpoint, protected_params, ancestor_params):
            if rules:
                lines.extend(("", f"; {comment}", *rules))
        params = [
            PARAM_TMPDIR,
            PARAM_TMPBASE,
            *HOME_PARAMS,
            *_staged_params(policy),
            *protected_params,
            *ancestor_params,
        ]
        if policy.fs.access == "rw":
            params.insert(0, PARAM_WORKSPACE)
        return cls(text="\n".join(lines) + "\n", params=tuple(params), proxy=proxy_endpoint)

    def argv(self, command: Sequence[str], values: Mapping[str, str]) -> list[str]:
        """The `sandbox-exec` command line that runs `command` under this profile.

        `values` must give exactly the parameters in `params`, each an absolute, resolved path
        (Seatbelt compares resolved paths, and a missing parameter fails the profile).
        """
        missing = [p for p in self.params if p not in values]
        extra = sorted(set(values) - set(self.params))
        if missing or extra:
            raise ValueError(f"profile parameters: missing {missing}, unexpected {extra}")
        if not command:
            raise ValueError("the command is empty")
        defines: list[str] = []
        for name in self.params:
            value = values[name]
            if not value.startswith("/") or "\x00" in value or "/../" in value + "/":
                raise ValueError(f"profile parameter {name}: {value!r} is not a resolved path")
            defines.append(f"-D{name}={value}")
        return [SANDBOX_EXEC, "-p", self.text, *defines, "--", *command]


def _inside(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def workspace_guards(
    workspace: str,
    protected: Sequence[str],
    staged: Sequence[str],
    homes: Sequence[str],
) -> tuple[str, ...]:
    """The directories that must not be renamed or removed: the workspace and every directory
    inside it that holds a protected entry, a staged path or a home directory (all absolute,
    resolved). Renaming one would move what its deny rule names out from under it. Outside
    the workspace nothing is writable, so nothing there needs a rule. Pure."""
    root = workspace.rstrip("/") or "/"
    out: set[str] = set()
    for anchor in (*protected, *staged, *homes):
        if anchor == root and anchor in homes:
            out.add(root)
        if not _inside(anchor, root):
            continue
        out.add(root)
        parent = anchor.rsplit("/", 1)[0]
        while _inside(parent, root):
            out.add(parent)
            parent = parent.rsplit("/", 1)[0]
    return tuple(sorted(out))


def protected_paths(homes: Sequence[str]) -> tuple[str, ...]:
    """Every path the profile protects, given the resolved home directories."""
    out = list(SENSITIVE_SYSTEM_PATHS)
    for home in homes:
        out.extend(f"{home.rstrip('/')}/{relative}" for relative in HOME_DENIED)
    return tuple(out)


def protecting(path: str, homes: Sequence[str]) -> str | None:
    """The protected path that `path` (resolved) is, or lies under; None if it is neither.

    A workspace or staged input there could never be used (the denylist wins over every
    allow), so `create` refuses it by field name rather than letting it fail later.
    """
    for protected in protected_paths(homes):
        if path == protected or path.startswith(protected.rstrip("/") + "/"):
            return protected
    return None
