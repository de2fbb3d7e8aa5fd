"""The embedded default policy: what it holds, and that examples/default.toml writes it out."""

from __future__ import annotations

from pathlib import Path

from panday.defaults import (
    DEFAULT_OUTPUT_BYTES,
    DEFAULT_WALL_CLOCK_MS,
    default_policy,
    passthrough_env,
)
from panday_core.policy import load_policy

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "default.toml"


def test_examples_default_toml_is_the_embedded_default() -> None:
    written = load_policy(str(EXAMPLE))
    embedded = default_policy("/w", {})
    assert written.with_workspace("/w") == embedded


def test_the_default_grants_only_the_workspace_and_ceilings() -> None:
    policy = default_policy("/w", {})
    assert policy.fs.workspace == "/w"
    assert policy.fs.access == "rw"
    assert policy.fs.staged_ro == ()
    assert policy.net.allow == ()
    assert policy.limits.wall_clock_ms == DEFAULT_WALL_CLOCK_MS
    assert policy.limits.output_bytes == DEFAULT_OUTPUT_BYTES
    assert dict(policy.env) == {}


def test_only_the_variables_that_select_a_locale_and_the_terminal_pass_through() -> None:
    caller = {
        "LANG": "de_DE.UTF-8",
        "LC_ALL": "C",
        "LC_TIME": "en_GB.UTF-8",
        "TERM": "xterm",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "GITHUB_TOKEN": "secret",
        "HOME": "/home/me",
        "PATH": "/home/me/bin:/usr/bin",
        "LD_PRELOAD": "/tmp/evil.so",
        "LANGUAGE": "de",
        "XLC_X": "no",
        "LC_SECRET": "a token someone named LC_*",
        "LC_TERMINAL": "iTerm2",
    }
    assert passthrough_env(caller) == {
        "LANG": "de_DE.UTF-8",
        "LANGUAGE": "de",
        "LC_ALL": "C",
        "LC_TIME": "en_GB.UTF-8",
        "TERM": "xterm",
    }
    assert dict(default_policy("/w", caller).env) == passthrough_env(caller)
