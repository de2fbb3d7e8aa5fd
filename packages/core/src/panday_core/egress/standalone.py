"""Run one egress proxy in the foreground: what ``panday proxy`` does.

`run_proxy` blocks until SIGINT or SIGTERM. It prints the proxy URLs (with the session
credentials) as shell ``export`` lines, then one JSON audit event per line as requests
come and go, so a person can watch what a tool tries to reach, and a script can parse it.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import TYPE_CHECKING, TextIO, TypedDict, Unpack

from panday_core.egress.audit import AuditEvent, encode_event
from panday_core.egress.server import EgressProxy

if TYPE_CHECKING:
    from panday_core.egress.limits import ProxyLimits
    from panday_core.egress.resolver import Resolver
    from panday_core.policy import NetPolicy


NO_PROXY = "localhost,127.0.0.1,::1"
"""Loopback stays direct: inside a jail that is the jail's own loopback, nothing else."""


def proxy_environment(http_url: str, socks_url: str) -> dict[str, str]:
    """The variables that make common tools use the proxy (each name's reason inline).

    `http_url` carries the credentials (``http://USER:TOKEN@HOST:PORT``); `socks_url` is the
    ``socks5h://`` form, so a SOCKS client leaves name resolution to the proxy.
    """
    env: dict[str, str] = {}
    for name, value in (
        # curl reads only the lower-case http_proxy (httpoxy); most others read either.
        ("HTTP_PROXY", http_url),
        ("HTTPS_PROXY", http_url),
        ("ALL_PROXY", socks_url),
        ("NO_PROXY", NO_PROXY),
    ):
        env[name] = value
        env[name.lower()] = value
    # npm reads its own configuration variables before the conventional ones.
    env["npm_config_proxy"] = http_url
    env["npm_config_https_proxy"] = http_url
    env["npm_config_noproxy"] = NO_PROXY
    # Yarn (berry) has its own names; Node's built-in fetch and http honour the
    # conventional variables only when asked to (Node 24 and later).
    env["YARN_HTTP_PROXY"] = http_url
    env["YARN_HTTPS_PROXY"] = http_url
    env["NODE_USE_ENV_PROXY"] = "1"
    return env


class ServeOptions(TypedDict, total=False):
    """Keyword options of `serve` and `run_proxy` (all optional)."""

    listen_host: str
    """Where to listen; 127.0.0.1 by default."""
    listen_port: int
    """0 (the default) picks a free port."""
    session_id: str | None
    audit_jsonl: str | None
    resolver: Resolver | None
    limits: ProxyLimits | None
    out: TextIO | None
    """Where the URLs and audit events are printed; stdout by default."""


class _Printer:
    """Prints audit events as JSON lines; the audit sink's writer thread calls it for each
    event of a batch, then `flush` once (a stream nobody reads blocks that thread only)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, event: AuditEvent) -> None:
        self.stream.write(encode_event(event).decode("utf-8"))

    def flush(self) -> None:
        self.stream.flush()


async def serve(
    net: NetPolicy, *, stop: asyncio.Event | None = None, **options: Unpack[ServeOptions]
) -> None:
    """Run the proxy until `stop` is set (or SIGINT/SIGTERM), printing URLs and events."""
    stream = options.get("out") or sys.stdout
    show = _Printer(stream)

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
        session_id=options.get("session_id"),
        resolver=options.get("resolver"),
        audit=show,
        audit_jsonl=options.get("audit_jsonl"),
        limits=options.get("limits"),
    )
    try:
        await proxy.start(options.get("listen_host", "127.0.0.1"), options.get("listen_port", 0))
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


def run_proxy(net: NetPolicy, **options: Unpack[ServeOptions]) -> int:
    """Blocking entry point for ``panday proxy``: returns the exit code (0 on a signal).

    Raises `OSError` when it cannot listen (address in use) or open the audit file; the
    CLI turns that into one line and a non-zero exit.
    """
    asyncio.run(serve(net, **options))
    return 0
