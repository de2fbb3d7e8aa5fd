"""`panday plugin inspect FILE`: what this host's tier would really grant a plugin."""

from __future__ import annotations

import os

from panday import exitcodes, tiers
from panday.cli.common import file_action, host_table, parser
from panday.stdio import write_text


def plugin_inspect(file: str, *, as_json: bool) -> int:
    """What this host's tier would really grant the plugin: the consent summary."""
    from panday.cli.inputs import load_manifest
    from panday.reports import encode

    manifest = load_manifest(file)
    host_tier = tiers.in_force()  # where bwrap cannot run, what T1 would grant
    summary = manifest.consent_summary(
        host_table(host_tier), os.environ, wording=tiers.consent(host_tier or "")
    )
    write_text(encode(summary) if as_json else summary.render())
    return exitcodes.OK if summary.runnable else exitcodes.FAILED


def main(args: list[str]) -> int:
    """`panday plugin ARGS`: the exit code."""
    ns = parser("panday plugin", "Inspect a plugin manifest.")
    sub = ns.add_subparsers(dest="action", required=True, parser_class=type(ns))
    file_action(
        sub.add_parser("inspect", help="the consent summary of a plugin.toml for this host"),
        "the plugin's plugin.toml ('-': read it from standard input)",
    )
    parsed = ns.parse_args(args)
    return plugin_inspect(parsed.file, as_json=parsed.json)
