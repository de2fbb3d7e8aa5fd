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
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

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

    The egress proxy is not wired to this tier yet, so this runs the generated profile with
    `sandbox-exec` directly; a plain listener stands in for the proxy.
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
