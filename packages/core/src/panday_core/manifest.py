"""``plugin.toml``: what a plugin asks for, the policy that implies, and what a person consents to.

A manifest is what someone reads before saying yes, so every field is either turned into the
policy the plugin runs under (`to_policy`) or shown at the consent prompt
(`consent_summary`), and the prompt says what this host's tier will *actually* grant. The
original project displayed a plugin's network request as a grant while nothing ever passed
it to the sandbox; here a request a tier cannot enforce is shown as not granted, with what
happens instead.

Shape::

    name = "gh-helper"            # ASCII letters, digits, '.', '_', '-'; no '..'
    version = "1.2.0"
    description = "Triage GitHub issues."
    skills = ["triage"]           # names, shown at the consent prompt
    hooks = ["pre-commit"]
    mcp_servers = ["github"]

    [capabilities]                # everything absent means "nothing"
    fs = "workspace-ro"           # "none" | "workspace-ro" | "workspace-rw"
    net = ["api.github.com"]      # host patterns, as in the policy's net.allow
    secrets = ["GITHUB_TOKEN"]    # environment variable names

Unknown keys are refused everywhere -- including TOML's trap: a top-level key written
*after* ``[capabilities]`` belongs to that table, so ``name = ...`` placed there is refused
as an unknown capability rather than quietly ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import msgspec

from panday_core.capabilities import Refusal, Support, check_policy
from panday_core.errors import PolicyError
from panday_core.policy import (
    MIB,
    FieldError,
    FsPolicy,
    NetPolicy,
    SandboxPolicy,
    _check_env_name,  # pyright: ignore[reportPrivateUsage] - one rule for env names, shared
    _dotted,  # pyright: ignore[reportPrivateUsage] - the policy loader's error helpers, shared
    _Model,  # pyright: ignore[reportPrivateUsage] - frozen, unknown keys refused, like the policy
    _normalized_hosts,  # pyright: ignore[reportPrivateUsage] - the policy's host rules, shared
    _parse_path,  # pyright: ignore[reportPrivateUsage] - see _dotted
    document_text,
    parse_toml,
    policy_error_from,
    read_document,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from panday_core.capabilities import FieldSupport, TierCapabilities

FsCapability = Literal["none", "workspace-ro", "workspace-rw"]

MAX_NAME = 64
MAX_DESCRIPTION = 2000
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_VERSION_CHARS = _NAME_CHARS | {"+"}


def _doc(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


def _is_control(char: str) -> bool:
    # C0, DEL, C1, and the format characters that reorder text on screen (bidi overrides,
    # zero-width joiners): all of them can make a consent prompt say something it does not.
    code = ord(char)
    return code < 0x20 or 0x7F <= code < 0xA0 or char in _FORMAT_CHARS  # noqa: PLR2004 - code points


_FORMAT_CHARS = frozenset(
    "\u00ad\u061c\u180e\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069\ufeff"
)


def _check_name(field: str, value: str, chars: frozenset[str] = _NAME_CHARS) -> None:
    """Names become directory names and are shown at the consent prompt."""
    if not value:
        raise FieldError(field, "is empty")
    if "/" in value or "\\" in value:
        raise FieldError(field, f"{value!r} contains a path separator")
    if ".." in value:
        raise FieldError(field, f"{value!r} contains '..'")
    if any(_is_control(c) for c in value):
        raise FieldError(field, f"{value!r} contains a control character")
    if len(value) > MAX_NAME:
        raise FieldError(field, f"is longer than {MAX_NAME} characters")
    if not set(value) <= chars or not value[0].isalnum():
        allowed = "'.', '_', '-'" + (", '+'" if "+" in chars else "")
        raise FieldError(
            field,
            f"{value!r} may contain only ASCII letters, digits and {allowed}, "
            "and must start with a letter or digit",
        )


def _check_unique(field: str, values: tuple[str, ...]) -> None:
    seen: set[str] = set()
    for i, value in enumerate(values):
        if value in seen:
            raise FieldError(f"{field}[{i}]", f"{value!r} is listed twice")
        seen.add(value)


class Capabilities(_Model, frozen=True, kw_only=True):
    """What the plugin asks to be granted. Absent means nothing."""

    fs: Annotated[
        FsCapability,
        _doc(
            "Access to the user's workspace: 'none' (an empty private directory instead), "
            "'workspace-ro' or 'workspace-rw'."
        ),
    ] = "none"
    net: Annotated[
        tuple[str, ...],
        _doc("Host patterns the plugin asks to reach (the policy's net.allow rules)."),
    ] = ()
    secrets: Annotated[
        tuple[str, ...],
        _doc("Environment variable names whose host values are passed in; nothing else is."),
    ] = ()

    def __post_init__(self) -> None:
        net = _normalized_hosts("capabilities.net", self.net)
        msgspec.structs.force_setattr(self, "net", net)
        _check_unique("capabilities.net", self.net)
        for i, name in enumerate(self.secrets):
            _check_env_name(f"capabilities.secrets[{i}]", name)
        _check_unique("capabilities.secrets", self.secrets)


class PluginManifest(_Model, frozen=True, kw_only=True):
    """A plugin's ``plugin.toml``."""

    name: Annotated[str, _doc("The plugin's name.")]
    version: Annotated[str, _doc("The plugin's version (shown at the consent prompt).")]
    description: Annotated[str, _doc("One paragraph shown at the consent prompt.")] = ""
    skills: Annotated[tuple[str, ...], _doc("Skill names the plugin provides.")] = ()
    hooks: Annotated[tuple[str, ...], _doc("Hook names the plugin registers.")] = ()
    mcp_servers: Annotated[tuple[str, ...], _doc("MCP server names the plugin provides.")] = ()
    capabilities: Capabilities = msgspec.field(default_factory=Capabilities)

    def __post_init__(self) -> None:
        _check_name("name", self.name)
        _check_name("version", self.version, _VERSION_CHARS)
        if len(self.description) > MAX_DESCRIPTION:
            raise FieldError("description", f"is longer than {MAX_DESCRIPTION} characters")
        if any(_is_control(c) and c not in "\n\t" for c in self.description):
            raise FieldError("description", "contains a control character")
        for field in ("skills", "hooks", "mcp_servers"):
            values: tuple[str, ...] = getattr(self, field)
            for i, value in enumerate(values):
                _check_name(f"{field}[{i}]", value)
            _check_unique(field, values)

    # ------------------------------------------------------------------ policy

    def to_policy(
        self,
        workspace: str,
        host_env: Mapping[str, str],
        *,
        scratch: str | None = None,
    ) -> SandboxPolicy:
        """The policy this manifest asks for, exactly.

        `workspace` is the user's workspace, granted per ``capabilities.fs``. With
        ``fs = "none"`` the plugin gets `scratch` (an empty directory the caller made)
        instead, never the user's workspace. ``net`` becomes ``net.allow`` host for host;
        ``env`` holds only the named secrets' values from `host_env` (a named secret that
        is not set is refused, not silently left out). Whether a tier can enforce the result
        is `create`'s question (`consent_summary` answers it ahead of time).
        """
        caps = self.capabilities
        if caps.fs == "none":
            if scratch is None:
                raise PolicyError(
                    "capabilities.fs",
                    "is 'none': give a scratch directory for the plugin's private workspace "
                    "(the user's workspace is not granted)",
                )
            if _overlaps(scratch, workspace):
                raise PolicyError(
                    "capabilities.fs",
                    f"is 'none' but the scratch directory {scratch!r} overlaps the workspace "
                    f"{workspace!r}",
                )
            fs = FsPolicy(workspace=scratch, access="rw")
        else:
            access: Literal["rw", "ro"] = "rw" if caps.fs == "workspace-rw" else "ro"
            fs = FsPolicy(workspace=workspace, access=access)
        env: dict[str, str] = {}
        for i, name in enumerate(caps.secrets):
            if name not in host_env:
                raise PolicyError(
                    f"capabilities.secrets[{i}]",
                    f"{name!r} is not set in this environment; set it or do not run the plugin",
                )
            env[name] = host_env[name]
        net = NetPolicy(allow=caps.net)
        return SandboxPolicy(fs=fs, net=net, env=env)

    def policy_for(
        self,
        tier: TierCapabilities,
        workspace: str,
        host_env: Mapping[str, str],
        *,
        scratch: str | None = None,
    ) -> SandboxPolicy:
        """The policy the plugin is run under on `tier`, as `consent_summary(tier)` states it:
        `to_policy`, except that an allowlist the tier cannot enforce is replaced by no
        network at all, and secrets are left out where ``env`` does not apply (T0 runs no
        process: the summary says they are not passed, and a tier refuses a value for a
        field that does nothing there). Use it only after the person approved that
        summary."""
        policy = self.to_policy(workspace, host_env, scratch=scratch)
        if policy.net.allow and not _enforced(tier.for_field("net.allow")):
            policy = msgspec.structs.replace(policy, net=NetPolicy())
        env = tier.for_field("env")
        if policy.env and env is not None and env.support is Support.NOT_APPLICABLE:
            policy = msgspec.structs.replace(policy, env={})
        return policy

    # ------------------------------------------------------------------ consent

    def consent_summary(
        self,
        tier: TierCapabilities,
        host_env: Mapping[str, str] | None = None,
        *,
        wording: tuple[str, str] | None = None,
    ) -> ConsentSummary:
        """What will actually be granted on this host with `tier`, in words for the person
        who approves it (how each grant is enforced is `panday doctor`'s business, not the
        prompt's). With `host_env`, a requested secret that is not set there is named: the
        plugin cannot start without it. `wording` is how the tier names its sandbox and
        what a plugin cannot reach in it (the SDK's tier registry entry says it; without
        it, both are said from the table)."""
        caps = self.capabilities
        placeholder = self.policy_for(
            tier,
            "/panday-workspace",
            dict.fromkeys(caps.secrets, ""),
            scratch="/panday-scratch",
        )
        # Refusals name the value first ("'/x': why"); the values here are placeholders,
        # so only the reason is shown to the person.
        refusals = tuple(
            Refusal(field=r.field, reason=r.reason.partition(": ")[2] or r.reason)
            for r in check_policy(placeholder, tier)
        )
        net_granted = caps.net if _enforced(tier.for_field("net.allow")) else ()
        passes_env = _passes_env(tier)
        missing = tuple(
            name for name in caps.secrets if host_env is not None and name not in host_env
        )
        sandbox, other_files = wording or (_sandbox_name(tier), _other_files(tier))
        can, cannot, withheld = _grants(
            self, net_granted, placeholder, missing, (tier, other_files)
        )
        lines = [f"{self.name} {self.version} asks to run on this computer."]
        lines += [f"  {line}" for line in self.description.splitlines() if line.strip()]
        lines += ["", f"If you approve, it runs in {sandbox}, where it can:"]
        lines += [f"  - {item}" for item in can]
        lines += ["and where it cannot:", *(f"  - {item}" for item in cannot)]
        if withheld:
            lines += ["Asked for, but NOT granted here:", *(f"  - {item}" for item in withheld)]
        provides = [
            f"{label} {', '.join(names)}"
            for label, names in (
                ("skills", self.skills),
                ("hooks", self.hooks),
                ("MCP servers", self.mcp_servers),
            )
            if names
        ]
        if provides:
            lines.append(
                f"It brings {'; '.join(provides)}: they run with these permissions, no more."
            )
        lines.append("")
        if refusals:
            lines.append(f"panday cannot run it here; {tier.tier} cannot enforce what it needs:")
            lines += [f"  - {r.field}: {r.reason}" for r in refusals]
        elif missing:
            names = ", ".join(missing)
            lines.append(
                f"panday will not start it until {names} {'is' if len(missing) == 1 else 'are'} "
                "set in your environment."
            )
        else:
            lines.append("panday can run it here with exactly these permissions.")
        return ConsentSummary(
            plugin=self.name,
            version=self.version,
            tier=str(tier.tier),
            runnable=not refusals and not missing,
            net_requested=caps.net,
            net_granted=net_granted,
            secrets_passed=caps.secrets if passes_env and caps.secrets else (),
            refusals=refusals,
            lines=tuple(lines),
            secrets_missing=missing,
        )


MANIFEST_MODELS: tuple[tuple[str, type[msgspec.Struct]], ...] = (
    ("", PluginManifest),
    ("capabilities.", Capabilities),
)
"""Every manifest model with its dotted prefix, for the dead-control lint (`nox -s fields`)."""


class ConsentSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What a person is asked to approve: the grants this tier will really give."""

    plugin: str
    version: str
    tier: str
    runnable: bool
    """False when the tier would refuse the plugin's policy at `create`, or a requested
    secret is not set."""
    net_requested: tuple[str, ...]
    net_granted: tuple[str, ...]
    """Empty unless the tier enforces the allowlist: asked-for is not granted."""
    secrets_passed: tuple[str, ...]
    refusals: tuple[Refusal, ...]
    lines: tuple[str, ...]
    """The summary as shown to the person, one line each."""
    secrets_missing: tuple[str, ...] = ()
    """Requested secrets that are not set in the environment the summary was made for: the
    plugin cannot start until they are (and `runnable` is False)."""

    def render(self) -> str:
        return "\n".join(self.lines) + "\n"


def _enforced(entry: FieldSupport | None) -> bool:
    return entry is not None and entry.support in {Support.STRICT, Support.PARTIAL}


def _passes_env(tier: TierCapabilities) -> bool:
    return _enforced(tier.for_field("env"))


# Without the tier's own wording (the SDK's registry gives it): plain words from its table,
# no mechanism names (the person cannot act on "bwrap" or "Seatbelt"; `panday doctor` shows
# those).
def _sandbox_name(tier: TierCapabilities) -> str:
    return f"panday's {tier.tier} sandbox"


def _other_files(tier: TierCapabilities) -> str:
    entry = tier.for_field("fs.workspace")
    gap = f" ({entry.note})" if entry is not None and entry.note else ""
    return f"reach your files outside the workspace{gap}"


def _grants(
    manifest: PluginManifest,
    net_granted: tuple[str, ...],
    policy: SandboxPolicy,
    missing: tuple[str, ...],
    sandbox: tuple[TierCapabilities, str],
) -> tuple[list[str], list[str], list[str]]:
    """(what it can do, what it cannot, what it asked for and does not get), in words;
    `sandbox` is the tier's table and what a plugin cannot reach in it."""
    tier, other_files = sandbox
    caps = manifest.capabilities
    can = [
        {
            "none": "work in an empty folder of its own; none of your files",
            "workspace-ro": "read the files in your workspace (the folder you run it in), "
            "but not change them",
            "workspace-rw": "read and change the files in your workspace (the folder you run "
            "it in)",
        }[caps.fs]
    ]
    cannot = [other_files]
    withheld: list[str] = []
    if net_granted:
        ports = " and ".join(str(p) for p in policy.net.ports)
        can.append(f"connect to {', '.join(net_granted)} (ports {ports}), and nowhere else")
        cannot.append("connect to any other host")
    else:
        cannot.append("use the network at all")
    if caps.net and not net_granted:
        entry = tier.for_field("net.allow")
        why = (entry.note or entry.mechanism) if entry is not None else "it declares nothing"
        withheld.append(
            f"connecting to {', '.join(caps.net)}: this sandbox cannot limit connections to "
            f"chosen hosts here ({why}). If you approve, it runs with no network at all and "
            "those connections fail"
        )
    if caps.secrets and _passes_env(tier):
        for name in caps.secrets:
            state = " (not set in your environment now)" if name in missing else ""
            can.append(f"see the value of {name} from your environment{state}")
        cannot.append("see anything else from your environment")
    elif caps.secrets:
        entry = tier.for_field("env")
        why = entry.note if entry is not None and entry.note else "this sandbox cannot pass them"
        withheld.append(f"the values of {', '.join(caps.secrets)}: {why}")
    else:
        cannot.append("see anything from your environment (no secrets are passed in)")
    return can, cannot, withheld


def _overlaps(a: str, b: str) -> bool:
    import posixpath

    x, y = posixpath.normpath(a).rstrip("/") + "/", posixpath.normpath(b).rstrip("/") + "/"
    return x.startswith(y) or y.startswith(x)


# ------------------------------------------------------------------------------ loading

_MODELS: dict[str, type[msgspec.Struct]] = {"": PluginManifest, "capabilities": Capabilities}
_TRAP = (
    "; a key written after the [capabilities] header belongs to that table: "
    "move top-level keys above it"
)


def _manifest_error(exc: msgspec.ValidationError, doc: object) -> PolicyError:
    """msgspec's error in the policy loader's words, with manifest-aware unknown-key hints."""
    message, _, where = str(exc).rpartition(" - at `")
    if not message:
        message, where = str(exc), "$"
    if message.startswith("Object contains unknown field `"):
        unknown = message.split("`")[1]
        keys = _parse_path(where.rstrip("`"))
        table = _dotted(keys)
        known = _MODELS.get(table, PluginManifest).__struct_fields__
        reason = f"unknown key {unknown!r}"
        if table == "capabilities" and unknown in PluginManifest.__struct_fields__:
            reason += _TRAP
        else:
            import difflib

            close = difflib.get_close_matches(unknown, known, n=1)
            reason += f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
        return PolicyError(_dotted([*keys, unknown]), reason)
    error = policy_error_from(exc, doc)
    if error.field == "capabilities.fs" and error.reason.startswith("must be"):
        return PolicyError(error.field, "must be 'none', 'workspace-ro' or 'workspace-rw'")
    return error


def manifest_from_dict(doc: Mapping[str, object]) -> PluginManifest:
    """Validate a parsed ``plugin.toml`` document."""
    try:
        return msgspec.convert(doc, PluginManifest)
    except msgspec.ValidationError as exc:
        raise _manifest_error(exc, doc) from None


def manifest_from_toml(text: str) -> PluginManifest:
    return manifest_from_dict(parse_toml(text))


def load_manifest(path: str) -> PluginManifest:
    """Load a ``plugin.toml`` (at most 1 MiB of UTF-8 TOML)."""
    raw = read_document(path, what="manifest", limit=MIB)
    return manifest_from_toml(document_text(raw, what="manifest", path=path))


def manifest_to_dict(manifest: PluginManifest) -> dict[str, object]:
    """Plain builtins (JSON output, round trips)."""
    result: dict[str, object] = msgspec.to_builtins(manifest)
    return result
