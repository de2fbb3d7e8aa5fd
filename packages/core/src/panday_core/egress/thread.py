"""One session's egress proxy on an event loop of its own, in a daemon thread.

A tier's session outlives any one call of its caller: the synchronous T2 Linux session has
no event loop at all, and an async caller's loop may stop between calls (``asyncio.run``
per call). So the proxy gets a loop of its own, in a thread, for the session's lifetime.
Why a thread rather than a helper process: it starts in about a millisecond (no second
interpreter, no imports), it cannot outlive its caller (a killed caller takes it along,
and the jails with it, through ``--die-with-parent``), audit events reach the caller's
callback directly, and the proxy's relay work is system calls that release the GIL.

When the loop stops, for whatever reason, the proxy is closed on the way out: listeners
and every connection are cut, so a jail's next connection fails at once instead of waiting
in a backlog nobody serves. A dead proxy never turns into a direct route: the jails it
served have no network of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from panday_core.egress.server import EgressProxy

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from panday_core.egress.audit import AuditEvent
    from panday_core.egress.limits import ProxyLimits
    from panday_core.egress.resolver import Resolver
    from panday_core.egress.tunnel import Connector
    from panday_core.policy import NetPolicy

T = TypeVar("T")
START_TIMEOUT_S = 10.0


@dataclass(frozen=True, kw_only=True)
class ProxySettings:
    """How a tier's session proxy is made, beyond the policy: what the SDK passes through.

    Every field is optional; the defaults are the host's resolver, no audit sink, the
    default `ProxyLimits` and a plain ``loop.create_connection``. Tests inject a
    `StaticResolver` (no real DNS) and a loopback-only `connector`.
    """

    resolver: Resolver | None = None
    audit: Callable[[AuditEvent], None] | None = None
    """Called on the proxy's thread with every `AuditEvent`; it must not block."""
    audit_jsonl: str | None = None
    """Append every audit event to this file (one JSON object per line)."""
    limits: ProxyLimits | None = None
    connector: Connector | None = None


class ProxyThread:
    """An `EgressProxy` served by its own loop in a daemon thread; `close` is idempotent."""

    def __init__(
        self,
        net: NetPolicy,
        *,
        session_id: str | None = None,
        settings: ProxySettings | None = None,
    ) -> None:
        given = settings or ProxySettings()
        self.proxy = EgressProxy(
            net,
            session_id=session_id,
            resolver=given.resolver,
            audit=given.audit,
            audit_jsonl=given.audit_jsonl,
            limits=given.limits,
            connector=given.connector,
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run, name=f"panday-egress-{self.proxy.session_id}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            # However the loop ended, nothing may keep accepting for a dead proxy.
            with contextlib.suppress(Exception):
                loop.run_until_complete(self.proxy.close())
            loop.close()

    def _call(self, coro: Coroutine[object, object, T], timeout: float = START_TIMEOUT_S) -> T:
        if not self._thread.is_alive():
            coro.close()
            raise RuntimeError("the egress proxy's thread is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @property
    def session_id(self) -> str:
        return self.proxy.session_id

    @property
    def alive(self) -> bool:
        """Whether the proxy is still serving (its loop runs)."""
        return self._thread.is_alive() and self._loop.is_running()

    def start_handoff(self, path: str) -> str:
        """Serve connected sockets handed over a unix socket at `path` (the Linux bridge)."""
        return self._call(self.proxy.start_handoff(path))

    def start_loopback(self) -> int:
        """Listen on 127.0.0.1 and ::1 at one free port, and return the port."""
        return self._call(self.proxy.start_loopback())

    def credentials(self, command_id: str | None = None) -> tuple[str, str]:
        """(user, token) for `command_id` (see `EgressProxy.credentials`); thread-safe."""
        return self.proxy.credentials(command_id)

    def environment(
        self,
        command_id: str,
        *,
        http: tuple[str, int] | None = None,
        socks: tuple[str, int] | None = None,
    ) -> dict[str, str]:
        """The proxy variables for one command, with credentials issued for its id (one
        reference, which `revoke` gives back when the command ends).

        The URLs name `http` and `socks` (where a relay listens), or by default the proxy's
        own TCP listener (which sniffs the protocol, so one port serves both). Raises
        `ValueError` for an id the proxy cannot issue credentials for.
        """
        from panday_core.egress.standalone import proxy_environment  # noqa: PLC0415 - no cycle

        proxy = self.proxy
        user, token = proxy.credentials(command_id)
        return proxy_environment(
            _url("http", user, token, http or proxy.tcp_address),
            _url("socks5h", user, token, socks or proxy.tcp_address),
        )

    def revoke(self, command_id: str) -> None:
        """`command_id`'s command ended: give back the reference its `environment` took.
        When it was the last, its credentials stop working at once (before this returns)
        and the tunnels opened with them are cut on the proxy's loop. Thread-safe."""
        grant = self.proxy.revoke(command_id)
        if grant is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                self._loop.call_soon_threadsafe(self.proxy.cut, grant, command_id)

    def close(self, timeout: float = START_TIMEOUT_S) -> None:
        """Stop the loop (which closes the proxy) and wait for the thread."""
        if self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)


def _url(scheme: str, user: str, token: str, where: tuple[str, int] | None) -> str:
    if where is None:
        raise RuntimeError("the proxy has no TCP listener; call start_loopback() first")
    host, port = where
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{user}:{token}@{shown}:{port}"
