"""`panday plugin inspect` and `panday proxy`, through the console script."""

from __future__ import annotations

import select
import signal
import socket
import subprocess
from typing import TYPE_CHECKING

import pytest

from panday import exitcodes, tiers
from panday_core.capabilities import Support

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from subprocess import CompletedProcess

    Cli = Callable[..., CompletedProcess[str]]
    Line = Callable[[CompletedProcess[str]], str]
    Validate = Callable[[str, str], dict[str, object]]

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
    assert result.stdout.startswith("Plugin gh-helper 1.2.0: Triage GitHub issues.\n")
    assert f"Tier: {tiers.host_command_tier()}" in result.stdout
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
    assert fragment in clean_line(result)


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
