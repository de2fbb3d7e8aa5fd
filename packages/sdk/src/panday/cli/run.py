# Over 500 lines: the CLI's main command: its parser, policy, three output modes and denials.
"""`panday run`: one command in a fresh session, output streamed live, its exit code passed on.

The hot path of the CLI. Its argument parser is hand-written (argparse and its imports
cost start-up time, and `run`'s grammar is small: options, then ``--``, then the command),
and the policy model and the tier are imported only after the command line is known to be
good. What each option means, and every exit code: docs/cli.md.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from panday import exitcodes
from panday.cli.errors import NoInputError, Terminated, UsageError
from panday.stdio import OutputError, sanitizing, write_all, write_text

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import BinaryIO

    from panday.session import Session
    from panday.terminal import Filter
    from panday_core.egress.audit import AuditEvent
    from panday_core.egress.thread import ProxySettings
    from panday_core.errors import PolicyViolation
    from panday_core.policy import SandboxPolicy
    from panday_core.types import ExecExit, ExecResult, ExecSpec, WriteReport

RUN_HELP = """\
usage: panday run [OPTIONS] [--] CMD [ARG]...

Run CMD in a fresh sandbox session; its output streams live and panday exits with its
exit code (128+N when signal N ended it). Without --policy, the per-user default policy
applies when it exists ($XDG_CONFIG_HOME/panday/policy.toml; `panday doctor` shows where),
else the embedded default: the current directory as the read-write workspace, no network,
an environment of PATH, HOME (the workspace), the caller's locale variables (LANG,
LANGUAGE, LC_ALL, the LC_* categories) and TERM only, 10 minutes and 16 MiB of output per
stream (every policy gets those two unless it writes "unbounded"). Control sequences in
output to a terminal are shown as text (^[), not obeyed.

A program the sandbox cannot see (a .venv whose python links into ~/.pyenv, a toolchain
under ~/.cargo or ~/.nvm) exits 127 naming the host path to stage with --ro.

options:
  --policy FILE       policy file (.toml or .json; '-': standard input) instead of the default
  --workspace DIR     the workspace (default: the policy's, else the current directory)
  --ro PATH           make PATH visible read-only at the same path (repeatable)
  --allow HOST        allow egress to HOST through the egress proxy (repeatable)
  --mem SIZE          memory ceiling for the whole command, e.g. 512M, 2G (binary units)
  --pids N            ceiling on processes and threads alive at once
  --cpu DUR           CPU-time ceiling, e.g. 30s, 500ms, 2m (a bare number is seconds)
  --timeout DUR       wall-clock ceiling for the command
  --env NAME          copy NAME's value from this environment into the sandbox; use this
                      form for secrets (export TOKEN=...; panday run --env TOKEN -- ...)
  --env NAME=VALUE    set NAME inside; the value is on panday's command line, which other
                      users of this host can read (ps), so never put a secret there
  --writes MODE       direct (default: in place, protected names read-only), checked (an
                      overlay; what passes the hazard rules is applied when the command
                      ends, the rest held: panday changes) or review (nothing lands until
                      panday changes apply); docs/workspace.md
  --audit FILE        append the egress proxy's events (one JSON object per line) to FILE;
                      refused connections are also summed up on stderr after the command
  --stdin             stream this process's standard input into the command (default: empty)
  --tty               give the command a terminal of its own (a new pseudo-terminal; job
                      control, resizing, Ctrl-C and Ctrl-Z act on the jailed job), relaying
                      this terminal to it; T2 Linux. `panday shell` is run --tty -- bash -i
  --tier TIER         auto (default), t2-linux, t1-linux or t2-macos; a named tier is
                      never replaced (t0 serves file tools and runs no command)
  --json              print one JSON result object (output not streamed)
  --sanitize          show terminal control sequences in the output as text (^[) instead
                      of passing them to the terminal; the default for a stream that is one
  --no-sanitize       pass the output byte for byte, also to a terminal
  --debug             show a traceback with an error
"""

_VALUED = frozenset(
    {"--policy", "--workspace", "--ro", "--allow", "--mem", "--pids", "--cpu", "--timeout"}
    | {"--env", "--tier", "--writes", "--audit"}
)
_REPEATABLE = frozenset({"--ro", "--allow", "--env"})
_FLAGS = frozenset(
    {"--json", "--stdin", "--debug", "--help", "-h", "--sanitize", "--no-sanitize", "--tty"}
)

_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "": 1000}


class RunOptions:
    """The parsed command line of `panday run`."""

    __slots__ = ("command", "flags", "values")

    def __init__(self) -> None:
        self.values: dict[str, list[str]] = {}
        self.flags: set[str] = set()
        self.command: list[str] = []

    def one(self, name: str) -> str | None:
        found = self.values.get(name)
        return found[-1] if found else None

    def many(self, name: str) -> list[str]:
        return self.values.get(name, [])


def _unknown(option: str) -> UsageError:
    import difflib

    close = difflib.get_close_matches(option.split("=", 1)[0], sorted(_VALUED | _FLAGS), n=1)
    hint = f" (did you mean {close[0]}?)" if close else " (panday run --help lists them)"
    return UsageError(f"run: unknown option {option!r}{hint}")


def parse(args: list[str]) -> RunOptions:
    """Options up to ``--`` or the first non-option word; the rest is the command."""
    opts = RunOptions()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            opts.command = args[i + 1 :]
            break
        if not arg.startswith("-") or arg == "-":
            opts.command = args[i:]
            break
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in _FLAGS:
            if eq:
                raise UsageError(f"run: {name} takes no value")
            opts.flags.add(name)
            i += 1
            continue
        if name not in _VALUED:
            raise _unknown(arg)
        if not eq:
            if i + 1 >= len(args):
                raise UsageError(f"run: {name} needs a value")
            value = args[i + 1]
            i += 1
        if name in opts.values and name not in _REPEATABLE:
            raise UsageError(f"run: {name} given twice; give it once")
        opts.values.setdefault(name, []).append(value)
        i += 1
    return opts


def parse_size(option: str, text: str) -> int:
    """``512M``, ``2G``, ``1.5GiB``, ``1048576``: bytes (units are binary: 1K = 1024)."""
    raw = text.strip().lower().removesuffix("b").removesuffix("i")
    unit = raw[-1:] if raw[-1:] in _SIZE_UNITS else ""
    number = raw[: len(raw) - len(unit)]
    try:
        value = float(number)
    except ValueError:
        raise UsageError(f"{option} {text!r}: not a size; write e.g. 512M, 2G or 1048576") from None
    if not value > 0 or value != value or value == float("inf"):  # noqa: PLR0124 - NaN check
        raise UsageError(f"{option} {text!r}: must be a positive size")
    return int(value * _SIZE_UNITS[unit])


def parse_duration(option: str, text: str) -> int:
    """``500ms``, ``30s``, ``2m``, ``1h``, or a bare number of seconds: milliseconds."""
    raw = text.strip().lower()
    unit = next((u for u in ("ms", "s", "m", "h") if raw.endswith(u)), "")
    number = raw[: len(raw) - len(unit)]
    try:
        value = float(number)
    except ValueError:
        raise UsageError(
            f"{option} {text!r}: not a duration; write e.g. 500ms, 30s, 2m or 1h"
        ) from None
    if not value > 0 or value == float("inf"):
        raise UsageError(f"{option} {text!r}: must be a positive duration")
    return max(1, round(value * _DURATION_UNITS[unit]))


def _count(option: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise UsageError(f"{option} {text!r}: not a whole number") from None
    return value


def _directory(option: str, text: str) -> str:
    """`text` as an absolute path, as a policy file would have to write it: ``..`` is
    refused as it is there (``link/..`` is not the directory it reads as, so lexical
    normalisation would mount another place than the kernel would resolve)."""
    if "\x00" in text:
        raise UsageError(f"{option} {text!r}: contains a NUL byte")
    if ".." in text.split("/"):
        raise UsageError(
            f"{option} {text!r}: contains '..'; give the path without it (after a link, "
            "'..' leads elsewhere than it reads, so panday never resolves it for you)"
        )
    path = text
    if not os.path.isabs(path):
        from panday.defaults import current_directory

        path = os.path.join(current_directory(), path)
    path = os.path.normpath(path)
    if not os.path.exists(path):
        raise NoInputError(f"{option} {text!r}: no such file or directory")
    return path


def _base_policy(opts: RunOptions, workspace: str | None) -> tuple[SandboxPolicy, str | None]:
    """The policy the options apply to, and the file it came from (None: the embedded
    default): --policy, else the per-user default when it exists, else the embedded one."""
    from panday.defaults import default_policy, user_policy_path

    file = opts.one("--policy")
    if file is not None:
        from panday.cli import inputs as cli_input

        if file == cli_input.STDIN and "--stdin" in opts.flags:
            raise UsageError(
                "run: --policy - reads the policy from standard input, so --stdin cannot also "
                "pass it to the command"
            )
        return cli_input.load_policy(file), file
    user = user_policy_path()
    if os.path.lexists(user):
        from panday.cli import inputs as cli_input

        return cli_input.load_policy(user, what="per-user default policy file"), user
    return default_policy(workspace), None


def _check_inputs(policy: SandboxPolicy, source: str | None) -> None:
    """A path the policy names that does not exist is a missing input (66), whichever way
    it got into the policy: the options were checked as they were parsed, the rest here."""
    from panday._shared import missing_paths

    missing = missing_paths(policy)
    if missing:
        where = f" (in {'<stdin>' if source == '-' else source})" if source is not None else ""
        first = missing[0]
        raise NoInputError(f"{first.field}{where}: {first.reason}")


def _limits(opts: RunOptions) -> dict[str, int]:
    """The limits the options set, each checked against the model's range by itself, so an
    error names the option rather than a policy field the user never wrote."""
    from panday_core.policy import FieldError, Limits

    wanted: dict[str, tuple[str, int]] = {}
    for option, field, parse_value in (
        ("--mem", "mem_bytes", parse_size),
        ("--pids", "pids", _count),
        ("--cpu", "cpu_ms", parse_duration),
        ("--timeout", "wall_clock_ms", parse_duration),
    ):
        text = opts.one(option)
        if text is not None:
            wanted[field] = (option, parse_value(option, text))
    for field, (option, value) in wanted.items():
        try:
            Limits(**{field: value})
        except FieldError as exc:
            raise UsageError(f"{option} {opts.one(option)!r}: {exc.reason}") from None
    return {field: value for field, (_, value) in wanted.items()}


def _env(opts: RunOptions) -> dict[str, str]:
    from panday_core.policy import FieldError, SandboxPolicy

    env: dict[str, str] = {}
    for item in opts.many("--env"):
        name, eq, value = item.partition("=")
        if not eq:
            if name not in os.environ:
                raise UsageError(
                    f"--env {name!r}: not set in this environment; export it first (a value "
                    "written on panday's command line is visible to every user in ps)"
                )
            value = os.environ[name]
        try:
            SandboxPolicy(env={name: value})
        except FieldError as exc:
            raise UsageError(f"--env {item!r}: {exc.reason}") from None
        env[name] = value
    return env


def _hosts(opts: RunOptions) -> list[str]:
    from panday_core.domains import normalize_pattern

    hosts: list[str] = []
    for host in opts.many("--allow"):
        try:
            hosts.append(normalize_pattern(host))
        except ValueError as exc:
            raise UsageError(f"--allow {host!r}: {exc}") from None
    return hosts


def build_policy(opts: RunOptions) -> SandboxPolicy:
    """The policy file (or the embedded default) with the command line's options applied.

    Every field the options do not touch is kept as the policy has it (``fs.protect``,
    ``fs.unprotect``, ``fs.allow_home``, ``allow_env_hooks`` included): the options only
    override or extend, and the result is validated like a policy file."""
    import msgspec

    from panday_core.policy import Limits, SandboxPolicy

    hosts, limits, env = _hosts(opts), _limits(opts), _env(opts)
    workspace_opt = opts.one("--workspace")
    workspace = _directory("--workspace", workspace_opt) if workspace_opt else None
    if workspace is not None and not os.path.isdir(workspace):
        raise NoInputError(f"--workspace {workspace_opt!r}: not a directory")
    staged = [_directory("--ro", p) for p in opts.many("--ro")]
    base, source = _base_policy(opts, workspace)
    if workspace is None and base.fs.workspace is None:
        from panday.defaults import current_directory

        workspace = current_directory()
    writes = opts.one("--writes")
    if writes is not None and writes not in {"direct", "checked", "review"}:
        raise UsageError(f"--writes {writes!r}: choose direct, checked or review")
    fs = msgspec.structs.replace(
        base.fs,
        workspace=workspace or base.fs.workspace,
        staged_ro=(*base.fs.staged_ro, *staged),
        writes=writes or base.fs.writes,
    )
    net = msgspec.structs.replace(base.net, allow=(*base.net.allow, *hosts))
    limit_values = {name: getattr(base.limits, name) for name in Limits.__struct_fields__}
    limit_values.update(limits)
    policy = SandboxPolicy(
        fs=fs,
        net=net,
        limits=Limits(**limit_values),
        env={**base.env, **env},
        allow_env_hooks=base.allow_env_hooks,
    )
    _check_inputs(policy, source)
    return policy


def _spec(opts: RunOptions, stdin: bytes | None) -> ExecSpec:
    from panday._shared import exec_spec

    if not opts.command:
        raise UsageError("run: no command given; write it after --, e.g. panday run -- ls -l")
    try:
        return exec_spec(opts.command, stdin=stdin, cwd=None, timeout=None)
    except ValueError as exc:
        raise UsageError(f"run: {exc}") from None


def _on_signal(signum: int, frame: object) -> None:
    del frame
    raise Terminated(signum)


def exit_code_of(end: ExecExit | ExecResult) -> int:
    """What `panday run` exits with for a finished command (docs/cli.md)."""
    if end.breach is not None:
        return exitcodes.LIMITS.get(end.breach.kind.value, exitcodes.INTERNAL)
    if end.exit_code is not None:
        return end.exit_code
    return exitcodes.SIGNAL_BASE + (end.signal or 0)


def writes_lines(report: WriteReport) -> str:
    """What became of a checked or review command's writes: one line per held change, and
    where the rest waits (nothing when everything was applied)."""
    from panday.terminal import inert

    # Paths and link targets are the jail's: made inert, so a name cannot forge a line.
    lines = [
        inert(f"panday: held {h.path} ({h.action}): {h.rule}: {h.reason}") for h in report.held
    ]
    if report.change_set is not None:
        waiting = f"{report.pending} change(s) wait for review; " if report.pending else ""
        lines.append(
            f"panday: {waiting}see `panday changes show {report.change_set}`, then "
            f"`panday changes apply {report.change_set} [PATH...]` or `discard`"
        )
    return "".join(line + "\n" for line in lines)


def _breach_line(end: ExecExit) -> str:
    assert end.breach is not None  # noqa: S101 - only called with a breach
    ended = (
        f"exit status {end.exit_code}"
        if end.exit_code is not None
        else f"killed by signal {end.signal}"
    )
    return f"limit exceeded: {end.breach.kind.value}: {end.breach.detail} (the command: {ended})"


def _stream(session: Session, spec: ExecSpec, opts: RunOptions) -> int:
    from panday_core.types import OutputChunk

    filters: dict[int, Filter] = {}
    for fd in (1, 2):
        if sanitizing(opts.flags, fd):
            from panday.terminal import Filter

            filters[fd] = Filter()
    events = session.stream(spec.argv, stdin=_stdin(opts))
    try:
        for event in events:
            if isinstance(event, OutputChunk):
                fd = 1 if event.stream == "stdout" else 2
                found = filters.get(fd)
                write_all(fd, event.data if found is None else found.feed(event.data))
                continue
            for fd, found in filters.items():
                write_all(fd, found.flush())
            if event.breach is not None:
                sys.stderr.write(f"panday: {_breach_line(event)}\n")
            if event.writes is not None:
                sys.stderr.write(writes_lines(event.writes))
            return exit_code_of(event)
    except BrokenPipeError:
        # Whoever reads our output has gone (`panday run -- yes | head -1`): stop the
        # command, as a pipeline would with SIGPIPE, and say nothing more.
        events.close()
        return exitcodes.SIGNAL_BASE + 13
    finally:
        events.close()
    raise RuntimeError("the command's events ended without an exit")


def _document(
    session: Session,
    spec: ExecSpec,
    result: ExecResult,
    write: Callable[[bytes], object],
    denials: Denials | None = None,
) -> int:
    """Write the ``--json`` document (no trailing newline) through `write`, in pieces, and
    return the exit code. The document is the report with empty output, formatted, with
    each stream's encoded text put where its empty string was: the kept output is held
    once, as its bytes, and encoded a slice at a time (`_json_string`), never also as its
    whole text or a whole document. The caller must hold no other reference to `result`."""
    import msgspec

    from panday.reports import RunReport

    code = exit_code_of(result)
    report = RunReport(
        tier=session.tier,
        session_id=session.id,
        workspace=session.workspace,
        argv=spec.argv,
        exit_code=result.exit_code,
        signal=result.signal,
        wall_ms=round(result.wall_ms, 3),
        breach=result.breach,
        stdout="",
        stderr="",
        truncated_stdout=result.truncated_stdout,
        truncated_stderr=result.truncated_stderr,
        panday_exit_code=code,
        writes=result.writes,
        events=tuple(denials.events) if denials is not None else (),
    )
    frame = msgspec.json.format(msgspec.json.encode(report), indent=2)
    # The keys, unescaped, occur once each: a quote inside a JSON string is escaped.
    before, _, rest = frame.partition(b'\n  "stdout": ""')
    between, _, after = rest.partition(b'\n  "stderr": ""')
    out, err = result.stdout, result.stderr
    del result
    write(before + b'\n  "stdout": ')
    _json_string(out, write)
    del out
    write(between + b'\n  "stderr": ')
    _json_string(err, write)
    del err
    write(after)
    return code


JSON_SLICE = 1 << 20
"""Bytes of kept output decoded and encoded at a time for ``--json``."""


def _json_string(data: bytes, write: Callable[[bytes], object]) -> None:
    """Write `data`, decoded as UTF-8 (invalid bytes replaced), as one JSON string through
    `write`, a slice at a time: besides `data` only one slice's text and its encoding are
    held at once."""
    import codecs

    import msgspec

    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    encode = msgspec.json.encode
    write(b'"')
    with memoryview(data) as view:
        for start in range(0, len(view), JSON_SLICE):
            # A character split between slices waits in the decoder for the next one.
            text = decoder.decode(view[start : start + JSON_SLICE])
            if text:
                write(encode(text)[1:-1])
    text = decoder.decode(b"", final=True)
    if text:
        write(encode(text)[1:-1])
    write(b'"')


def _collect(session: Session, spec: ExecSpec, opts: RunOptions) -> list[ExecResult]:
    """The finished command for ``--json``, in a list the writer empties (so no other
    reference keeps its output alive while the document is encoded)."""
    from panday_core.execution import collect

    return [collect(session.stream(spec.argv, stdin=_stdin(opts)))]


def _json(session: Session, spec: ExecSpec, box: list[ExecResult], denials: Denials) -> int:
    """One JSON document, written whole once the command has finished and its session
    closed (so every egress event is in); a document that cannot be built is refused
    (exit 74), never cut short.

    It is built in an unlinked temporary file, then copied out: held in memory, 16 MiB of
    kept output (``yes``: 24 MiB of JSON) took the process to a peak of 67-75 MiB, over the
    64 MiB budget of issue 13; in the file it costs one slice."""
    import tempfile

    try:
        with tempfile.TemporaryFile(prefix="panday-json-") as doc:
            code = _document(session, spec, box.pop(), doc.write, denials)
            doc.write(b"\n")
            doc.flush()
            sys.stdout.flush()
            _copy_out(doc)
    except MemoryError:
        raise OutputError(1, 0, OSError(12, "the JSON document does not fit in memory")) from None
    except BrokenPipeError:
        raise  # the reader left: handled as for any output
    except OSError as exc:  # the temporary file (a full or read-only TMPDIR)
        why = OSError(exc.errno, f"the JSON document's temporary file: {exc.strerror or exc}")
        raise OutputError(1, 0, why) from exc
    return code


def _copy_out(doc: BinaryIO) -> None:
    """Copy the finished document in `doc` to standard output, a slice at a time."""
    size = doc.tell()
    doc.seek(0)
    while size > 0:
        chunk = doc.read(min(size, JSON_SLICE))
        if not chunk:  # the file shrank under us: never a silently short document
            raise OutputError(1, size, OSError(5, "the JSON document's temporary file ended"))
        write_all(1, chunk)
        size -= len(chunk)


def _stdin(opts: RunOptions) -> int | None:
    """Descriptor 0 with ``--stdin`` (streamed into the command), else nothing."""
    return 0 if "--stdin" in opts.flags else None


def _check_tier(tier: str) -> None:
    """A named tier must exist and run commands; T0 serves file tools and never does."""
    from panday import tiers

    try:
        tiers.check_name(tier)
    except ValueError as exc:
        raise UsageError(f"--tier {exc.args[0].removeprefix('tier: ')}") from None
    row = tiers.entry(tier)
    if not row.runs_commands:
        choices = ", ".join(("auto", *tiers.COMMAND_TIERS))
        raise UsageError(
            f"--tier {tier}: {row.title} serves file tools in-process and never runs "
            f"commands; choose {choices}"
        )


def main(args: list[str]) -> int:
    """`panday run ARGS`: the exit code (errors are raised for `panday.cli.report`; with
    ``--json`` they are also a JSON document on stdout, so a harness that reads stdout
    always gets one)."""
    opts = parse(args)
    if "--help" in opts.flags or "-h" in opts.flags:
        write_text(RUN_HELP)
        return exitcodes.OK
    if "--json" not in opts.flags:
        return _run(opts)
    try:
        return _run(opts)
    except (KeyboardInterrupt, SystemExit, BrokenPipeError, OutputError):
        raise
    except Exception as exc:  # noqa: BLE001 - every error: its line, and its document
        return _json_failure(exc, opts)


def _json_failure(exc: Exception, opts: RunOptions) -> int:
    """The command never ran: the error's line on stderr, and a `RunReport` naming it."""
    from panday.cli.errors import classify
    from panday.reports import RunReport, encode

    code, line = classify(exc)
    if line:
        sys.stderr.write(f"panday: {line}\n")
    report = RunReport(
        tier="",
        session_id="",
        workspace=opts.one("--workspace") or "",
        argv=tuple(opts.command),
        exit_code=None,
        signal=None,
        wall_ms=0.0,
        breach=None,
        stdout="",
        stderr="",
        truncated_stdout=False,
        truncated_stderr=False,
        panday_exit_code=code,
        error=line or type(exc).__name__,
    )
    write_text(encode(report) + "\n")
    return code


def _run(opts: RunOptions) -> int:
    if not opts.command:
        raise UsageError("run: no command given; write it after --, e.g. panday run -- ls -l")
    import signal

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _on_signal)
    tier = _options_tier(opts)
    # --stdin streams this process's standard input into the command as it reads it (never
    # read whole first: a pipe that stays open must not hold the command back, and a large
    # one must not fill panday's memory); without it the command's stdin is empty.
    spec = _spec(opts, None)
    policy = build_policy(opts)
    from panday.session import open as open_session
    from panday_core.errors import PolicyViolation as Refused

    denials = Denials()
    audit = opts.one("--audit")
    if audit is not None:
        _check_audit_file(audit)
    try:
        session = open_session(policy, tier=tier, egress=denials.settings(policy, audit))
    except Refused as exc:
        raise _defaulted(exc, opts, policy) from None
    box: list[ExecResult] = []
    with session:
        if "--json" in opts.flags:
            box = _collect(session, spec, opts)
            code = exitcodes.OK
        else:
            code = _interactive(session, spec, opts)
    # After the session closed: its proxy has reported every connection's end.
    if box:
        return _json(session, spec, box, denials)
    line = denials.summary()
    if line:
        sys.stderr.write(line)
    return code


def _options_tier(opts: RunOptions) -> str:
    """The tier asked for (checked), after the options that exclude each other."""
    if "--tty" in opts.flags and opts.flags & {"--json", "--stdin"}:
        raise UsageError("run: --tty relays this terminal both ways; drop --json and --stdin")
    tier = opts.one("--tier") or "auto"
    if tier != "auto":
        _check_tier(tier)
    return tier


def _interactive(session: Session, spec: ExecSpec, opts: RunOptions) -> int:
    """The command's output streamed live, or relayed through a terminal of its own."""
    if "--tty" in opts.flags:
        from panday.cli.tty import run_tty

        return run_tty(session, spec.argv, exit_code_of)
    return _stream(session, spec, opts)


class Denials:
    """The egress proxy's audit events of this run (one command): what `--json` carries
    as ``events`` and what the summary line after the command says was refused."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def settings(self, policy: SandboxPolicy, audit: str | None) -> ProxySettings | None:
        """Proxy settings that record every event (and append them to `audit` as JSON
        lines); None without ``net.allow`` (no proxy) or off Linux (the T2 macOS proxy
        takes no settings from a caller yet)."""
        if not policy.net.allow or not sys.platform.startswith("linux"):
            return None
        from panday_core.egress.thread import ProxySettings

        return ProxySettings(audit=self.events.append, audit_jsonl=audit)

    def refused(self) -> list[AuditEvent]:
        return [e for e in self.events if e.phase == "close" and e.verdict == "refused"]

    def summary(self) -> str:
        """One line for a terminal: how many connections the proxy refused, and why (the
        first three distinct destinations); empty when none was."""
        from panday.terminal import inert

        refused = self.refused()
        if not refused:
            return ""
        total = sum(e.count for e in refused)
        seen: dict[str, str] = {}
        for event in refused:
            where = f"{event.host or event.address or '?'}:{event.port or '?'}"
            seen.setdefault(where, event.reason)
        shown = "; ".join(f"{w} ({r})" for w, r in list(seen.items())[:3])
        more = f"; and {len(seen) - 3} more" if len(seen) > 3 else ""  # noqa: PLR2004 - shown
        # Host names are the jail's (it asked for them): inert on the caller's terminal.
        return (
            inert(f"panday: {total} connection(s) refused by the egress proxy: {shown}{more}")
            + "\n"
        )


def _check_audit_file(path: str) -> None:
    """--audit FILE must be writable before anything runs (one clear line otherwise)."""
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise NoInputError(f"--audit {path!r}: {exc.strerror}") from None


def _defaulted(exc: PolicyViolation, opts: RunOptions, policy: SandboxPolicy) -> Exception:
    """A refused workspace the user never chose says so: it defaulted to the current
    directory (no ``--workspace``, no ``fs.workspace``), and what to do instead."""
    from panday_core.capabilities import Refusal
    from panday_core.errors import PolicyViolation as Refused

    chosen = opts.one("--workspace") is not None or _policy_names_workspace(opts)
    if chosen or not any(v.field == "fs.workspace" for v in exc.violations):
        return exc
    hint = (
        f" [the workspace defaulted to the current directory, {policy.fs.workspace}, as no "
        "--workspace or fs.workspace was given: run panday from a project directory, or "
        "give one with --workspace DIR]"
    )
    return Refused(
        exc.tier,
        [
            Refusal(field=v.field, reason=v.reason + hint) if v.field == "fs.workspace" else v
            for v in exc.violations
        ],
    )


def _policy_names_workspace(opts: RunOptions) -> bool:
    """Whether the policy file (``--policy``, or the per-user default) names a workspace."""
    from panday.cli import inputs as cli_input
    from panday.defaults import user_policy_path

    path = opts.one("--policy") or user_policy_path()
    if path == cli_input.STDIN or not os.path.exists(path):
        return False
    try:
        return cli_input.load_policy(path).fs.workspace is not None
    except Exception:  # noqa: BLE001 - only a hint: the policy was read once already
        return False
