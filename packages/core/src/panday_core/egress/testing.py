"""Connectors for tests and benchmarks: the proxy reaches loopback and nothing else.

A test of the proxy (or of a tier's egress bridge) runs with a guard removed when it is
falsified; the connector is the last line that keeps such a run from sending a packet off
this host. `LoopbackOnly` records every address the proxy connects to and opens only
loopback ones.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable


class LoopbackOnly:
    """A `Connector` that records each (address, port) and refuses anything off loopback."""

    def __init__(self) -> None:
        self.attempts: list[tuple[str, int]] = []

    async def __call__(
        self, factory: Callable[[], asyncio.BaseProtocol], host: str, port: int
    ) -> object:
        from panday_core.egress.listeners import open_connection  # noqa: PLC0415 - tests only

        self.attempts.append((host, port))
        if not ipaddress.ip_address(host).is_loopback:
            raise ConnectionRefusedError(f"test connector: {host} is not loopback; not connecting")
        return await open_connection(factory, host, port)


class HttpUpstream:
    """An HTTP server on 127.0.0.1, in a thread: every GET gets 200 and `body`; the Host
    header of each request is recorded (`requests`), and its whole head (`heads`). For
    tests that need an allowlisted upstream.

    With `keep_alive` it ignores ``Connection: close`` and keeps reading requests on the
    same connection (an upstream the proxy cannot count on to end the exchange), and the
    body names the requested path."""

    def __init__(
        self, body: bytes = b"hello from the upstream\n", *, keep_alive: bool = False
    ) -> None:
        import http.server  # noqa: PLC0415 - tests only
        import threading  # noqa: PLC0415

        self.requests: list[str] = []
        self.heads: list[str] = []
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def do_GET(self) -> None:
                upstream.requests.append(self.headers.get("Host", ""))
                upstream.heads.append(f"{self.requestline}\r\n{self.headers}")
                answer = f"{self.path}\n".encode() if keep_alive else body
                self.send_response(200)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                if keep_alive:
                    self.close_connection = False  # whatever the request asked for

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
                del format, args

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def count(self) -> int:
        """Requests answered so far."""
        return len(self.requests)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)
