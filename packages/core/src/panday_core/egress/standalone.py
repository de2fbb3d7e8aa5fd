"""Run one egress proxy in the foreground: what ``panday proxy`` does.

`run_proxy` blocks until SIGINT or SIGTERM. It prints the proxy URLs (with the session
credentials) as shell ``export`` lines, then one JSON audit event per line as requests
come and go, so a person can watch what a tool tries to reach, and a script can parse it.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import TYPE_CHECKING, TextIO

from panday_core.egress.audit import AuditEvent, encode_event
from panday_core.egress.server import EgressProxy, ProxyLimits

if TYPE_CHECKING:
    from panday_core.egress.resolver import Resolver
    from panday_core.policy import NetPolicy


def proxy_environment(http_url: str, socks_url: str) -> dict[str, str]:
    """The variables that make common tools (curl, pip, git, npm) use the proxy."""
    env: dict[str, str] = {}
    for name, value in (
        ("HTTP_PROXY", http_url),
        ("HTTPS_PROXY", http_url),
        ("ALL_PROXY", socks_url),
        ("NO_PROXY", "localhost,127.0.0.1,::1"),
    ):
        env[name] = value
        env[name.lower()] = value
    return env


async def serve(
    net: NetPolicy,
    *,
    listen_host: str = "127.0.0.1",
    listen_port: int = 0,
    session_id: str | None = None,
    audit_jsonl: str | None = None,
    resolver: Resolver | None = None,
    limits: ProxyLimits | None = None,
    out: TextIO | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run the proxy until `stop` is set (or SIGINT/SIGTERM), printing URLs and events."""
    stream = out if out is not None else sys.stdout

    def show(event: AuditEvent) -> None:
        stream.write(encode_event(event).decode("utf-8"))
        stream.flush()

    done = stop if stop is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, done.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass
    proxy = EgressProxy(
        net,
        session_id=session_id,
        resolver=resolver,
        audit=show,
        audit_jsonl=audit_jsonl,
        limits=limits,
    )
    try:
        await proxy.start(listen_host, listen_port)
        rules = proxy.rules
        stream.write(
            f"# panday egress proxy, session {proxy.session_id}: allow {list(rules.allow)}, "
            f"deny {list(rules.deny)}, ports {sorted(rules.ports)}\n"
        )
        env = proxy_environment(proxy.url(), proxy.url(scheme="socks5h"))
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
            stream.write(f"export {name}={env[name]}\n")
        stream.flush()
        await done.wait()
    finally:
        await proxy.close()
        for sig in installed:
            loop.remove_signal_handler(sig)


def run_proxy(
    net: NetPolicy,
    *,
    listen_host: str = "127.0.0.1",
    listen_port: int = 0,
    session_id: str | None = None,
    audit_jsonl: str | None = None,
    resolver: Resolver | None = None,
    out: TextIO | None = None,
) -> int:
    """Blocking entry point for ``panday proxy``: returns the exit code (0 on a signal).

    Raises `OSError` when it cannot listen (address in use) or open the audit file; the
    CLI turns that into one line and a non-zero exit.
    """
    asyncio.run(
        serve(
            net,
            listen_host=listen_host,
            listen_port=listen_port,
            session_id=session_id,
            audit_jsonl=audit_jsonl,
            resolver=resolver,
            out=out,
        )
    )
    return 0
