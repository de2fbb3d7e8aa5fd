"""The policy model refuses every class of bad input with the dotted field and the value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from panday_core.errors import PolicyError
from panday_core.policy import (
    DEFAULT_OUTPUT_BYTES,
    DEFAULT_WALL_CLOCK_MS,
    LIMIT_RANGES,
    UNBOUNDED,
    FieldError,
    FsPolicy,
    Limits,
    NetPolicy,
    SandboxPolicy,
    load_policy,
    policy_from_dict,
    policy_from_json,
    policy_from_toml,
    policy_to_dict,
)

if TYPE_CHECKING:
    from collections.abc import Callable

REPO = Path(__file__).resolve().parents[3]


def refused(doc: dict[str, object]) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        policy_from_dict(doc)
    return info.value


def test_empty_document_is_the_default_policy() -> None:
    policy = policy_from_dict({})
    assert policy == SandboxPolicy()
    assert policy.net.allow == ()
    assert policy.fs.access == "rw"
    bounded = {"wall_clock_ms": DEFAULT_WALL_CLOCK_MS, "output_bytes": DEFAULT_OUTPUT_BYTES}
    for name in LIMIT_RANGES:
        assert getattr(policy.limits, name) == bounded.get(name), name


@pytest.mark.parametrize(
    "limits",
    [Limits(), policy_from_dict({"limits": {"pids": 8}}).limits, policy_from_toml("").limits],
    ids=["built in Python", "a document naming other limits", "an empty TOML file"],
)
def test_the_wall_clock_and_the_output_are_bounded_however_a_policy_is_made(
    limits: Limits,
) -> None:
    # Leaving them out never means "none": every path that makes a policy (a file, a
    # dict, Python) gets the model's finite defaults, which every tier enforces.
    assert limits.wall_clock_cap == DEFAULT_WALL_CLOCK_MS == 600_000
    assert limits.output_cap == DEFAULT_OUTPUT_BYTES == 16 * 1024 * 1024
    assert limits.unbounded() == ()


def test_unbounded_is_an_explicit_visible_choice() -> None:
    doc = policy_from_toml('[limits]\nwall_clock_ms = "unbounded"\noutput_bytes = "unbounded"\n')
    assert doc.limits.wall_clock_cap is None
    assert doc.limits.output_cap is None
    assert doc.limits.unbounded() == ("limits.wall_clock_ms", "limits.output_bytes")
    assert policy_from_dict(policy_to_dict(doc)) == doc
    # Python says it the same way; None is refused with the way to say it.
    assert Limits(output_bytes=UNBOUNDED).output_cap is None
    with pytest.raises(FieldError, match="'unbounded' for no ceiling") as info:
        Limits(wall_clock_ms=None)  # pyright: ignore[reportArgumentType] - the bad value is the point
    assert info.value.field == "limits.wall_clock_ms"
    for doc_value, fragment in ((None, "or 'unbounded', got nothing"), ("none", "or 'unbounded'")):
        error = refused({"limits": {"output_bytes": doc_value}})
        assert error.field == "limits.output_bytes"
        assert fragment in error.reason, error


def test_a_full_valid_document_is_accepted_and_round_trips() -> None:
    doc: dict[str, object] = {
        "version": 1,
        "fs": {"workspace": "/srv/work", "access": "ro", "staged_ro": ["/opt/data"]},
        "net": {"allow": ["API.GitHub.com", "*.pypi.org", "203.0.113.7"], "ports": [443]},
        "limits": {"mem_bytes": 1 << 30, "pids": 64, "wall_clock_ms": 5000},
        "env": {"LANG": "C.UTF-8"},
    }
    policy = policy_from_dict(doc)
    assert policy.net.allow == ("api.github.com", "*.pypi.org", "203.0.113.7")
    again = policy_from_dict(policy_to_dict(policy))
    assert again == policy


@pytest.mark.parametrize(
    ("doc", "field", "fragment"),
    [
        # wrong types
        ({"limits": {"mem_bytes": "lots"}}, "limits.mem_bytes", "expected an integer"),
        ({"limits": {"mem_bytes": True}}, "limits.mem_bytes", "got a boolean"),
        ({"limits": {"pids": 1.5}}, "limits.pids", "expected an integer"),
        ({"net": {"allow": "api.github.com"}}, "net.allow", "expected a list"),
        ({"net": {"allow": ["a.com", 3]}}, "net.allow[1]", "expected a string"),
        ({"fs": "somewhere"}, "fs", "expected a table"),
        ({"env": {"TOKEN": 3}}, "env.TOKEN", "expected a string"),
        ({"fs": {"access": "rx"}}, "fs.access", "'rw' or 'ro'"),
        ({"version": 2}, "version", "must be 1"),
        # out of range: negative, zero where meaningless, absurdly large
        ({"limits": {"pids": -3}}, "limits.pids", "at least 1"),
        ({"limits": {"mem_bytes": 0}}, "limits.mem_bytes", "at least"),
        ({"limits": {"wall_clock_ms": 0}}, "limits.wall_clock_ms", "at least 1"),
        ({"limits": {"mem_bytes": 1 << 60}}, "limits.mem_bytes", "at most"),
        ({"limits": {"cpu_ms": 10**15}}, "limits.cpu_ms", "at most"),
        ({"net": {"ports": [0]}}, "net.ports[0]", "at least 1"),
        ({"net": {"ports": [70000]}}, "net.ports[0]", "at most 65535"),
        ({"net": {"ports": []}}, "net.ports", "empty"),
        # a URL, host:port or a wildcard where a domain belongs
        ({"net": {"allow": ["https://api.github.com/"]}}, "net.allow[0]", "is a URL"),
        ({"net": {"allow": ["api.github.com:443"]}}, "net.allow[0]", "host:port"),
        ({"net": {"allow": ["api.github.com/repos"]}}, "net.allow[0]", "path"),
        ({"net": {"allow": ["user@api.github.com"]}}, "net.allow[0]", "user info"),
        ({"net": {"allow": ["*"]}}, "net.allow[0]", "wildcard over a single label"),
        ({"net": {"allow": ["*.com"]}}, "net.allow[0]", "wildcard over a single label"),
        ({"net": {"allow": ["api.*.com"]}}, "net.allow[0]", "not the whole leftmost label"),
        ({"net": {"allow": ["*github.com"]}}, "net.allow[0]", "not the whole leftmost label"),
        ({"net": {"allow": ["[::1]"]}}, "net.allow[0]", "bracketed"),
        ({"net": {"allow": [""]}}, "net.allow[0]", "empty"),
        ({"net": {"allow": ["a b.com"]}}, "net.allow[0]", "whitespace"),
        ({"net": {"allow": ["bücher.de"]}}, "net.allow[0]", "punycode"),
        ({"net": {"allow": ["example.com."]}}, "net.allow[0]", "trailing dot"),
        ({"net": {"allow": ["-bad.com"]}}, "net.allow[0]", "hyphen"),
        ({"net": {"allow": ["a..com"]}}, "net.allow[0]", "empty label"),
        ({"net": {"allow": ["1.2.3"]}}, "net.allow[0]", "all-digit"),
        ({"net": {"deny": ["https://x.y/"]}}, "net.deny[0]", "is a URL"),
        # paths
        ({"fs": {"workspace": "relative/dir"}}, "fs.workspace", "relative"),
        ({"fs": {"workspace": "/a/../etc"}}, "fs.workspace", "'..'"),
        ({"fs": {"workspace": "/a\x00b"}}, "fs.workspace", "NUL"),
        ({"fs": {"staged_ro": ["/ok", "rel"]}}, "fs.staged_ro[1]", "relative"),
        # env names and values
        ({"env": {"1BAD": "x"}}, "env.1BAD", "not an environment variable name"),
        ({"env": {"A-B": "x"}}, "env.A-B", "not an environment variable name"),
        ({"env": {"A": "x\x00y"}}, "env.A", "NUL"),
        # unknown keys anywhere, including typos of real keys
        ({"limts": {}}, "limts", "did you mean 'limits'"),
        ({"limits": {"pid": 3}}, "limits.pid", "did you mean 'pids'"),
        ({"net": {"allowed": ["a.com"]}}, "net.allowed", "did you mean 'allow'"),
        ({"fs": {"workspace_ro": True}}, "fs.workspace_ro", "unknown key"),
    ],
)
def test_bad_input_names_the_field(doc: dict[str, object], field: str, fragment: str) -> None:
    error = refused(doc)
    assert error.field == field, str(error)
    assert fragment in error.reason, str(error)
    assert str(error).startswith(f"{field}: ")


def test_type_errors_show_the_offending_value() -> None:
    error = refused({"limits": {"mem_bytes": "lots"}})
    assert "'lots'" in str(error)
    error = refused({"net": {"allow": ["https://api.github.com/"]}})
    assert "https://api.github.com/" in str(error)


def test_direct_construction_is_held_to_the_same_rules() -> None:
    with pytest.raises(ValueError, match="is a URL"):
        NetPolicy(allow=("https://x.y/",))
    with pytest.raises(ValueError, match="out of range"):
        Limits(pids=0)
    with pytest.raises(ValueError, match="relative"):
        SandboxPolicy().with_workspace("here")


def _built_in_python() -> list[tuple[str, object, str]]:
    """(dotted field, how to build the bad value, what the reason says)."""
    return [
        ("limits.pids", lambda: Limits(pids=-1), "out of range"),
        ("limits.mem_bytes", lambda: Limits(mem_bytes="1G"), "not an integer"),  # pyright: ignore[reportArgumentType] - the bad value is the point
        ("fs.workspace", lambda: FsPolicy(workspace="rel"), "relative"),
        ("fs.workspace", lambda: FsPolicy(workspace=3), "expected a string"),  # pyright: ignore[reportArgumentType] - the bad value is the point
        ("fs.access", lambda: FsPolicy(access="rwx"), "must be 'rw' or 'ro'"),  # pyright: ignore[reportArgumentType] - the bad value is the point
        ("fs.staged_ro", lambda: FsPolicy(staged_ro="/opt"), "expected a list of strings"),  # pyright: ignore[reportArgumentType] - the bad value is the point
        ("fs.staged_ro[1]", lambda: FsPolicy(staged_ro=("/a", "b")), "relative"),
        ("net.allow[0]", lambda: NetPolicy(allow=("https://x.y/",)), "is a URL"),
        ("net.allow", lambda: NetPolicy(allow="x.y"), "expected a list of strings"),  # pyright: ignore[reportArgumentType] - the bad value is the point
        ("net.ports[0]", lambda: NetPolicy(ports=(70000,)), "not a TCP port"),
        ("net.ports", lambda: NetPolicy(ports=()), "is empty"),
        ("env.A", lambda: SandboxPolicy(env={"A": 1}), "must be strings"),  # pyright: ignore[reportArgumentType] - the bad value is the point
        ("env.1X", lambda: SandboxPolicy(env={"1X": "v"}), "not an environment variable"),
        ("version", lambda: SandboxPolicy(version=2), "must be 1"),  # pyright: ignore[reportArgumentType] - the bad value is the point
        ("fs", lambda: SandboxPolicy(fs={"workspace": "/w"}), "expected a FsPolicy"),  # pyright: ignore[reportArgumentType] - the bad value is the point
    ]


@pytest.mark.parametrize(
    ("field", "build", "fragment"),
    _built_in_python(),
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_every_invalid_value_built_in_python_is_a_policy_error_naming_the_field(
    field: str, build: Callable[[], object], fragment: str
) -> None:
    with pytest.raises(PolicyError) as info:
        build()
    assert isinstance(info.value, FieldError)
    assert isinstance(info.value, ValueError)  # callers that caught ValueError still do
    assert info.value.field == field
    assert fragment in info.value.reason
    assert str(info.value) == f"{field}: {info.value.reason}"


def test_valid_values_built_in_python_are_accepted() -> None:
    # Control for the test above: the same constructors, given good values, build, and a
    # list given where the model holds a tuple is taken as the tuple.
    fs = FsPolicy(workspace="/w", access="ro", staged_ro=["/a", "/b"])  # pyright: ignore[reportArgumentType] - a list, as Python callers write it
    assert fs.staged_ro == ("/a", "/b")
    net = NetPolicy(allow=["API.example.com"], ports=[443])  # pyright: ignore[reportArgumentType] - as above
    assert net.allow == ("api.example.com",)
    assert net.ports == (443,)
    assert Limits(pids=1).pids == 1
    assert SandboxPolicy(fs=fs, net=net, env={"A": "1"}).env["A"] == "1"


def test_a_document_names_the_same_field_as_python_does() -> None:
    cases: tuple[tuple[dict[str, object], str], ...] = (
        ({"limits": {"pids": 0}}, "limits.pids"),
        ({"fs": {"staged_ro": ["/a", "b"]}}, "fs.staged_ro[1]"),
        ({"net": {"ports": [70000]}}, "net.ports[0]"),
        ({"env": {"1X": "v"}}, "env.1X"),
    )
    for doc, field in cases:
        assert refused(doc).field == field


def test_models_are_immutable() -> None:
    policy = policy_from_dict({"env": {"A": "1"}})
    with pytest.raises(AttributeError):
        policy.version = 1  # pyright: ignore[reportAttributeAccessIssue] - writing is the point
    with pytest.raises(TypeError):
        policy.env["B"] = "2"  # pyright: ignore[reportIndexIssue] - writing is the point


def test_toml_and_json_files(tmp_path: Path) -> None:
    toml_file = tmp_path / "p.toml"
    toml_file.write_text('[net]\nallow = ["api.github.com"]\n[limits]\npids = 10\n')
    json_file = tmp_path / "p.json"
    json_file.write_text(json.dumps({"net": {"allow": ["api.github.com"]}, "limits": {"pids": 10}}))
    assert load_policy(str(toml_file)) == load_policy(str(json_file))


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("bad.toml", "[net\nallow = 1", "invalid TOML"),
        ("bad.json", "{not json", "invalid JSON"),
        ("list.json", "[1, 2]", "table/object at the top level"),
        ("binary.toml", b"\xff\xfe\x00", "not UTF-8"),
    ],
)
def test_unparseable_files_are_refused(
    tmp_path: Path, name: str, content: str | bytes, fragment: str
) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(PolicyError, match=fragment):
        load_policy(str(path))


def test_unreadable_and_missing_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read policy file"):
        load_policy(str(tmp_path / "missing.toml"))
    with pytest.raises(PolicyError, match="cannot read policy file"):
        load_policy(str(tmp_path))  # a directory


def test_the_toml_table_trap_is_refused() -> None:
    # A key written after [limits] belongs to that table, not to the top level: it must be
    # refused as unknown there rather than silently accepted as a top-level setting.
    with pytest.raises(PolicyError) as info:
        policy_from_toml("[limits]\npids = 4\nversion = 1\n")
    assert info.value.field == "limits.version"


def test_policy_from_json_rejects_non_objects() -> None:
    with pytest.raises(PolicyError, match="top level"):
        policy_from_json(b'"just a string"')


@pytest.mark.parametrize(
    "example",
    sorted(p for p in (REPO / "examples").glob("*.toml") if p.name != "plugin.toml"),
    ids=lambda p: p.name,
)
def test_shipped_examples_are_valid(example: Path) -> None:
    load_policy(str(example))


@given(st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=4))
def test_arbitrary_limit_tables_either_validate_or_raise_policy_error(
    table: dict[str, object],
) -> None:
    try:
        limits = policy_from_dict({"limits": table}).limits
    except PolicyError as exc:
        field = exc.field
        limits = None
    else:
        field = ""
    if limits is None:
        assert field.startswith("limits")
        return
    for name, value in table.items():
        assert getattr(limits, name) == value
    for name in ("wall_clock_ms", "output_bytes"):
        if name not in table:  # never None: the model's finite default
            assert isinstance(getattr(limits, name), int)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
        max_leaves=8,
    )
)
def test_arbitrary_documents_never_escape_as_other_errors(doc: object) -> None:
    try:
        if isinstance(doc, dict):
            policy_from_dict(doc)  # pyright: ignore[reportUnknownArgumentType] - fuzz input
        else:
            policy_from_json(msgspec.json.encode(doc))
    except PolicyError:
        pass
