"""`panday proxy [OPTIONS]`: an egress proxy in the foreground, one JSON audit event a line."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from panday import exitcodes
from panday.cli.common import parser
from panday.cli.errors import UsageError

if TYPE_CHECKING:
    import argparse


def _port(option: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{option} {text!r}: not a port number") from None
    return value


def proxy(ns: argparse.Namespace) -> int:
    """Run the egress proxy until Ctrl-C (or SIGTERM); exit 71 when it cannot listen."""
    from panday.cli import inputs as cli_input
    from panday_core.domains import normalize_pattern
    from panday_core.policy import FieldError, NetPolicy

    base = cli_input.load_policy(ns.policy).net if ns.policy else NetPolicy()
    for option, hosts in (("--allow", ns.allow), ("--deny", ns.deny)):
        for host in hosts:
            try:
                normalize_pattern(host)
            except ValueError as exc:
                raise UsageError(f"{option} {host!r}: {exc}") from None
    ports = tuple(_port("--port", p) for p in ns.port) or base.ports
    listen_port = _port("--listen-port", ns.listen_port)
    if not 0 <= listen_port <= 65535:  # noqa: PLR2004 - TCP port range
        raise UsageError(f"--listen-port {ns.listen_port!r}: not a TCP port (0-65535)")
    try:
        net = NetPolicy(allow=(*base.allow, *ns.allow), deny=(*base.deny, *ns.deny), ports=ports)
    except FieldError as exc:
        raise UsageError(f"--port: {exc.reason}") from None
    from panday_core.egress.standalone import run_proxy

    try:
        return run_proxy(
            net,
            listen_host=ns.listen,
            listen_port=listen_port,
            session_id=ns.session_id,
            audit_jsonl=ns.audit_jsonl,
        )
    except OSError as exc:
        what = f"open {exc.filename}" if exc.filename else f"listen on {ns.listen}:{listen_port}"
        sys.stderr.write(f"panday: the egress proxy cannot {what}: {exc.strerror or exc}\n")
        return exitcodes.OS_ERROR


def main(args: list[str]) -> int:
    """`panday proxy ARGS`: the exit code."""
    ns = parser(
        "panday proxy",
        "Run an egress proxy in the foreground: it prints the proxy variables, then one JSON "
        "audit event per line; Ctrl-C stops it.",
    )
    ns.add_argument("--policy", help="policy file whose [net] section applies")
    for option, metavar, what in (
        ("--allow", "HOST", "host pattern to allow (repeatable)"),
        ("--deny", "HOST", "host pattern to refuse even when allowed (repeatable)"),
        ("--port", "N", "destination port (repeatable; default 80 and 443)"),
    ):
        ns.add_argument(option, action="append", default=[], metavar=metavar, help=what)
    ns.add_argument("--listen", default="127.0.0.1", metavar="HOST", help="listen address")
    ns.add_argument("--listen-port", default="0", metavar="N", help="0: a free port")
    ns.add_argument("--session-id", help="the session id the proxy authenticates")
    ns.add_argument("--audit-jsonl", metavar="FILE", help="also append audit events to FILE")
    return proxy(ns.parse_args(args))
