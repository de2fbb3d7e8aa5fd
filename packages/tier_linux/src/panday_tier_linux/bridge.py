"""The egress bridge: how a jail with no network reaches the session's egress proxy.

A session whose policy lists hosts in ``net.allow`` gets, at `open_session`:

* an `EgressProxy` (``panday_core.egress``) on a loop thread of its own (`ProxyThread`: see
  there why a thread and not a helper process), serving one unix socket in a private
  runtime directory (mode 0700) with the session's rules: ``net.allow``, ``net.deny``,
  ``net.ports``;
* per command, the runtime directory (a copy of `relay.py` and that socket) bound
  read-only into the jail, and the relay run in front of the command inside the jail's own
  network namespace (which keeps ``--unshare-net`` and holds only its loopback). The relay
  listens on 127.0.0.1 and hands every connection to the proxy; it is listening before the
  command starts;
* per command, the proxy variables (`proxy_environment`) with credentials issued for that
  command's id, so the audit log names the command and no other process can use the
  proxy; when the command ends (`command_ended`) they are revoked, and any tunnel still
  open with them is cut, so nothing a command leaves behind (a file with its proxy URL)
  works for a later one.

The seccomp filter of such a session admits ``AF_INET``/``AF_INET6`` sockets as well (the
relay's listeners and the tools' connections to them), which reach nothing but the jail's
own loopback. There is no resolver inside: names travel to the proxy, which resolves them.
If the proxy cannot start, `open_session` refuses ``net.allow``; if it dies, the relay
answers every connection with the reason, and nothing falls back to a direct route.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import tempfile
from typing import TYPE_CHECKING

from panday_tier_linux.argv import HTTP_PORT, SOCKS_PORT, RelaySpec

if TYPE_CHECKING:
    from panday_core.egress.thread import ProxySettings, ProxyThread
    from panday_core.policy import NetPolicy

PYTHON = "/usr/bin/python3"
"""The relay's interpreter: the host's own, which the jail shows at the same path."""
MIN_PYTHON = (3, 8)
SOCKET_NAME = "egress.sock"
RELAY_NAME = "relay.py"
_MAX_SOCKET_PATH = 100
"""Unix socket paths must fit sun_path (108 bytes with the terminating NUL)."""


@functools.cache
def unavailable_reason() -> str | None:
    """None when the bridge can run here; otherwise why not (checked once per process)."""
    if not os.access(PYTHON, os.X_OK):
        return f"the egress relay needs {PYTHON} (install python3), which the jail runs"
    real = os.path.realpath(PYTHON)
    if not real.startswith("/usr/"):
        return f"{PYTHON} resolves to {real}, outside /usr, which is all a jail shows"
    import subprocess

    want = ".".join(str(v) for v in MIN_PYTHON)
    try:
        done = subprocess.run(
            [PYTHON, "-I", "-S", "-c", f"import sys; sys.exit(sys.version_info < {MIN_PYTHON})"],
            capture_output=True,
            timeout=10,
            check=False,
            env={},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the egress relay's interpreter {PYTHON} does not run: {exc}"
    if done.returncode != 0:
        return f"the egress relay needs Python >= {want} at {PYTHON}"
    return None


def relay_source() -> bytes:
    """The relay program (copied into each session's runtime directory)."""
    from importlib.resources import files

    return files("panday_tier_linux").joinpath(RELAY_NAME).read_bytes()


def _runtime_base() -> str:
    """``$XDG_RUNTIME_DIR`` when it is a private directory of ours, else the temp dir."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isabs(base):
        try:
            st = os.stat(base)
        except OSError:
            st = None
        if (
            st is not None
            and stat.S_ISDIR(st.st_mode)
            and st.st_uid == os.geteuid()
            and not st.st_mode & 0o077
        ):
            return base
    return tempfile.gettempdir()


def runtime_dir() -> str:
    """A new private (0700) directory for one session's proxy socket."""
    base = _runtime_base()
    if len(os.path.join(base, "panday-egress-xxxxxxxx", SOCKET_NAME)) > _MAX_SOCKET_PATH:
        base = "/tmp"  # noqa: S108 - a mkdtemp directory (0700) below it
    return tempfile.mkdtemp(prefix="panday-egress-", dir=base)


class Bridge:
    """One session's egress proxy and what its jails need to reach it."""

    def __init__(self, proxy: ProxyThread, directory: str, socket_path: str) -> None:
        self.proxy = proxy
        self.directory = directory
        self.socket_path = socket_path

    @classmethod
    def start(
        cls, net: NetPolicy, *, session_id: str, settings: ProxySettings | None = None
    ) -> Bridge:
        """Start the proxy for `net` on a unix socket in a new runtime directory.

        Raises `OSError` or `RuntimeError` when it cannot; nothing is left behind then.
        """
        from panday_core.egress.thread import ProxyThread

        directory = runtime_dir()
        try:
            relay = os.path.join(directory, RELAY_NAME)
            fd = os.open(relay, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o400)
            try:
                os.write(fd, relay_source())
            finally:
                os.close(fd)
            proxy = ProxyThread(net, session_id=session_id, settings=settings)
            try:
                path = proxy.start_handoff(os.path.join(directory, SOCKET_NAME))
            except BaseException:
                proxy.close()
                raise
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return cls(proxy, directory, path)

    def relay_spec(self) -> RelaySpec:
        return RelaySpec(python=PYTHON, directory=self.directory)

    def environment(self, command_id: str) -> dict[str, str]:
        """The proxy variables for one command, with credentials issued for its id; call
        `command_ended` with the same id when the command has ended (also when it could
        not be started).

        Raises `ValueError` for an id the proxy cannot issue credentials for.
        """
        return self.proxy.environment(
            command_id, http=("127.0.0.1", HTTP_PORT), socks=("127.0.0.1", SOCKS_PORT)
        )

    def command_ended(self, command_id: str) -> None:
        """The command `environment` was called for has ended: revoke its credentials
        (once every command running under that id has ended) and cut its tunnels."""
        self.proxy.revoke(command_id)

    @property
    def alive(self) -> bool:
        return self.proxy.alive

    def close(self) -> None:
        """Stop the proxy (cutting every tunnel) and remove the runtime directory."""
        self.proxy.close()
        shutil.rmtree(self.directory, ignore_errors=True)
