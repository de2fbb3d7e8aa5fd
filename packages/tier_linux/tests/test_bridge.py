"""The egress bridge end to end: real bwrap jails, a real curl, the real proxy. Loopback only.

The upstream is an HTTP server on the host's 127.0.0.1. The proxy's resolver is a table
(`StaticResolver`) that maps the test names to 127.0.0.1, and its connector refuses any
address off loopback, so nothing here asks real DNS or leaves this host, even with a guard
removed. The proxy refuses loopback answers unless that IP literal is allowlisted (see the
phase-1 proxy tests), so the positive-control policy lists 127.0.0.1 beside the name: in
this world 127.0.0.1 plays the public address.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday_core.capabilities import Support, check_policy
from panday_core.egress import AuditEvent, ProxySettings, StaticResolver
from panday_core.egress.testing import HttpUpstream, LoopbackOnly
from panday_core.errors import CommandNotFound, Internal, PolicyViolation
from panday_core.execution import acollect, collect
from panday_core.policy import FsPolicy, NetPolicy, SandboxPolicy
from panday_core.types import ExecSpec, SessionSpec
from panday_tier_linux import bridge, declared_capabilities, host_capabilities
from panday_tier_linux.sandbox import T2LinuxSandbox
from panday_tier_linux.session import open_session

if TYPE_CHECKING:
    from collections.abc import Iterator

    from panday_core.types import ExecResult
    from panday_tier_linux.session import LinuxSession

linux = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="T2 Linux runs on Linux only"
)
ALLOWED = "allowed.test"
OTHER = "other.test"
CURL = "/usr/bin/curl"


@pytest.fixture
def upstream() -> Iterator[HttpUpstream]:
    server = HttpUpstream()
    try:
        yield server
    finally:
        server.close()


class World:
    """One allowlist session's ingredients: policy, resolver, audit events."""

    def __init__(self, workspace: Path, upstream: HttpUpstream) -> None:
        self.workspace = workspace
        self.upstream = upstream
        self.events: list[AuditEvent] = []
        self.connector = LoopbackOnly()
        self.settings = ProxySettings(
            resolver=StaticResolver({ALLOWED: ["127.0.0.1"], OTHER: ["127.0.0.1"]}),
            audit=self.events.append,
            connector=self.connector,
        )

    def closed(self) -> list[AuditEvent]:
        """The close events: one per connection (an allowed tunnel also has an open one)."""
        return [e for e in list(self.events) if e.phase == "close"]

    def policy(self, *allow: str) -> SandboxPolicy:
        net = NetPolicy(allow=allow or (ALLOWED, "127.0.0.1"), ports=(self.upstream.port,))
        return SandboxPolicy(fs=FsPolicy(workspace=str(self.workspace)), net=net)

    def open(self, *allow: str) -> LinuxSession:
        return open_session(self.policy(*allow), egress=self.settings)

    def url(self, host: str) -> str:
        return f"http://{host}:{self.upstream.port}/"


@pytest.fixture
def world(tmp_path: Path, upstream: HttpUpstream) -> World:
    if not os.access(CURL, os.X_OK):
        pytest.fail(f"inconclusive: these tests need {CURL} (CI installs curl)")
    return World(tmp_path, upstream)


def curl(session: LinuxSession, *args: str, command_id: str | None = None) -> ExecResult:
    argv = (CURL, "-sS", "--max-time", "20", *args)
    spec = ExecSpec(argv=argv, timeout_ms=60_000, command_id=command_id)
    return collect(session.exec(spec))


def head_and_body(result: ExecResult) -> tuple[int, dict[str, str], bytes]:
    """curl -i output: (status, headers, body)."""
    head, _, body = result.stdout.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1]) if lines[0].startswith("HTTP/") else 0
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


# ---------------------------------------------------------------------- the capability data


def test_the_declared_table_enforces_the_allowlist_with_the_bridge() -> None:
    caps = declared_capabilities()
    for field in ("net.allow", "net.deny", "net.ports"):
        entry = caps.for_field(field)
        assert entry is not None
        assert entry.support is Support.STRICT, field
        assert "egress proxy" in entry.mechanism


def test_without_the_bridge_the_net_fields_are_refused_with_the_cause() -> None:
    caps = host_capabilities({}, bridge_reason="no interpreter for the relay")
    policy = SandboxPolicy(
        fs=FsPolicy(workspace="/w"),
        net=NetPolicy(allow=("api.github.com",), deny=("x.github.com",), ports=(443,)),
    )
    refused = check_policy(policy, caps)
    assert [r.field for r in refused] == ["net.allow", "net.deny", "net.ports"]
    assert all("no interpreter for the relay" in r.reason for r in refused)
    assert check_policy(policy, host_capabilities({}, bridge_reason=None)) == ()


@linux
def test_this_host_can_run_the_bridge() -> None:
    # The host's own suite fails (never skips) when the mechanism is missing.
    assert bridge.unavailable_reason() is None
    assert "enforced" in host_report_line()


def host_report_line() -> str:
    from panday_tier_linux import host_report  # noqa: PLC0415

    return host_report()["net.allow"]


@linux
def test_a_relay_that_could_not_set_up_is_an_error_not_a_result(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The relay says so on its report pipe; its stderr line is not what is read."""
    with world.open() as session:
        control = session.run(["/bin/true"])
        if control.exit_code != 0:
            pytest.fail(f"inconclusive: control failed: {control}")
        # The relay is told to listen on a port no jail may bind (below 1024, no
        # capabilities): its own setup fails, before any command could run.
        monkeypatch.setattr("panday_tier_linux.argv.HTTP_PORT", 80)
        with pytest.raises(Internal, match="egress relay inside the jail failed: cannot listen"):
            session.run(["/bin/true"])


@linux
def test_a_missing_program_is_reported_as_without_the_relay(world: World) -> None:
    """The tier raises `CommandNotFound` itself, with and without the relay: bwrap's status
    says its exec failed, the relay's report pipe says its exec failed."""
    plain = SandboxPolicy(fs=FsPolicy(workspace=str(world.workspace)))
    found: list[tuple[str, int, str]] = []
    for session in (open_session(plain), world.open()):
        with session:
            control = session.run(["/bin/true"])
            if control.exit_code != 0:
                pytest.fail(f"inconclusive: control failed: {control}")
            with pytest.raises(CommandNotFound) as failed:
                session.run(["no-such-program-here", "arg"])
            found.append((failed.value.program, failed.value.exit_code, failed.value.reason))
            with pytest.raises(CommandNotFound) as denied:
                session.run(["/etc"])  # exists, cannot be executed
            found.append((denied.value.program, denied.value.exit_code, denied.value.reason))
    assert found[0] == found[2] == ("no-such-program-here", 127, "not found inside the sandbox")
    assert found[1] == found[3]
    assert found[1][:2] == ("/etc", 126)


@linux
@pytest.mark.parametrize("code", [125, 1, 127])
def test_a_command_that_prints_setup_words_keeps_its_own_exit(world: World, code: int) -> None:
    """A command that writes exactly what bwrap or the relay write when they fail, and
    exits with their code, is still a command that ran: its output cannot change how its
    exit is classified, with or without the relay."""
    line = "bwrap: execvp no-such-program-here: No such file or directory"
    for setup in (line, "panday-relay: the relay loop did not start"):
        mimic = ["/bin/sh", "-c", f"echo '{setup}' >&2; exit {code}"]
        plain = SandboxPolicy(fs=FsPolicy(workspace=str(world.workspace)))
        for session in (open_session(plain), world.open()):
            with session:
                result = session.run(mimic)
            assert result.exit_code == code, result
            assert result.stderr == f"{setup}\n".encode()
            assert result.breach is None


# ---------------------------------------------------------------------- opening and closing


@linux
def test_a_proxy_that_cannot_start_refuses_the_allowlist(
    world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "gone"
    monkeypatch.setattr(bridge, "runtime_dir", lambda: str(missing))
    threads = threading.active_count()
    with pytest.raises(PolicyViolation) as refused:
        world.open()
    assert refused.value.field == "net.allow"
    assert "could not start" in refused.value.reason
    assert threading.active_count() == threads  # the proxy's thread did not stay behind


@linux
def test_a_workspace_around_the_bridge_is_refused(world: World) -> None:
    policy = SandboxPolicy(
        fs=FsPolicy(workspace="/run"), net=NetPolicy(allow=(ALLOWED,)), version=1
    )
    with pytest.raises(PolicyViolation) as refused:
        open_session(policy, egress=world.settings)
    assert refused.value.field == "fs.workspace"
    assert "'/run'" in refused.value.reason


@linux
def test_the_proxy_lives_in_a_private_directory_until_the_session_closes(world: World) -> None:
    with world.open() as session:
        assert session.bridge is not None
        directory = Path(session.bridge.directory)
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert stat.S_ISSOCK(Path(session.bridge.socket_path).stat().st_mode)
        assert session.bridge.alive
        proxy = session.bridge
    assert not proxy.alive
    assert not directory.exists()


# ---------------------------------------------------------------------- curl through the jail


@linux
def test_a_jailed_curl_reaches_an_allowlisted_host_over_http_connect_and_socks(
    world: World,
) -> None:
    with world.open() as session:
        plain = curl(session, world.url(ALLOWED), command_id="plain")
        tunnel = curl(session, "--proxytunnel", world.url(ALLOWED), command_id="tunnel")
        socks = collect(
            session.exec(
                ExecSpec(
                    argv=("/bin/sh", "-c", f'exec {CURL} -sS -x "$ALL_PROXY" {world.url(ALLOWED)}'),
                    command_id="socks",
                )
            )
        )
    for result in (plain, tunnel, socks):
        assert (result.exit_code, result.stdout) == (0, b"hello from the upstream\n"), result
    assert world.upstream.requests == [f"{ALLOWED}:{world.upstream.port}"] * 3
    allowed = [(e.command_id, e.protocol, e.verdict, e.address) for e in world.closed()]
    assert allowed == [
        ("plain", "http", "allowed", "127.0.0.1"),
        ("tunnel", "http-connect", "allowed", "127.0.0.1"),
        ("socks", "socks5", "allowed", "127.0.0.1"),
    ]
    assert world.connector.attempts == [("127.0.0.1", world.upstream.port)] * 3


@linux
def test_a_jailed_curl_is_refused_403_with_the_reason_for_another_host(world: World) -> None:
    with world.open(ALLOWED, "127.0.0.1") as session:
        ok = curl(session, "-i", world.url(ALLOWED))
        status, _, body = head_and_body(ok)
        if status != 200:  # the positive control: this session does reach the allowed host
            pytest.fail(f"inconclusive: control failed: the allowed host gave {ok!r}")
        refused = curl(session, "-i", world.url(OTHER))
        literal = curl(session, "-i", f"http://203.0.113.9:{world.upstream.port}/")
    status, headers, body = head_and_body(refused)
    assert status == 403
    assert headers["x-panday-refused"] == f"{OTHER} is not in net.allow"
    assert f"{OTHER} is not in net.allow".encode() in body
    status, headers, _ = head_and_body(literal)
    assert status == 403
    assert headers["x-panday-refused"] == "203.0.113.9 is not in net.allow"
    assert world.upstream.requests == [f"{ALLOWED}:{world.upstream.port}"]
    assert [e.verdict for e in world.closed()] == ["allowed", "refused", "refused"]
    assert world.connector.attempts == [("127.0.0.1", world.upstream.port)]


@linux
def test_each_command_gets_its_own_credentials(world: World) -> None:
    with world.open() as session:
        env = session.run(["/bin/sh", "-c", "echo $HTTP_PROXY; echo $ALL_PROXY; echo $NO_PROXY"])
        other = session.run(["/bin/sh", "-c", "echo $HTTP_PROXY"])
        with pytest.raises(ValueError, match="command_id"):
            curl(session, world.url(ALLOWED), command_id="no spaces allowed")
    http_url, socks_url, no_proxy = env.stdout.decode().split()
    assert http_url.startswith("http://cmd-1:")
    assert http_url.endswith("@127.0.0.1:3128")
    assert socks_url.startswith("socks5h://cmd-1:")
    assert socks_url.endswith("@127.0.0.1:1081")
    assert no_proxy == "localhost,127.0.0.1,::1"
    assert other.stdout.decode().startswith("http://cmd-2:")
    assert other.stdout.decode().split("@")[0] != http_url.split("@")[0]


@linux
def test_the_relay_listens_before_the_command_starts(world: World) -> None:
    """A peer fails about 5 % of immediate connections on a start-up race; here none may."""
    bash = shutil.which("bash") or "/bin/bash"
    probe = "exec 3<>/dev/tcp/127.0.0.1/3128 && exec 4<>/dev/tcp/127.0.0.1/1081 && echo up"
    with world.open() as session:
        results = [session.run([bash, "-c", probe]) for _ in range(20)]
    failures = [r for r in results if r.stdout != b"up\n"]
    assert failures == []


@linux
def test_the_command_starts_as_it_would_without_the_relay(world: World) -> None:
    """Same signal dispositions and mask, same parent (the jail's init), no children.

    Not a Python probe: Python ignores SIGPIPE itself, which would hide the relay's.
    """
    status = ["/bin/cat", "/proc/self/status"]
    children = ["/bin/sh", "-c", 'read -r c < /proc/$$/task/$$/children; echo "[$c]"']

    def seen(session: LinuxSession) -> tuple[list[str], bytes]:
        lines = session.run(status).stdout.decode().splitlines()
        wanted = [line for line in lines if line.startswith(("SigIgn", "SigBlk", "PPid"))]
        return wanted, session.run(children).stdout

    plain = SandboxPolicy(fs=FsPolicy(workspace=str(world.workspace)))
    with open_session(plain) as session:
        without = seen(session)
    with world.open() as session:
        with_relay = seen(session)
    assert len(without[0]) == 3, without
    assert without[1] == b"[]\n"
    assert with_relay == without


@linux
def test_the_async_protocol_carries_the_bridge(world: World) -> None:
    async def scenario() -> tuple[ExecResult, ExecResult]:
        sandbox = T2LinuxSandbox(egress=world.settings)
        handle = await sandbox.create(SessionSpec(policy=world.policy()))
        try:
            argv = (CURL, "-sS", "-o", "/dev/null", "-w", "%{http_code}")
            ok = await acollect(sandbox.exec(handle, ExecSpec(argv=(*argv, world.url(ALLOWED)))))
            no = await acollect(sandbox.exec(handle, ExecSpec(argv=(*argv, world.url(OTHER)))))
        finally:
            await sandbox.destroy(handle)
        return ok, no

    ok, no = asyncio.run(scenario())
    assert (ok.stdout, no.stdout) == (b"200", b"403")


@linux
def test_the_enforcement_report_holds_with_the_bridge(world: World) -> None:
    with world.open() as session:
        report = session.enforcement()
    assert report.problems() == []
    assert any(m.startswith("/run/panday ") and m.endswith(" ro") for m in report.mounts)
    net = next(n for n in report.namespaces if n.name == "net")
    assert net.isolated


# ---------------------------------------------------------------------- credentials per command


@linux
def test_a_commands_credentials_die_with_it(world: World) -> None:
    """A command leaves its proxy URL behind; a later command of the session gets 407 with
    it, while its own credentials pass. The audit log names each command truthfully."""
    saved = world.workspace / "left-behind"
    with world.open() as session:
        first = session.run(["/bin/sh", "-c", f'printf %s "$HTTP_PROXY" > {saved}'])
        assert first.exit_code == 0
        url = saved.read_text()
        assert url.startswith("http://cmd-1:")
        reuse = (
            f'{CURL} -sS -o /dev/null -w %{{http_code}} -x "$(cat {saved})" {world.url(ALLOWED)}'
        )
        own = f"{CURL} -sS -o /dev/null -w %{{http_code}} {world.url(ALLOWED)}"
        ok = session.run(["/bin/sh", "-c", own])
        if ok.stdout != b"200":  # the positive control: the session's own credentials pass
            pytest.fail(f"inconclusive: control failed: {ok!r}")
        stale = session.run(["/bin/sh", "-c", reuse])
    assert stale.stdout == b"407"
    closed = [(e.command_id, e.verdict, e.reason) for e in world.closed()]
    assert closed[0][:2] == ("cmd-2", "allowed")
    assert closed[1] == (None, "refused", "wrong proxy credentials")
    opened = [e for e in world.events if e.phase == "open"]
    assert [(e.command_id, e.host) for e in opened] == [("cmd-2", ALLOWED)]


@linux
def test_two_commands_under_one_id_share_the_credentials_until_both_end(
    world: World, upstream: HttpUpstream
) -> None:
    del upstream
    with world.open() as session:
        bridge_ = session.bridge
        assert bridge_ is not None
        env_a = bridge_.environment("shared")
        env_b = bridge_.environment("shared")
        assert env_a == env_b
        user, token = env_a["HTTP_PROXY"].removeprefix("http://").split("@")[0].split(":")
        assert bridge_.proxy.proxy.check_credentials((user, token)) == (True, "shared")
        bridge_.command_ended("shared")
        assert bridge_.proxy.proxy.check_credentials((user, token)) == (True, "shared")
        bridge_.command_ended("shared")
        assert bridge_.proxy.proxy.check_credentials((user, token)) == (False, None)
