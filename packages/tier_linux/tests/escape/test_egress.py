"""Escape probes for sessions with an allowlist: the egress proxy must be the only way out.

A session with ``net.allow`` keeps ``--unshare-net`` but gains a relay on its own loopback,
the proxy's unix socket and AF_INET sockets. These probes try every other way: connecting
directly while ignoring the proxy variables, UDP and DNS, reaching a host loopback service
*through* the proxy, using the proxy from outside the jail without the token, and going on
after the proxy died. Each must-fail probe has its positive control: the same operation
outside the jail, or through the proxy with the permission granted.

Every target is a listener this test runs on 127.0.0.1 or ::1; test names are answered by
the proxy's table resolver (no real DNS); the proxy's connector refuses anything off
loopback. Nothing here sends a packet anywhere else.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    from conftest import Escape, Listener, Outcome, PolicyOptions  # the suite's fixture types

    from panday_core.types import ExecResult

ALLOWED = "allowed.test"
WAIT_S = 30.0

# Probe helpers that run inside the jail (after the suite's PRELUDE): talk to the relay the
# way a tool does, with the credentials from the jail's own proxy variables.
PROXY = r'''
import base64, urllib.parse
def proxy_url(var="HTTP_PROXY"):
    return urllib.parse.urlsplit(os.environ[var])
def basic(url):
    return base64.b64encode(f"{url.username}:{url.password}".encode()).decode()
def read_head(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return data
def refused_why(head):
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"x-panday-refused:"):
            return line.split(b":", 1)[1].strip().decode()
    return ""
def connect_via(target, auth=True):
    """CONNECT through the relay: (status line, refusal reason)."""
    url = proxy_url()
    s = socket.create_connection((url.hostname, url.port), timeout=15)
    head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
    if auth:
        head += f"Proxy-Authorization: Basic {basic(url)}\r\n"
    s.sendall((head + "\r\n").encode())
    answer = read_head(s)
    s.close()
    return answer.split(b"\r\n", 1)[0].decode(), refused_why(answer)
def socks_via(host, port):
    """SOCKS5 CONNECT (domain form) through the relay: the reply code, or None."""
    url = proxy_url("ALL_PROXY")
    s = socket.create_connection((url.hostname, url.port), timeout=15)
    s.sendall(b"\x05\x01\x02")
    if s.recv(2) != b"\x05\x02":
        return None
    user, password = url.username.encode(), url.password.encode()
    s.sendall(bytes((1, len(user))) + user + bytes((len(password),)) + password)
    if s.recv(2) != b"\x01\x00":
        return None
    name = host.encode()
    s.sendall(bytes((5, 1, 0, 3, len(name))) + name + port.to_bytes(2, "big"))
    reply = s.recv(4)
    s.close()
    return reply[1] if len(reply) > 1 else None
'''


def _host(address: object) -> tuple[str, int]:
    """(host, port) of a listener's address (an IPv6 one carries flow info and scope too)."""
    assert isinstance(address, tuple)
    parts = cast("tuple[object, ...]", address)
    return str(parts[0]), int(cast("int", parts[1]))


def _target(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _through_proxy(target: str) -> str:
    return (
        PROXY
        + f"""
line, why = connect_via({target!r})
if " 200 " in line + " ":
    ok(line)
blocked(f"{{line}} / {{why}}")
"""
    )


def _granted(esc: Escape, host: str, port: int) -> PolicyOptions:
    """A policy whose allowlist admits `host` (a loopback literal) under ALLOWED's name."""
    esc.names[ALLOWED] = [host]
    return {"allow": [ALLOWED, host], "ports": [port]}


# ---------------------------------------------------------------------- no other route


@pytest.mark.parametrize("kind", ["tcp4", "tcp6"])
def test_a_direct_connection_ignoring_the_proxy_reaches_nothing(
    esc: Escape, listen: Callable[[str], Listener], kind: str
) -> None:
    server = listen(kind)
    host, port = _host(server.address)
    family = "AF_INET" if kind == "tcp4" else "AF_INET6"
    direct = f"""
s = socket.socket(socket.{family}, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect({(host, port)!r})
except OSError as exc:
    blocked(err(exc))
ok("connected directly")
"""
    esc.control(esc.outside(direct))
    options = _granted(esc, host, port)
    with esc.open(**options) as session:
        # Positive control: this very session reaches the listener, through the proxy.
        through = session.run(esc.py(_through_proxy(_target(ALLOWED, port))), timeout_ms=60_000)
        esc.control(
            esc.parse("through the proxy", through.stdout, through.stderr, through.exit_code)
        )
        server.settle()
        accepted = server.accepted
        result = session.run(esc.py(direct), timeout_ms=60_000)
    esc.must_block(esc.parse("inside the jail", result.stdout, result.stderr, result.exit_code))
    server.settle()
    assert server.accepted == accepted, "the host listener saw a direct connection from the jail"


@pytest.mark.parametrize("kind", ["udp4", "udp6"])
def test_udp_and_dns_queries_never_leave_an_allowlisted_jail(
    esc: Escape, listen: Callable[[str], Listener], kind: str
) -> None:
    """A "resolver" on the host's loopback: a DNS query to it (UDP) must never arrive."""
    server = listen(kind)
    family = "AF_INET" if kind == "udp4" else "AF_INET6"
    # A DNS query for allowed.test (id 0x5044, recursion desired, one A question).
    query = (
        b"\x50\x44\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07allowed\x04test\x00\x00\x01\x00\x01"
    )
    code = f"""
s = socket.socket(socket.{family}, socket.SOCK_DGRAM)
try:
    for _ in range(3):
        s.sendto({query!r}, {server.address!r})
except OSError as exc:
    blocked(err(exc))
ok("sent")  # sending proves nothing by itself; the listener below is the judge
"""
    outside = esc.outside(code)
    server.settle()
    esc.control(outside)
    if not server.received:
        pytest.fail("inconclusive: control failed: the host listener received nothing from outside")
    server.received.clear()
    esc.names[ALLOWED] = ["127.0.0.1"]
    esc.inside(code, allow=[ALLOWED, "127.0.0.1"])
    server.settle()
    assert not server.received, f"ESCAPE: the host listener received {server.received!r}"
    esc.held()


def test_names_are_resolved_by_the_proxy_only(
    esc: Escape, listen: Callable[[str], Listener]
) -> None:
    server = listen("tcp4")
    host, port = _host(server.address)
    options = _granted(esc, host, port)
    resolve = f"""
try:
    socket.getaddrinfo({ALLOWED!r}, 80)
except OSError as exc:
    if os.path.exists("/etc/resolv.conf"):
        ok("failed, but a resolver is configured: " + err(exc))
    blocked(f"no resolver inside: {{exc}}")
ok("the jail resolved a name itself")
"""
    with esc.open(**options) as session:
        # Positive control: the name resolves, at the proxy, and the tunnel is made.
        through = session.run(esc.py(_through_proxy(_target(ALLOWED, port))), timeout_ms=60_000)
        esc.control(
            esc.parse("through the proxy", through.stdout, through.stderr, through.exit_code)
        )
        result = session.run(esc.py(resolve), timeout_ms=60_000)
    esc.must_block(esc.parse("inside the jail", result.stdout, result.stderr, result.exit_code))


def test_an_allowlisted_jail_has_only_its_own_loopback(esc: Escape) -> None:
    code = """
names = [l.split(":", 1)[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
routes = open("/proc/net/route").read().splitlines()[1:]
if any(n != "lo" for n in names) or routes:
    ok(f"interfaces {names}, {len(routes)} IPv4 routes")
blocked(f"interfaces {names}, no IPv4 route")
"""
    esc.control(esc.outside(code))
    esc.must_block(esc.inside(code, allow=[ALLOWED]))


def test_an_allowlist_admits_inet_sockets_and_nothing_more(esc: Escape) -> None:
    families = esc.families_probe(
        ("AF_NETLINK", "AF_PACKET", "AF_VSOCK", "AF_ALG", "AF_BLUETOOTH", "AF_X25")
    )
    esc.control(esc.outside(families))
    inet = """
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close()
except OSError as exc:
    blocked(err(exc))
ok("AF_INET and AF_INET6")
"""
    esc.control(esc.inside(inet, allow=[ALLOWED]))
    esc.must_block(esc.inside(families, allow=[ALLOWED]))


# ---------------------------------------------------------------------- through the proxy


@pytest.mark.parametrize("kind", ["tcp4", "tcp6"])
def test_a_host_loopback_service_cannot_be_reached_through_the_proxy(
    esc: Escape, listen: Callable[[str], Listener], kind: str
) -> None:
    server = listen(kind)
    host, port = _host(server.address)
    reach = (
        PROXY
        + f"""
seen = []
for target in ({_target(ALLOWED, port)!r}, {_target(host, port)!r}, "localhost:{port}"):
    line, why = connect_via(target)
    seen.append(f"{{target}}: {{line}} ({{why}})")
    if " 200 " in line + " ":
        ok("; ".join(seen))
code = socks_via({host!r}, {port})
seen.append(f"socks5 {host}: reply {{code}}")
if code == 0:
    ok("; ".join(seen))
blocked("; ".join(seen))
"""
    )
    # Positive control: with the loopback literal itself allowlisted, the service answers.
    esc.control(esc.inside(reach, **_granted(esc, host, port)))
    server.settle()
    accepted, attempts = server.accepted, len(esc.connector.attempts)
    # The allowlist names only ALLOWED, which resolves to the host's loopback: refused.
    outcome = esc.inside(reach, allow=[ALLOWED], ports=[port])
    esc.must_block(outcome)
    assert "loopback address" in outcome.detail
    server.settle()
    assert server.accepted == accepted, "the host's loopback service saw a connection"
    assert len(esc.connector.attempts) == attempts, "the proxy tried to connect"


def test_the_proxy_refuses_a_host_process_without_the_token(
    esc: Escape, listen: Callable[[str], Listener]
) -> None:
    server = listen("tcp4")
    host, port = _host(server.address)
    # Outside the jail: hand a loopback TCP connection to the proxy's socket, as the relay
    # does, then CONNECT with the credentials in $AUTH (or none).
    outside = """
import base64
path, target, auth = sys.argv[1], sys.argv[2], os.environ.get("AUTH", "")
with socket.socket() as listener:
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    ours = socket.create_connection(listener.getsockname(), timeout=10)
    theirs, _ = listener.accept()
relay = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
relay.connect(path)
rights = theirs.fileno().to_bytes(4, sys.byteorder)
relay.sendmsg([b"C"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
theirs.close()
head = f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n"
if auth:
    head += "Proxy-Authorization: Basic " + base64.b64encode(auth.encode()).decode() + "\\r\\n"
ours.sendall((head + "\\r\\n").encode())
answer = ours.recv(4096).split(b"\\r\\n", 1)[0].decode()
if " 200 " in answer + " ":
    ok(answer)
blocked(answer)
"""
    options = _granted(esc, host, port)
    target = _target(ALLOWED, port)
    with esc.open(**options) as session, esc.open(**options) as neighbour:
        assert session.bridge is not None
        assert neighbour.bridge is not None
        path = session.bridge.socket_path
        mode = stat.S_IMODE(Path(session.bridge.directory).stat().st_mode)
        assert mode == 0o700, "the proxy's socket must sit in a private directory"

        def attempt(auth: str) -> Outcome:
            argv = esc.py(outside)
            return esc.outside_run([*argv, path, target], env={**os.environ, "AUTH": auth})

        user, token = session.bridge.proxy.credentials("cmd-9")
        esc.control(attempt(f"{user}:{token}"))
        wrong = [
            "",
            f"{user}:{'0' * len(token)}",
            "session:" + neighbour.bridge.proxy.credentials()[1],
            "cmd-8:" + token,
        ]
        for auth in wrong:
            outcome = attempt(auth)
            esc.must_block(outcome)
            assert "407" in outcome.detail


# ---------------------------------------------------------------------- a dead proxy


def test_a_dead_proxy_leaves_the_jail_without_any_route(
    esc: Escape, listen: Callable[[str], Listener]
) -> None:
    server = listen("tcp4")
    host, port = _host(server.address)
    options = _granted(esc, host, port)
    ready, go = esc.ws / "ready", esc.ws / "go"
    probe = (
        PROXY
        + f"""
import time
if sys.argv[1] == "mid":  # a command running when the proxy dies: it had a tunnel before
    first, _ = connect_via({_target(ALLOWED, port)!r})
    if " 200 " not in first + " ":
        print("RESULT control-failed", first, flush=True)
        sys.exit(0)
    open({str(ready)!r}, "w").close()
    deadline = time.monotonic() + {WAIT_S}
    while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:
        time.sleep(0.02)
line, why = connect_via({_target(ALLOWED, port)!r})
if " 200 " in line + " ":
    ok("the proxy still answered: " + line)
if "egress proxy cannot be reached" not in why:
    ok("no reason given: " + line)
s = socket.socket()
s.settimeout(5)
try:
    s.connect({(host, port)!r})
except OSError as exc:
    blocked(f"{{line}} ({{why}}); direct: {{err(exc)}}")
ok("a direct route appeared")
"""
    )
    with esc.open(**options) as session:
        assert session.bridge is not None
        results: list[ExecResult] = []
        running = threading.Thread(
            target=lambda: results.append(session.run([*esc.py(probe), "mid"], timeout_ms=120_000)),
            daemon=True,
        )
        running.start()
        deadline = time.monotonic() + WAIT_S
        while not ready.exists() and running.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not ready.exists():
            running.join(WAIT_S)
            pytest.fail(f"inconclusive: control failed: no tunnel before the kill: {results!r}")
        session.bridge.proxy.close()  # the proxy dies mid-command
        assert not session.bridge.alive
        go.touch()
        running.join(WAIT_S * 2)
        assert results, "the probe did not finish"
        during = results[0]
        after = session.run([*esc.py(probe), "late"], timeout_ms=120_000)
    esc.must_block(
        esc.parse("after the proxy died", during.stdout, during.stderr, during.exit_code)
    )
    # A command started after the death: the relay answers with the reason; no route.
    late = esc.parse("started after the proxy died", after.stdout, after.stderr, after.exit_code)
    esc.must_block(late)
    server.settle()
    assert server.accepted == 1, "only the control's tunnel may have reached the listener"


# ---------------------------------------------------------------------- hostile load (issue 14)

# The caller of a session, in a process of its own whose soft RLIMIT_NOFILE is 1,024: it
# opens a session with an allowlist, starts the jailed probe (argv[3]) in a thread, waits
# for the probe's "ready" file, then looks at itself (its descriptors, its memory) and
# makes a request from another command. One JSON line reports what it saw.
HOSTILE_CALLER = r"""
CURL_MAX_S, HEAD_TIMEOUT_S = 20, 90
import asyncio, json, os, resource, socket, subprocess, sys, threading, time
mode, ws, probe = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "floor":  # soft = hard (root here, Docker's default): nothing can be raised
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    import select
    held = [socket.socket() for _ in range(1100)]  # positive control: past 1,024, select fails
    fd = os.open("/dev/null", os.O_RDONLY)
    try:
        select.select([fd], [], [], 0)
        floor_control = [fd, "ok"]
    except ValueError as exc:
        floor_control = [fd, str(exc)]
    os.close(fd)
    for s in held:
        s.close()
else:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
from panday_core.egress import ProxyLimits, ProxySettings, StaticResolver
from panday_core.egress.testing import HttpUpstream, LoopbackOnly
from panday_core.policy import FsPolicy, NetPolicy, SandboxPolicy
from panday_tier_linux.session import open_session

def rss_kib():
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) for l in fh if l.startswith("VmRSS:"))

class Half(asyncio.Protocol):
    # Echoes; keeps its own side open when the client half-closes.
    def connection_made(self, transport):
        self.transport = transport
    def data_received(self, data):
        self.transport.write(data)
    def eof_received(self):
        return True

if mode in ("flood", "floor"):
    upstream = HttpUpstream()
    port = upstream.port
else:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    server = asyncio.run_coroutine_threadsafe(
        loop.create_server(Half, "127.0.0.1", 0), loop).result(10)
    port = server.sockets[0].getsockname()[1]
events = []
# In the flood, a credential-less connection is reaped only by the head timeout. Made
# longer than curl's --max-time, a request that had to wait for the flood to be reaped can
# only fail (status 000), however fast or slow this machine is at the moment.
limits = ProxyLimits(head_timeout=HEAD_TIMEOUT_S) if mode == "flood" else None
settings = ProxySettings(
    resolver=StaticResolver({"allowed.test": ["127.0.0.1"]}),
    connector=LoopbackOnly(),
    audit=events.append,
    limits=limits,
)
net = NetPolicy(allow=("allowed.test", "127.0.0.1"), ports=(port,))
policy = SandboxPolicy(fs=FsPolicy(workspace=ws), net=net)
ready, go = os.path.join(ws, "ready"), os.path.join(ws, "go")
curl = ["/usr/bin/curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time",
        str(CURL_MAX_S), f"http://allowed.test:{port}/"]
out = {}
with open_session(policy, egress=settings) as session:
    if mode in ("flood", "floor"):
        controls = []
        for _ in range(3):  # the same request before the flood, timed on this machine now
            start = time.monotonic()
            out["control"] = session.run(curl).stdout.decode()
            controls.append(time.monotonic() - start)
            if out["control"] != "200":
                break
        out["control_took"] = max(controls)
    out["rss_before"] = rss_kib()
    done = {}
    def jailed():
        done["result"] = session.run(["/usr/bin/python3", "-I", "-c", probe, str(port)],
                                     timeout_ms=180_000)
    worker = threading.Thread(target=jailed, daemon=True)
    worker.start()
    deadline = time.monotonic() + 120
    while not os.path.exists(ready) and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    out["ready"] = open(ready).read() if os.path.exists(ready) else None
    if mode == "floor":
        out["floor_control"] = floor_control
        out["status"] = session.run(curl).stdout.decode()
        fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(8)]
        out["fds"] = fds
        try:
            select.select(fds, [], [], 0)
            out["select"] = "ok"
        except ValueError as exc:
            out["select"] = str(exc)
        for fd in fds:
            os.close(fd)
    elif mode == "flood":
        errors, stop = [], threading.Event()
        def work():
            while not stop.is_set():
                try:
                    with open("/etc/hostname", "rb"):
                        pass
                    a, b = socket.socketpair()
                    a.close()
                    b.close()
                except OSError as exc:
                    errors.append(str(exc))
                time.sleep(0.005)
        busy = threading.Thread(target=work, daemon=True)
        busy.start()
        start = time.monotonic()
        out["status"] = session.run(curl).stdout.decode()
        out["took"] = time.monotonic() - start
        try:
            subprocess.run(["/bin/true"], check=True, timeout=30)
            out["caller"] = "ok"
        except OSError as exc:
            out["caller"] = str(exc)
        stop.set()
        busy.join(10)
        out["errors"] = errors[:3]
        out["events"] = len(events)
    else:
        out["rss_half"] = rss_kib()
    open(go, "w").close()
    worker.join(120)
    result = done.get("result")
    out["probe"] = None if result is None else [result.exit_code, result.stderr.decode()[-300:]]
print(json.dumps(out), flush=True)
"""

FLOOD_PROBE = r"""
import os, socket, time
socks = []
for _ in range(3000):  # no credentials, never a byte: just held
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", 3128))
    socks.append(s)
open("ready", "w").write(str(len(socks)))
deadline = time.monotonic() + 120
while not os.path.exists("go") and time.monotonic() < deadline:
    time.sleep(0.05)
"""

HALF_PROBE = r"""
import base64, os, socket, sys, time, urllib.parse
port = int(sys.argv[1])
url = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
auth = base64.b64encode(f"{url.username}:{url.password}".encode())
head = b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nProxy-Authorization: Basic %s\r\n\r\n" % (port, auth)
socks = []
for _ in range(1000):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=15)
    s.sendall(head + b"x")
    data = b""
    while not data.endswith(b"\r\n\r\nx"):
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    if not data.endswith(b"\r\n\r\nx"):
        break
    s.shutdown(socket.SHUT_WR)  # half-closed: the upstream's direction stays open
    socks.append(s)
open("ready", "w").write(str(len(socks)))
deadline = time.monotonic() + 120
while not os.path.exists("go") and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def _hostile_caller(esc: Escape, mode: str, probe: str) -> dict[str, object]:
    import json  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    proc = subprocess.run(
        [sys.executable, "-c", HOSTILE_CALLER, mode, str(esc.ws), probe],
        capture_output=True, timeout=400, check=False, cwd=esc.next_door,
    )  # fmt: skip
    lines = proc.stdout.decode().strip().splitlines()
    if proc.returncode != 0 or not lines:
        pytest.fail(f"the caller process failed: {proc.returncode} {proc.stderr.decode()[-2000:]}")
    return cast("dict[str, object]", json.loads(lines[-1]))


def test_idle_connections_from_a_jail_never_exhaust_the_callers_descriptors(esc: Escape) -> None:
    """3,000 credential-less idle connections from a jailed command, through its relay, while
    the caller's soft descriptor limit is 1,024: the caller's own work sees no EMFILE, and
    another command's request is answered while the flood is held.

    No time bound judges that (one failed at load 80 in run L7: 1.01 s against 1.0 s). The
    flood's connections are reaped only by the head timeout, here 90 s, and the request
    gives up after 20 s; so a request that had to wait for the flood to go fails as a
    timeout (status 000) on any machine at any load, and one that was served in time
    passes however long the machine made it take."""
    out = _hostile_caller(esc, "flood", FLOOD_PROBE)
    if out["control"] != "200" or out["ready"] != "3000":
        pytest.fail(f"inconclusive: control failed: {out}")
    assert out["status"] == "200", out
    assert out["caller"] == "ok", out
    assert out["errors"] == [], out
    assert cast("int", out["events"]) < 200, out  # the flood is summed up, not logged per line
    esc.held()


def test_with_soft_equal_to_hard_a_jails_connections_never_push_the_caller_past_select(
    esc: Escape,
) -> None:
    """soft = hard = 20,000 (the limit cannot be raised): 3,000 credential-less connections a
    jailed command holds through its relay must not push the caller's new descriptors past
    1,024, and the caller's next `session.run` (which waits on descriptors) works."""
    out = _hostile_caller(esc, "floor", FLOOD_PROBE)
    control = cast("list[object]", out["floor_control"])
    if out["control"] != "200" or out["ready"] != "3000" or control[1] == "ok":
        pytest.fail(f"inconclusive: control failed: {out}")
    assert out["status"] == "200", out
    assert max(cast("list[int]", out["fds"])) < 1024, out
    assert out["select"] == "ok", out
    esc.held()


SLOTS_PROBE = (
    PROXY
    + r"""
import time
def tunnel():
    url = proxy_url()
    s = socket.create_connection((url.hostname, url.port), timeout=15)
    auth = f"Proxy-Authorization: Basic {basic(url)}\r\n"
    s.sendall(f"CONNECT TARGET HTTP/1.1\r\n{auth}\r\n".encode())
    line = read_head(s).split(b"\r\n", 1)[0].decode()
    if " 200 " in line + " ":
        return s
    s.close()
    return line
held, first = [], None
for _ in range(LIMIT + 1):
    got = tunnel()
    if isinstance(got, str):
        first = got
        break
    held.append(got)
if len(held) != LIMIT or first is None or " 503 " not in first + " ":
    print("control failed:", len(held), first, flush=True)
    sys.exit(0)
most = len(held)
for _ in range(20):  # requests and refusals alternate from one command
    got = tunnel()
    if not isinstance(got, str):
        held.append(got)
    most = max(most, len(held))
    held.pop().close()
    for _ in range(500):  # bounded retries until the proxy has seen the close
        again = tunnel()
        if not isinstance(again, str):
            break
        time.sleep(0.01)
    if isinstance(again, str):
        print("control failed: a freed slot was not granted:", again, flush=True)
        sys.exit(0)
    held.append(again)
    most = max(most, len(held))
if most > LIMIT:
    ok(f"held {most} tunnels at once with a limit of {LIMIT}")
blocked(f"never more than {most} tunnels at once")
"""
)


def test_refusals_as_busy_never_give_a_jailed_command_more_slots(
    esc: Escape, listen: Callable[[str], Listener]
) -> None:
    """A jailed command at its limit whose requests are refused as busy (each refusal's
    connection then closes) never gains a slot: it cannot hold more than its limit."""
    from panday_core.egress import ProxyLimits, ProxySettings, StaticResolver  # noqa: PLC0415
    from panday_tier_linux.session import open_session  # noqa: PLC0415

    server = listen("tcp4")
    host, port = _host(server.address)
    options = _granted(esc, host, port)
    limit = 4
    code = SLOTS_PROBE.replace("LIMIT", str(limit)).replace("TARGET", _target(ALLOWED, port))
    settings = ProxySettings(
        resolver=StaticResolver(esc.names),
        connector=esc.connector,
        audit=esc.events.append,
        limits=ProxyLimits(max_per_command=limit),
    )
    with open_session(esc.policy(**options), egress=settings) as session:
        result = session.run(esc.py(code), timeout_ms=120_000)
    outcome = esc.parse("inside the jail", result.stdout, result.stderr, result.exit_code)
    if outcome.verdict is None:
        pytest.fail(f"inconclusive: control failed: {outcome.raw}")
    esc.must_block(outcome)


def test_half_closed_tunnels_from_a_jail_hold_no_read_buffers_in_the_caller(esc: Escape) -> None:
    """1,000 tunnels a jailed command opens and half-closes cost the caller (whose memory
    is outside the jail's limit) a few MiB, not a read buffer each."""
    out = _hostile_caller(esc, "half", HALF_PROBE)
    if out["ready"] != "1000":  # the control: every tunnel opened, carried bytes, half-closed
        pytest.fail(f"inconclusive: control failed: {out}")
    grew_kib = cast("int", out["rss_half"]) - cast("int", out["rss_before"])
    assert grew_kib <= 32 * 1024, f"the caller grew {grew_kib / 1024:.1f} MiB: {out}"
    esc.held()


def test_a_jail_holds_a_few_handoff_connections_at_most(esc: Escape) -> None:
    """Every process of a jail can connect to the proxy's socket, not only its relay; one
    jail may hold `max_relays_per_jail` connections (its relay's included), and another
    command of the session keeps its way out."""
    from panday_tier_linux.argv import BRIDGE_DIR  # noqa: PLC0415

    code = f"""
import time
held = []
for _ in range(20):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect("{BRIDGE_DIR}/egress.sock")
    except OSError as exc:
        break
    held.append(s)
time.sleep(0.5)
alive = 0
for s in held:
    try:
        s.recv(1, socket.MSG_DONTWAIT)  # b"": the proxy closed it
    except BlockingIOError:
        alive += 1
    except OSError:
        pass
open("ready", "w").write(str(alive))
deadline = time.monotonic() + 60
while not os.path.exists("go") and time.monotonic() < deadline:
    time.sleep(0.05)
if alive > 3:  # the relay holds one of the jail's four
    ok(f"{{alive}} of {{len(held)}} connections held")
if alive:
    blocked(f"{{alive}} of {{len(held)}} connections held")
print("no connection was held at all", flush=True)
"""
    server = HttpServer()
    try:
        esc.names[ALLOWED] = ["127.0.0.1"]
        ready, go = esc.ws / "ready", esc.ws / "go"
        with esc.open(allow=[ALLOWED, "127.0.0.1"], ports=[server.port]) as session:
            results: list[ExecResult] = []
            worker = threading.Thread(
                target=lambda: results.append(session.run(esc.py(code), timeout_ms=120_000)),
                daemon=True,
            )
            worker.start()
            deadline = time.monotonic() + WAIT_S
            while not ready.exists() and worker.is_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            other = session.run(
                ["/usr/bin/curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                 "--max-time", "20", f"http://{ALLOWED}:{server.port}/"],
            )  # fmt: skip
            go.touch()
            worker.join(WAIT_S)
        assert results, "the probe did not finish"
        outcome = esc.parse("inside the jail", results[0].stdout, results[0].stderr, 0)
        if outcome.verdict is None:
            pytest.fail(f"inconclusive: control failed: {outcome.raw}")
        esc.must_block(outcome)
        assert other.stdout == b"200", other
    finally:
        server.close()


class HttpServer:
    """`HttpUpstream` (imported lazily: it pulls in http.server)."""

    def __init__(self, *, keep_alive: bool = False) -> None:
        from panday_core.egress.testing import HttpUpstream  # noqa: PLC0415

        self.upstream = HttpUpstream(keep_alive=keep_alive)
        self.port = self.upstream.port

    @property
    def heads(self) -> list[str]:
        return self.upstream.heads

    def close(self) -> None:
        self.upstream.close()


def test_a_second_request_on_one_connection_never_rides_on_the_first_decision(
    esc: Escape,
) -> None:
    """Two requests on one connection, the second to a host not in the allowlist, against
    an upstream that ignores ``Connection: close``: the second never reaches it."""
    server = HttpServer(keep_alive=True)
    try:
        esc.names[ALLOWED] = ["127.0.0.1"]
        esc.names["evil.test"] = ["127.0.0.1"]
        code = (
            PROXY
            + f"""
url = proxy_url()
auth = basic(url)
def request(host, path):
    return (f"GET http://{{host}}:{server.port}{{path}} HTTP/1.1\\r\\nHost: {{host}}\\r\\n"
            f"Proxy-Authorization: Basic {{auth}}\\r\\n\\r\\n").encode()
s = socket.create_connection((url.hostname, url.port), timeout=15)
s.sendall(request({ALLOWED!r}, "/a") + request("evil.test", "/b"))
data = b""
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
except OSError:
    pass
answers = data.count(b"HTTP/1.")
if answers != 1 and b"/a" not in data:
    print("first request unanswered:", data[:200], flush=True)
    sys.exit(0)
if answers > 1 or b"/b" in data:
    ok(f"{{answers}} answers on one connection")
blocked("one answer, then the proxy closed the connection")
"""
        )
        outcome = esc.inside(code, allow=[ALLOWED, "127.0.0.1"], ports=[server.port])
        if outcome.verdict is None:
            pytest.fail(f"inconclusive: control failed: {outcome.raw}")
        esc.must_block(outcome)
        assert [h.split("\r\n")[0] for h in server.heads] == ["GET /a HTTP/1.1"]
        assert all("proxy-authorization" not in h.lower() for h in server.heads)
    finally:
        server.close()


def test_a_commands_proxy_credentials_do_not_outlive_it(
    esc: Escape, listen: Callable[[str], Listener]
) -> None:
    server = listen("tcp4")
    host, port = _host(server.address)
    options = _granted(esc, host, port)
    saved = esc.ws / "left-behind"
    reuse = (
        PROXY
        + f"""
import urllib.parse
url = urllib.parse.urlsplit(open({str(saved)!r}).read())
s = socket.create_connection((url.hostname, url.port), timeout=15)
s.sendall((f"CONNECT {_target(ALLOWED, port)} HTTP/1.1\\r\\n"
           f"Proxy-Authorization: Basic {{basic(url)}}\\r\\n\\r\\n").encode())
line = read_head(s).split(b"\\r\\n", 1)[0].decode()
if " 200 " in line + " ":
    ok("an ended command's credentials still work: " + line)
blocked(line)
"""
    )
    with esc.open(**options) as session:
        session.run(["/bin/sh", "-c", f'printf %s "$HTTP_PROXY" > {saved}'])
        # Positive control: a running command's own credentials pass.
        own = session.run(esc.py(_through_proxy(_target(ALLOWED, port))), timeout_ms=60_000)
        esc.control(esc.parse("own credentials", own.stdout, own.stderr, own.exit_code))
        later = session.run(esc.py(reuse), timeout_ms=60_000)
    outcome = esc.parse("a later command", later.stdout, later.stderr, later.exit_code)
    esc.must_block(outcome)
    assert "407" in outcome.detail


@pytest.mark.parametrize(
    ("first", "kind"),
    [
        (b"GET http://allowed.test/ HTTP/1.1\nHost: x\n\n", "bare LF"),
        (b"\x04\x01\x00\x50\x7f\x00\x00\x01u\x00", "SOCKS4"),
        (b"\x16\x03\x01\x00\x05hello", "TLS"),
    ],
)
def test_a_request_that_cannot_become_valid_is_answered_at_once(
    esc: Escape, listen: Callable[[str], Listener], first: bytes, kind: str
) -> None:
    del kind
    server = listen("tcp4")
    host, port = _host(server.address)
    code = f"""
import time
s = socket.create_connection(("127.0.0.1", 3128), timeout=15)
start = time.monotonic()
s.sendall({first!r})
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
took = time.monotonic() - start
if took >= HEAD_TIMEOUT / 2 or not data:  # answered at once, not at the head timeout
    ok(f"held {{took:.1f}} s: {{data[:40]!r}}")
blocked(f"answered in {{took:.3f}} s: {{data[:40]!r}}")
"""
    from panday_core.egress import ProxyLimits  # noqa: PLC0415

    code = code.replace("HEAD_TIMEOUT", repr(ProxyLimits().head_timeout))
    options = _granted(esc, host, port)
    with esc.open(**options) as session:
        through = session.run(esc.py(_through_proxy(_target(ALLOWED, port))), timeout_ms=60_000)
        esc.control(esc.parse("a valid request", through.stdout, through.stderr, through.exit_code))
        result = session.run(esc.py(code), timeout_ms=60_000)
    esc.must_block(esc.parse("inside the jail", result.stdout, result.stderr, result.exit_code))


def test_names_that_resolve_outside_global_unicast_are_refused(
    esc: Escape, listen: Callable[[str], Listener]
) -> None:
    server = listen("tcp4")
    host, port = _host(server.address)
    names = {"site.test": "fec0::1", "doc.test": "3fff::1", "relay.test": "192.88.99.1"}
    reach = (
        PROXY
        + f"""
seen = []
for name in {sorted(names)!r}:
    line, why = connect_via(f"{{name}}:{port}")
    seen.append(f"{{name}}: {{line}} ({{why}})")
    if " 403 " not in line + " ":
        ok("; ".join(seen))
blocked("; ".join(seen))
"""
    )
    options = _granted(esc, host, port)
    for name, addr in names.items():
        esc.names[name] = [addr]
    options["allow"] = [*options.get("allow", ()), *names]
    esc.control(esc.inside(_through_proxy(_target(ALLOWED, port)), **options))
    attempts = len(esc.connector.attempts)
    outcome = esc.inside(reach, **options)
    esc.must_block(outcome)
    for words in ("site-local", "documentation", "6to4 relay anycast"):
        assert words in outcome.detail
    assert len(esc.connector.attempts) == attempts, "the proxy tried to connect"
