"""`panday policy check|schema`, `panday plugin inspect` and `panday proxy`."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from panday import exitcodes, tiers
from panday.cli import UsageError

if TYPE_CHECKING:
    import argparse

    from panday_core.capabilities import TierCapabilities


def _host_table(tier: str | None) -> TierCapabilities:
    if tier is None:
        from panday_core.errors import TierUnavailable  # noqa: PLC0415 - error path

        raise TierUnavailable("auto", f"panday has no tier that runs commands on {sys.platform}")
    return tiers.host_capabilities(tier)


def policy_check(file: str, *, as_json: bool) -> int:
    """Validate `file`; per command tier, whether this host can enforce it, and if not why.

    The host's own tier is checked against its host-probed table (a ceiling this host
    cannot hold is refused here as `create` would refuse it); the other OS's tier against
    its declared table.
    """
    from panday.reports import PolicyCheckReport, TierCheck, encode  # noqa: PLC0415
    from panday_core.capabilities import check_policy  # noqa: PLC0415
    from panday_core.policy import load_policy  # noqa: PLC0415

    policy = load_policy(file)
    if policy.fs.workspace is None:
        policy = policy.with_workspace(os.getcwd())
    host_tier = tiers.host_command_tier()
    rows: list[TierCheck] = []
    for tier in tiers.COMMAND_TIERS:
        here = tier == host_tier
        table = tiers.host_capabilities(tier) if here else tiers.declared(tier)
        refusals = check_policy(policy, table)
        unavailable = tiers.unavailable_reason(tier)
        rows.append(
            TierCheck(
                tier=tier,
                host_tier=here,
                available=unavailable is None,
                unavailable_reason=unavailable,
                enforceable=not refusals and unavailable is None,
                refused=refusals,
            )
        )
    verdict = any(row.enforceable for row in rows if row.host_tier)
    if as_json:
        report = PolicyCheckReport(
            file=file, valid=True, enforceable_here=verdict, tiers=tuple(rows)
        )
        sys.stdout.write(encode(report))
        return exitcodes.OK if verdict else exitcodes.FAILED
    where = f"on {host_tier}" if host_tier else "on this OS (panday has no tier for it)"
    state = "enforceable" if verdict else "NOT enforceable"
    lines = [f"{file}: valid policy, {state} {where}"]
    for row in rows:
        mark = " (this host)" if row.host_tier else ""
        lines.append(
            f"  {row.tier}{mark}: {'enforceable' if row.enforceable else 'not enforceable'}"
        )
        if not row.available:
            lines.append(f"    unavailable: {row.unavailable_reason}")
        lines.extend(f"    refused {r.field}: {r.reason}" for r in row.refused)
    sys.stdout.write("\n".join(lines) + "\n")
    return exitcodes.OK if verdict else exitcodes.FAILED


def policy_schema() -> int:
    from panday_core.policy import SandboxPolicy  # noqa: PLC0415
    from panday_core.schema import json_schema, render  # noqa: PLC0415

    sys.stdout.write(render(json_schema(SandboxPolicy, "policy")))
    return exitcodes.OK


def plugin_inspect(file: str, *, as_json: bool) -> int:
    """What this host's tier would really grant the plugin: the consent summary."""
    from panday.reports import encode  # noqa: PLC0415
    from panday_core.manifest import load_manifest  # noqa: PLC0415

    manifest = load_manifest(file)
    summary = manifest.consent_summary(_host_table(tiers.host_command_tier()))
    sys.stdout.write(encode(summary) if as_json else summary.render())
    return exitcodes.OK if summary.runnable else exitcodes.FAILED


def _port(option: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{option} {text!r}: not a port number") from None
    return value


def proxy(ns: argparse.Namespace) -> int:
    """Run the egress proxy until Ctrl-C (or SIGTERM); exit 71 when it cannot listen."""
    from panday_core.domains import normalize_pattern  # noqa: PLC0415
    from panday_core.policy import FieldError, NetPolicy, load_policy  # noqa: PLC0415

    base = load_policy(ns.policy).net if ns.policy else NetPolicy()
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
    from panday_core.egress.standalone import run_proxy  # noqa: PLC0415 - asyncio: this path only

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
