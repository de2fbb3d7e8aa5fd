"""``python -m panday_core.egress``: the standalone proxy without the SDK (tests, benchmarks).

Bad input gets one line on stderr and exit status 2; the SDK's ``panday proxy`` calls
`panday_core.egress.standalone.run_proxy` the same way.
"""

from __future__ import annotations

import argparse
import sys


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m panday_core.egress", description=__doc__)
    parser.add_argument("--policy", help="policy file (.toml or .json) whose [net] section applies")
    parser.add_argument("--allow", action="append", default=[], help="host pattern (repeatable)")
    parser.add_argument("--deny", action="append", default=[], help="host pattern (repeatable)")
    parser.add_argument("--port", action="append", type=int, default=[], help="destination port")
    parser.add_argument("--listen-host", default="127.0.0.1")
    parser.add_argument("--listen-port", type=int, default=0)
    parser.add_argument("--session-id")
    parser.add_argument("--audit-jsonl", help="append audit events to this file")
    parser.add_argument(
        "--resolve",
        action="append",
        default=[],
        metavar="NAME=IP",
        help="answer NAME with IP instead of asking DNS (then only listed names resolve)",
    )
    parser.add_argument(
        "--resolve-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="each --resolve lookup holds a lookup thread this long (a slow resolver, for "
        "benchmarks)",
    )
    return parser.parse_args(argv)


def _fail(message: str, code: int = 2) -> int:
    sys.stderr.write(f"error: {message}\n")
    return code


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    from panday_core.egress.resolver import StaticResolver  # noqa: PLC0415
    from panday_core.egress.standalone import run_proxy  # noqa: PLC0415
    from panday_core.errors import PolicyError  # noqa: PLC0415 - after argument errors
    from panday_core.policy import NetPolicy, load_policy  # noqa: PLC0415

    try:
        if args.policy:
            net = load_policy(args.policy).net
        else:
            ports = tuple(args.port) or (80, 443)
            net = NetPolicy(allow=tuple(args.allow), deny=tuple(args.deny), ports=ports)
    except PolicyError as exc:  # also a bad option value: FieldError names net.* itself
        return _fail(str(exc))
    table: dict[str, list[str]] = {}
    for item in args.resolve:
        name, eq, addr = str(item).partition("=")
        if not eq or not name or not addr:
            return _fail(f"--resolve {item!r}: expected NAME=IP")
        table.setdefault(name.lower(), []).append(addr)
    if args.resolve_delay < 0 or (args.resolve_delay and not table):
        return _fail("--resolve-delay: a non-negative number of seconds, with --resolve")
    resolver = StaticResolver(table, delay=args.resolve_delay) if table else None
    try:
        return run_proxy(
            net,
            listen_host=args.listen_host,
            listen_port=args.listen_port,
            session_id=args.session_id,
            audit_jsonl=args.audit_jsonl,
            resolver=resolver,
        )
    except OSError as exc:
        return _fail(f"cannot start the egress proxy: {exc.strerror or exc}", 1)


if __name__ == "__main__":
    sys.exit(main())
