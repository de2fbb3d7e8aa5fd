"""`panday changes`: the change sets that ``fs.writes`` checked or review kept, and what to
do with them (list, show, apply, discard, collect)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from panday import exitcodes
from panday.cli.common import parser
from panday.cli.errors import NoInputError
from panday.stdio import write_text

if TYPE_CHECKING:
    from panday.changes import ChangeSet


def _list(*, every: bool, as_json: bool) -> int:
    from panday.changes import change_sets
    from panday.defaults import current_directory
    from panday_core.changes import store

    # An apply a panday that died left unfinished is finished first (its journal).
    for line in store.recover(max_age_s=None):
        write_text(f"panday: {line}\n", 2)
    found = change_sets(None if every else current_directory())
    if as_json:
        import msgspec

        write_text(
            msgspec.json.format(msgspec.json.encode([c.meta for c in found])).decode() + "\n"
        )
        return exitcodes.OK
    if not found:
        where = "" if every else " for this directory (--all lists every workspace's)"
        write_text(f"no change sets{where}\n")
        return exitcodes.OK
    from panday.terminal import inert

    for change_set in found:
        where = f"  {change_set.workspace}" if every else ""
        write_text(inert(change_set.summary() + where) + "\n")
    return exitcodes.OK


def _get(change_id: str) -> ChangeSet:
    from panday.changes import ChangeError, get

    try:
        return get(change_id)
    except ChangeError as exc:
        raise NoInputError(f"changes: {exc}") from None


def _show(change_id: str, paths: list[str], *, as_json: bool) -> int:
    change_set = _get(change_id)
    if as_json:
        from panday.reports import encode

        write_text(encode(change_set.meta))
        return exitcodes.OK
    from panday.terminal import Filter, inert

    # What the jail wrote (names, link targets, contents) reaches a terminal inert: names
    # in caret notation always, the diff through the terminal filter when stdout is one.
    lines = [f"change set {change_set.id} over {change_set.workspace}: {' '.join(change_set.argv)}"]
    for change in change_set.changes:
        why = f"  held: {change.reason}" if change.state in {"held", "conflict"} else ""
        line = f"  {change.state:8} {change.action:6} {change.kind:7} {change.path}{why}"
        lines.append(inert(line))
    write_text("\n".join(lines) + "\n\n")
    screen = Filter() if sys.stdout.isatty() else None
    for path in paths or [None]:
        text = change_set.diff(path)
        if screen is not None:
            text = screen.feed(text.encode()).decode("utf-8", "replace")
        write_text(text)
    if screen is not None:
        write_text(screen.flush().decode("utf-8", "replace"))
    return exitcodes.OK


def _apply(change_id: str, paths: list[str], *, held: bool) -> int:
    from panday.changes import ChangeError

    change_set = _get(change_id)
    try:
        result = change_set.apply(paths or None, include_held=held)
    except ChangeError as exc:
        raise NoInputError(f"changes: {exc}") from None
    for path, why in result.conflicts:
        write_text(f"panday: not applied: {path}: {why}\n", 2)
    write_text(
        f"applied {len(result.applied)} change(s) to {change_set.workspace}; "
        f"{result.left} left in {change_set.id}\n"
    )
    return exitcodes.FAILED if result.conflicts else exitcodes.OK


def _discard(change_id: str) -> int:
    from panday.changes import ChangeError

    change_set = _get(change_id)
    try:
        change_set.discard()
    except ChangeError as exc:
        raise NoInputError(f"changes: {exc}") from None
    write_text(f"discarded {change_id}\n")
    return exitcodes.OK


def _collect(days: float) -> int:
    from panday_core.changes import store

    for line in store.recover(max_age_s=int(days * 86400)):
        write_text(line + "\n")
    return exitcodes.OK


def main(args: list[str]) -> int:
    """`panday changes ARGS`: the exit code."""
    ns = parser(
        "panday changes",
        "Change sets kept by fs.writes checked (held changes) or review (everything).",
    )
    sub = ns.add_subparsers(dest="action", parser_class=type(ns))
    listing = sub.add_parser("list", help="change sets of this directory's workspace")
    listing.add_argument("--all", action="store_true", help="every workspace's")
    listing.add_argument("--json", action="store_true", help="one JSON document")
    show = sub.add_parser("show", help="a change set's changes, risk-ranked, and a diff")
    show.add_argument("id")
    show.add_argument("paths", nargs="*", metavar="PATH", help="only at or under these")
    show.add_argument("--json", action="store_true", help="the change set as JSON")
    apply = sub.add_parser("apply", help="apply a change set (all, or the PATHs given)")
    apply.add_argument("id")
    apply.add_argument("paths", nargs="*", metavar="PATH", help="only at or under these")
    apply.add_argument(
        "--held", action="store_true", help="also apply the held changes named by PATH"
    )
    discard = sub.add_parser("discard", help="remove a change set")
    discard.add_argument("id")
    collect = sub.add_parser(
        "collect", help="finish interrupted applies; remove change sets older than DAYS"
    )
    collect.add_argument("--older-than", type=float, default=14.0, metavar="DAYS")
    parsed = ns.parse_args(args)
    action = parsed.action or "list"
    if action == "list":
        return _list(every=getattr(parsed, "all", False), as_json=getattr(parsed, "json", False))
    if action == "show":
        return _show(parsed.id, parsed.paths, as_json=parsed.json)
    if action == "apply":
        return _apply(parsed.id, parsed.paths, held=parsed.held)
    if action == "discard":
        return _discard(parsed.id)
    return _collect(parsed.older_than)
