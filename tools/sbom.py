"""CycloneDX 1.6 SBOMs for each distributable package and for the whole workspace.

For every target (each workspace member, and the workspace as a whole) and every platform
panday ships for (linux, macos), a runtime-only environment is synced from uv.lock
(`uv sync --locked --no-default-groups --no-editable --python-platform ...`: no dev tools,
exactly the locked versions) and `cyclonedx-py environment` describes it. The platform is
part of the SBOM because the closure differs: the sdk pulls in the Linux tier (and its
bubblewrap wheel) only on Linux. Each optional extra of a package (``panday[ray]``) gets
SBOMs of its own, so the licence gate also covers what the extra pulls in.

cyclonedx-py sees our own packages as local directories: no purl, and an absolute
`file://` path that differs per checkout. They are published on PyPI under their
distribution names, so this tool gives them that purl and drops the path.

Every third-party component gets the SHA-256 of the file that was installed for it, from
uv.lock: the wheel whose tags are exactly those the installed `.dist-info/WHEEL` records
(or the sdist, when it was built from source), also named as the component's
`distribution` reference. Our own packages have no such file before the `build` gate runs;
the release attests the built wheels separately (docs/release.md).

Each document gets a `serialNumber`: a UUID derived (version 5) from the document's own
content, so the same inputs give the same number, and different SBOMs different ones.
Then it checks every component has a purl and a licence (and every third-party one a
hash), validates the document against the CycloneDX 1.6 schema, and writes it with sorted
keys. `--check-reproducible` builds everything a second time from fresh environments in a
different directory and requires byte-identical output.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import sys
import tempfile
import tomllib
import uuid
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import results
from gatelib import REPO, GateError, Member, canonical, die, run, workspace_members

PLATFORMS = ("linux", "macos")
SPEC_VERSION = "1.6"


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    version: str
    pyproject: Path
    sync_args: tuple[str, ...]  # selects what `uv sync` installs
    kind: str  # CycloneDX type of the root component
    extra: str = ""  # an optional extra (e.g. `ray` for panday[ray]): its closure, separately

    @property
    def key(self) -> str:
        """The name, with the extra when there is one (``panday+ray``)."""
        return f"{self.name}+{self.extra}" if self.extra else self.name

    def file_name(self, platform: str) -> str:
        return f"{self.key}-{self.version}.{platform}.cdx.json"


def targets(members: list[Member]) -> list[Target]:

    found = [
        Target(m.name, m.version, m.directory / "pyproject.toml", ("--package", m.name), "library")
        for m in members
    ]
    # Each optional extra gets SBOMs of its own (the package with that extra): what a user
    # of `panday[ray]` installs is described, and the licence and audit gates cover it.
    for m in members:
        pyproject = m.directory / "pyproject.toml"
        extras = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"].get(
            "optional-dependencies", {}
        )
        for extra in sorted(extras):
            sync = ("--package", m.name, "--extra", extra)
            found.append(Target(m.name, m.version, pyproject, sync, "library", extra))
    root = REPO / "pyproject.toml"

    project = tomllib.loads(root.read_text(encoding="utf-8"))["project"]
    found.append(
        Target(project["name"], project["version"], root, ("--all-packages",), "application")
    )
    return found


def _runtime_env(target: Target, platform: str, where: Path) -> Path:
    env_dir = where / f"{target.key}-{platform}"
    run(["uv", "venv", "--quiet", "--python", sys.executable, str(env_dir)], cwd=REPO)
    sync_env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(env_dir)}
    sync_env.pop("VIRTUAL_ENV", None)
    run(
        [
            "uv", "sync", "--quiet", "--locked", "--no-default-groups", "--no-editable",
            "--python-platform", platform, *target.sync_args,
        ],
        cwd=REPO,
        env=sync_env,
    )  # fmt: skip
    return env_dir


def _raw_sbom(target: Target, env_dir: Path, out: Path) -> dict[str, object]:
    run(
        [
            sys.executable, "-m", "cyclonedx_py", "environment", "--sv", SPEC_VERSION,
            "--output-reproducible", "--no-validate", "--of", "JSON",
            "--pyproject", str(target.pyproject), "--mc-type", target.kind,
            "-o", str(out), str(env_dir),
        ],
        cwd=REPO,
    )  # fmt: skip
    doc: dict[str, object] = json.loads(out.read_text(encoding="utf-8"))
    return doc


def declared_licence_names(doc: dict[str, object], env_dir: Path) -> None:
    """A component cyclonedx-py gave no licence keeps the one its metadata declares.

    cyclonedx-py drops a `License:` metadata field that is not an SPDX id (``Apache 2.0``,
    ``3-Clause BSD License``: Ray and protobuf write those). Such a declaration is recorded
    as a licence *name*, as declared, so the licence gate sees what the package says and
    must accept that exact text by an exception, rather than the SBOM saying nothing.
    """
    from importlib.metadata import distributions  # noqa: PLC0415 - only needed here

    declared: dict[str, str] = {}
    for site in env_dir.glob("lib/python*/site-packages"):
        for dist in distributions(path=[str(site)]):
            texts = [t.strip() for t in dist.metadata.get_all("License") or []]
            if len(texts) == 1 and texts[0] and "\n" not in texts[0]:
                declared[canonical(dist.metadata["Name"])] = texts[0]
    components: list[dict[str, object]] = doc.get("components", [])  # pyright: ignore[reportAssignmentType] - CycloneDX JSON
    for component in components:
        name = canonical(str(component.get("name", "")))
        if not component.get("licenses") and name in declared:
            licence = {"name": declared[name], "acknowledgement": "declared"}
            component["licenses"] = [{"license": licence}]


@functools.cache
def lock_artifacts() -> dict[
    tuple[str, str], tuple[dict[str, str] | None, tuple[dict[str, str], ...]]
]:
    """(canonical name, version) -> (its sdist, its wheels), each with url and hash, from
    uv.lock."""
    lock = tomllib.loads((REPO / "uv.lock").read_text(encoding="utf-8"))
    found: dict[tuple[str, str], tuple[dict[str, str] | None, tuple[dict[str, str], ...]]] = {}
    for package in lock.get("package", []):
        if "version" not in package:
            continue
        key = (canonical(package["name"]), str(package["version"]))
        found[key] = (package.get("sdist"), tuple(package.get("wheels", ())))
    return found


def installed_tags(env_dir: Path) -> dict[str, frozenset[str]]:
    """canonical name -> the tags its installed wheel declared (the .dist-info/WHEEL file)."""
    tags: dict[str, frozenset[str]] = {}
    for wheel in env_dir.glob("lib/python*/site-packages/*.dist-info/WHEEL"):
        metadata = (wheel.parent / "METADATA").read_text(encoding="utf-8", errors="replace")
        name = next(
            (
                line.split(":", 1)[1].strip()
                for line in metadata.splitlines()
                if line.startswith("Name:")
            ),
            None,
        )
        if name is None:
            continue
        lines = wheel.read_text(encoding="utf-8").splitlines()
        tags[canonical(name)] = frozenset(
            line.split(":", 1)[1].strip() for line in lines if line.startswith("Tag:")
        )
    return tags


def _wheel_tags(url: str) -> frozenset[str]:
    from packaging.utils import parse_wheel_filename  # noqa: PLC0415 - only here

    return frozenset(str(tag) for tag in parse_wheel_filename(url.rsplit("/", 1)[-1])[3])


def installed_artifact(name: str, version: str, tags: frozenset[str]) -> dict[str, str] | None:
    """The locked file (url, hash) installed for `name` `version`: the wheel with exactly
    these tags, else its sdist (built locally); None when uv.lock has neither."""
    sdist, wheels = lock_artifacts().get((canonical(name), version), (None, ()))
    for wheel in wheels:
        if tags and _wheel_tags(wheel["url"]) == tags:
            return wheel
    if sdist is not None:
        return sdist  # no wheel with these tags: built here from the locked sdist
    # No sdist, so uv could only install a locked wheel (it checks their hashes), yet some
    # wheels' own WHEEL file names a plain `linux_<arch>` platform while the file is
    # published as `manylinux..._<arch>` (Ray's do): when exactly one locked wheel fits the
    # same interpreter, ABI and architecture, that is it. Two or more: no guess, no hash.
    loose = {_loose(t) for t in tags}
    fits = [w for w in wheels if loose and {_loose(t) for t in _wheel_tags(w["url"])} == loose]
    return fits[0] if len(fits) == 1 else None


def _loose(tag: str) -> str:
    """A wheel tag with a glibc Linux platform reduced to its architecture."""
    import re  # noqa: PLC0415 - only here

    interpreter, abi, platform = tag.split("-", 2)
    arch = re.fullmatch(r"(?:manylinux\d+|manylinux_\d+_\d+|linux)_(\w+)", platform)
    return f"{interpreter}-{abi}-linux:{arch.group(1)}" if arch else tag


def _hash_entry(artifact: dict[str, str]) -> dict[str, str]:
    algorithm, _, digest = artifact["hash"].partition(":")
    if algorithm != "sha256" or len(digest) != 64:  # noqa: PLR2004 - hex SHA-256
        raise GateError(f"uv.lock: unexpected hash {artifact['hash']!r} for {artifact['url']}")
    return {"alg": "SHA-256", "content": digest}


def serial_number(doc: dict[str, object]) -> str:
    """A version 5 UUID of the document's content (without a serial number): the same
    SBOM always gets the same number, a different one a different number."""
    body = {k: v for k, v in doc.items() if k != "serialNumber"}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'panday-sbom:{digest}')}"


def _add_hash(component: dict[str, object], tags: dict[str, frozenset[str]]) -> None:
    """The SHA-256 of the locked file installed for a third-party component, as its hash
    and as its `distribution` reference (which names the file the hash is of)."""
    name, version = str(component["name"]), str(component["version"])
    artifact = installed_artifact(name, version, tags.get(canonical(name), frozenset()))
    if artifact is None:
        return
    component["hashes"] = [_hash_entry(artifact)]
    refs: list[dict[str, object]] = component.get("externalReferences", [])  # pyright: ignore[reportAssignmentType] - CycloneDX JSON
    distribution: dict[str, object] = {
        "type": "distribution",
        "url": artifact["url"],
        "hashes": [_hash_entry(artifact)],
    }
    component["externalReferences"] = [
        *(r for r in refs if r.get("type") != "distribution"),
        distribution,
    ]


def _purl(name: str, version: str, *, on_pypi: bool) -> str:
    kind = "pypi" if on_pypi else "generic"
    return f"pkg:{kind}/{canonical(name)}@{version}"


def finish(
    doc: dict[str, object],
    target: Target,
    platform: str,
    ours: set[str],
    tags: dict[str, frozenset[str]] | None = None,
) -> str:
    """Give our packages their purls, drop local paths, give third-party components the
    hash of what was installed, number the document, check, and render stably."""
    metadata: dict[str, object] = doc["metadata"]  # pyright: ignore[reportAssignmentType] - CycloneDX JSON
    root: dict[str, object] = metadata["component"]  # pyright: ignore[reportAssignmentType] - CycloneDX JSON
    root["purl"] = _purl(target.name, target.version, on_pypi=canonical(target.name) in ours)
    properties: list[dict[str, str]] = metadata.setdefault("properties", [])  # pyright: ignore[reportAssignmentType] - CycloneDX JSON
    properties.append({"name": "panday:platform", "value": platform})
    if target.extra:
        properties.append({"name": "panday:extra", "value": target.extra})
    properties.sort(key=lambda p: (p["name"], p["value"]))
    components: list[dict[str, object]] = doc.setdefault("components", [])  # pyright: ignore[reportAssignmentType] - CycloneDX JSON
    for component in components:
        if canonical(str(component["name"])) in ours:
            component["purl"] = _purl(
                str(component["name"]), str(component["version"]), on_pypi=True
            )
            refs: list[dict[str, str]] = component.get("externalReferences", [])  # pyright: ignore[reportAssignmentType] - CycloneDX JSON
            kept = [r for r in refs if not r.get("url", "").startswith("file:")]
            if kept:
                component["externalReferences"] = kept
            else:
                component.pop("externalReferences", None)
        elif tags is not None:
            _add_hash(component, tags)
    missing = [
        f"{c.get('name')}: no {field}"
        for c in [root, *components]
        for field in ("purl", "licenses")
        if not c.get(field)
    ]
    if tags is not None:
        missing += [
            f"{c.get('name')}: no hash of its installed file in uv.lock"
            for c in components
            if canonical(str(c["name"])) not in ours and not c.get("hashes")
        ]
    doc["serialNumber"] = serial_number(doc)
    if missing:
        raise GateError(f"{target.file_name(platform)}: {'; '.join(missing)}")
    text = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if "file://" in text or str(REPO) in text:
        raise GateError(f"{target.file_name(platform)}: a local path leaked into the SBOM")
    return text


def validate(texts: dict[str, str]) -> None:
    """Validate against the CycloneDX 1.6 JSON schema, format assertions included.

    jsonschema checks `iri-reference` with an Earley parser that takes a good fraction of a
    second per URL on a busy machine, and the same URLs recur across SBOMs; the check is
    memoised (same function, same answers), which cuts the gate from minutes to seconds.
    """
    from cyclonedx.schema import SchemaVersion  # noqa: PLC0415 - heavy; only here
    from cyclonedx.validation.json import JsonStrictValidator  # noqa: PLC0415
    from jsonschema import Draft7Validator  # noqa: PLC0415

    checkers = Draft7Validator.FORMAT_CHECKER.checkers
    if "iri-reference" in checkers:
        check, raises = checkers["iri-reference"]
        checkers["iri-reference"] = (functools.cache(check), raises)
    validator = JsonStrictValidator(SchemaVersion.V1_6)
    for name, text in texts.items():
        error = validator.validate_str(text)
        if error is not None:
            raise GateError(f"{name} is not valid CycloneDX {SPEC_VERSION}: {error}")


def _one(target: Target, platform: str, where: Path, ours: set[str]) -> tuple[str, tuple[str, int]]:
    env_dir = _runtime_env(target, platform, where)
    raw = _raw_sbom(target, env_dir, where / f"{target.key}-{platform}.raw.json")
    declared_licence_names(raw, env_dir)
    text = finish(raw, target, platform, ours, installed_tags(env_dir))
    names = component_names(text)
    if target.kind == "application":  # the workspace: all our packages must be in it
        require_members(target.file_name(platform), names, ours)
    return target.file_name(platform), (text, len(names))


def generate(where: Path, pool: Executor, *, check: bool = True) -> dict[str, tuple[str, int]]:
    """File name -> (SBOM text, component count) for every target and platform.

    Each (target, platform) has its own environment directory, so they are built side by
    side: the work is subprocesses (uv sync, cyclonedx-py), and one at a time it was most
    of this gate's time."""
    members = workspace_members()
    ours = {canonical(m.name) for m in members}
    jobs = [(t, p) for t in targets(members) for p in PLATFORMS]
    futures = [pool.submit(_one, target, platform, where, ours) for target, platform in jobs]
    result = dict(f.result() for f in futures)
    if not result:
        raise GateError("no SBOM was generated")
    if check:
        validate({name: text for name, (text, _) in result.items()})
    return result


def component_names(text: str) -> set[str]:
    components: list[dict[str, str]] = json.loads(text).get("components", [])
    return {canonical(c["name"]) for c in components}


def require_members(file_name: str, names: set[str], ours: set[str]) -> None:
    """The workspace SBOM lists every workspace package: an empty or partial one is broken."""
    missing = sorted(ours - names)
    if missing:
        raise GateError(f"{file_name} lacks workspace packages: {', '.join(missing)}")


def require_same(first: dict[str, tuple[str, int]], second: dict[str, tuple[str, int]]) -> None:
    differ = sorted(n for n in first.keys() | second.keys() if first.get(n) != second.get(n))
    if differ:
        raise GateError(
            f"not reproducible: a second run from fresh environments changed {', '.join(differ)}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "dist" / "sbom")
    parser.add_argument(
        "--check-reproducible",
        action="store_true",
        help="generate twice from fresh environments and require byte-identical files",
    )
    args = parser.parse_args(argv)
    out: Path = args.out
    try:
        with (
            ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 1)) as pool,
            tempfile.TemporaryDirectory(prefix="panday-sbom-a-") as first,
            tempfile.TemporaryDirectory(prefix="panday-sbom-second-run-") as second,
        ):
            # The second run (from fresh environments in another directory) goes side by
            # side with the first; it is compared byte for byte below.
            later = (
                pool.submit(generate, Path(second), pool, check=False)
                if args.check_reproducible
                else None
            )
            sboms = generate(Path(first), pool)
            if later is not None:
                require_same(sboms, later.result())
    except GateError as exc:
        die("sbom", str(exc))
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.cdx.json"):
        stale.unlink()
    for name, (text, count) in sorted(sboms.items()):
        (out / name).write_text(text, encoding="utf-8", newline="\n")
        print(f"sbom: {name}: {count} components")
    shown = out.relative_to(REPO) if out.is_relative_to(REPO) else out
    note = ", byte-identical on a second run" if args.check_reproducible else ""
    print(
        f"sbom: {len(sboms)} CycloneDX {SPEC_VERSION} SBOMs written to {shown} (schema-valid{note})"
    )
    counts = {name: count for name, (_, count) in sorted(sboms.items())}
    workspace = max(counts.values())
    results.record(
        "sbom", f"sbom ({len(sboms)} SBOMs, up to {workspace} components)", counts=counts
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
