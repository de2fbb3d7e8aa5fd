"""What `panday run` writes: every byte, whatever the size or the descriptor's mode, and on a
terminal, no control sequence that acts.

The terminal cases run panday under a real pseudo-terminal (the default applies there) and
through pipes with ``--sanitize``; each first shows the sequence reaching the caller byte
for byte without the filter (the positive control).
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import pty
import select
import subprocess
import threading
import time
from typing import TYPE_CHECKING

import pytest

from panday import cli, exitcodes
from panday.stdio import write_all
from panday.terminal import Filter

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from subprocess import CompletedProcess

    Cli = Callable[..., CompletedProcess[str]]
    Line = Callable[[CompletedProcess[str]], str]
    Validate = Callable[[str, str], dict[str, object]]

HOSTILE = {
    "OSC 52 (clipboard)": b"\x1b]52;c;ZXZpbA==\x07",
    "OSC 0 (title)": b"\x1b]0;owned\x07",
    "cursor position report (types into the shell)": b"\x1b[6n",
    "DCS": b"\x1bP+q544e\x1b\\",
    "cursor up and erase": b"\x1b[1A\x1b[2K",
    "C1 CSI (UTF-8)": "\u009b6n".encode(),
    "BEL and DEL": b"\x07\x7f",
}


def _inert(data: bytes) -> bool:
    """No control character but tab, newline, carriage return and a complete SGR."""
    import re  # noqa: PLC0415 - test helper

    rest = re.sub(rb"\x1b\[[0-9;:]*m", b"", data)
    return not re.search(rb"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f]|\xc2[\x80-\x9f]", rest)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_the_filter_makes_each_sequence_visible_and_inert(name: str) -> None:
    raw = b"before " + HOSTILE[name] + b" after\n"
    assert not _inert(raw)  # control: the raw bytes would act
    out = Filter().feed(raw)
    assert _inert(out), out
    assert out.startswith(b"before ")
    assert out.endswith(b" after\n")
    assert b"^" in out  # shown, not dropped


def test_the_filter_keeps_text_colour_and_line_control() -> None:
    text = "naïve ✓ \x1b[1;31mred\x1b[0m\ttab\r\nnext\n".encode()
    assert Filter().feed(text) == text


def test_a_sequence_split_across_chunks_is_one_sequence() -> None:
    raw = b"x\x1b]52;c;ZXZp\x07\x1b[31mred\x1b[0m" + "\u009b".encode() + b"6n\x1b"
    for cut in range(1, len(raw)):
        f = Filter()
        out = f.feed(raw[:cut]) + f.feed(raw[cut:]) + f.flush()
        assert out == Filter().feed(raw[:-1]) + b"^[", cut


def _through_pty(exe: str, args: list[str], cwd: Path) -> bytes:
    """panday's output as a terminal receives it (stdout and stderr on a pty)."""
    leader, follower = pty.openpty()
    env = {**os.environ, "XDG_CONFIG_HOME": str(cwd / "no-user-config")}
    proc = subprocess.Popen(
        [exe, *args], stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, cwd=cwd, env=env
    )
    os.close(follower)
    out = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every writer closed the pty
                break
            if not chunk:
                break
            out += chunk
    finally:
        proc.wait(timeout=30)
        os.close(leader)
    return out


@pytest.mark.usefixtures("linux_tier")
def test_on_a_terminal_control_sequences_are_inert_by_default(exe: str, tmp_path: Path) -> None:
    payload = b"".join(HOSTILE.values())
    script = "printf '%s' \"$1\"; printf '%s' \"$1\" >&2; printf '\\033[32mok\\033[0m\\n'"
    args = ["run", "--", "sh", "-c", script, "sh", payload.decode()]
    control = _through_pty(exe, ["run", "--no-sanitize", *args[1:]], tmp_path)
    if HOSTILE["OSC 52 (clipboard)"] not in control:
        pytest.fail(f"inconclusive: control failed: {control!r}")
    seen = _through_pty(exe, args, tmp_path)
    assert _inert(seen), seen
    assert b"^[]52;c;ZXZpbA==^G" in seen
    assert b"\x1b[32mok\x1b[0m" in seen  # colour kept


@pytest.mark.usefixtures("linux_tier")
def test_sanitize_applies_to_pipes_and_no_sanitize_is_byte_for_byte(cli: Cli) -> None:
    script = "printf 'a\\033]0;t\\007b'"
    plain = cli("run", "--", "sh", "-c", script)
    assert plain.stdout == "a\x1b]0;t\x07b"  # not a terminal: unchanged by default
    assert cli("run", "--no-sanitize", "--", "sh", "-c", script).stdout == plain.stdout
    assert cli("run", "--sanitize", "--", "sh", "-c", script).stdout == "a^[]0;t^Gb"


def test_write_all_writes_more_than_one_write_can() -> None:
    # 2 GiB + 4 KiB of untouched anonymous memory (no resident cost), through a pipe whose
    # reader counts: a single write(2) returns at 0x7ffff000 bytes on Linux.
    size = (2 << 30) + 4096
    buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    r, w = os.pipe()
    got = [0]

    def count() -> None:
        while data := os.read(r, 1 << 20):
            got[0] += len(data)

    reader = threading.Thread(target=count)
    reader.start()
    try:
        write_all(w, memoryview(buf))
    finally:
        os.close(w)
        reader.join(120)
        os.close(r)
        buf.close()
    assert got[0] == size


def test_write_all_waits_on_a_non_blocking_descriptor() -> None:
    r, w = os.pipe()
    os.set_blocking(w, False)
    data = os.urandom(1 << 20)  # 16 pipe buffers: the first write stops at 64 KiB
    got = bytearray()

    def slow() -> None:
        while chunk := os.read(r, 4096):
            got.extend(chunk)
            time.sleep(0.0005)

    reader = threading.Thread(target=slow)
    reader.start()
    try:
        write_all(w, data)
    finally:
        os.close(w)
        reader.join(60)
        os.close(r)
    assert bytes(got) == data


@pytest.mark.usefixtures("linux_tier")
def test_json_through_a_non_blocking_pipe_is_written_whole(
    exe: str, tmp_path: Path, validate: Validate
) -> None:
    r, w = os.pipe()
    flags = fcntl.fcntl(w, fcntl.F_GETFL)
    fcntl.fcntl(w, fcntl.F_SETFL, flags | os.O_NONBLOCK)  # as node's child pipes leave it
    proc = subprocess.Popen(
        [exe, "run", "--json", "--", "head", "-c", "3000000", "/dev/zero"],
        stdout=w,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    os.close(w)
    out = bytearray()
    while chunk := os.read(r, 1 << 16):
        out.extend(chunk)
        time.sleep(0.001)  # a slow reader: the pipe fills, writes answer EAGAIN
    os.close(r)
    assert proc.stderr is not None
    with proc.stderr:
        err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    assert err == b""
    doc = validate(out.decode(), "cli-run")
    assert doc["stdout"] == "\u0000" * 3_000_000


@pytest.mark.usefixtures("linux_tier")
def test_a_json_document_that_cannot_be_built_is_refused(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def too_big(*_args: object) -> bytes:
        raise MemoryError

    monkeypatch.setattr("panday.cli.run._document", too_big)
    monkeypatch.chdir(tmp_path)
    code = cli.main(["run", "--json", "--", "true"])
    out, err = capfd.readouterr()
    assert code == exitcodes.OUTPUT_ERROR
    assert out == ""  # nothing half-written
    assert err.startswith("panday: cannot write standard output: the JSON document")
    assert "incomplete" in err


@pytest.mark.usefixtures("linux_tier")
def test_unbounded_limits_are_named_by_policy_check_and_doctor(
    cli: Cli, tmp_path: Path, validate: Validate
) -> None:
    policy = tmp_path / "unbounded.toml"
    policy.write_text('[limits]\nwall_clock_ms = "unbounded"\n')
    bounded = tmp_path / "bounded.toml"
    bounded.write_text("[limits]\npids = 64\n")
    control = cli("policy", "check", "--json", str(bounded))
    assert json.loads(control.stdout)["unbounded"] == []  # absent: the finite default
    checked = cli("policy", "check", str(policy))
    assert "unbounded: limits.wall_clock_ms: no ceiling at all" in checked.stdout
    doc = validate(cli("policy", "check", "--json", str(policy)).stdout, "cli-policy-check")
    assert doc["unbounded"] == ["limits.wall_clock_ms"]
    config = tmp_path / "config"
    (config / "panday").mkdir(parents=True)
    (config / "panday" / "policy.toml").write_text(policy.read_text())
    env = {**os.environ, "XDG_CONFIG_HOME": str(config)}
    doctor = cli("doctor", env=env)
    assert "unbounded: limits.wall_clock_ms: no ceiling at all" in doctor.stdout
    doctor_doc = validate(cli("doctor", "--json", env=env).stdout, "cli-doctor")
    assert doctor_doc["user_policy"] == {
        "path": str(config / "panday" / "policy.toml"),
        "present": True,
        "valid": True,
        "error": None,
        "unbounded": ["limits.wall_clock_ms"],
    }
