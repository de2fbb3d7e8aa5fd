# Over 500 lines: the policy model is one schema whose sections validate each other.
"""The policy model: what a session may touch, reach and consume.

Every model is a frozen `msgspec.Struct` that refuses unknown keys. Types and ranges are
checked when a document is loaded (`load_policy`, `policy_from_dict`, `policy_from_json`);
semantic checks (absolute paths, host patterns, ranges) also run in ``__post_init__`` so a
policy built directly in Python is held to the same rules. A field absent from a document
takes its documented default; nothing is inferred from a misspelt key, because misspelt keys
are refused.

msgspec rather than pydantic: the model sits on the CLI's start-up path, and msgspec costs
a fraction of pydantic's import time (measured figures are in docs/policy.md).
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, cast  # noqa: TID251 - Any types the raw TOML/JSON boundary

import msgspec

from panday_core.domains import normalize_pattern
from panday_core.errors import PolicyError
from panday_core.protect import OPT_OUT_NAMES, env_hook_reason

POLICY_VERSION = 1

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
TIB = 1024 * GIB
_DAY_MS = 24 * 60 * 60 * 1000

_MAX_PATH = 4096
_MAX_ENV_VALUE = 128 * KIB

UNBOUNDED: Final = "unbounded"
"""What a policy writes for `limits.wall_clock_ms` or `limits.output_bytes` to have no
ceiling at all. Those two always have a value (a number, or this word): leaving one out
takes the model's default below, never "none", so a hand-written policy is bounded unless
it says otherwise, in words a reader sees (``panday policy check`` and ``panday doctor``
name every unbounded field)."""

DEFAULT_WALL_CLOCK_MS: Final = 600_000
"""The model's default `limits.wall_clock_ms`: 10 minutes per command."""
DEFAULT_OUTPUT_BYTES: Final = 16 * MIB
"""The model's default `limits.output_bytes`: 16 MiB of stdout and of stderr kept per
command; the rest is read and discarded after a marker."""

ALWAYS_BOUNDED: Final = ("wall_clock_ms", "output_bytes")
"""The limits that always have a finite default (`UNBOUNDED` only when written)."""

# Ranges: below the minimum a ceiling is meaningless (nothing can start); above the maximum
# it is almost certainly a unit mistake (bytes vs MiB, ms vs s), so it is refused, not clamped.
LIMIT_RANGES: Mapping[str, tuple[int, int, str]] = types.MappingProxyType(
    {
        "cpu_ms": (1, 7 * _DAY_MS, "milliseconds of CPU time, all processes together"),
        "mem_bytes": (1 * MIB, 16 * TIB, "bytes of memory, all processes together"),
        "pids": (1, 4_194_304, "processes and threads alive at once"),
        "disk_bytes": (64 * KIB, 16 * TIB, "bytes written to the workspace and temp dir"),
        "wall_clock_ms": (1, 7 * _DAY_MS, "milliseconds of elapsed time per command"),
        "output_bytes": (1 * KIB, 1 * GIB, "bytes of stdout and of stderr kept per command"),
    }
)


class FieldError(PolicyError):
    """An invalid value in a policy or manifest model, named by its dotted field.

    Raised by the models' checks whether the value came from a document or was built in
    Python (``panday.Limits(pids=-1)`` raises it with field ``limits.pids``), so one
    ``except PolicyError`` catches every invalid value. `field` is the full dotted path
    from the document's top (``fs.staged_ro[0]``, ``capabilities.net[1]``).
    """


def _doc(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


def _check_abs_path(field: str, value: str) -> None:
    if "\x00" in value:
        raise FieldError(field, f"{value!r} contains a NUL byte")
    if not value.startswith("/"):
        raise FieldError(field, f"{value!r} is relative; give an absolute path")
    if len(value) > _MAX_PATH:
        raise FieldError(field, f"path is longer than {_MAX_PATH} characters")
    if any(part == ".." for part in value.split("/")):
        raise FieldError(field, f"{value!r} contains '..'; give the path without it")


def _check_rel_path(field: str, value: str) -> None:
    if "\x00" in value:
        raise FieldError(field, f"{value!r} contains a NUL byte")
    if not value.strip("/") or value.startswith("/"):
        raise FieldError(field, f"{value!r} must be a path relative to the workspace")
    if len(value) > _MAX_PATH:
        raise FieldError(field, f"path is longer than {_MAX_PATH} characters")
    if any(part in {"..", "."} for part in value.rstrip("/").split("/")):
        raise FieldError(field, f"{value!r} contains '.' or '..'; give the path without it")


def _check_env_name(field: str, name: str) -> None:
    if not name:
        raise FieldError(field, "an empty name is not an environment variable name")
    if "=" in name or "\x00" in name:
        # execve's environment is NAME=VALUE strings ending at NUL: such a name would be
        # cut there and set a different variable (A=B with value C sets A to B=C).
        raise FieldError(
            field, f"{name!r} contains '=' or a NUL byte, which cannot be in a variable name"
        )
    ok = not name[0].isdigit() and name.isascii()
    ok = ok and all(c.isalnum() or c == "_" for c in name)
    if not ok:
        raise FieldError(
            field, f"{name!r} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
        )


def _strings(field: str, values: object) -> tuple[str, ...]:
    """A list of strings given in Python (a list or tuple) as the model's tuple; a bare
    string is refused rather than taken apart into characters."""
    if isinstance(values, str) or not isinstance(values, list | tuple):
        got = _TYPE_WORDS.get(type(values).__name__, type(values).__name__)
        raise FieldError(field, f"expected a list of strings, got {got}")
    items = cast("list[object] | tuple[object, ...]", values)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            got = _TYPE_WORDS.get(type(item).__name__, type(item).__name__)
            raise FieldError(f"{field}[{i}]", f"expected a string, got {got}")
    return cast("tuple[str, ...]", tuple(items))


def _normalized_hosts(field: str, values: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for i, value in enumerate(_strings(field, values)):
        try:
            out.append(normalize_pattern(value))
        except ValueError as exc:
            raise FieldError(f"{field}[{i}]", str(exc)) from None
    return tuple(out)


class _Model(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Shared configuration: immutable, unknown keys refused, keyword-only."""


class FsPolicy(_Model, frozen=True, kw_only=True):
    """Filesystem scope: one workspace, read-only staged inputs, nothing else."""

    workspace: Annotated[
        str | None,
        _doc(
            "Absolute path of the one directory the command works in (HOME points into it). "
            "Absent: the SDK and CLI use the current directory when the session opens."
        ),
    ] = None
    access: Annotated[
        Literal["rw", "ro"], _doc("Whether the command may write the workspace: rw or ro.")
    ] = "rw"
    staged_ro: Annotated[
        tuple[str, ...],
        _doc("Absolute paths made visible read-only, at the same path inside the sandbox."),
    ] = ()
    protect: Annotated[
        tuple[str, ...],
        _doc(
            "Paths relative to the workspace that stay read-only (and cannot be created) "
            "even when the workspace is writable, on top of the default list (.git, .envrc, "
            ".vscode, .mcp.json ...; docs/threat-model.md). A trailing '/' makes a missing "
            "one a directory."
        ),
    ] = ()
    unprotect: Annotated[
        tuple[str, ...],
        _doc(
            "Entries of the default protected list to leave writable, by name (e.g. '.git' "
            "for a command that commits). Each one lets the command plant what a tool "
            "outside the sandbox runs later."
        ),
    ] = ()
    allow_home: Annotated[
        bool,
        _doc(
            "Allow a home directory (or a directory holding one) as the workspace or a "
            "staged path. Its start-up files and what they source, .ssh, .config, .local, "
            "toolchains and tools' configuration that names code stay protected (a partial "
            "list: see docs/threat-model.md)."
        ),
    ] = False
    writes: Annotated[
        Literal["direct", "checked", "review"],
        _doc(
            "How the command's writes reach the workspace. 'direct': in place, with the "
            "protected entries read-only (a list: partial). 'checked': into an overlay; "
            "when the command ends every change that passes the hazard rules is applied "
            "(one rename per file), the rest held for review. 'review': into an overlay; "
            "nothing lands until `panday changes apply` (docs/workspace.md)."
        ),
    ] = "direct"

    def __post_init__(self) -> None:
        if self.writes not in {"direct", "checked", "review"}:
            raise FieldError(
                "fs.writes", f"{self.writes!r} must be 'direct', 'checked' or 'review'"
            )
        if self.workspace is not None:
            if not isinstance(self.workspace, str):  # pyright: ignore[reportUnnecessaryIsInstance] - built in Python
                raise FieldError("fs.workspace", "expected a string (an absolute path)")
            _check_abs_path("fs.workspace", self.workspace)
        if self.access not in {"rw", "ro"}:
            raise FieldError("fs.access", f"{self.access!r} must be 'rw' or 'ro'")
        msgspec.structs.force_setattr(self, "staged_ro", _strings("fs.staged_ro", self.staged_ro))
        for i, path in enumerate(self.staged_ro):
            _check_abs_path(f"fs.staged_ro[{i}]", path)
        msgspec.structs.force_setattr(self, "protect", _strings("fs.protect", self.protect))
        for i, rel in enumerate(self.protect):
            _check_rel_path(f"fs.protect[{i}]", rel)
        msgspec.structs.force_setattr(self, "unprotect", _strings("fs.unprotect", self.unprotect))
        for i, name in enumerate(self.unprotect):
            if name not in OPT_OUT_NAMES:
                known = ", ".join(sorted(OPT_OUT_NAMES))
                raise FieldError(
                    f"fs.unprotect[{i}]",
                    f"{name!r} is not a default protected entry (known: {known})",
                )
        if not isinstance(self.allow_home, bool):  # pyright: ignore[reportUnnecessaryIsInstance] - built in Python
            raise FieldError("fs.allow_home", "expected true or false")


class NetPolicy(_Model, frozen=True, kw_only=True):
    """Network egress. Empty `allow` means no network at all."""

    allow: Annotated[
        tuple[str, ...],
        _doc(
            "Host patterns the command may reach through the egress proxy: exact names, "
            "'*.example.com' (subdomains only, never the apex) or IP literals. "
            "Empty: no network at all."
        ),
    ] = ()
    deny: Annotated[
        tuple[str, ...], _doc("Host patterns refused even when 'allow' covers them.")
    ] = ()
    ports: Annotated[
        tuple[Annotated[int, msgspec.Meta(ge=1, le=65535)], ...],
        _doc("Destination ports allowed for allowlisted hosts."),
    ] = (80, 443)

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "allow", _normalized_hosts("net.allow", self.allow))
        msgspec.structs.force_setattr(self, "deny", _normalized_hosts("net.deny", self.deny))
        if not isinstance(self.ports, list | tuple):  # pyright: ignore[reportUnnecessaryIsInstance] - built in Python
            raise FieldError("net.ports", "expected a list of port numbers")
        msgspec.structs.force_setattr(self, "ports", tuple(self.ports))
        for i, port in enumerate(cast("tuple[object, ...]", self.ports)):
            if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:  # noqa: PLR2004 - TCP port range
                raise FieldError(f"net.ports[{i}]", f"{port!r} is not a TCP port (1-65535)")
        if not self.ports:
            raise FieldError("net.ports", "is empty; list at least one port, or leave the key out")


def _limit_meta(name: str) -> msgspec.Meta:
    low, high, unit = LIMIT_RANGES[name]
    return msgspec.Meta(ge=low, le=high, description=f"Ceiling on {unit}.")


# Spelled out one by one (not built in a loop) so type checkers see plain `int`.
CpuMs = Annotated[int, _limit_meta("cpu_ms")]
MemBytes = Annotated[int, _limit_meta("mem_bytes")]
Pids = Annotated[int, _limit_meta("pids")]
DiskBytes = Annotated[int, _limit_meta("disk_bytes")]
WallClockMs = Annotated[int, _limit_meta("wall_clock_ms")]
OutputBytes = Annotated[int, _limit_meta("output_bytes")]


Unbounded = Annotated[
    Literal["unbounded"],
    msgspec.Meta(description="No ceiling at all: an explicit, visible choice."),
]


class Limits(_Model, frozen=True, kw_only=True):
    """Resource ceilings. cpu_ms, mem_bytes, pids and disk_bytes: absent means no ceiling
    was requested. wall_clock_ms and output_bytes always have one: absent takes the default
    (600000 ms; 16 MiB per stream), and only the word "unbounded" removes it."""

    cpu_ms: CpuMs | None = None
    mem_bytes: MemBytes | None = None
    pids: Pids | None = None
    disk_bytes: DiskBytes | None = None
    wall_clock_ms: WallClockMs | Unbounded = DEFAULT_WALL_CLOCK_MS
    output_bytes: OutputBytes | Unbounded = DEFAULT_OUTPUT_BYTES

    def __post_init__(self) -> None:
        for name, (low, high, unit) in LIMIT_RANGES.items():
            value: object = getattr(self, name)
            if name in ALWAYS_BOUNDED:
                if value == UNBOUNDED:
                    continue
                if value is None:
                    raise FieldError(
                        f"limits.{name}",
                        f"None is not a ceiling: give a number ({unit}), or {UNBOUNDED!r} "
                        "for no ceiling at all (leave the key out for the default)",
                    )
            elif value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise FieldError(f"limits.{name}", f"{value!r} is not an integer ({unit})")
            if not low <= value <= high:
                raise FieldError(
                    f"limits.{name}", f"{value} is out of range {low}..{high} ({unit})"
                )

    @property
    def wall_clock_cap(self) -> int | None:
        """The wall clock in milliseconds, or None when the policy says ``"unbounded"``."""
        value = self.wall_clock_ms
        return None if value == UNBOUNDED else value

    @property
    def output_cap(self) -> int | None:
        """The output ceiling in bytes per stream, or None when ``"unbounded"``."""
        value = self.output_bytes
        return None if value == UNBOUNDED else value

    def unbounded(self) -> tuple[str, ...]:
        """The dotted fields this policy explicitly leaves without a ceiling."""
        return tuple(f"limits.{n}" for n in ALWAYS_BOUNDED if getattr(self, n) == UNBOUNDED)


def _checked_env(given: Mapping[str, str], hooks: tuple[str, ...]) -> dict[str, str]:
    """The policy's environment, every name and value checked; a start-up hook (a name
    that makes a program load or run code: LD_*, GIT_CONFIG_*, PYTHONPATH, PAGER ...; see
    `panday_core.protect.ENV_HOOKS`) only when `hooks` lists it."""
    for i, name in enumerate(hooks):
        _check_env_name(f"allow_env_hooks[{i}]", name)
    env = dict(given)
    for name, value in env.items():
        if not isinstance(name, str) or not isinstance(value, str):  # pyright: ignore[reportUnnecessaryIsInstance] - built in Python
            raise FieldError(f"env.{name}", "names and values must be strings")
        _check_env_name(f"env.{name}", name)
        why = env_hook_reason(name)
        if why is not None and name not in hooks:
            raise FieldError(
                f"env.{name}",
                f"is a start-up hook ({why}): programs in the sandbox would run code they "
                "did not ask for; list it in allow_env_hooks to set it anyway",
            )
        if "\x00" in value:
            raise FieldError(f"env.{name}", "value contains a NUL byte")
        if len(value) > _MAX_ENV_VALUE:
            raise FieldError(f"env.{name}", f"value is longer than {_MAX_ENV_VALUE} bytes")
    return env


class SandboxPolicy(_Model, frozen=True, kw_only=True):
    """One uniform policy, enforced by the chosen tier or refused at `create`."""

    version: Annotated[Literal[1], _doc("Policy format version; only 1 exists.")] = POLICY_VERSION
    fs: FsPolicy = msgspec.field(default_factory=FsPolicy)
    net: NetPolicy = msgspec.field(default_factory=NetPolicy)
    limits: Limits = msgspec.field(default_factory=Limits)
    env: Annotated[
        Mapping[str, str],
        _doc(
            "Variables set inside the sandbox, on top of a small fixed set (PATH, HOME, LANG, "
            "TERM). Nothing from the caller's environment is inherited."
        ),
    ] = msgspec.field(default_factory=dict[str, str])
    allow_env_hooks: Annotated[
        tuple[str, ...],
        _doc(
            "Names in env that are start-up hooks (names that make a program load or run "
            "code: LD_*, DYLD_*, GIT_CONFIG_*, BASH_ENV, PYTHONPATH, NODE_OPTIONS, PAGER, "
            "EDITOR ...; the list and its reasons are in docs/policy.md) and may be set "
            "anyway. Unlisted, such a name is refused: programs in the sandbox would run code "
            "they did not ask for. The list is partial: none is ever complete."
        ),
    ] = ()

    def __post_init__(self) -> None:
        if self.version != POLICY_VERSION:
            raise FieldError("version", f"{self.version!r} must be {POLICY_VERSION}")
        for name, model in (("fs", FsPolicy), ("net", NetPolicy), ("limits", Limits)):
            if not isinstance(getattr(self, name), model):
                raise FieldError(name, f"expected a {model.__name__}")
        if not isinstance(self.env, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance] - built in Python
            raise FieldError("env", "expected a table of names to string values")
        hooks = _strings("allow_env_hooks", self.allow_env_hooks)
        msgspec.structs.force_setattr(self, "allow_env_hooks", hooks)
        env = _checked_env(self.env, hooks)
        msgspec.structs.force_setattr(self, "env", types.MappingProxyType(env))

    def with_workspace(self, workspace: str) -> SandboxPolicy:
        """A copy whose `fs.workspace` is set (the SDK fills in the current directory)."""
        return msgspec.structs.replace(
            self, fs=msgspec.structs.replace(self.fs, workspace=workspace)
        )


# ------------------------------------------------------------------------------ loading

_TYPE_WORDS = {
    "int": "an integer",
    "str": "a string",
    "bool": "a boolean",
    "float": "a number",
    "array": "a list",
    "object": "a table",
    "null": "nothing",
}


def _parse_path(path: str) -> list[str | int]:
    """Split msgspec's ``$.a.b[0]`` error location into keys."""
    out: list[str | int] = []
    i = 1 if path.startswith("$") else 0
    while i < len(path):
        if path[i] == ".":
            j = i + 1
            while j < len(path) and path[j] not in ".[":
                j += 1
            out.append(path[i + 1 : j])
            i = j
        elif path[i] == "[":
            j = path.index("]", i)
            inner = path[i + 1 : j]
            out.append(int(inner) if inner.isdigit() else inner.strip("'\""))
            i = j + 1
        else:
            i += 1
    return out


def _dotted(keys: list[str | int]) -> str:
    text = ""
    for key in keys:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else key)
    return text


def _value_at(doc: object, keys: list[str | int]) -> tuple[bool, object]:
    """The raw value at `keys` in the parsed document, to show it in an error."""
    node = doc
    for key in keys:
        if isinstance(key, int) and isinstance(node, list | tuple):
            items = cast("list[object] | tuple[object, ...]", node)
            if key >= len(items):
                return False, None
            node = items[key]
        elif isinstance(key, str) and isinstance(node, dict):
            table = cast("dict[str, object]", node)
            if key not in table:
                return False, None
            node = table[key]
        else:
            return False, None
    return True, node


_CHOICES = {
    "fs.access": "'rw' or 'ro'",
    "version": "1",
    "limits.wall_clock_ms": f"a number of milliseconds or {UNBOUNDED!r}",
    "limits.output_bytes": f"a number of bytes or {UNBOUNDED!r}",
}


def _friendly(message: str, dotted: str) -> str:
    """Reword msgspec's messages for people writing policy files."""
    if message.startswith("Expected `") and "`, got `" in message:
        want, got = message[len("Expected `") :].split("`, got `", 1)
        got = got.rstrip("`")
        wanted = [w.strip() for w in want.split("|") if w.strip() != "null"]
        words = " or ".join(_TYPE_WORDS.get(w, w) for w in wanted)
        if dotted in _CHOICES and dotted.startswith("limits."):
            words = _CHOICES[dotted]  # int | "unbounded": say which string
        return f"expected {words}, got {_TYPE_WORDS.get(got, got)}"
    if message.startswith("Expected `int` >= "):
        return f"must be at least {message.rsplit(' ', 1)[-1]}"
    if message.startswith("Expected `int` <= "):
        return f"must be at most {message.rsplit(' ', 1)[-1]} (check the unit)"
    if message.startswith("Invalid enum value"):
        return f"must be {_CHOICES.get(dotted, 'one of the allowed values')}"
    return message


def _struct_fields(keys: list[str | int]) -> tuple[str, ...]:
    node: object = SandboxPolicy
    for key in keys:
        info = getattr(node, "__struct_fields__", None)
        if info is None or not isinstance(key, str):
            return ()
        node = getattr(node, "__annotations__", {}).get(key)
        node = {"fs": FsPolicy, "net": NetPolicy, "limits": Limits}.get(key, node)
    fields: tuple[str, ...] = getattr(node, "__struct_fields__", ())
    return fields


def policy_error_from(exc: msgspec.ValidationError, doc: object, prefix: str = "") -> PolicyError:
    """Turn msgspec's error into a `PolicyError` naming the dotted field and the value."""
    message, _, where = str(exc).rpartition(" - at `")
    if not message:
        message, where = str(exc), "$"
    keys = _parse_path(where.rstrip("`"))
    cause = exc.__cause__
    if isinstance(cause, FieldError):
        keys = _parse_path("$." + cause.field)  # already the full dotted path
        reason = cause.reason
    elif message.startswith("Object contains unknown field `"):
        unknown = message.split("`")[1]
        known = _struct_fields(keys)
        keys = [*keys, unknown]
        reason = f"unknown key {unknown!r}"
        if known:
            import difflib

            close = difflib.get_close_matches(unknown, known, n=1)
            reason += f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
    else:
        if keys and keys[-1] == "...":  # msgspec does not name the mapping key; find it
            keys = keys[:-1]
            found, mapping = _value_at(doc, keys)
            if found and isinstance(mapping, dict):
                bad = [k for k, v in mapping.items() if not isinstance(v, str)]  # pyright: ignore[reportUnknownVariableType] - raw document
                keys = [*keys, str(bad[0]) if bad else "?"]  # pyright: ignore[reportUnknownArgumentType] - raw document
        reason = _friendly(message, _dotted(keys))
    found, value = _value_at(doc, keys)
    if found and not isinstance(cause, FieldError) and not message.startswith("Object contains"):
        shown = repr(value)
        reason = f"{reason} (value: {shown[:80]}{'...' if len(shown) > 80 else ''})"  # noqa: PLR2004 - display width
    dotted = _dotted(keys)
    return PolicyError(f"{prefix}{dotted}" if prefix and dotted else prefix or dotted, reason)


def policy_from_dict(doc: Mapping[str, object]) -> SandboxPolicy:
    """Validate a parsed document (from TOML, JSON or code) into a `SandboxPolicy`."""
    try:
        return msgspec.convert(doc, SandboxPolicy)
    except msgspec.ValidationError as exc:
        raise policy_error_from(exc, doc) from None


def policy_from_json(text: str | bytes) -> SandboxPolicy:
    """Parse and validate a JSON policy document."""
    try:
        doc: object = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise PolicyError("", f"invalid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise PolicyError("", "a policy document must be a table/object at the top level")
    return policy_from_dict(doc)  # pyright: ignore[reportUnknownArgumentType] - raw document


def parse_toml(text: str) -> dict[str, Any]:
    """A TOML document as builtins, or `PolicyError` (shared by policies and manifests)."""
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError("", f"invalid TOML: {exc}") from None


def read_document(path: str, *, what: str, limit: int) -> bytes:
    """At most `limit` bytes of a document file, or `PolicyError` saying why not."""
    try:
        with open(path, "rb") as fh:  # noqa: PTH123 - pathlib costs start-up time here
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise PolicyError("", f"cannot read {what} {path!r}: {exc.strerror}") from None
    if len(raw) > limit:
        raise PolicyError("", f"{what} {path!r} is larger than {limit // MIB} MiB")
    return raw


def document_text(raw: bytes, *, what: str, path: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError("", f"{what} {path!r} is not UTF-8 text") from None


def policy_from_toml(text: str) -> SandboxPolicy:
    """Parse and validate a TOML policy document."""
    return policy_from_dict(parse_toml(text))


def load_policy(path: str) -> SandboxPolicy:
    """Load a policy file: ``.json`` as JSON, anything else as TOML."""
    raw = read_document(path, what="policy file", limit=4 * MIB)
    if path.endswith(".json"):
        return policy_from_json(raw)
    return policy_from_toml(document_text(raw, what="policy file", path=path))


def policy_to_dict(policy: SandboxPolicy) -> dict[str, Any]:
    """Plain builtins (for JSON output and round trips)."""
    return cast("dict[str, Any]", msgspec.to_builtins(policy, enc_hook=_enc_hook))


def _enc_hook(obj: object) -> object:
    if isinstance(obj, types.MappingProxyType):
        return dict(cast("Mapping[str, str]", obj))
    raise NotImplementedError(type(obj).__name__)
