"""The generated Seatbelt profile, read back with a small s-expression reader (runs on any OS).

String matching would miss a rule split across lines or a filter nested one level deeper, so
the profile is parsed into forms and the assertions walk the forms. Golden files pin the whole
text for representative policies; structure tests say *why* each part must be as it is.

Regenerate the golden files after a deliberate change with::

    PANDAY_UPDATE_GOLDEN=1 uv run pytest packages/tier_macos/tests/test_profile.py
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from panday_core.declared.t2_macos import DATA_VOLUME, MACH_SERVICES, SENSITIVE_HOME_PATHS
from panday_core.policy import SandboxPolicy, policy_from_dict
from panday_tier_macos.profile import (
    HOME_PARAMS,
    PARAM_ANCESTOR,
    PARAM_TMPBASE,
    PARAM_TMPDIR,
    PARAM_WORKSPACE,
    POSIX_SEM_REGEX,
    SANDBOX_EXEC,
    TERMINAL_REGEX,
    ProxyEndpoint,
    SeatbeltProfile,
    protecting,
    workspace_guards,
)

GOLDEN = Path(__file__).parent / "golden"

# ------------------------------------------------------------------ s-expression reader


@dataclass(frozen=True)
class Sym:
    name: str


@dataclass(frozen=True)
class Str:
    value: str


@dataclass(frozen=True)
class Rx:
    pattern: str


Node = Sym | Str | Rx | int | list["Node"]


class SbplSyntaxError(ValueError):
    pass


def _read_string(text: str, i: int) -> tuple[str, int]:
    """`text[i]` is the opening quote; returns the value and the index after the closer."""
    out: list[str] = []
    i += 1
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 >= len(text):
                break
            out.append(text[i + 1])
            i += 2
            continue
        if ch == '"':
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    raise SbplSyntaxError("unterminated string")


def _atom(token: str) -> Node:
    if token.lstrip("-").isdigit():
        return int(token)
    if token.startswith("#o") and token[2:].isdigit():
        return int("0" + token[1:], 0)  # SBPL writes octal as #o755, Python as 0o755
    return Sym(token)


def _tokens(text: str) -> list[Node | str]:
    """Atoms, strings and regexes as nodes; parentheses as the strings "(" and ")"."""
    out: list[Node | str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in " \t\r\n":
            i += 1
        elif ch == ";":
            end = text.find("\n", i)
            i = len(text) if end == -1 else end
        elif ch in "()":
            out.append(ch)
            i += 1
        elif ch == '"':
            value, i = _read_string(text, i)
            out.append(Str(value))
        elif text.startswith('#"', i):
            value, i = _read_string(text, i + 1)
            out.append(Rx(value))
        else:
            j = i
            while j < len(text) and text[j] not in ' \t\r\n()";':
                j += 1
            out.append(_atom(text[i:j]))
            i = j
    return out


def read_sbpl(text: str) -> list[Node]:
    """Every top-level form of `text`. Raises `SbplSyntaxError` on unbalanced input."""
    stack: list[list[Node]] = [[]]
    for item in _tokens(text):
        if item == "(":
            stack.append([])
        elif item == ")":
            if len(stack) == 1:
                raise SbplSyntaxError("unbalanced ')'")
            done = stack.pop()
            stack[-1].append(done)
        else:
            assert not isinstance(item, str)
            stack[-1].append(item)
    if len(stack) != 1:
        raise SbplSyntaxError(f"{len(stack) - 1} unclosed '('")
    return stack[0]


@dataclass(frozen=True)
class Rule:
    action: str
    operations: tuple[str, ...]
    filters: tuple[Node, ...]
    index: int


def rules(forms: list[Node]) -> list[Rule]:
    out: list[Rule] = []
    for index, form in enumerate(forms):
        if not isinstance(form, list) or not form or not isinstance(form[0], Sym):
            raise SbplSyntaxError(f"top-level form {form!r} is not a rule")
        head = form[0].name
        if head == "version":
            continue
        assert head in {"allow", "deny"}, f"unexpected top-level form {head}"
        ops: list[str] = []
        filters: list[Node] = []
        for part in form[1:]:
            if isinstance(part, Sym):
                ops.append(part.name)
            else:
                filters.append(part)
        out.append(Rule(head, tuple(ops), tuple(filters), index))
    return out


def walk(node: Node) -> list[Node]:
    """`node` and everything nested in it."""
    out: list[Node] = [node]
    if isinstance(node, list):
        for child in node:
            out.extend(walk(child))
    return out


def heads(node: Node) -> set[str]:
    return {n[0].name for n in walk(node) if isinstance(n, list) and n and isinstance(n[0], Sym)}


def params_in(node: Node) -> set[str]:
    found: set[str] = set()
    for n in walk(node):
        if isinstance(n, list) and len(n) == 2 and n[0] == Sym("param"):
            arg = n[1]
            assert isinstance(arg, Str)
            found.add(arg.value)
    return found


def matches(op: str, pattern: str) -> bool:
    """Whether an operation name in a rule covers `op` (``network*`` covers ``network-bind``)."""
    if pattern.endswith("*"):
        return op.startswith(pattern[:-1])
    return op == pattern


def allows(rs: list[Rule], op: str) -> list[Rule]:
    return [r for r in rs if r.action == "allow" and any(matches(op, o) for o in r.operations)]


# -------------------------------------------------------------------------- policies

WS = "/Users/alice/project"
PROXY = ProxyEndpoint(host="127.0.0.1", port=41234)


def policy(doc: dict[str, object] | None = None) -> SandboxPolicy:
    return policy_from_dict(doc or {}).with_workspace(WS)


POLICIES: dict[str, tuple[SandboxPolicy, ProxyEndpoint | None, int, int]] = {
    # name: (policy, proxy endpoint, protected entries, ancestors)
    "default": (policy(), None, 0, 0),
    "read-only": (policy({"fs": {"access": "ro"}}), None, 0, 0),
    "staged": (policy({"fs": {"staged_ro": ["/opt/data", f"{WS}/inputs"]}}), None, 0, 0),
    "proxy": (policy({"net": {"allow": ["api.github.com"], "ports": [443]}}), PROXY, 0, 0),
    # A writable workspace as `create` sees it: three protected entries, a nested staged
    # input, and the directories that hold them.
    "protected": (policy({"fs": {"staged_ro": [f"{WS}/data/in"]}}), None, 3, 2),
}


def profile_of(name: str) -> SeatbeltProfile:
    pol, proxy, protected, ancestors = POLICIES[name]
    return SeatbeltProfile.from_policy(pol, proxy, protected=protected, ancestors=ancestors)


def parsed(name: str) -> list[Rule]:
    return rules(read_sbpl(profile_of(name).text))


ALL = sorted(POLICIES)

# ------------------------------------------------------------------------ the reader


def test_reader_reads_nested_forms_strings_regexes_and_comments() -> None:
    forms = read_sbpl('(version 1) ; c\n(allow file-read* (subpath "/a \\"b\\"") (regex #"^/x$"))')
    assert forms == [
        [Sym("version"), 1],
        [
            Sym("allow"),
            Sym("file-read*"),
            [Sym("subpath"), Str('/a "b"')],
            [Sym("regex"), Rx("^/x$")],
        ],
    ]
    assert read_sbpl("(deny process-exec (file-mode #o4000))")[0] == [
        Sym("deny"),
        Sym("process-exec"),
        [Sym("file-mode"), 0o4000],
    ]


@pytest.mark.parametrize("text", ["(allow", "(allow))", ")", '(allow "x)', "((a) (b)"])
def test_reader_refuses_unbalanced_input(text: str) -> None:
    with pytest.raises(SbplSyntaxError):
        read_sbpl(text)


# ----------------------------------------------------------------------- structure


@pytest.mark.parametrize("name", ALL)
def test_profile_is_balanced_and_starts_with_version_and_deny_default(name: str) -> None:
    forms = read_sbpl(profile_of(name).text)
    assert forms[0] == [Sym("version"), 1]
    assert forms[1] == [Sym("deny"), Sym("default")]
    assert [Sym("allow"), Sym("default")] not in forms


@pytest.mark.parametrize("name", ALL)
def test_network_is_denied_unconditionally_before_any_network_allow(name: str) -> None:
    rs = parsed(name)
    deny_all = [r for r in rs if r.action == "deny" and r.operations == ("network*",)]
    assert len(deny_all) == 1
    assert not deny_all[0].filters
    for rule in rs:
        if rule.action == "allow" and any(o.startswith("network") for o in rule.operations):
            assert rule.index > deny_all[0].index, "a network allow before the deny is overridden"


@pytest.mark.parametrize("name", ALL)
def test_no_bind_no_inbound_no_local_filter_no_port_53(name: str) -> None:
    rs = parsed(name)
    for op in ("network-bind", "network-inbound"):
        assert allows(rs, op) == [], f"{op} must never be allowed"
    for rule in rs:
        if any(o.startswith("network") for o in rule.operations):
            for f in rule.filters:
                assert "local" not in heads(f), "(local ...) matches every outbound socket"
    text = profile_of(name).text
    assert ":53" not in text
    assert "*:" not in text


@pytest.mark.parametrize("name", ["default", "read-only", "staged", "protected"])
def test_without_an_allowlist_no_outbound_is_allowed_at_all(name: str) -> None:
    assert allows(parsed(name), "network-outbound") == []


def test_with_the_proxy_outbound_goes_only_to_its_loopback_port() -> None:
    rs = parsed("proxy")
    (only,) = allows(rs, "network-outbound")
    assert only.operations == ("network-outbound",), "network* or a wider op would grant more"
    assert only.filters == ([Sym("remote"), Sym("tcp"), Str(f"localhost:{PROXY.port}")],)
    # nothing else about the network is allowed
    for op in ("network-bind", "network-inbound", "system-socket"):
        assert allows(rs, op) == []


def test_proxy_endpoint_must_be_loopback_and_a_port() -> None:
    assert ProxyEndpoint(host="::1", port=1).port == 1
    assert ProxyEndpoint(host="localhost", port=65535).host == "localhost"
    for host, port in [("10.0.0.1", 80), ("example.com", 80), ("0.0.0.0", 80), ("127.0.0.1", 0)]:  # noqa: S104 - only refused, never bound
        with pytest.raises(ValueError, match="proxy"):
            ProxyEndpoint(host=host, port=port)


def test_allowlist_without_proxy_and_proxy_without_allowlist_are_refused() -> None:
    with pytest.raises(ValueError, match=r"net\.allow"):
        SeatbeltProfile.from_policy(policy({"net": {"allow": ["example.com"]}}))
    with pytest.raises(ValueError, match=r"net\.allow is empty"):
        SeatbeltProfile.from_policy(policy(), PROXY)


WRITE_OPS = ("file-write*", "file-write-data", "file-write-create", "file-write-unlink")
DEVICE_FILTERS = {"/dev/null", "/dev/zero", "/dev/stdout", "/dev/stderr"}


def _write_subpaths(rs: list[Rule]) -> set[str]:
    found: set[str] = set()
    for rule in rs:
        if rule.action != "allow" or not any(
            matches(w, o) or matches(o, w) for o in rule.operations for w in WRITE_OPS
        ):
            continue
        assert rule.filters, f"an unfiltered write allow at form {rule.index}"
        for f in rule.filters:
            assert isinstance(f, list)
            assert isinstance(f[0], Sym)
            kind = f[0].name
            if kind == "subpath":
                (param,) = params_in(f)
                found.add(param)
            elif kind == "literal":
                assert isinstance(f[1], Str)
                assert f[1].value in DEVICE_FILTERS, f"write to {f[1].value}"
                assert rule.operations == ("file-write-data",), "devices get data writes only"
            elif kind == "regex":
                assert f[1] == Rx("^/dev/fd/[0-9]+$")
                assert rule.operations == ("file-write-data",)
            else:
                pytest.fail(f"unexpected write filter {f!r}")
    return found


@pytest.mark.parametrize("name", ["default", "staged", "proxy", "protected"])
def test_workspace_and_private_temp_are_the_only_write_subpaths(name: str) -> None:
    assert _write_subpaths(parsed(name)) == {PARAM_WORKSPACE, PARAM_TMPDIR}


def test_read_only_workspace_has_no_write_rule() -> None:
    assert _write_subpaths(parsed("read-only")) == {PARAM_TMPDIR}
    assert PARAM_WORKSPACE not in profile_of("read-only").params


def test_staged_inputs_are_denied_writes_after_the_workspace_rule() -> None:
    rs = parsed("staged")
    (workspace_rule,) = [
        r for r in allows(rs, "file-write-create") if r.operations == ("file-write*",)
    ]
    denies = [r for r in rs if r.action == "deny" and r.operations == ("file-write*",)]
    assert len(denies) == 1
    assert denies[0].index > workspace_rule.index
    assert {p for f in denies[0].filters for p in params_in(f)} == {"STAGED_0", "STAGED_1"}
    assert {_kind(f) for f in denies[0].filters} == {"subpath"}


@pytest.mark.parametrize("name", ALL)
def test_reads_are_broad_and_the_protected_paths_are_denied_last(name: str) -> None:
    rs = parsed(name)
    (read_all,) = allows(rs, "file-read-data")
    assert read_all.filters == (), "reads are broad by design (a partial guarantee)"
    protected = [
        r for r in rs if r.action == "deny" and set(r.operations) == {"file-read*", "file-write*"}
    ]
    assert len(protected) == 1
    last_allow = max(r.index for r in rs if r.action == "allow")
    assert protected[0].index > last_allow, "an allow after the denylist would override it"
    text = repr(protected[0].filters)
    for required in (".ssh", ".aws", ".gnupg", ".config/gh", "Library/Keychains", "_history"):
        assert required in text
    # issue 12, 6(d): secrets the first list missed
    for required in (
        ".cargo/credentials.toml",
        ".cargo/credentials",
        ".config/git/credentials",
        ".vault-token",
        ".pgpass",
        ".terraform.d",
        ".gem/credentials",
        ".codex",
        ".claude",
    ):
        for home in HOME_PARAMS:
            assert (home, "/" + required) in _paths(protected[0], "subpath")
    for system in ("/private/etc/master.passwd", "/private/var/db"):
        assert system in text
    for home in HOME_PARAMS:
        assert home in params_in(list(protected[0].filters))


def test_var_db_is_denied_with_only_the_named_carve_outs() -> None:
    rs = parsed("default")
    protected = next(r for r in rs if set(r.operations) == {"file-read*", "file-write*"})
    var_db = [
        f
        for f in protected.filters
        if isinstance(f, list) and f[0] == Sym("require-all") and "/private/var/db" in repr(f[1])
    ]
    assert len(var_db) == 2, "once as /private/var/db, once in the Data-volume spelling"
    for prefix, rule in zip(("", DATA_VOLUME), var_db, strict=True):
        inner = rule[1:]
        assert inner[0] == [Sym("subpath"), Str(prefix + "/private/var/db")]
        for carve in inner[1:]:
            assert isinstance(carve, list)
            assert carve[0] == Sym("require-not")
            target = carve[1]
            assert isinstance(target, list)
            assert isinstance(target[1], Str)
            assert target[1].value.startswith(prefix + "/private/var/db/")


@pytest.mark.parametrize("name", ALL)
def test_process_rules(name: str) -> None:
    rs = parsed(name)
    (exec_allow,) = allows(rs, "process-exec")
    setuid = [r for r in rs if r.action == "deny" and r.operations == ("process-exec*",)]
    assert len(setuid) == 1
    assert setuid[0].filters == (
        [Sym("require-any"), [Sym("file-mode"), 0o4000], [Sym("file-mode"), 0o2000]],
    ), "setuid and setgid programs alike, run directly or as a script's interpreter"
    assert setuid[0].index > exec_allow.index
    for op in ("signal", "process-info-pidinfo"):
        (rule,) = allows(rs, op)
        assert rule.filters == ([Sym("target"), Sym("same-sandbox")],)


@pytest.mark.parametrize("name", ALL)
def test_mach_lookup_is_limited_to_the_named_services(name: str) -> None:
    (rule,) = allows(parsed(name), "mach-lookup")
    assert [f[1] for f in rule.filters if isinstance(f, list)] == [Str(s) for s in MACH_SERVICES]
    assert all(isinstance(f, list) and f[0] == Sym("global-name") for f in rule.filters)


def _sysctl_allowed(rs: list[Rule], name: str) -> bool:
    """Whether an allow rule's sysctl filters admit `name` (and no deny after it refuses)."""
    verdict = False
    for rule in rs:
        if not any(matches("sysctl-read", o) for o in rule.operations):
            continue
        for f in rule.filters:
            assert isinstance(f, list)
            assert isinstance(f[1], Str)
            kind, value = f[0], f[1].value
            hit = name == value if kind == Sym("sysctl-name") else name.startswith(value)
            if hit:
                verdict = rule.action == "allow"
    return verdict


@pytest.mark.parametrize("name", ALL)
def test_other_processes_cannot_be_listed_or_read_through_sysctl(name: str) -> None:
    rs = parsed(name)
    for rule in allows(rs, "sysctl-read"):
        assert "kern.proc" not in repr(rule.filters), "no process sysctl is on the allowlist"
    deny = [r for r in rs if r.action == "deny" and r.operations == ("sysctl-read",)]
    assert deny
    assert deny[-1].filters == ([Sym("sysctl-name-prefix"), Str("kern.proc")],)
    assert deny[-1].index > max(r.index for r in allows(rs, "sysctl-read"))
    # What the kernel asks Seatbelt about (issue 12, 6(c)): another process by pid, every
    # process, a uid's processes, another process's arguments and environment.
    for sysctl in ("kern.proc.pid.1", "kern.proc.all", "kern.proc.uid.0", "kern.procargs2.1"):
        assert not _sysctl_allowed(rs, sysctl), sysctl
    for sysctl in ("hw.ncpu", "kern.osrelease", "hw.optional.arm64", "machdep.cpu.brand_string"):
        assert _sysctl_allowed(rs, sysctl), f"{sysctl}: start-up sysctls stay readable"


@pytest.mark.parametrize("name", ALL)
def test_params_listed_are_exactly_the_params_used(name: str) -> None:
    prof = profile_of(name)
    assert params_in(read_sbpl(prof.text)) == set(prof.params)


def test_argv_passes_every_parameter_and_the_command_after_a_separator() -> None:
    prof = profile_of("staged")
    values = {p: f"/private/tmp/{p.lower()}" for p in prof.params}
    argv = prof.argv(["/bin/echo", "-n", "hi"], values)
    assert argv[:3] == [SANDBOX_EXEC, "-p", prof.text]
    assert argv[-4:] == ["--", "/bin/echo", "-n", "hi"]
    assert argv[3:-4] == [f"-D{p}={values[p]}" for p in prof.params]


def test_argv_refuses_missing_extra_and_unresolved_parameters() -> None:
    prof = profile_of("default")
    good = dict.fromkeys(prof.params, "/private/tmp/x")
    with pytest.raises(ValueError, match="missing"):
        prof.argv(["/bin/true"], {k: v for k, v in good.items() if k != PARAM_WORKSPACE})
    with pytest.raises(ValueError, match="unexpected"):
        prof.argv(["/bin/true"], {**good, "OTHER": "/x"})
    for bad in ("relative", "/a/../b", "/a/..", "/a\x00b"):
        with pytest.raises(ValueError, match="resolved path"):
            prof.argv(["/bin/true"], {**good, PARAM_TMPDIR: bad})
    with pytest.raises(ValueError, match="empty"):
        prof.argv([], good)


def test_the_profile_names_no_host_path() -> None:
    for name in ALL:
        text = profile_of(name).text
        assert WS not in text
        assert "/Users/" not in text
        assert "/opt/data" not in text


def test_protecting_names_the_protected_path_a_directory_lies_in() -> None:
    homes = ["/Users/alice"]
    assert protecting("/Users/alice/.ssh", homes) == "/Users/alice/.ssh"
    assert protecting("/Users/alice/.ssh/keys", homes) == "/Users/alice/.ssh"
    assert protecting("/private/var/db/x", homes) == "/private/var/db"
    assert protecting("/Users/alice/.sshx", homes) is None
    assert protecting("/Users/alice", homes) is None, "a workspace may contain protected paths"
    assert protecting("/Users/alice/project", homes) is None
    assert all(protecting(f"/Users/alice/{p}", homes) for p in SENSITIVE_HOME_PATHS)


# ------------------------------------------------- protected entries, move blocking


def _kind(f: Node) -> str:
    assert isinstance(f, list)
    assert isinstance(f[0], Sym)
    return f[0].name


def _parts(expr: Node) -> tuple[str, ...]:
    """A path expression as its parts: a string's value, a parameter's name."""
    if isinstance(expr, Str):
        return (expr.value,)
    assert isinstance(expr, list)
    head = expr[0]
    if head == Sym("param"):
        arg = expr[1]
        assert isinstance(arg, Str)
        return (arg.value,)
    assert head == Sym("string-append"), f"unexpected path expression {expr!r}"
    return tuple(p for part in expr[1:] for p in _parts(part))


def _paths(rule: Rule, kind: str) -> set[tuple[str, ...]]:
    return {_parts(f[1]) for f in rule.filters if isinstance(f, list) and _kind(f) == kind}


def _undata(parts: tuple[str, ...]) -> tuple[str, ...] | None:
    """`parts` without the Data-volume prefix; None when they do not carry it."""
    if parts[0] == DATA_VOLUME:
        return parts[1:]
    if parts[0].startswith(DATA_VOLUME + "/"):
        return (parts[0][len(DATA_VOLUME) :], *parts[1:])
    return None


def _path_filters(node: Node) -> list[tuple[str, tuple[str, ...]]]:
    """Every (kind, parts) path filter in `node`, however deeply nested."""
    return [
        (_kind(n), _parts(n[1]))
        for n in walk(node)
        if isinstance(n, list) and n and n[0] in (Sym("subpath"), Sym("literal"))
    ]


@pytest.mark.parametrize("name", ALL)
def test_every_denied_path_is_denied_in_its_data_volume_spelling_too(name: str) -> None:
    """Issue 12, 6(a): /System/Volumes/Data/Users/a/.ssh is /Users/a/.ssh by another name."""
    for rule in parsed(name):
        if rule.action != "deny" or not any(o.startswith("file") for o in rule.operations):
            continue
        if not rule.filters:
            continue  # (deny file-write-setugid): every path
        if rule.filters == ([Sym("regex"), Rx(TERMINAL_REGEX)],):
            continue  # devices: /dev is devfs, with no Data-volume spelling
        found = _path_filters(list(rule.filters))
        plain = {(k, p) for k, p in found if _undata(p) is None}
        data = {(k, _undata(p)) for k, p in found if _undata(p) is not None}
        assert plain, f"deny at form {rule.index} names no path"
        assert data == plain, f"deny at form {rule.index}: spellings differ"


def test_protected_entries_are_denied_writes_after_the_workspace_rule() -> None:
    rs = parsed("protected")
    (workspace_rule,) = [
        r for r in allows(rs, "file-write-create") if r.operations == ("file-write*",)
    ]
    denies = [r for r in rs if r.action == "deny" and r.operations == ("file-write*",)]
    (entries,) = [d for d in denies if any("PROTECTED_0" in params_in(f) for f in d.filters)]
    assert entries.index > workspace_rule.index, "an earlier deny would lose to the allow"
    assert {p for f in entries.filters for p in params_in(f)} == {
        "PROTECTED_0",
        "PROTECTED_1",
        "PROTECTED_2",
    }
    # subpath: a "file" entry can be a directory on disk (an old-style submodule's .git),
    # and subpath also matches the path itself.
    assert {_kind(f) for f in entries.filters} == {"subpath"}


def test_no_protected_entry_no_rule() -> None:
    for name in ("default", "read-only", "staged", "proxy"):
        assert "PROTECTED_" not in profile_of(name).text


def _unlink_rule(rs: list[Rule]) -> Rule:
    (rule,) = [r for r in rs if r.action == "deny" and r.operations == ("file-write-unlink",)]
    return rule


def test_protected_and_staged_paths_and_every_directory_holding_them_cannot_be_renamed() -> None:
    """Issue 12, 6(b): a deny is path-based, so renaming a directory above what it names
    (``mv data d2``) would carry the protected or staged path out from under it."""
    rs = parsed("protected")
    rule = _unlink_rule(rs)
    last_write_allow = max(r.index for r in allows(rs, "file-write-unlink"))
    assert rule.index > last_write_allow
    assert {("ANCESTOR_0",), ("ANCESTOR_1",)} <= _paths(rule, "literal")
    assert {("PROTECTED_0",), ("PROTECTED_1",), ("PROTECTED_2",), ("STAGED_0",)} <= _paths(
        rule, "subpath"
    )
    # ancestors by literal only: their other children stay removable
    assert not any(p[0].startswith("ANCESTOR_") for p in _paths(rule, "subpath"))


@pytest.mark.parametrize("name", ALL)
def test_no_secret_in_a_home_can_be_renamed_out_from_under_its_rule(name: str) -> None:
    """``mv ~/.config ~/x; cat ~/x/gh/hosts.yml``; ``mv ~ $TMPDIR/h`` (a workspace set to
    the home, with fs.allow_home, could otherwise do both)."""
    literal = _paths(_unlink_rule(parsed(name)), "literal")
    for home in HOME_PARAMS:
        assert (home,) in literal, "the home itself"
        for relative in SENSITIVE_HOME_PATHS:
            parts = relative.split("/")
            for i in range(1, len(parts)):
                assert (home, "/" + "/".join(parts[:i])) in literal, relative


@pytest.mark.parametrize("name", ALL)
def test_no_set_id_bit_can_be_set_on_any_file(name: str) -> None:
    """Issue 12, 6(f): Seatbelt checks setting S_ISUID/S_ISGID as its own operation."""
    rs = parsed(name)
    denies = [r for r in rs if r.action == "deny" and r.operations == ("file-write-setugid",)]
    assert len(denies) == 1
    assert denies[0].filters == (), "every file, whatever its path"
    for rule in rs:
        if rule.action == "allow":
            assert "file-write-setugid" not in rule.operations
            assert "file*" not in rule.operations


def test_workspace_guards_are_the_directories_holding_what_is_protected() -> None:
    ws = "/Users/a/p"
    got = workspace_guards(
        ws,
        protected=(f"{ws}/.git", f"{ws}/a/b/c"),
        staged=(f"{ws}/sub/data", "/opt/outside"),
        homes=("/Users/a", "/private/var/root"),
    )
    assert got == (ws, f"{ws}/a", f"{ws}/a/b", f"{ws}/sub")
    # nothing inside the workspace: nothing to pin
    assert workspace_guards(ws, (), ("/opt/x",), ("/Users/a",)) == ()
    # a home inside the workspace (fs.allow_home): the directories above it, the workspace
    home_inside = workspace_guards("/Volumes/x", (), (), ("/Volumes/x/homes/al",))
    assert home_inside == ("/Volumes/x", "/Volumes/x/homes")
    # the workspace is the home
    assert workspace_guards("/Users/a", (), (), ("/Users/a",)) == ("/Users/a",)
    # a sibling whose name starts like the workspace is not inside it
    assert workspace_guards(ws, (f"{ws}x/.git",), (), ()) == ()


def test_workspace_guards_take_the_workspace_as_spelled_or_with_a_trailing_slash() -> None:
    # A trailing slash is not part of the name: the guard is the directory itself.
    assert workspace_guards("/Users/a/p/", (), ("/Users/a/p/in/x",), ()) == (
        "/Users/a/p",
        "/Users/a/p/in",
    )
    # Only slashes are trimmed from the name, nothing else at its end.
    assert workspace_guards("/Volumes/BOX", ("/Volumes/BOX/sub/.git",), (), ()) == (
        "/Volumes/BOX",
        "/Volumes/BOX/sub",
    )
    # The root as workspace: every directory above an anchor, up to "/".
    assert workspace_guards("/", ("/a/b/.git",), (), ()) == ("/", "/a", "/a/b")


def test_an_anchor_outside_the_workspace_does_not_end_the_search() -> None:
    ws = "/Users/a/p"
    got = workspace_guards(ws, ("/etc/outside", f"{ws}/d/.git"), ("/opt/x", f"{ws}/s/in"), ())
    assert got == (ws, f"{ws}/d", f"{ws}/s")


def test_the_counts_must_be_counts() -> None:
    # Positive control: zero of each is a profile.
    assert SeatbeltProfile.from_policy(policy(), protected=0, ancestors=0).text
    with pytest.raises(ValueError, match=r"^protected and ancestors are counts$"):
        SeatbeltProfile.from_policy(policy(), protected=-1)
    with pytest.raises(ValueError, match=r"^protected and ancestors are counts$"):
        SeatbeltProfile.from_policy(policy(), ancestors=-1)


def test_without_counts_the_profile_has_no_protected_entry_or_ancestor() -> None:
    plain = SeatbeltProfile.from_policy(policy())
    assert plain == SeatbeltProfile.from_policy(policy(), protected=0, ancestors=0)
    assert not [p for p in plain.params if p.startswith(("PROTECTED_", "ANCESTOR_"))]


# --------------------------------------------------------------------------- golden


@pytest.mark.parametrize("name", ALL)
def test_golden(name: str) -> None:
    path = GOLDEN / f"{name}.sb"
    text = profile_of(name).text
    if os.environ.get("PANDAY_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; set PANDAY_UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(encoding="utf-8"), (
        f"{path.name} differs from the generated profile; if the change is intended, "
        "regenerate with PANDAY_UPDATE_GOLDEN=1"
    )


def test_from_policy_is_pure() -> None:
    for name in ALL:
        assert profile_of(name) == profile_of(name)


@pytest.mark.parametrize("name", ALL)
def test_pandays_state_under_either_home_is_denied_reads_writes_and_renames(name: str) -> None:
    """Issue 22, case 3: the key that seals panday's caches lives in ``~/.cache/panday``
    (the account's home, `panday_core.userstate`); a command whose workspace is the home
    (fs.allow_home) must neither read it nor move ``~/.cache`` out from under the rule."""
    rs = parsed(name)
    protected = [
        r for r in rs if r.action == "deny" and set(r.operations) == {"file-read*", "file-write*"}
    ]
    (rule,) = protected
    subpaths = _paths(rule, "subpath")
    literal = _paths(_unlink_rule(rs), "literal")
    for home in HOME_PARAMS:
        assert (home, "/.cache/panday") in subpaths, home
        assert (home, "/.cache") in literal, home
    assert protecting("/Users/alice/.cache/panday/plans", ["/Users/alice"]) == (
        "/Users/alice/.cache/panday"
    )
    assert protecting("/Users/alice/.cache/other", ["/Users/alice"]) is None  # control


# ------------------------------------------------------------- issue 30 (macOS, round two)


def _last_rules(rs: list[Rule]) -> int:
    return max(r.index for r in rs if r.action == "allow")


@pytest.mark.parametrize("name", ALL)
def test_no_terminal_can_be_read_written_or_driven(name: str) -> None:
    """Issue 30, 3: another Terminal tab's device (/dev/ttys003, mode 620, the same user) would
    give its keystrokes (a sudo password) to a read; a command runs on pipes and has no
    terminal of its own to except."""
    rs = parsed(name)
    (rule,) = [r for r in rs if r.filters == ([Sym("regex"), Rx(TERMINAL_REGEX)],)]
    assert rule.action == "deny"
    assert set(rule.operations) == {"file-read*", "file-write*", "file-ioctl"}
    assert rule.index > _last_rules(rs), "an allow after it would reopen the terminals"
    pattern = re.compile(TERMINAL_REGEX)
    for device in ("/dev/ttys000", "/dev/ttys003", "/dev/ttys123", "/dev/ptmx", "/dev/ptyp0"):
        assert pattern.search(device), device
    for device in ("/dev/ttyp0", "/dev/ptyqf"):
        assert pattern.search(device), device
    for device in ("/dev/tty", "/dev/null", "/dev/fd/1", "/dev/urandom", "/dev/ttys"):
        assert not pattern.search(device), f"{device} is not another terminal"


@pytest.mark.parametrize("name", ALL)
def test_no_file_flag_can_be_changed(name: str) -> None:
    """Issue 30, 2: the placeholders holding missing protected names are immutable (uchg);
    clearing the flag is the one way to remove one, so flags are denied everywhere, last."""
    rs = parsed(name)
    denies = [r for r in rs if r.action == "deny" and r.operations == ("file-write-flags",)]
    assert len(denies) == 1
    assert denies[0].filters == (), "every file, whatever its path"
    assert denies[0].index > _last_rules(rs)


@pytest.mark.parametrize("name", ALL)
def test_other_sessions_temp_dirs_are_denied_but_not_its_own(name: str) -> None:
    """Issue 30, 6: every session's temp dir is made in one per-user base; the base is denied
    to reads and writes, the session's own temp dir carved out, in both spellings."""
    rs = parsed(name)
    (rule,) = [
        r for r in rs if r.action == "deny" and set(r.operations) == {"file-read*", "file-write*"}
    ]
    carved = [
        f
        for f in rule.filters
        if isinstance(f, list) and f[0] == Sym("require-all") and PARAM_TMPBASE in params_in(f)
    ]
    assert len(carved) == 2, "once as given, once in the Data-volume spelling"
    for prefix, form in zip(((), (DATA_VOLUME,)), carved, strict=True):
        base, keep = form[1], form[2]
        assert isinstance(base, list)
        assert base[0] == Sym("subpath")
        assert _parts(base[1]) == (*prefix, PARAM_TMPBASE)
        assert isinstance(keep, list)
        assert keep[0] == Sym("require-not")
        own = keep[1]
        assert isinstance(own, list)
        assert own[0] == Sym("subpath")
        assert _parts(own[1]) == (*prefix, PARAM_TMPDIR)
    assert PARAM_TMPBASE in profile_of(name).params


@pytest.mark.parametrize("name", ALL)
def test_no_mach_host_and_only_multiprocessing_semaphores(name: str) -> None:
    """Issue 30, 7: mach-host* is not needed; a named semaphore of another program of the
    user (sem_wait stalls it) is out of reach, CPython's multiprocessing ones stay usable."""
    rs = parsed(name)
    assert not allows(rs, "mach-host-special-port-set")
    assert "mach-host" not in profile_of(name).text
    (sem,) = allows(rs, "ipc-posix-sem")
    assert sem.filters == ([Sym("ipc-posix-name-regex"), Rx(POSIX_SEM_REGEX)],)
    pattern = re.compile(POSIX_SEM_REGEX)
    assert pattern.search("/mp-x7k2a9q")
    assert pattern.search("mp-x7k2a9q")
    assert not pattern.search("/postgres-lock")
    assert not pattern.search("/xmp-1")


def test_the_workspace_and_its_guarded_directories_keep_their_mode_and_acl() -> None:
    """Issue 30, 7: ``chmod 777 .`` (or an ACL) on the workspace would let another local
    user rename .git aside; so would it on a directory holding a protected entry."""
    rs = parsed("protected")
    (workspace_rule,) = [
        r for r in allows(rs, "file-write-create") if r.operations == ("file-write*",)
    ]
    (rule,) = [r for r in rs if r.action == "deny" and "file-write-mode" in r.operations]
    assert set(rule.operations) == {"file-write-mode", "file-write-acl"}
    assert rule.index > workspace_rule.index
    literal = _paths(rule, "literal")
    for name in (PARAM_WORKSPACE, f"{PARAM_ANCESTOR}0", f"{PARAM_ANCESTOR}1"):
        assert (name,) in literal, name
        assert (DATA_VOLUME, name) in literal, name
    assert not _paths(rule, "subpath"), "the rest of the workspace keeps chmod"
    read_only = parsed("read-only")
    assert not [r for r in read_only if "file-write-mode" in r.operations]


SECRETS_ROUND_TWO = (
    "Library/Messages",
    "Library/Mail",
    "Library/Safari",
    "Library/Group Containers",
    "Library/Containers",
    "Library/Mobile Documents",
    "Library/Saved Application State",
    ".gemini/oauth_creds.json",
    ".config/github-copilot",
    "Library/Application Support/Claude/claude_desktop_config.json",
    ".cursor/mcp.json",
    ".cache/huggingface/token",
    ".terraformrc",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".config/op",
    ".config/rclone",
    ".s3cfg",
    "Library/Application Support/Google/Chrome Beta",
    "Library/Application Support/Google/Chrome Canary",
    "Library/Application Support/Arc",
    "Library/Application Support/Vivaldi",
)


@pytest.mark.parametrize("name", ALL)
def test_round_two_secrets_and_tcc_places_are_denied_under_both_homes(name: str) -> None:
    """Issue 30, 5: with Full Disk Access granted to the terminal, a command inherits it (TCC
    judges the responsible app); mail, messages and other apps' containers, and plaintext
    tokens the first list missed."""
    rs = parsed(name)
    (rule,) = [
        r for r in rs if r.action == "deny" and set(r.operations) == {"file-read*", "file-write*"}
    ]
    subpaths = _paths(rule, "subpath")
    for relative in SECRETS_ROUND_TWO:
        for home in HOME_PARAMS:
            assert (home, "/" + relative) in subpaths, relative
            assert (DATA_VOLUME, home, "/" + relative) in subpaths, relative
