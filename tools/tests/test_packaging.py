"""What each package's metadata says on PyPI: the licence text, project URLs, classifiers,
and README links that work outside the repository (PyPI renders the README on its own)."""

from __future__ import annotations

import re
import tomllib
from typing import TYPE_CHECKING

import pytest

from gatelib import REPO, Member, workspace_members

if TYPE_CHECKING:
    from pathlib import Path

MEMBERS = workspace_members()
_RELATIVE_LINK = re.compile(r"\]\((?!https://|http://|#|mailto:)([^)]+)\)")


def _project(member: Member) -> dict[str, object]:
    doc = tomllib.loads((member.directory / "pyproject.toml").read_text(encoding="utf-8"))
    project: dict[str, object] = doc["project"]
    return project


@pytest.mark.parametrize(
    "licence", [REPO / "LICENSE", *(m.directory / "LICENSE" for m in MEMBERS)], ids=str
)
def test_every_licence_file_is_the_full_apache_text(licence: Path) -> None:
    text = licence.read_text(encoding="utf-8")
    assert text.lstrip().startswith("Apache License\n")
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert len(text.splitlines()) > 150  # the licence itself, not the short header
    assert text == (REPO / "LICENSE").read_text(encoding="utf-8")


@pytest.mark.parametrize("member", MEMBERS, ids=lambda m: m.name)
def test_metadata_has_urls_and_classifiers(member: Member) -> None:
    project = _project(member)
    urls: dict[str, str] = project["urls"]  # pyright: ignore[reportAssignmentType] - TOML
    root = tomllib.loads((REPO / "packages/sdk/pyproject.toml").read_text(encoding="utf-8"))
    assert urls == root["project"]["urls"]  # one set of URLs for the four packages
    assert {"Homepage", "Source", "Issues", "Documentation", "Changelog"} <= urls.keys()
    classifiers: list[str] = project["classifiers"]  # pyright: ignore[reportAssignmentType] - TOML
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    assert project["requires-python"] == ">=3.11"
    for minor in ("3.11", "3.12", "3.13"):  # the versions CI's matrix runs
        assert f"Programming Language :: Python :: {minor}" in classifiers
    assert classifiers == sorted(classifiers)


def test_the_cli_points_at_the_project_documentation() -> None:
    from panday.cli import DOCS, HELP  # noqa: PLC0415 - tools import packages in tests

    root = tomllib.loads((REPO / "packages/sdk/pyproject.toml").read_text(encoding="utf-8"))
    assert DOCS.startswith(root["project"]["urls"]["Homepage"] + "/")
    assert f"{DOCS}/cli.md" in HELP
    assert (REPO / "docs" / "cli.md").is_file()


@pytest.mark.parametrize("member", MEMBERS, ids=lambda m: m.name)
def test_package_readmes_use_absolute_links(member: Member) -> None:
    readme = (member.directory / "README.md").read_text(encoding="utf-8")
    relative = _RELATIVE_LINK.findall(readme)
    assert not relative, f"{member.name}'s README links {relative}, which break on PyPI"
    base = "https://github.com/panday-dev/panday/blob/main/"
    for target in re.findall(r"\]\((" + re.escape(base) + r"[^)#]+)", readme):
        assert (REPO / target.removeprefix(base)).exists(), target
