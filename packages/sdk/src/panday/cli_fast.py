"""`panday run` from a cached jail plan: the CLI's start-up path (docs/cli.md, "Start-up").

The `panday` console script enters here (`console`): a run this module can serve from a
plan is served, everything else goes to `panday.cli.console` untouched, before anything
was opened or spawned.

Agents call `panday run` once per tool call, so its start-up is paid on every call. The
full path imports the policy model (msgspec), judges the policy against the tier's table
and opens a session before the jail starts; for the same inputs on the same host all of
that comes out the same every time. So a run whose plan is cached (by the tier's planner,
its registry entry's `planner`: T2 Linux's `panday_tier_linux.plan`) reads it and starts
the jail with neither the model nor typing imported.

How it stays as strict as the full path:

* The plan is found by a key holding every input the full path reads to decide it: the
  option words, the current directory, the policy file's digest (or the per-user
  default's, or for the embedded default the caller's locale and terminal variables it
  copies), a digest of each value ``--env NAME`` takes from the environment, panday's
  version and every source file of panday, its core and the tier (path, size, mtime,
  inode), the interpreter, the model's libraries, and the host facts the tier names
  (kernel, bwrap, libseccomp, the /etc view, the user). Anything different: another key,
  no plan, and the plan is made again.
* A plan is made (on a miss) by the full path's own functions: its option parser,
  `panday.cli.run.build_policy`, the tier choice and the tier's session open with every refusal.
  So a plan exists only for inputs that would have started a jail.
* What must be judged per command is judged on every run, hit or miss: the workspace
  and staged paths are opened again without following links and refused again (a link, a
  home directory, a system directory, ``sys.path``), and the protected entries are bound
  read-only with placeholders (`panday_tier_linux.binds.Roots`).
* The jail is bounded exactly as the full path bounds it: the policy's ceilings, the
  host's own protection where the policy sets no pid or memory ceiling (the same cgroup
  ceilings, or the same rlimits), the output cap and the wall clock (the model's defaults
  unless the policy says "unbounded"); a breach is reported in the same words and code.
* The CLI behaves as the full path's: standard descriptors 0-2 that are closed or unusable
  are repaired first (`panday.stdio.repair_std_fds`, also for everything handed over),
  output to a terminal passes the terminal filter unless ``--no-sanitize`` (`--sanitize`
  filters any stream), and every write is looped (`panday.stdio.write_all`).
* Whatever this path does not handle returns None *before the command runs*, and the full
  path runs instead and answers in its own words: options beyond the plain ones
  (``--json``, ``--stdin``, ``--allow``, ``--debug`` ...), a policy with a disk ceiling
  or an allowlist, anything refused or missing, bounds that came out otherwise than
  planned, and a jail that bwrap could not set up (the command never ran: a program
  missing inside the jail, a directory it cannot enter; the full path runs it again and
  classifies it, from bwrap's status, as `CommandNotFound`, `WorkspaceUnusable` ...).
"""

from __future__ import annotations

import os
import sys

from panday import exitcodes, tiers
from panday.stdio import repair_std_fds, sanitizing, write_all
from panday_core.startup import suppress

TYPE_CHECKING = False  # typing's flag without importing typing (this module's purpose)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType
    from typing import NoReturn

    from panday.terminal import Filter
    from panday_core.execution import Ended
    from panday_core.process import Stream
    from panday_tier_linux.plan import Launched, Plan

KEY_FORMAT = "panday-run-plan 1"
VALUED = frozenset(
    {"--policy", "--workspace", "--ro", "--mem", "--pids", "--cpu", "--timeout", "--env", "--tier"}
)
"""The options this path accepts, each written as two words (``--ro PATH``); any other
option, or the ``--name=value`` form, takes the full path."""
FLAGS = frozenset({"--sanitize", "--no-sanitize"})
"""The flags this path accepts: they change how output is written, not the jail."""
MODEL_LIBRARIES = ("msgspec", "typing_extensions")
"""Libraries that decide whether the model accepts a policy: part of the key."""
_POLICY_LIMIT = 4 << 20
"""As `panday.cli.inputs.POLICY_LIMIT`: a larger file takes the full path (which refuses it)."""


def console() -> NoReturn:
    """The `panday` console script: `panday run` from a cached plan when it can, else the
    whole CLI (`panday.cli.console`, which does everything else, ``run`` included).

    The entry point is here, not in `panday.cli`, so a cached run compiles and loads none
    of the CLI's own modules; whatever it leaves alone reaches `panday.cli.console` before
    anything was opened or spawned.
    """
    repair_std_fds()  # first: nothing may be opened onto a closed 0, 1 or 2
    code = run_cached(sys.argv[1:])
    if code is None:
        from panday.cli import console as full_cli

        full_cli()
    for stream in (sys.stdout, sys.stderr):  # a line `panday.cli.report` wrote
        with suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(code)


def run_cached(argv: list[str]) -> int | None:
    """`panday ARGV` through a cached (or newly made) plan: the exit code, or None when the
    full path (`panday.cli.main`) must run instead. None is only ever returned before the
    command has run."""
    if len(argv) < 2 or argv[0] != "run" or not tiers.planners():  # noqa: PLR2004 - run and a command
        return None
    split = _split(argv[1:])
    tier = None if split is None else served_tier(split[0])
    if split is None or tier is None:
        return None
    options, flags, command = split
    try:
        jail = tiers.planner(tier)
        plan = _plan(argv[1:], options, command)
        launched = None if plan is None else _launch(jail, plan, command)
    except Exception:  # noqa: BLE001 - raised before the command ran: the full path reports it
        return None
    except BaseException as exc:  # noqa: BLE001 - Ctrl-C, SIGTERM: as `panday.cli.main` does
        return _report(exc)
    if plan is None or launched is None:
        return None
    return _finish(jail, plan, launched, _Output(flags))


def served_tier(options: list[str]) -> str | None:
    """The tier this run would open when it is one whose planner serves cached runs on
    this host (``--tier`` as named, or what ``auto`` picks here); None: the full path."""
    named = [options[i + 1] for i in range(0, len(options), 2) if options[i] == "--tier"]
    here = tiers.host_command_tiers()
    served = {t for t in tiers.planners() if t in here}
    if not set(named) <= {tiers.AUTO, *served}:
        return None
    tier = named[-1] if named and named[-1] != tiers.AUTO else (here[0] if here else None)
    return tier if tier in served else None


def _split(words: list[str]) -> tuple[list[str], set[str], list[str]] | None:
    """(option words, flags, command) for the plain form ``[--opt VALUE | --flag]... [--]
    CMD...``, split where `panday.cli.run.parse` splits it (the plan is made only when that
    parser agrees); None for anything else."""
    options: list[str] = []
    flags: set[str] = set()
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            command = words[i + 1 :]
            return (options, flags, command) if command else None
        if not word.startswith("-") or word == "-":
            return options, flags, words[i:]
        if word in FLAGS:
            flags.add(word)
            i += 1
            continue
        if word not in VALUED or i + 1 >= len(words):
            return None
        options += [word, words[i + 1]]
        i += 2
    return None


def _digest(data: bytes) -> str:
    from _blake2 import blake2b

    return blake2b(data, digest_size=32).hexdigest()


def _read_policy(path: str) -> bytes | None:
    """The bytes `panday.cli.inputs.read_input` would read (a regular file), or None."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        data = b""
        while len(data) <= _POLICY_LIMIT:  # reads sized by the file, not by the limit
            chunk = os.read(fd, min(_POLICY_LIMIT + 1, st.st_size + 1) - len(data) or 1)
            if not chunk:
                break
            data += chunk
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= _POLICY_LIMIT else None


def _tree(base: str, into: list[str]) -> None:
    """Every source file under `base` as ``relative-path size mtime inode`` lines."""
    todo = [base]
    while todo:
        top = todo.pop()
        with os.scandir(top) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        todo.append(entry.path)
                elif entry.name.endswith((".py", ".so", ".pyi")):
                    st = entry.stat(follow_symlinks=False)
                    rel = entry.path[len(base) :]
                    into.append(f"  {rel} {st.st_size} {st.st_mtime_ns} {st.st_ino}")


def _code_identity(tier: str) -> list[str]:
    """panday's version, its packages' source files (the tier's among them), the
    interpreter, the model's libraries: a changed panday (an upgrade, an edit in a
    checkout) plans afresh."""
    import panday
    import panday_core

    impl = sys.implementation
    lines = [
        f"panday {panday.__version__}",
        f"python {sys.version} {impl.name} {impl.cache_tag} {sys.executable} {sys.prefix}",
        f"tier {tier}",
    ]
    for package in (panday, panday_core, tiers.import_module(tiers.entry(tier).package)):
        for base in package.__path__:
            lines.append(f"source {package.__name__} {base}")
            _tree(base, lines)
    for name in MODEL_LIBRARIES:
        found = next(
            (
                where
                for entry in sys.path
                for where in (os.path.join(entry, name), os.path.join(entry, f"{name}.py"))
                if entry and os.path.exists(where)
            ),
            None,
        )
        lines.append(f"library {name} {found}")
        if found is not None and os.path.isdir(found):
            _tree(found, lines)
        elif found is not None:
            st = os.stat(found)
            lines.append(f"  {st.st_size} {st.st_mtime_ns} {st.st_ino}")
    return lines


def _inputs(options: list[str]) -> list[str] | None:
    """The key lines of this run's own inputs (None: a form this path leaves alone)."""
    from panday.defaults import passthrough_env, user_policy_path

    tier = served_tier(options)
    if tier is None:
        return None
    values: dict[str, list[str]] = {}
    for i in range(0, len(options), 2):
        values.setdefault(options[i], []).append(options[i + 1])
    lines = [
        KEY_FORMAT,
        *_code_identity(tier),
        f"cwd {os.getcwd()}",
        f"args {options!r}",
    ]
    given = values.get("--policy")
    if given is not None:
        source, path = "file", given[-1]
    else:
        source, path = "user", user_policy_path()
        if not os.path.lexists(path):
            source = "default"
    if source == "default":
        lines.append(f"policy default {sorted(passthrough_env(os.environ).items())!r}")
    else:
        data = None if path == "-" else _read_policy(path)
        if data is None:
            return None
        lines.append(f"policy {source} {path!r} {len(data)} {_digest(data)}")
    for item in values.get("--env", []):
        name, eq, _value = item.partition("=")
        if eq:
            continue  # the value is in the option words
        value = os.environ.get(name)
        if value is None:
            return None
        lines.append(f"env {name!r} {_digest(value.encode('utf-8', 'surrogateescape'))}")
    return lines


def cached_plan(options: list[str]) -> Plan | None:
    """The cached plan for `panday run OPTIONS -- ...` in this directory, as things are
    now; None when there is none (or the options are a form this path leaves alone)."""
    tier = served_tier(options)
    inputs = _inputs(options)
    if tier is None or inputs is None:
        return None
    return _load(tiers.planner(tier), inputs)


def _load(jail: ModuleType, inputs: list[str]) -> Plan | None:
    facts: list[str] | None = jail.host_facts()
    found: Plan | None = None if facts is None else jail.load("\n".join([*inputs, *facts]))
    return found


def _plan(args: list[str], options: list[str], command: list[str]) -> Plan | None:
    tier = served_tier(options)
    inputs = _inputs(options)
    if tier is None or inputs is None:
        return None
    found = _load(tiers.planner(tier), inputs)
    if found is not None:
        return found
    from panday.cli_plan import make

    return make(args, options, command, inputs, tier=tier, again=_inputs)


class _Output:
    """The command's output to ours, as `panday.cli.run._stream` writes it: through the
    terminal filter where it applies (`panday.terminal`), every write looped."""

    __slots__ = ("filters",)

    def __init__(self, flags: set[str]) -> None:
        self.filters: dict[int, Filter] = {}
        for fd in (1, 2):
            if sanitizing(flags, fd):
                from panday.terminal import Filter

                self.filters[fd] = Filter()

    def write(self, stream: Stream, data: bytes) -> None:
        fd = 1 if stream == "stdout" else 2
        found = self.filters.get(fd)
        write_all(fd, data if found is None else found.feed(data))

    def flush(self) -> None:
        """What a filter still holds (an escape cut off by the end of the output)."""
        for fd, found in self.filters.items():
            write_all(fd, found.flush())


def _on_signal(signum: int, frame: object) -> None:
    del frame
    from panday.cli.errors import Terminated

    raise Terminated(signum)


def _report(exc: BaseException) -> int:
    from panday.cli.errors import report

    return report(exc, debug=False)


def _launch(jail: ModuleType, plan: Plan, command: Sequence[str]) -> Launched | None:
    """Start `command` in the planned jail (every per-command check first); None when
    something would be refused or could not be checked, with nothing run."""
    import _signal  # pyright: ignore[reportMissingModuleSource] - signal without its enum (panday_core.startup)

    for signum in (_signal.SIGTERM, _signal.SIGHUP):
        _signal.signal(signum, _on_signal)
    launched: Launched | None = jail.launch(plan, command, os.environ)
    return launched


def _finish(jail: ModuleType, plan: Plan, launched: Launched, output: _Output) -> int | None:
    """Stream the running command to our output until it ends: its exit code (panday's
    own for a breach, a signal, a reader that went away, output it could not write). None
    only when bwrap could not set the jail up, so the command never ran and the full path
    may run it instead (and classify why, as it does)."""
    try:
        ended: Ended | None = jail.run(launched, plan, write=output.write)
    except BaseException as exc:  # noqa: BLE001 - as `panday.cli.main`: one line and a code
        return _report(exc)
    if ended is None:  # the command never ran: the full path runs it and says why
        return None
    try:
        output.flush()
        return _exit_code(ended)
    except BaseException as exc:  # noqa: BLE001 - as above; the command has run
        return _report(exc)


def _exit_code(ended: Ended) -> int:
    """What `panday run` exits with (as `panday.cli.run.exit_code_of`), after the line a
    breach gets on stderr (as `panday.cli.run._breach_line`)."""
    if ended.breach is not None:
        kind, detail = ended.breach
        how = (
            f"exit status {ended.exit_code}"
            if ended.exit_code is not None
            else f"killed by signal {ended.signal}"
        )
        line = f"panday: limit exceeded: {kind}: {detail} (the command: {how})\n"
        # A reader that went away: the exit code still says it.
        with suppress(OSError):
            write_all(2, line.encode())
        return exitcodes.LIMITS.get(kind, exitcodes.INTERNAL)
    if ended.exit_code is not None:
        return ended.exit_code
    return exitcodes.SIGNAL_BASE + (ended.signal or 0)
