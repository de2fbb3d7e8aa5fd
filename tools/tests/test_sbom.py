"""SBOM post-processing: our packages get purls and lose local paths; gaps fail the gate.

The full generation (every package, both platforms, schema validation, and a second run
that must be byte-identical) is what `nox -s sbom` does on every run.
"""

from __future__ import annotations

import json

import pytest

import sbom
from gatelib import REPO, GateError

TARGET = sbom.Target("panday", "0.1.0", REPO / "packages" / "sdk" / "pyproject.toml", (), "library")
OURS = {"panday", "panday-core"}


def _raw(*, msgspec_licence: bool = True, msgspec_purl: bool = True) -> dict[str, object]:
    msgspec: dict[str, object] = {"name": "msgspec", "version": "0.23.0"}
    if msgspec_purl:
        msgspec["purl"] = "pkg:pypi/msgspec@0.23.0"
    msgspec["licenses"] = [{"license": {"id": "BSD-3-Clause"}}] if msgspec_licence else []
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "metadata": {
            "component": {
                "name": "panday",
                "version": "0.1.0",
                "licenses": [{"license": {"id": "Apache-2.0"}}],
            },
            "properties": [{"name": "cdx:reproducible", "value": "true"}],
        },
        "components": [
            {
                "name": "panday-core",
                "version": "0.1.0",
                "licenses": [{"license": {"id": "Apache-2.0"}}],
                "externalReferences": [
                    {
                        "type": "distribution",
                        "url": f"file://{REPO}/packages/core",
                        "comment": "PackageSource: Local",
                    }
                ],
            },
            msgspec,
        ],
    }


def test_our_packages_get_their_pypi_purl_and_no_local_path() -> None:
    text = sbom.finish(_raw(), TARGET, "linux", OURS)
    doc = json.loads(text)
    assert doc["metadata"]["component"]["purl"] == "pkg:pypi/panday@0.1.0"
    core = next(c for c in doc["components"] if c["name"] == "panday-core")
    assert core["purl"] == "pkg:pypi/panday-core@0.1.0"
    assert "externalReferences" not in core
    assert {"name": "panday:platform", "value": "linux"} in doc["metadata"]["properties"]
    assert "file://" not in text
    assert text.endswith("}\n")
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_component_without_a_licence_fails() -> None:
    sbom.finish(_raw(), TARGET, "linux", OURS)  # control: the complete document passes
    with pytest.raises(GateError, match="msgspec: no licenses"):
        sbom.finish(_raw(msgspec_licence=False), TARGET, "linux", OURS)


def test_third_party_component_without_a_purl_fails() -> None:
    sbom.finish(_raw(), TARGET, "linux", OURS)  # control: the complete document passes
    with pytest.raises(GateError, match="msgspec: no purl"):
        sbom.finish(_raw(msgspec_purl=False), TARGET, "linux", OURS)


def test_a_changed_second_run_is_reported() -> None:
    first = {"a.cdx.json": ("x", 1), "b.cdx.json": ("y", 1)}
    sbom.require_same(first, dict(first))
    with pytest.raises(GateError, match=r"b\.cdx\.json"):
        sbom.require_same(first, {"a.cdx.json": ("x", 1), "b.cdx.json": ("y2", 1)})
    with pytest.raises(GateError, match=r"b\.cdx\.json"):
        sbom.require_same(first, {"a.cdx.json": ("x", 1)})


def test_workspace_sbom_without_our_packages_fails() -> None:
    sbom.require_members("w.cdx.json", {"panday", "panday-core", "msgspec"}, OURS)  # control
    with pytest.raises(GateError, match="lacks workspace packages: panday-core"):
        sbom.require_members("w.cdx.json", {"panday", "msgspec"}, OURS)
    with pytest.raises(GateError, match="lacks workspace packages"):
        sbom.require_members("w.cdx.json", set(), OURS)


# Tags of the manylinux x86_64 msgspec 0.23.0 wheel for CPython 3.11 (as its WHEEL file
# lists them), and that wheel's hash in uv.lock.
MSGSPEC_TAGS = frozenset(
    {
        "cp311-cp311-manylinux_2_17_x86_64",
        "cp311-cp311-manylinux2014_x86_64",
        "cp311-cp311-manylinux_2_28_x86_64",
    }
)


def _locked_wheel(tags: frozenset[str]) -> dict[str, str]:
    _, wheels = sbom.lock_artifacts()[("msgspec", "0.23.0")]
    return next(w for w in wheels if sbom._wheel_tags(w["url"]) == tags)  # noqa: SLF001 - the matcher under test  # pyright: ignore[reportPrivateUsage]


def test_third_party_components_get_the_hash_of_the_installed_file() -> None:
    wheel = _locked_wheel(MSGSPEC_TAGS)
    text = sbom.finish(_raw(), TARGET, "linux", OURS, {"msgspec": MSGSPEC_TAGS})
    msgspec = next(c for c in json.loads(text)["components"] if c["name"] == "msgspec")
    digest = wheel["hash"].removeprefix("sha256:")
    assert msgspec["hashes"] == [{"alg": "SHA-256", "content": digest}]
    assert msgspec["externalReferences"][-1] == {
        "type": "distribution",
        "url": wheel["url"],
        "hashes": [{"alg": "SHA-256", "content": digest}],
    }
    core = next(c for c in json.loads(text)["components"] if c["name"] == "panday-core")
    assert "hashes" not in core  # ours: not built yet when the SBOM is made


def test_a_component_built_from_source_gets_its_sdist_hash() -> None:
    sdist, _ = sbom.lock_artifacts()[("msgspec", "0.23.0")]
    assert sdist is not None
    built_here = frozenset({"cp311-cp311-linux_x86_64"})  # a local build matches no wheel
    text = sbom.finish(_raw(), TARGET, "linux", OURS, {"msgspec": built_here})
    msgspec = next(c for c in json.loads(text)["components"] if c["name"] == "msgspec")
    assert msgspec["hashes"][0]["content"] == sdist["hash"].removeprefix("sha256:")


def test_a_third_party_component_without_a_locked_file_fails() -> None:
    raw = _raw()
    components: list[dict[str, object]] = raw["components"]  # pyright: ignore[reportAssignmentType] - test data
    components[1]["version"] = "0.0.0-not-locked"
    with pytest.raises(GateError, match="msgspec: no hash of its installed file"):
        sbom.finish(raw, TARGET, "linux", OURS, {"msgspec": MSGSPEC_TAGS})


def test_the_serial_number_is_a_uuid_of_the_content() -> None:
    first = json.loads(sbom.finish(_raw(), TARGET, "linux", OURS, {"msgspec": MSGSPEC_TAGS}))
    again = json.loads(sbom.finish(_raw(), TARGET, "linux", OURS, {"msgspec": MSGSPEC_TAGS}))
    other = json.loads(sbom.finish(_raw(), TARGET, "macos", OURS, {"msgspec": MSGSPEC_TAGS}))
    assert first["serialNumber"].startswith("urn:uuid:")
    assert first["serialNumber"] == again["serialNumber"]  # reproducible
    assert first["serialNumber"] != other["serialNumber"]  # and distinct per document


def test_a_wheel_whose_own_tag_says_linux_finds_its_locked_manylinux_file() -> None:
    """Ray's wheels say ``linux_x86_64`` in their WHEEL file, ``manylinux2014_x86_64`` in
    their file name: the one locked wheel that fits is still found (and only one)."""
    (version,) = [v for (n, v) in sbom.lock_artifacts() if n == "ray"]
    found = sbom.installed_artifact("ray", version, frozenset({"cp311-cp311-linux_x86_64"}))
    assert found is not None
    assert found["url"].endswith("-cp311-cp311-manylinux2014_x86_64.whl")
    assert sbom.installed_artifact("ray", version, frozenset({"cp311-cp311-linux_s390x"})) is None
