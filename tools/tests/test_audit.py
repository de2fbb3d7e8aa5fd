"""The audit gate fails closed: a vulnerable pin, a silent or unreachable service, an
un-auditable requirement and an expired exception each turn it red; each red case has a
positive control showing the same run passes when only that one thing is fixed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import socket
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import audit
from gatelib import GateError, canonical, workspace_members

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from conftest import RunGate

FIXTURE_DB = Path(__file__).parent / "fixtures" / "advisories"
VULNERABLE = "requests==2.19.0\n"
FIXED = "requests==2.32.3\n"

# Slow: each case runs pip-audit against a loopback service (about 9 s in all). The
# `tests` gate leaves them to CI and to PANDAY_SLOW_TESTS=1 (.ci/run sets it).
pytestmark = pytest.mark.slow


def _audit(run_gate: RunGate, tmp_path: Path, requirements: str, *args: str) -> tuple[int, str]:
    req = tmp_path / "requirements.txt"
    req.write_text(requirements, encoding="utf-8")
    exceptions = tmp_path / "exceptions.toml"
    if not exceptions.exists():
        exceptions.write_text("", encoding="utf-8")
    argv = ["-r", str(req), "--exceptions", str(exceptions), "--timeout", "5", *args]
    return run_gate(audit.main, argv)


def test_vulnerable_pin_turns_the_gate_red_offline(run_gate: RunGate, tmp_path: Path) -> None:
    code, out = _audit(run_gate, tmp_path, FIXED, "--advisory-db", str(FIXTURE_DB))
    if code != 0:
        pytest.fail(f"inconclusive: control failed, a fixed requests did not pass:\n{out}")
    assert "offline snapshot" in out
    assert "taken 2024-01-01" in out
    code, out = _audit(run_gate, tmp_path, VULNERABLE, "--advisory-db", str(FIXTURE_DB))
    assert code == 1
    assert "requests==2.19.0: PANDAY-TEST-2018-1" in out
    assert "fixed in 2.20.0" in out


def test_vulnerable_pin_is_red_against_the_real_snapshot(run_gate: RunGate, tmp_path: Path) -> None:
    db = os.environ.get("PANDAY_ADVISORY_DB")
    if not db:
        pytest.skip(
            "PANDAY_ADVISORY_DB is not set (.ci/run sets it); the fixture test covers the logic"
        )
    code, out = _audit(run_gate, tmp_path, FIXED, "--advisory-db", db)
    if code != 0:
        pytest.fail(f"inconclusive: control failed against {db}:\n{out}")
    code, out = _audit(run_gate, tmp_path, VULNERABLE, "--advisory-db", db)
    assert code == 1
    assert "CVE-2018-18074" in out


@contextmanager
def _stub_service(respond: Callable[[BaseHTTPRequestHandler, bytes], None]) -> Generator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - base class name
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            respond(self, body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/query"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _answer(status: int, payload: bytes) -> Callable[[BaseHTTPRequestHandler, bytes], None]:
    def respond(handler: BaseHTTPRequestHandler, _body: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    return respond


@pytest.mark.parametrize(
    ("status", "payload"),
    [(200, b"{}"), (200, b""), (200, b'{"vulns": []}'), (503, b"")],
    ids=["empty-object", "empty-body", "no-vulns", "http-503"],
)
def test_service_that_answers_nothing_turns_the_gate_red(
    run_gate: RunGate, tmp_path: Path, status: int, payload: bytes
) -> None:
    with _stub_service(_answer(status, payload)) as url:
        code, out = _audit(run_gate, tmp_path, FIXED, "--service-url", url)
    assert code == 1
    assert "advisory service" in out
    assert "0 known vulnerabilities" not in out


def test_a_snapshot_that_knows_only_some_canaries_turns_the_gate_red(
    run_gate: RunGate, tmp_path: Path
) -> None:
    # A snapshot cut down to one package's advisories would be silent about every other
    # pin (jinja2==2.10 passed that way): the canaries span eight packages.
    cut = tmp_path / "cut"
    shutil.copytree(FIXTURE_DB / "vulns" / "requests", cut / "vulns" / "requests")
    code, out = _audit(run_gate, tmp_path, "jinja2==2.10\n", "--advisory-db", str(cut))
    assert code == 1
    assert "positive control failed" in out
    assert "jinja2==2.10" in out
    assert "7 of 8 releases with published advisories" in out
    # Control: the full fixture snapshot knows every canary, and then the pin is found.
    code, out = _audit(run_gate, tmp_path, "jinja2==2.10\n", "--advisory-db", str(FIXTURE_DB))
    assert code == 1
    assert "jinja2==2.10: PANDAY-TEST-CANARY-" in out


def test_no_network_says_how_to_audit_offline(
    run_gate: RunGate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:  # nothing listens here: as if OSV could not be reached
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(audit, "ONLINE_URL", f"http://127.0.0.1:{port}/v1/query")
    monkeypatch.delenv("PANDAY_ADVISORY_DB", raising=False)
    code, out = _audit(run_gate, tmp_path, FIXED)
    assert code == 1
    assert "unreachable" in out
    assert "set PANDAY_ADVISORY_DB to an OSV snapshot" in out


def test_unreachable_service_turns_the_gate_red(run_gate: RunGate, tmp_path: Path) -> None:
    with socket.socket() as sock:  # a loopback port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, out = _audit(
        run_gate, tmp_path, FIXED, "--service-url", f"http://127.0.0.1:{port}/v1/query"
    )
    assert code == 1
    assert "unreachable" in out


def test_service_failing_after_the_positive_control_turns_pip_audit_red(
    run_gate: RunGate, tmp_path: Path
) -> None:
    canary = b'{"vulns": [{"id": "PYSEC-2018-28"}]}'

    def respond(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        query = json.loads(body)
        ok = (query["package"]["name"], query["version"]) in audit.CANARIES
        _answer(200 if ok else 500, canary if ok else b"")(handler, body)

    with _stub_service(respond) as url:
        code, out = _audit(run_gate, tmp_path, FIXED, "--service-url", url)
    assert code == 1
    assert "pip-audit could not complete the audit" in out


@pytest.mark.parametrize("line", ["requests>=2", "-e ./packages/core", "requests"])
def test_requirement_that_cannot_be_audited_turns_the_gate_red(
    run_gate: RunGate, tmp_path: Path, line: str
) -> None:
    code, out = _audit(run_gate, tmp_path, f"{line}\n", "--advisory-db", str(FIXTURE_DB))
    assert code == 1
    assert "cannot audit" in out


def _exception(tmp_path: Path, expires: dt.date) -> None:
    (tmp_path / "exceptions.toml").write_text(
        "[[exception]]\n"
        'id = "PANDAY-TEST-ALIAS-1"\n'
        'package = "Requests"\n'
        'reason = "test: accepted on purpose"\n'
        f"expires = {expires.isoformat()}\n",
        encoding="utf-8",
    )


def test_exception_with_reason_and_expiry_accepts_a_finding(
    run_gate: RunGate, tmp_path: Path
) -> None:
    _exception(tmp_path, dt.datetime.now(tz=dt.UTC).date() + dt.timedelta(days=30))
    code, out = _audit(run_gate, tmp_path, VULNERABLE, "--advisory-db", str(FIXTURE_DB))
    assert code == 0, out
    assert "accepted PANDAY-TEST-ALIAS-1 in requests==2.19.0" in out
    assert "1 accepted by exceptions" in out


def test_expired_exception_turns_the_gate_red(run_gate: RunGate, tmp_path: Path) -> None:
    _exception(tmp_path, dt.datetime.now(tz=dt.UTC).date() - dt.timedelta(days=1))
    code, out = _audit(run_gate, tmp_path, VULNERABLE, "--advisory-db", str(FIXTURE_DB))
    assert code == 1
    assert "expired" in out


def test_exception_without_a_reason_is_refused(run_gate: RunGate, tmp_path: Path) -> None:
    (tmp_path / "exceptions.toml").write_text(
        '[[exception]]\nid = "X"\npackage = "requests"\nexpires = 2099-01-01\n', encoding="utf-8"
    )
    code, out = _audit(run_gate, tmp_path, FIXED, "--advisory-db", str(FIXTURE_DB))
    assert code == 1
    assert "reason" in out


def test_lock_export_excludes_exactly_the_workspace_packages() -> None:
    pins, excluded = audit.locked_pins()
    members = {canonical(m.name) for m in workspace_members()}
    assert {canonical(e) for e in excluded} == members
    assert members.isdisjoint({p.name for p in pins})
    assert len(pins) > 10


def test_batches_never_name_a_package_twice() -> None:
    pins = [audit.Pin("a", "1"), audit.Pin("a", "2"), audit.Pin("b", "1"), audit.Pin("a", "1")]
    batches = audit.batches(pins)
    flat = [p for b in batches for p in b]
    assert len(flat) == len(set(flat)) == len(set(pins))
    for batch in batches:
        assert len({p.name for p in batch}) == len(batch)


def test_a_pin_missing_from_the_report_or_skipped_fails() -> None:
    pins = [audit.Pin("requests", "2.32.3"), audit.Pin("idna", "3.7")]
    both = [audit.Dep("requests", "2.32.3"), audit.Dep("idna", "3.7")]
    assert audit.findings_of(pins, both) == []  # control: a complete report passes
    with pytest.raises(GateError, match=r"idna==3\.7"):
        audit.findings_of(pins, both[:1])
    skipped = [both[0], audit.Dep("idna", "3.7", skip_reason="could not be audited")]
    with pytest.raises(GateError, match="could not be audited"):
        audit.findings_of(pins, skipped)
