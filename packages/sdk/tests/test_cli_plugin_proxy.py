"""`panday plugin inspect` and `panday proxy`, through the console script."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday import exitcodes, tiers
from panday_core.capabilities import Support

if TYPE_CHECKING:
    from collections.abc import Callable
    from subprocess import CompletedProcess

    Cli = Callable[..., CompletedProcess[str]]
    Line = Callable[[CompletedProcess[str]], str]
    Validate = Callable[[str, str], dict[str, object]]

REPO = Path(__file__).resolve().parents[3]
MANIFEST = """\
name = "gh-helper"
version = "1.2.0"
description = "Triage GitHub issues."

[capabilities]
fs = "workspace-ro"
net = ["api.github.com"]
"""


def _host_enforces_allowlists() -> bool:
    host = tiers.host_command_tier()
    entry = tiers.host_capabilities(host).for_field("net.allow") if host else None
    return entry is not None and entry.support is not Support.NOT_ENFORCED


@pytest.mark.skipif(tiers.host_command_tier() is None, reason="no command tier for this OS")
def test_plugin_inspect_shows_what_this_host_really_grants(
    tmp_path: Path, cli: Cli, validate: Validate
) -> None:
    manifest = tmp_path / "plugin.toml"
    manifest.write_text(MANIFEST)
    result = cli("plugin", "inspect", str(manifest))
    assert result.stdout.startswith(
        "gh-helper 1.2.0 asks to run on this computer.\n  Triage GitHub issues.\n"
    )
    assert "If you approve, it runs in panday's " in result.stdout
    as_json = cli("plugin", "inspect", "--json", str(manifest))
    doc = validate(as_json.stdout, "cli-plugin-inspect")
    assert doc["net_requested"] == ["api.github.com"]
    if _host_enforces_allowlists():
        assert doc["net_granted"] == ["api.github.com"]
    else:
        assert doc["net_granted"] == []  # asked for is not granted
    assert (as_json.returncode == exitcodes.OK) == doc["runnable"]


@pytest.mark.parametrize(
    ("content", "code", "fragment"),
    [
        (None, exitcodes.NO_INPUT, "cannot read"),
        ('name = "x"\n', exitcodes.INVALID_POLICY, "version"),
        (
            'name = "x"\nversion = "1"\n[capabilities]\nfs = "all"\n',
            exitcodes.INVALID_POLICY,
            "capabilities.fs",
        ),
    ],
)
def test_plugin_inspect_bad_input(  # noqa: PLR0917 - fixtures and parameters
    tmp_path: Path, cli: Cli, clean_line: Line, content: str | None, code: int, fragment: str
) -> None:
    manifest = tmp_path / "plugin.toml"
    if content is not None:
        manifest.write_text(content)
    result = cli("plugin", "inspect", str(manifest))
    assert result.returncode == code, result.stderr
    line = clean_line(result)
    assert fragment in line
    assert str(manifest) in line  # the line names the file
    if code == exitcodes.INVALID_POLICY:
        assert f"panday: {manifest}: invalid plugin manifest: " in line
        assert "invalid policy" not in line


SAMPLE = REPO / "examples" / "plugin.toml"


@pytest.mark.skipif(tiers.host_command_tier() is None, reason="no command tier for this OS")
def test_the_sample_manifest_is_inspected_as_docs_manifest_md_shows(cli: Cli) -> None:
    # examples/plugin.toml asks for the workspace read-only, one host and one secret.
    # With the secret set, it can run here exactly as summarised (exit 0) where the host's
    # tier enforces an allowlist; without it, the summary says so and exits 1.
    env = {**os.environ, "GITHUB_TOKEN": "not-a-real-token"}
    ready = cli("plugin", "inspect", str(SAMPLE), env=env)
    text = ready.stdout
    assert text.startswith("gh-triage 1.2.0 asks to run on this computer.\n")
    assert "read the files in your workspace (the folder you run it in), but not change" in text
    assert "see the value of GITHUB_TOKEN from your environment\n" in text
    assert "not-a-real-token" not in text
    for internal in ("bwrap", "relay", "seccomp", "Seatbelt", "socket"):
        assert internal not in text, text
    if _host_enforces_allowlists():
        assert ready.returncode == exitcodes.OK, ready.stdout + ready.stderr
        assert "connect to api.github.com (ports 80 and 443), and nowhere else" in text
        assert text.rstrip().endswith("panday can run it here with exactly these permissions.")
    unset = {k: v for k, v in os.environ.items() if k != "GITHUB_TOKEN"}
    missing = cli("plugin", "inspect", str(SAMPLE), env=unset)
    assert missing.returncode == exitcodes.FAILED
    assert "(not set in your environment now)" in missing.stdout
    assert "panday will not start it until GITHUB_TOKEN is set" in missing.stdout
    as_json = cli("plugin", "inspect", "--json", str(SAMPLE), env=unset)
    doc = json.loads(as_json.stdout)
    assert doc["secrets_missing"] == ["GITHUB_TOKEN"]
    assert doc["runnable"] is False


def _read_until(fd: int, marker: bytes, within: float) -> bytes:
    """Bytes from `fd` until `marker` and the end of its line, or fail after `within` s."""
    import os  # noqa: PLC0415
    import time  # noqa: PLC0415

    data = b""
    deadline = time.monotonic() + within
    while not (marker in data and data.endswith(b"\n")):
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, left))
        if not ready:
            pytest.fail(f"no {marker!r} line within {within} s: {data!r}")
        chunk = os.read(fd, 4096)
        if not chunk:
            pytest.fail(f"the proxy exited before printing {marker!r}: {data!r}")
        data += chunk
    return data


def test_proxy_starts_prints_its_variables_and_stops_on_ctrl_c(
    exe: str, finished: Callable[[subprocess.Popen[bytes]], None]
) -> None:
    proc = subprocess.Popen(
        [exe, "proxy", "--allow", "example.com", "--listen-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        lines = _read_until(proc.stdout.fileno(), b"export HTTP_PROXY=", 60).decode()
        proxy_url = next(x for x in lines.splitlines() if x.startswith("export HTTP_PROXY="))
        assert "@127.0.0.1:" in proxy_url
        assert "allow ['example.com']" in lines.splitlines()[0]
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=20)
    finally:
        finished(proc)
    assert code == exitcodes.OK


def test_proxy_that_cannot_listen_is_one_line_and_exit_71(cli: Cli, clean_line: Line) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = cli("proxy", "--listen-port", str(port), timeout=30)
    assert result.returncode == exitcodes.OS_ERROR
    line = clean_line(result)
    assert f"cannot listen on 127.0.0.1:{port}" in line
    assert "in use" in line


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--allow", "https://x.y/"], "--allow 'https://x.y/': 'https://x.y/' is a URL"),
        (["--port", "http"], "--port 'http': not a port number"),
        (["--port", "70000"], "--port: "),
        (["--listen-port", "-1"], "--listen-port '-1': not a TCP port"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_proxy_bad_input_is_a_usage_error(
    cli: Cli, clean_line: Line, args: list[str], fragment: str
) -> None:
    result = cli("proxy", *args)
    assert result.returncode == exitcodes.USAGE
    assert fragment in clean_line(result)


def test_top_level_usage(cli: Cli, clean_line: Line) -> None:
    assert cli().returncode == exitcodes.USAGE
    result = cli("frobnicate")
    assert result.returncode == exitcodes.USAGE
    assert "unknown command 'frobnicate'" in clean_line(result)
    helped = cli("--help")
    assert helped.returncode == exitcodes.OK
    assert "run [OPTIONS] -- CMD" in helped.stdout
    assert cli("--version").stdout.startswith("panday ")


def test_debug_shows_a_traceback(tmp_path: Path, cli: Cli) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[limits]\npid = 3\n")
    result = cli("--debug", "policy", "check", str(bad))
    assert result.returncode == exitcodes.INVALID_POLICY
    assert "Traceback" in result.stderr
    assert "panday_core" in result.stderr  # the core's own frames, not only the CLI's
    assert result.stderr.strip().splitlines()[-1] == (
        f"panday: {bad}: invalid policy: limits.pid: unknown key 'pid' (did you mean 'pids'?)"
    )
