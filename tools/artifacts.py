"""Build every package's sdist and wheel, check their metadata, and test the wheels as a
user gets them: `pip install panday` into a fresh virtual environment outside the source
tree, run from a directory outside the source tree.

Only the `panday` wheel is asked for. Its dependencies are resolved the way pip resolves
them on this platform, from the built wheels and nothing else (``--no-index --find-links
dist/packages``): on Linux that brings panday-core and panday-tier-linux and must *not*
bring panday-tier-macos (its marker says macOS), so the test sees exactly the set of
packages a user's install has. Third-party dependencies come from the locked,
hash-checked runtime requirements of `panday` alone, installed first; `uv pip check`
proves every declared dependency is then satisfied, and every imported panday module must
come from the new environment's site-packages.

From that environment it runs `panday doctor --json`, `panday policy check` on every
policy in examples/, `panday plugin inspect` on the sample manifest, and (where the host's
tier is usable) `panday run -- sh -c 'echo ok'` in the jail.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any  # noqa: TID251 - JSON reports are Any at this boundary

import results
from gatelib import REPO, GateError, Member, die, run, workspace_members

DIST = REPO / "dist" / "packages"
EXAMPLES = REPO / "examples"
MANIFEST = "plugin.toml"
"""The sample plugin manifest in examples/; every other .toml/.json there is a policy."""


def tier_packages() -> dict[str, str]:
    """Platform -> the import package of each tier that ships as its own distribution
    (from the SDK's tier registry: `requirement` set, `platform` set)."""
    from panday import tiers  # noqa: PLC0415 - tools import packages lazily

    return {
        t.platform: t.package
        for t in tiers.REGISTRY
        if t.requirement is not None and t.platform is not None
    }


def build(out: Path, members: list[Member]) -> list[Path]:
    """`uv build --all-packages` into `out`; exactly one sdist and one wheel per member."""
    if out.exists():
        shutil.rmtree(out)
    run(["uv", "build", "--all-packages", "--out-dir", str(out)], cwd=REPO)
    files = sorted(out.iterdir())
    problems: list[str] = []
    for member in members:
        stem = f"{member.name.replace('-', '_')}-{member.version}"
        wheels = [f for f in files if f.name.startswith(f"{stem}-") and f.suffix == ".whl"]
        sdists = [f for f in files if f.name == f"{stem}.tar.gz"]
        if len(wheels) != 1 or len(sdists) != 1:
            problems.append(f"{member.name}: {len(wheels)} wheels, {len(sdists)} sdists")
    if problems:
        raise GateError(f"unexpected build output in {out}: {'; '.join(problems)}")
    return [f for f in files if f.suffix == ".whl" or f.name.endswith(".tar.gz")]


def check_metadata(files: list[Path]) -> None:
    twine = Path(sys.executable).parent / "twine"
    run([str(twine), "check", "--strict", *map(str, files)])


def _clean_env(venv: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def install_outside(out: Path, where: Path, *, compile_bytecode: bool = True) -> Path:
    """A fresh venv holding what `pip install panday` gives this platform, from `out`:
    bytecode compiled as pip compiles it (`compile_bytecode=False`: as uv installs by
    default, which the start-up benchmark measures)."""
    venv = where / "venv"
    if venv.resolve().is_relative_to(REPO):
        raise GateError(f"{venv} is inside the source tree; the artifact test must not be")
    run(["uv", "venv", "--quiet", "--python", sys.executable, str(venv)], cwd=where)
    requirements = where / "runtime-requirements.txt"
    run(
        [
            "uv", "export", "--locked", "--package", "panday", "--no-default-groups",
            "--no-emit-workspace", "--format", "requirements.txt", "--no-header",
            "--output-file", str(requirements),
        ],
        cwd=REPO,
    )  # fmt: skip
    python = str(venv / "bin" / "python")
    uv_pip = ["uv", "pip", "install", "--quiet", "--python", python]
    run([*uv_pip, "--require-hashes", "-r", str(requirements)], cwd=where)
    # Only `panday`, resolved as pip would here: markers decide which tier comes along.
    # --no-cache: uv caches find-links wheels by file name, and every build is 0.1.0 until
    # a release, so a cached wheel from an earlier build would be tested instead of this one.
    compile_flag = ["--compile-bytecode"] if compile_bytecode else []
    run(
        [*uv_pip, *compile_flag, "--no-cache", "--no-index", "--find-links", str(out), "panday"],
        cwd=where,
    )
    run(["uv", "pip", "check", "--python", python], cwd=where)
    return venv


def _installed(venv: Path, where: Path) -> set[str]:
    listing = run(
        ["uv", "pip", "list", "--format", "json", "--python", str(venv / "bin" / "python")],
        cwd=where,
    )
    rows: list[dict[str, str]] = json.loads(listing)
    return {row["name"].replace("_", "-").lower() for row in rows}


def expected_imports() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(panday modules that must import here, tier packages that must be absent here)."""
    packages = tier_packages()
    here = next((m for p, m in packages.items() if sys.platform.startswith(p)), None)
    present = ("panday", "panday_core", *([here] if here else []))
    absent = tuple(m for m in packages.values() if m != here)
    return present, absent


def smoke(venv: Path, where: Path) -> list[str]:
    """Run the installed CLI from outside the tree; return what was checked."""
    env = _clean_env(venv)
    python = str(venv / "bin" / "python")
    panday = str(venv / "bin" / "panday")
    present, absent = expected_imports()
    installed = _installed(venv, where)
    stray_tiers = [m for m in absent if m.replace("_", "-") in installed]
    if stray_tiers:
        raise GateError(f"`pip install panday` on {sys.platform} also installed {stray_tiers}")
    probe = (
        "import importlib.util, json, sys; "
        "print(json.dumps({m: (s.origin if (s := importlib.util.find_spec(m)) else None) "
        "for m in sys.argv[1:]}))"
    )
    origins: dict[str, str | None] = json.loads(
        run([python, "-c", probe, *present, *absent], cwd=where, env=env)
    )
    missing = [m for m in present if origins.get(m) is None]
    if missing:
        raise GateError(f"not importable from the fresh environment: {missing}")
    stray = {
        m: f
        for m in present
        if (f := origins[m]) is not None and not Path(f).resolve().is_relative_to(venv.resolve())
    }
    if stray:
        raise GateError(f"imported from outside the fresh environment: {stray}")
    run([panday, "--help"], cwd=where, env=env)
    doctor = _doctor(panday, where, env)
    checked = _policies(panday, where, env)
    inspected = _plugin(panday, where, env)
    jailed = _jailed(panday, where, env)
    without = f"; {', '.join(absent)} not installed, as on a user's machine" if absent else ""
    return [
        f"only `panday` asked for: {len(installed)} distributions installed{without}",
        f"{len(present)} panday modules imported from the fresh environment",
        "`panday --help` ran",
        *doctor,
        *checked,
        inspected,
        *jailed,
    ]


def _policies(panday: str, where: Path, env: dict[str, str]) -> list[str]:
    """`panday policy check` on every policy in examples/: valid, and its exit code agrees
    with its verdict (0 enforceable here, 1 not); once more with all of them at once."""
    files = sorted(
        f for f in EXAMPLES.iterdir() if f.suffix in {".toml", ".json"} and f.name != MANIFEST
    )
    if not files:
        raise GateError(f"no policies in {EXAMPLES}")
    lines: list[str] = []
    for example in files:
        policy = where / example.name
        shutil.copyfile(example, policy)
        proc, report = _json_command([panday, "policy", "check", "--json", policy.name], where, env)
        enforceable = bool(report.get("enforceable_here"))
        if report.get("valid") is not True or (proc.returncode == 0) != enforceable:
            detail = f"exit {proc.returncode} disagrees with its report: {proc.stdout.strip()}"
            raise GateError(f"`panday policy check {example.name}` {detail}")
        verdict = "enforceable here" if enforceable else "valid, not enforceable on this host"
        lines.append(f"`panday policy check {example.name}`: {verdict} (exit {proc.returncode})")
    names = [f.name for f in files]
    every = subprocess.run(
        [panday, "policy", "check", *names],
        cwd=where, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    if every.returncode not in {0, 1} or every.stderr:
        raise GateError(
            f"`panday policy check {' '.join(names)}` (exit {every.returncode}): "
            f"{every.stderr.strip()}"
        )
    return lines


def _plugin(panday: str, where: Path, env: dict[str, str]) -> str:
    """`panday plugin inspect` on the sample manifest, without and with the secrets it asks
    for: without, it must say it cannot start (exit 1, naming them); with them, its exit
    code must agree with its verdict. Nothing real is passed: the value is a placeholder."""
    import tomllib  # noqa: PLC0415 - only here

    manifest = where / MANIFEST
    shutil.copyfile(EXAMPLES / MANIFEST, manifest)
    secrets: list[str] = tomllib.loads(manifest.read_text(encoding="utf-8"))["capabilities"].get(
        "secrets", []
    )
    argv = [panday, "plugin", "inspect", "--json", MANIFEST]
    without = {k: v for k, v in env.items() if k not in secrets}
    proc, report = _json_command(argv, where, without)
    if secrets and (proc.returncode != 1 or report.get("secrets_missing") != secrets):
        raise GateError(
            f"`panday plugin inspect {MANIFEST}` without {secrets} set "
            f"(exit {proc.returncode}): {report}"
        )
    proc, report = _json_command(argv, where, without | dict.fromkeys(secrets, "placeholder"))
    runnable = bool(report.get("runnable"))
    if (proc.returncode == 0) != runnable or not report.get("lines"):
        raise GateError(f"`panday plugin inspect {MANIFEST}` (exit {proc.returncode}): {report}")
    verdict = "can run here" if runnable else "cannot run on this host"
    needs = f"needs {', '.join(secrets)} (exit 1 without); with it, " if secrets else ""
    return f"`panday plugin inspect {MANIFEST}`: {needs}{verdict} (exit {proc.returncode})"


def _json_command(
    argv: list[str], where: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run a `panday ... --json` command; its process and the JSON object it printed."""
    proc = subprocess.run(
        argv, cwd=where, env=env, capture_output=True, text=True, check=False, timeout=300
    )
    try:
        report: dict[str, Any] = json.loads(proc.stdout)
    except ValueError as exc:
        shown = " ".join(["panday", *argv[1:]])
        detail = f"(exit {proc.returncode}): {proc.stderr.strip()}"
        raise GateError(f"`{shown}` printed no JSON {detail}") from exc
    return proc, report


def _doctor(panday: str, where: Path, env: dict[str, str]) -> list[str]:
    """`panday doctor --json` from the wheels: a report naming this host's tier, whose exit
    code agrees with it and with what the source tree sees here; when the tier runs, one
    jailed command too."""
    from panday import exitcodes, tiers  # noqa: PLC0415 - tools import packages lazily

    host_tier = tiers.host_command_tier()
    usable_here = host_tier is not None and tiers.unavailable_reason(host_tier) is None
    proc, report = _json_command([panday, "doctor", "--json"], where, env)
    if report.get("host_tier") != host_tier:
        raise GateError(
            f"`panday doctor` names tier {report.get('host_tier')!r}, not {host_tier!r}"
        )
    rows = [r for r in report.get("tiers", []) if r.get("host_tier")]
    available = bool(rows) and all(r.get("available") for r in rows)
    want = exitcodes.OK if usable_here else exitcodes.TIER_UNAVAILABLE
    if available != usable_here or proc.returncode != want:
        raise GateError(
            f"`panday doctor` from the wheels: exit {proc.returncode}, available={available}, "
            f"but the source tree finds {host_tier} {'usable' if usable_here else 'unusable'} "
            f"here: {proc.stderr.strip() or proc.stdout.strip()[:400]}"
        )
    if not usable_here:
        why = rows[0].get("unavailable_reason") if rows else "no command tier for this OS"
        return [f"`panday doctor`: {host_tier} unavailable on this host ({why}); exit {want}"]
    return [f"`panday doctor --json`: {host_tier} available (exit 0)"]


def _jailed(panday: str, where: Path, env: dict[str, str]) -> list[str]:
    """`panday run -- sh -c 'echo ok'` in the jail, where the host's tier is usable."""
    from panday import tiers  # noqa: PLC0415 - tools import packages lazily

    host_tier = tiers.host_command_tier()
    if host_tier is None or tiers.unavailable_reason(host_tier) is not None:
        return []  # _doctor has already required the wheels to agree that it is not
    jailed = subprocess.run(
        [panday, "run", "--", "sh", "-c", "echo ok; test ! -e /etc/shadow"],
        cwd=where, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    if jailed.returncode != 0 or jailed.stdout != "ok\n":
        raise GateError(
            f"`panday run` from the wheels (exit {jailed.returncode}): "
            f"{jailed.stdout.strip()} {jailed.stderr.strip()}"
        )
    return ["`panday run -- sh -c 'echo ok'`: ran in the jail (no /etc/shadow inside)"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=DIST)
    args = parser.parse_args(argv)
    out: Path = args.out
    try:
        members = workspace_members()
        files = build(out, members)
        check_metadata(files)
        wheels = [f for f in files if f.suffix == ".whl"]
        with tempfile.TemporaryDirectory(prefix="panday-artifacts-") as tmp:
            where = Path(tmp).resolve()
            venv = install_outside(out, where)
            checked = smoke(venv, where)
    except GateError as exc:
        die("build", str(exc))
    sdists = len(files) - len(wheels)
    shown = out.relative_to(REPO) if out.is_relative_to(REPO) else out
    print(f"build: {len(wheels)} wheels and {sdists} sdists in {shown}; twine check --strict ok")
    for line in checked:
        print(f"build: installed outside the tree: {line}")
    results.record("build", f"build ({len(wheels)} wheels, {sdists} sdists)", wheels=len(wheels))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
