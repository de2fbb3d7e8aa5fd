"""Network escape probes: loopback listeners, UDP, DNS, bind, unix sockets, mach services, and
the one way out a proxy session has. Loopback only: no probe sends anything off this host.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from macos_escape_helpers import (
    PROBE_TIMEOUT_S,
    Jail,
    Listener,
    UdpEcho,
    control,
    guarded,
    inconclusive,
    outside,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from panday_core.egress.testing import HttpUpstream
    from panday_core.types import SandboxHandle

CONNECT = guarded(
    "import socket, sys\n"
    "family = socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET\n"
    "s = socket.socket(family, socket.SOCK_STREAM)\n"
    "s.settimeout(10)",
    "s.connect((sys.argv[1], int(sys.argv[2])))",
    "CONNECTED",
)
UDP = guarded(
    "import socket, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.settimeout(5)",
    "s.sendto(b'panday-probe', ('127.0.0.1', int(sys.argv[1])))\n"
    "data, _ = s.recvfrom(512)\n"
    "print('ANSWERED' if data == b'panday-probe' else 'WRONG')",
    None,
)
BIND = guarded(
    "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_STREAM)",
    "s.bind(('127.0.0.1', 0))\ns.listen(1)",
    "BOUND",
)
UNIX = guarded(
    "import socket, sys\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\ns.settimeout(10)",
    "s.connect(sys.argv[1])",
    "CONNECTED",
)

MACH = """
import ctypes, sys
lib = ctypes.CDLL('/usr/lib/libSystem.B.dylib')
bootstrap = ctypes.c_uint32.in_dll(lib, 'bootstrap_port')
lib.bootstrap_look_up.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint32)]
port = ctypes.c_uint32(0)
kr = lib.bootstrap_look_up(bootstrap, sys.argv[1].encode(), ctypes.byref(port))
print('FOUND' if kr == 0 else f'DENIED {kr}')
"""


@pytest.fixture
def udp_echo() -> Iterator[UdpEcho]:
    srv = UdpEcho()
    try:
        yield srv
    finally:
        srv.close()


def test_a_loopback_listener_cannot_be_reached(
    jail: Jail, workspace: Path, tcp_listener: Listener
) -> None:
    control(CONNECT, "127.0.0.1", str(tcp_listener.port), want="CONNECTED")
    before = tcp_listener.accepted
    handle = jail.create(workspace)
    assert jail.py(handle, CONNECT, "127.0.0.1", str(tcp_listener.port)) == "DENIED"
    assert tcp_listener.accepted == before


def test_an_ipv6_loopback_listener_cannot_be_reached(jail: Jail, workspace: Path) -> None:
    try:
        srv = Listener(socket.AF_INET6, ("::1", 0))
    except OSError as exc:
        inconclusive("cannot listen on ::1 on this host", exc)
    try:
        control(CONNECT, "::1", str(srv.port), want="CONNECTED")
        handle = jail.create(workspace)
        assert jail.py(handle, CONNECT, "::1", str(srv.port)) == "DENIED"
    finally:
        srv.close()


def test_a_dns_query_to_a_loopback_server_is_not_sent(
    jail: Jail, workspace: Path, udp_echo: UdpEcho
) -> None:
    control(UDP, str(udp_echo.port), want="ANSWERED")
    before = udp_echo.received
    handle = jail.create(workspace)
    assert jail.py(handle, UDP, str(udp_echo.port)) == "DENIED"
    assert udp_echo.received == before


def test_the_system_resolver_cannot_be_reached(jail: Jail, workspace: Path) -> None:
    # libinfo's getaddrinfo talks to mDNSResponder over this socket; connecting sends nothing.
    resolver = "/private/var/run/mDNSResponder"
    control(UNIX, resolver, want="CONNECTED")
    handle = jail.create(workspace)
    assert jail.py(handle, UNIX, resolver) == "DENIED"
    lookup = (
        "import socket\n"
        "try:\n"
        "    socket.getaddrinfo('panday-probe.invalid', 80)\n"
        "    print('RESOLVED')\n"
        "except OSError:\n"
        "    print('FAILED')\n"
    )
    assert jail.py(handle, lookup) == "FAILED"


def test_a_port_cannot_be_bound(jail: Jail, workspace: Path) -> None:
    control(BIND, want="BOUND")
    handle = jail.create(workspace)
    assert jail.py(handle, BIND) == "DENIED"


def test_a_host_unix_socket_cannot_be_reached(
    jail: Jail, workspace: Path, unix_listener: tuple[Listener, str]
) -> None:
    srv, path = unix_listener
    control(UNIX, path, want="CONNECTED")
    before = srv.accepted
    handle = jail.create(workspace)
    assert jail.py(handle, UNIX, path) == "DENIED"
    assert srv.accepted == before


@pytest.mark.parametrize(
    "service",
    [
        "com.apple.dnssd.service",  # the DNS daemon
        "com.apple.SecurityServer",  # keychain access
    ],
)
def test_a_mach_service_outside_the_list_cannot_be_looked_up(
    jail: Jail, workspace: Path, service: str
) -> None:
    control(MACH, service, want="FOUND")
    handle = jail.create(workspace)
    if jail.py(handle, MACH, "com.apple.system.opendirectoryd.libinfo") != "FOUND":
        inconclusive("the one allowed mach service is reachable inside")
    assert jail.py(handle, MACH, service).startswith("DENIED")


def test_with_a_proxy_only_its_loopback_port_is_reachable(
    workspace: Path, tmp_path: Path, tcp_listener: Listener, udp_echo: UdpEcho
) -> None:
    """The profile variant for an allowlist: the proxy's port is open, nothing else is.

    This runs the generated profile with `sandbox-exec` directly, a plain listener standing
    in for the proxy, to show the profile alone: the port is open, nothing else is.
    """
    from panday_core.policy import policy_from_dict  # noqa: PLC0415
    from panday_tier_macos.profile import ProxyEndpoint, SeatbeltProfile  # noqa: PLC0415
    from panday_tier_macos.sandbox import protected_homes  # noqa: PLC0415

    other = Listener(socket.AF_INET, ("127.0.0.1", 0))
    try:
        control(CONNECT, "127.0.0.1", str(other.port), want="CONNECTED")
        policy = policy_from_dict({"net": {"allow": ["example.com"]}}).with_workspace(
            str(workspace)
        )
        proxy = ProxyEndpoint(host="127.0.0.1", port=tcp_listener.port)
        profile = SeatbeltProfile.from_policy(policy, proxy)
        tmp = tmp_path / "tmp"
        tmp.mkdir()
        host_home, account_home = protected_homes()
        values = {
            "WORKSPACE": os.path.realpath(workspace),
            "TMPDIR": os.path.realpath(tmp),
            "HOST_HOME": host_home,
            "ACCOUNT_HOME": account_home,
        }
        probe = (
            "import json, socket, sys\n"
            "def tcp(port):\n"
            "    s = socket.socket(); s.settimeout(10)\n"
            "    try:\n"
            "        s.connect(('127.0.0.1', port)); return 'CONNECTED'\n"
            "    except PermissionError:\n"
            "        return 'DENIED'\n"
            "    except OSError as e:\n"
            "        return f'ERROR {e.errno}'\n"
            "def udp(port):\n"
            "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "    try:\n"
            "        s.sendto(b'x', ('127.0.0.1', port)); return 'SENT'\n"
            "    except PermissionError:\n"
            "        return 'DENIED'\n"
            "def bind():\n"
            "    s = socket.socket()\n"
            "    try:\n"
            "        s.bind(('127.0.0.1', 0)); s.listen(1); return 'BOUND'\n"
            "    except PermissionError:\n"
            "        return 'DENIED'\n"
            "proxy, other, dns = (int(a) for a in sys.argv[1:4])\n"
            "print(json.dumps({'proxy': tcp(proxy), 'other': tcp(other), "
            "'udp_to_proxy_port': udp(proxy), 'udp_dns': udp(dns), 'bind': bind()}))\n"
        )
        argv = profile.argv(
            [
                sys.executable,
                "-I",
                "-c",
                probe,
                str(proxy.port),
                str(other.port),
                str(udp_echo.port),
            ],
            values,
        )
        done = subprocess.run(
            argv,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
            env={"PATH": "/usr/bin:/bin", "HOME": values["WORKSPACE"]},
            cwd=workspace,
        )
        lines = done.stdout.decode().strip().splitlines()
        if not lines:
            inconclusive("the probe ran under the proxy profile", done.stderr.decode()[-400:])
        seen = json.loads(lines[-1])
        if seen["proxy"] != "CONNECTED":
            inconclusive("the proxy's port is reachable under the proxy profile", seen)
        assert seen == {
            "proxy": "CONNECTED",
            "other": "DENIED",
            "udp_to_proxy_port": "DENIED",
            "udp_dns": "DENIED",
            "bind": "DENIED",
        }
    finally:
        other.close()


# ---------------------------------------------------------------------- through the proxy
# Sessions with an allowlist, served by the real egress proxy. Names come from a table
# (no real DNS) and the proxy's connector refuses anything off loopback.

ALLOWED = "allowed.test"
CURL = "/usr/bin/curl"


@pytest.fixture
def proxy_jail() -> Iterator[Jail]:
    from panday_core.egress import ProxySettings, StaticResolver  # noqa: PLC0415
    from panday_core.egress.testing import LoopbackOnly  # noqa: PLC0415

    table = {ALLOWED: ["127.0.0.1"], "other.test": ["127.0.0.1"]}
    j = Jail(ProxySettings(resolver=StaticResolver(table), connector=LoopbackOnly()))
    try:
        yield j
    finally:
        j.close()


@pytest.fixture
def http_upstream() -> Iterator[HttpUpstream]:
    from panday_core.egress.testing import HttpUpstream  # noqa: PLC0415

    srv = HttpUpstream()
    try:
        yield srv
    finally:
        srv.close()


def _allow(upstream: HttpUpstream, *hosts: str) -> dict[str, object]:
    return {"net": {"allow": list(hosts), "ports": [upstream.port]}}


def _curl(jail: Jail, handle: SandboxHandle, url: str) -> tuple[int, str]:
    """curl through the session's proxy variables: (HTTP status, X-Panday-Refused)."""
    result = jail.run(handle, CURL, "-sS", "-i", "--max-time", "20", url)
    head = result.stdout.decode("latin-1").split("\r\n\r\n", 1)[0].split("\r\n")
    if not head or not head[0].startswith("HTTP/"):
        return 0, result.stderr.decode("utf-8", "replace")
    why = next(
        (h.split(":", 1)[1].strip() for h in head if h.lower().startswith("x-panday-refused:")), ""
    )
    return int(head[0].split(" ")[1]), why


def test_through_the_proxy_an_allowlisted_host_answers_and_another_is_refused(
    proxy_jail: Jail, workspace: Path, http_upstream: HttpUpstream
) -> None:
    handle = proxy_jail.create(workspace, _allow(http_upstream, ALLOWED, "127.0.0.1"))
    status, _ = _curl(proxy_jail, handle, f"http://{ALLOWED}:{http_upstream.port}/")
    if status != 200:
        inconclusive("the allowlisted host answers through the proxy", status)
    assert http_upstream.count == 1
    status, why = _curl(proxy_jail, handle, f"http://other.test:{http_upstream.port}/")
    assert (status, why) == (403, "other.test is not in net.allow")
    assert http_upstream.count == 1


def test_a_command_ignoring_the_proxy_reaches_nothing(
    proxy_jail: Jail, workspace: Path, http_upstream: HttpUpstream, udp_echo: UdpEcho
) -> None:
    control(CONNECT, "127.0.0.1", str(http_upstream.port), want="CONNECTED")
    control(UDP, str(udp_echo.port), want="ANSWERED")
    handle = proxy_jail.create(workspace, _allow(http_upstream, ALLOWED, "127.0.0.1"))
    status, _ = _curl(proxy_jail, handle, f"http://{ALLOWED}:{http_upstream.port}/")
    if status != 200:
        inconclusive("the same session reaches the host through the proxy", status)
    before = http_upstream.count
    assert proxy_jail.py(handle, CONNECT, "127.0.0.1", str(http_upstream.port)) == "DENIED"
    assert proxy_jail.py(handle, CONNECT, "::1", str(http_upstream.port)) == "DENIED"
    assert proxy_jail.py(handle, UDP, str(udp_echo.port)) == "DENIED"
    assert proxy_jail.py(handle, BIND) == "DENIED"
    assert http_upstream.count == before
    assert udp_echo.received == 1  # the control's datagram only


def test_a_host_loopback_service_cannot_be_reached_through_the_proxy(
    proxy_jail: Jail, workspace: Path, http_upstream: HttpUpstream
) -> None:
    granted = proxy_jail.create(workspace, _allow(http_upstream, ALLOWED, "127.0.0.1"))
    status, _ = _curl(proxy_jail, granted, f"http://{ALLOWED}:{http_upstream.port}/")
    if status != 200:
        inconclusive("with 127.0.0.1 allowlisted the service answers", status)
    before = http_upstream.count
    handle = proxy_jail.create(workspace, _allow(http_upstream, ALLOWED))
    status, why = _curl(proxy_jail, handle, f"http://{ALLOWED}:{http_upstream.port}/")
    assert status == 403
    assert "loopback address" in why
    status, _ = _curl(proxy_jail, handle, f"http://127.0.0.1:{http_upstream.port}/")
    assert status == 403
    assert http_upstream.count == before


def test_the_proxy_refuses_a_process_without_the_token(
    proxy_jail: Jail, workspace: Path, http_upstream: HttpUpstream
) -> None:
    handle = proxy_jail.create(workspace, _allow(http_upstream, ALLOWED, "127.0.0.1"))
    url = proxy_jail.run(handle, "/bin/sh", "-c", 'printf %s "$HTTP_PROXY"').stdout.decode()
    creds, _, where = url.removeprefix("http://").rpartition("@")
    port = int(where.rsplit(":", 1)[1])
    target = f"http://{ALLOWED}:{http_upstream.port}/"
    probe = (
        "import base64, socket, sys\n"
        "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=10)\n"
        "auth = sys.argv[3]\n"
        "head = f'GET {sys.argv[2]} HTTP/1.1\\r\\nHost: x\\r\\n'\n"
        "if auth:\n"
        "    basic = base64.b64encode(auth.encode()).decode()\n"
        "    head += f'Proxy-Authorization: Basic {basic}\\r\\n'\n"
        "s.sendall((head + '\\r\\n').encode())\n"
        "print(s.recv(4096).split(b' ')[1].decode())\n"
    )
    control(probe, str(port), target, creds, want="200")
    user, _, token = creds.partition(":")
    for wrong in ("", f"{user}:{'0' * len(token)}", f"session:{token}"):
        assert outside(probe, str(port), target, wrong) == "407"
