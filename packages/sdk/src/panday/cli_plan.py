"""Making `panday run`'s jail plan on a miss of its cache (`panday.cli_fast`): the full
path's own parser, policy and tier choice, then the tier's plan maker (its registry entry's
`maker`) opens a session with every refusal and the plan is stored under the run's key.
Never on the start-up path of a run whose plan is cached.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable

    from panday_tier_linux.plan import Plan


def make(
    args: list[str],
    options: list[str],
    command: list[str],
    inputs: list[str],
    *,
    tier: str,
    again: Callable[[list[str]], list[str] | None],
) -> Plan | None:
    """Plan this run the full path's way (its parser, its policy, its tier choice, the
    tier's session open with every refusal), store the plan under `inputs` (the run's key
    lines, computed again by `again` once the plan is made) and return it; None (with
    nothing spawned) when the full path should run instead (it would choose another tier
    than the one the cache serves these options with, among others)."""
    from panday import tiers
    from panday._shared import exec_spec
    from panday.cli import run as cli_run

    opts = cli_run.parse(args)
    if opts.command != command or not set(opts.flags) <= {"--sanitize", "--no-sanitize"}:
        return None
    exec_spec(command, stdin=None, cwd=None, timeout=None)
    policy = cli_run.build_policy(opts)
    if tiers.choose(policy, opts.one("--tier") or tiers.AUTO) != tier:
        return None
    maker = tiers.maker(tier)
    # The session's own plan (what it launches its commands from), with the names whose
    # values the cache must not hold (left out when it is stored).
    made: Plan | None = maker.make(policy, tuple(caller_env(options)))
    if made is None:
        return None
    # Keyed by the inputs and facts as they are *after* the open (the session made the /etc
    # view if it was missing), and only when the inputs did not change while it was made (a
    # policy file edited meanwhile): a plan is never stored under inputs it was not made of.
    facts: list[str] | None = tiers.planner(tier).host_facts()
    if facts is not None and again(options) == inputs:
        maker.store("\n".join([*inputs, *facts]), made)
    return made


def caller_env(options: list[str]) -> list[str]:
    """The names whose values come from the environment: those whose last ``--env`` is
    ``--env NAME`` rather than ``--env NAME=VALUE`` (the last one wins, as in
    `panday.cli.run`)."""
    last: dict[str, bool] = {}
    for i in range(0, len(options), 2):
        if options[i] == "--env":
            name, eq, _value = options[i + 1].partition("=")
            last[name] = not eq
    return sorted(name for name, from_environ in last.items() if from_environ)
