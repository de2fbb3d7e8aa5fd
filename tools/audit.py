"""Audit the locked dependencies for known vulnerabilities; fail closed.

pip-audit alone can pass while checking nothing: against a service that knows none of the
packages it prints "No known vulnerabilities found" and exits 0. This gate therefore:

- audits exact pins (every package in uv.lock, every dependency group, every optional
  extra such as `panday[ray]`, every platform),
  with `--strict`, so a dependency that cannot be audited fails the gate;
- first asks the service about releases it must know to be vulnerable (`CANARIES`: eight
  packages, most of them pinned in our own lock) — a positive control: a service that
  answers nothing, cannot be reached, or knows only some packages (a snapshot cut down to
  a few directories) fails the gate before its silence about our dependencies is believed;
- checks that every pin it fed in came back audited;
- excludes the workspace's own packages by name, saying so: they are built from this
  repository, are not published on PyPI yet, and have no advisories to look up;
- applies exceptions only from one file, each with an id, a reason and an expiry date.

Online by default (OSV). With `PANDAY_ADVISORY_DB` set, it serves that OSV directory on a
loopback port for the duration of the audit and says "offline snapshot" and its date.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
import tempfile
import tomllib
import urllib.error
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import msgspec

import results
from gatelib import REPO, GateError, canonical, die, run, workspace_members

ONLINE_URL = "https://api.osv.dev/v1/query"
EXCEPTIONS = REPO / "tools" / "audit-exceptions.toml"
# The positive control: releases every OSV source lists as vulnerable, across packages (one
# canary would pass a snapshot cut down to that one package). Most are pinned in uv.lock too.
CANARIES = (
    ("requests", "2.19.0"),  # CVE-2018-18074
    ("urllib3", "1.24.1"),  # CVE-2019-11324
    ("pyyaml", "5.3"),  # CVE-2020-1747
    ("certifi", "2022.9.24"),  # CVE-2022-23491
    ("cryptography", "3.2"),  # CVE-2020-36242
    ("idna", "3.6"),  # CVE-2024-3651
    ("jinja2", "2.10"),  # CVE-2019-10906
    ("pip", "21.0"),  # CVE-2021-3572
)
OFFLINE_HINT = (
    "to audit offline, set PANDAY_ADVISORY_DB to an OSV snapshot (the PyPA advisory "
    "database's vulns/ layout; see docs/release.md)"
)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)\s*(?:;.*)?$")


@dataclass(frozen=True, slots=True)
class Pin:
    name: str  # canonical
    version: str


class Accepted(msgspec.Struct, forbid_unknown_fields=True):
    """One accepted advisory (see tools/audit-exceptions.toml)."""

    id: str
    package: str
    reason: str
    expires: dt.date


class _ExceptionsFile(msgspec.Struct, forbid_unknown_fields=True):
    exception: list[Accepted] = []


def parse_requirements(text: str, source: str) -> list[Pin]:
    """Exact `name==version` pins; anything else cannot be audited and is an error."""
    pins: list[Pin] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        match = _PIN.match(line)
        if match is None:
            raise GateError(
                f"{source}:{number}: cannot audit {line!r}: only exact `name==version` pins "
                "can be looked up"
            )
        pins.append(Pin(canonical(match.group(1)), match.group(2)))
    return pins


def locked_pins() -> tuple[list[Pin], list[str]]:
    """Every third-party pin in uv.lock, plus the workspace members that were left out."""
    exported = run(
        [
            "uv", "export", "--locked", "--all-packages", "--all-groups", "--all-extras",
            "--no-emit-workspace",
            "--format", "requirements.txt", "--no-hashes", "--no-annotate", "--no-header",
        ],
        cwd=REPO,
    )  # fmt: skip
    pins = parse_requirements(exported, "uv export")
    members = [m.name for m in workspace_members()]
    return pins, members


def load_exceptions(path: Path) -> list[Accepted]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return msgspec.convert(data, _ExceptionsFile).exception
    except (OSError, tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise GateError(f"{path}: {exc}") from exc


class _Id(msgspec.Struct):
    id: str


class _Answer(msgspec.Struct):
    vulns: list[_Id] = []


class Vuln(msgspec.Struct):
    id: str
    fix_versions: list[str] = []
    aliases: list[str] = []


class Dep(msgspec.Struct):
    name: str
    version: str | None = None
    vulns: list[Vuln] = []
    skip_reason: str | None = None


class _Report(msgspec.Struct):
    dependencies: list[Dep]


def ask(url: str, name: str, version: str, timeout: float) -> list[str]:
    """Query an OSV endpoint directly; return the advisory ids it lists."""
    if not url.startswith(("http://", "https://")):
        raise GateError(f"advisory service URL must be http(s): {url}")
    body = json.dumps({"package": {"name": name, "ecosystem": "PyPI"}, "version": version})
    request = urllib.request.Request(  # noqa: S310 - scheme checked above
        url, data=body.encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - checked above
            raw: bytes = response.read()
        # OSV answers `{}` when it knows no advisory: an empty body is not that answer.
        answer = msgspec.json.decode(raw, type=_Answer)
    except (urllib.error.URLError, OSError, msgspec.DecodeError) as exc:
        raise GateError(f"advisory service {url} unreachable or unreadable: {exc}") from exc
    return [v.id for v in answer.vulns]


def positive_control(url: str, timeout: float) -> str:
    found = {f"{name}=={version}": ask(url, name, version, timeout) for name, version in CANARIES}
    silent = [pin for pin, ids in found.items() if not ids]
    if silent:
        raise GateError(
            f"positive control failed: the advisory service at {url} reports nothing for "
            f"{', '.join(silent)} ({len(silent)} of {len(found)} releases with published "
            "advisories); its silence about our dependencies would prove nothing"
        )
    total = sum(len(ids) for ids in found.values())
    return f"{len(found)} vulnerable releases of {len(found)} packages -> {total} advisories"


def batches(pins: list[Pin]) -> list[list[Pin]]:
    """Distinct pins, split so that no batch names a package twice.

    A universal lock may pin two versions of one package (one per Python range); pip-audit
    refuses a requirements file that names a package twice, so each version gets audited in
    its own batch.
    """
    out: list[list[Pin]] = []
    for pin in sorted(set(pins), key=lambda p: (p.name, p.version)):
        home = next((b for b in out if all(p.name != pin.name for p in b)), None)
        if home is None:
            out.append([pin])
        else:
            home.append(pin)
    return out


def pip_audit(pins: list[Pin], url: str, timeout: float, workdir: Path) -> list[Dep]:
    """Run pip-audit over one batch of distinct pins; return its per-dependency report."""
    requirements = workdir / "requirements.txt"
    requirements.write_text("".join(f"{p.name}=={p.version}\n" for p in pins), encoding="utf-8")
    report = workdir / "report.json"
    report.unlink(missing_ok=True)
    argv = [
        sys.executable, "-m", "pip_audit", "--requirement", str(requirements),
        "--no-deps", "--disable-pip", "--strict", "--vulnerability-service", "osv",
        "--osv-url", url, "--format", "json", "--progress-spinner", "off",
        "--timeout", str(max(1, int(timeout))), "--cache-dir", str(workdir / "cache"),
        "--output", str(report),
    ]  # fmt: skip
    env = {**os.environ, "PIP_NO_INPUT": "1"}
    import subprocess  # noqa: PLC0415 - only this path spawns pip-audit

    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    # pip-audit exits 1 both for "vulnerabilities found" (report written) and for any error
    # (no report); only a report tells the two apart.
    if proc.returncode not in (0, 1) or not report.is_file() or report.stat().st_size == 0:
        lines = [
            line
            for line in (proc.stderr or proc.stdout).strip().splitlines()
            if not line.startswith("WARNING:")
        ]
        tail = " | ".join(lines[-3:]) if lines else "no output"
        raise GateError(f"pip-audit could not complete the audit (exit {proc.returncode}): {tail}")
    try:
        return msgspec.json.decode(report.read_bytes(), type=_Report).dependencies
    except msgspec.DecodeError as exc:
        raise GateError(f"pip-audit wrote an unreadable report: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Finding:
    package: str
    version: str
    id: str
    aliases: tuple[str, ...]
    fixes: tuple[str, ...]


def findings_of(pins: list[Pin], deps: list[Dep]) -> list[Finding]:
    """Check every pin came back audited; return the advisories reported."""
    seen = {(canonical(d.name), d.version): d for d in deps}
    missing = [f"{p.name}=={p.version}" for p in pins if (p.name, p.version) not in seen]
    skipped = [f"{name} ({d.skip_reason})" for (name, _), d in seen.items() if d.skip_reason]
    if missing or skipped:
        names = missing + skipped
        raise GateError(f"{len(names)} dependencies were not audited: {', '.join(names)}")
    return [
        Finding(name, str(version), v.id, tuple(v.aliases), tuple(v.fix_versions))
        for (name, version), dep in sorted(
            seen.items(), key=lambda item: (item[0][0], str(item[0][1]))
        )
        for v in dep.vulns
    ]


def apply_exceptions(
    found: list[Finding], exceptions: list[Accepted], today: dt.date
) -> tuple[list[Finding], list[str]]:
    """Split findings into (still failing, notes about accepted/expired/unused exceptions)."""
    notes: list[str] = []
    expired = [e for e in exceptions if e.expires < today]
    if expired:
        ids = ", ".join(f"{e.id} ({e.package}, expired {e.expires})" for e in expired)
        raise GateError(f"audit exceptions expired: {ids}; fix or renew them in {EXCEPTIONS.name}")
    remaining: list[Finding] = []
    used: set[str] = set()
    for finding in found:
        match = next(
            (
                e
                for e in exceptions
                if canonical(e.package) == finding.package
                and (e.id == finding.id or e.id in finding.aliases)
            ),
            None,
        )
        if match is None:
            remaining.append(finding)
        else:
            used.add(match.id)
            notes.append(
                f"accepted {match.id} in {finding.package}=={finding.version} until "
                f"{match.expires}: {match.reason}"
            )
    notes.extend(
        f"unused exception {e.id} ({e.package}): no finding matches it; remove it"
        for e in exceptions
        if e.id not in used
    )
    return remaining, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("-r", "--requirement", type=Path, action="append", default=[],
        help="audit these pinned requirements instead of uv.lock")  # fmt: skip
    add("--exceptions", type=Path, default=EXCEPTIONS)
    add("--advisory-db", type=Path, default=None,
        help="OSV directory (default: $PANDAY_ADVISORY_DB; else online)")  # fmt: skip
    parser.add_argument("--service-url", default=None, help="query this OSV endpoint instead")
    parser.add_argument("--timeout", type=float, default=15.0)
    args = parser.parse_args(argv)
    try:
        return _audit(args)
    except GateError as exc:
        die("audit", str(exc))


def _collect(requirement_files: list[Path]) -> tuple[list[Pin], list[str], str]:
    """(pins to audit, workspace packages left out, where the pins came from)."""
    if requirement_files:
        pins: list[Pin] = []
        for path in requirement_files:
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise GateError(f"cannot read {path}: {exc.strerror or exc}") from exc
            pins.extend(parse_requirements(text, str(path)))
        return pins, [], ", ".join(str(p) for p in requirement_files)
    pins, excluded = locked_pins()
    members = {canonical(m) for m in excluded}
    leaked = [p.name for p in pins if p.name in members]
    if leaked:
        raise GateError(f"workspace packages reached the audit list: {', '.join(leaked)}")
    return pins, excluded, "uv.lock (runtime and every dependency group, every platform)"


def _service(stack: ExitStack, service_url: str | None, db_path: Path | None) -> tuple[str, str]:
    """(query URL, description of the source) — starting the loopback server if offline."""
    if service_url:
        return service_url, f"the advisory service at {service_url}"
    if db_path is None:
        return ONLINE_URL, f"OSV online ({ONLINE_URL})"
    from osv_server import AdvisoryDB, serve, snapshot_date  # noqa: PLC0415 - offline only

    if not db_path.is_dir():
        raise GateError(f"PANDAY_ADVISORY_DB={db_path} is not a directory")
    url = stack.enter_context(serve(AdvisoryDB(db_path.resolve())))
    return url, (
        f"offline snapshot {db_path} ({snapshot_date(db_path)}), served on {url}; "
        "an old snapshot is not a current audit"
    )


def _audit(args: argparse.Namespace) -> int:
    pins, excluded, source_of_pins = _collect(args.requirement)
    if not pins:
        raise GateError(f"nothing to audit in {source_of_pins}")
    exceptions = load_exceptions(args.exceptions)
    db_env = os.environ.get("PANDAY_ADVISORY_DB")
    db_path: Path | None = args.advisory_db or (Path(db_env) if db_env else None)
    with ExitStack() as stack:
        url, where = _service(stack, args.service_url, db_path)
        print(f"audit: source: {where}")
        try:
            print(f"audit: positive control: {positive_control(url, args.timeout)}")
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="panday-audit-")))
            deps = [
                d for batch in batches(pins) for d in pip_audit(batch, url, args.timeout, workdir)
            ]
        except GateError as exc:
            if url == ONLINE_URL:  # no network here, perhaps: say how to audit without it
                raise GateError(f"{exc}; {OFFLINE_HINT}") from exc
            raise

    found = findings_of(pins, deps)
    remaining, notes = apply_exceptions(found, exceptions, dt.datetime.now(tz=dt.UTC).date())
    for note in notes:
        print(f"audit: {note}")
    if excluded:
        print(
            f"audit: excluded {len(excluded)} workspace packages ({', '.join(excluded)}): built "
            "from this repository and not published on PyPI, so no advisory database can know "
            "them; their locked dependencies are all audited"
        )
    names = len({p.name for p in pins})
    print(
        f"audit: {names} packages audited ({len(set(pins))} pinned versions) from {source_of_pins}"
    )
    if remaining:
        for f in remaining:
            fix = f"fixed in {', '.join(f.fixes)}" if f.fixes else "no fixed version"
            alias = f" ({', '.join(f.aliases)})" if f.aliases else ""
            print(f"  {f.package}=={f.version}: {f.id}{alias}, {fix}")
        packages = len({f.package for f in remaining})
        die("audit", f"{len(remaining)} known vulnerabilities in {packages} packages")
    print(f"audit: 0 known vulnerabilities ({len(found) - len(remaining)} accepted by exceptions)")
    source = "online OSV"
    if db_path is not None:
        from osv_server import snapshot_date  # noqa: PLC0415 - offline only

        taken = re.search(r"\d{4}-\d{2}-\d{2}", snapshot_date(db_path))
        source = f"offline snapshot {taken.group(0) if taken else 'of unknown date'}"
    results.record("audit", f"audit ({source}, {names} packages)", packages=names, source=source)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
