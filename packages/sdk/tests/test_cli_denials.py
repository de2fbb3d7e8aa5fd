"""Denials you can see (issue 27, 7): the egress proxy's refusals of a `panday run`
command reach its caller: one summary line on stderr after the command, every event in
``--json``'s ``events`` and in ``--audit FILE`` as JSON lines. The positive control is the
same request to a host the policy allows (a loopback server this test starts, allowed by
its IP literal), which goes through and is recorded as allowed. No name is resolved: the
proxy refuses a host outside net.allow before looking it up."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/self").exists(), reason="the egress bridge is T2 Linux's"
)

# Through the proxy panday names in http_proxy, also for 127.0.0.1 (which no_proxy and
# urllib's defaults would otherwise send straight to the jail's own loopback).
_FETCH = """
import os, sys, urllib.request
for name in ("no_proxy", "NO_PROXY"):
    os.environ.pop(name, None)
proxy = urllib.request.ProxyHandler({"http": os.environ["http_proxy"]})
opener = urllib.request.build_opener(proxy)
for url in sys.argv[1:]:
    try:
        with opener.open(url, timeout=20) as answer:
            print("status", answer.status)
    except Exception as exc:
        print("error", exc)
"""


def _run(exe: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(cwd / "no-config")}
    return subprocess.run(
        [exe, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def server() -> object:
    class Quiet(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
            del format, args

    made = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=made.serve_forever, daemon=True)
    thread.start()
    yield made
    made.shutdown()
    made.server_close()
    thread.join(timeout=10)


def _fetch(*urls: str) -> tuple[str, ...]:
    return ("--", "/usr/bin/python3", "-c", _FETCH, *urls)


def _policy(tmp_path: Path, port: int) -> str:
    """A policy allowing this test's loopback server, by IP literal and port."""
    path = tmp_path / "policy.toml"
    path.write_text(
        f'[fs]\nworkspace = "{tmp_path}"\n[net]\nallow = ["127.0.0.1"]\nports = [{port}, 80]\n'
    )
    return str(path)


def test_a_refused_connection_is_summed_up_after_the_command(
    exe: str, tmp_path: Path, server: http.server.ThreadingHTTPServer
) -> None:
    port = server.server_address[1]
    policy = _policy(tmp_path, port)
    allowed = _run(exe, tmp_path, "run", "--policy", policy, *_fetch(f"http://127.0.0.1:{port}/"))
    assert allowed.returncode == 0, allowed.stderr
    assert "status 200" in allowed.stdout, "control: the allowed request went through"
    assert "refused" not in allowed.stderr
    refused = _run(exe, tmp_path, "run", "--policy", policy, *_fetch("http://evil.test/"))
    assert refused.returncode == 0, refused.stderr
    assert "403" in refused.stdout
    assert (
        "panday: 1 connection(s) refused by the egress proxy: evil.test:80 "
        "(evil.test is not in net.allow)"
    ) in refused.stderr


def test_json_and_the_audit_file_carry_every_event(
    exe: str, tmp_path: Path, server: http.server.ThreadingHTTPServer
) -> None:
    port = server.server_address[1]
    audit = tmp_path / "audit.jsonl"
    done = _run(
        exe, tmp_path, "run", "--json", "--policy", _policy(tmp_path, port), "--audit",
        str(audit), *_fetch(f"http://127.0.0.1:{port}/", "http://evil.test/"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    closes = [e for e in report["events"] if e["phase"] == "close"]
    verdicts = sorted((e["host"], e["verdict"]) for e in closes)
    assert verdicts == [("127.0.0.1", "allowed"), ("evil.test", "refused")]
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert sorted((e["host"], e["verdict"]) for e in lines if e["phase"] == "close") == verdicts


def test_an_audit_file_that_cannot_be_written_is_one_line_before_anything_runs(
    exe: str, tmp_path: Path
) -> None:
    done = _run(exe, tmp_path, "run", "--audit", "/nonexistent/dir/a.jsonl", "--", "touch", "ran")
    assert done.returncode == 66, done.stderr
    assert "--audit '/nonexistent/dir/a.jsonl'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ran").exists()


def test_json_gets_a_document_when_the_command_never_ran(exe: str, tmp_path: Path) -> None:
    """Issue 27, 8: a harness that reads --json's stdout gets a document with the error,
    not an empty stdout (the control: a command that runs has no error)."""
    ran = _run(exe, tmp_path, "run", "--json", "--", "true")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["error"] is None
    missing = _run(exe, tmp_path, "run", "--json", "--", "no-such-program-here")
    assert missing.returncode == 127
    report = json.loads(missing.stdout)
    assert report["panday_exit_code"] == 127
    assert "not found inside the sandbox" in report["error"]
    assert "not found inside the sandbox" in missing.stderr
    refused = _run(exe, tmp_path, "run", "--json", "--ro", "/etc", "--", "true")
    assert refused.returncode == 77
    assert "fs.staged_ro[0]" in json.loads(refused.stdout)["error"]
