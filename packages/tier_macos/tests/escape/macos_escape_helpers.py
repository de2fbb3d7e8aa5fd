"""Helpers shared by the macOS escape suite (imported by conftest.py and the probe modules).

Each probe is a short Python program that prints one verdict word. It runs without any
sandbox first (`outside`: the positive control, which must succeed or the test fails as
inconclusive), then inside a session (`Jail.py`), and where it says something, once more
inside with the permission granted. The interpreter is the one running the tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from panday_core.egress import ProxySettings
    from panday_core.types import ExecResult, SandboxHandle
    from panday_tier_macos.sandbox import T2MacosSandbox

MACOS = sys.platform == "darwin"
SKIP_REASON = (
    f"macOS escape suite: needs macOS and /usr/bin/sandbox-exec; this host is {sys.platform} "
    "(CI's macos-15 and macos-14 jobs run it)"
)
HERE = Path(__file__).parent
PROBE_TIMEOUT_S = 60


def inconclusive(what: str, detail: object = "") -> NoReturn:
    pytest.fail(f"inconclusive: positive control failed: {what} {detail}".rstrip())


def verdict(result: ExecResult | subprocess.CompletedProcess[bytes]) -> str:
    """The last line the probe printed (or a description of how it failed)."""
    out = result.stdout.decode("utf-8", "replace").strip().splitlines()
    if out:
        return out[-1]
    code = (
        result.exit_code
        if not isinstance(result, subprocess.CompletedProcess)
        else result.returncode
    )
    err = result.stderr.decode("utf-8", "replace").strip()[-400:]
    return f"<no output; exit {code}; stderr {err!r}>"


def outside(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run a probe without any sandbox: the positive control."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", code, *args],
        capture_output=True,
        timeout=PROBE_TIMEOUT_S,
        check=False,
        env=env,
    )
    return verdict(done)


def control(code: str, *args: str, want: str) -> None:
    """The positive control: without the sandbox, the probe must give `want`."""
    got = outside(code, *args)
    if got != want:
        inconclusive(f"{want} expected without the sandbox", got)


def guarded(setup: str, action: str, success: str | None) -> str:
    """A probe program: `setup`, then `action`, then print `success` (None: the action prints
    its own verdict); a refusal prints DENIED and any other OS error prints ERROR and errno."""
    body = "\n".join("    " + line for line in action.strip().splitlines())
    done = f"\n    print({success!r})" if success is not None else ""
    return (
        f"{setup.strip()}\ntry:\n{body}{done}\n"
        "except PermissionError:\n    print('DENIED')\n"
        "except OSError as e:\n    print('ERROR', e.errno, e.strerror)\n"
    )


class Jail:
    """Sessions of the real T2 macOS tier, driven synchronously for the tests."""

    def __init__(self, egress: ProxySettings | None = None) -> None:
        from panday_tier_macos import T2MacosSandbox  # noqa: PLC0415 - macOS only

        self.sandbox: T2MacosSandbox = T2MacosSandbox(egress=egress)
        self.handles: list[SandboxHandle] = []

    def create(self, workspace: Path, doc: dict[str, object] | None = None) -> SandboxHandle:
        from panday_core.policy import policy_from_dict  # noqa: PLC0415
        from panday_core.types import SessionSpec  # noqa: PLC0415

        policy = policy_from_dict(doc or {}).with_workspace(str(workspace))
        handle = asyncio.run(self.sandbox.create(SessionSpec(policy=policy)))
        self.handles.append(handle)
        return handle

    def run(
        self,
        handle: SandboxHandle,
        *argv: str,
        stdin: bytes | None = None,
        timeout_ms: int | None = None,
    ) -> ExecResult:
        from panday_core.execution import acollect  # noqa: PLC0415
        from panday_core.types import ExecSpec  # noqa: PLC0415

        spec = ExecSpec(argv=argv, stdin=stdin, timeout_ms=timeout_ms or PROBE_TIMEOUT_S * 1000)
        return asyncio.run(acollect(self.sandbox.exec(handle, spec)))

    def py(self, handle: SandboxHandle, code: str, *args: str) -> str:
        """Run a probe inside the session; its verdict word."""
        return verdict(self.run(handle, sys.executable, "-I", "-c", code, *args))

    def close(self) -> None:
        for handle in self.handles:
            asyncio.run(self.sandbox.destroy(handle))


SECRETS = (
    ".ssh/id_ed25519",
    ".aws/credentials",
    ".gnupg/private-keys-v1.d/canary.key",
    ".config/gh/hosts.yml",
    "Library/Keychains/login.keychain-db",
    ".zsh_history",
    ".bash_history",
    ".netrc",
    # issue 12, 6(d)
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".config/git/credentials",
    ".vault-token",
    ".pgpass",
    ".terraform.d/credentials.tfrc.json",
    ".gem/credentials",
    ".codex/auth.json",
    ".claude/.credentials.json",
)


class _Server:
    """A loopback server answering in a thread until `close`."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(0.2)
        self.count: int = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _serve(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError):
                self.answer()

    def answer(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


class Listener(_Server):
    """A TCP (or unix) server that accepts and counts connections."""

    def __init__(self, family: socket.AddressFamily, address: str | tuple[str, int]) -> None:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind(address)
            sock.listen(16)
        except OSError:
            sock.close()
            raise
        super().__init__(sock)

    @property
    def accepted(self) -> int:
        return self.count

    def answer(self) -> None:
        conn, _ = self.sock.accept()
        self.count += 1
        with contextlib.suppress(OSError):
            conn.sendall(b"hello\n")
        conn.close()


class UdpEcho(_Server):
    """A UDP server that echoes each datagram (stands in for a DNS server)."""

    def __init__(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        super().__init__(sock)

    @property
    def received(self) -> int:
        return self.count

    def answer(self) -> None:
        data, peer = self.sock.recvfrom(512)
        self.count += 1
        self.sock.sendto(data, peer)
